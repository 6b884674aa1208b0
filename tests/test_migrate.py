"""Run files of earlier versions load as the current one: the figures v1 kept in `extra` move to their typed fields,
the warnings v2 kept as "[code] message" strings become findings."""

import json

import pytest

from kbench.errors import ResultsError
from kbench.results import migrate, storage
from kbench.results.findings import Finding, FindingCode
from kbench.results.figures import Accuracy, Ceilings, Floor, KernelShare, PeakMemory, Work
from kbench.results.diagnostics import (
    Degeneracy,
    Divisor,
    GpuState,
    MachineState,
    ProcessCheck,
    ReferenceNoise,
    ReferenceOutput,
    RegimeDecision,
    WitnessFigures,
)
from kbench.results.records import Speedups, Status

FLOOR = {"seconds": 1e-3, "memory_s": 1e-3, "compute_s": 1e-4, "bound": "memory", "work": {"flops": 1e9, "bytes": 3e9},
         "ceilings": {"name": "H100", "bandwidth_bytes_s": 3e12, "flops_s": 4e14, "flops_kind": "tf32",
                      "measured_at": "2026-11-20"}}


def _v1_file(tmp_path, rows):
    doc = {"format": "kbench-run", "version": 1, "run_id": "20261120-000000-abcd", "started": "2026-11-20T00:00:00",
           "state": "complete", "config": {"device": "cuda"}, "evaluations": rows}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return path


def _row(solution, extra):
    return {"problem": "p", "solution": solution, "status": "correct", "device": "cuda", "size": "full", "extra": extra}


def test_a_version_1_run_loads_with_its_figures_in_typed_fields(tmp_path):
    eager = _row("eager", {"floor": FLOOR, "peak_bytes": {"reference": 4096}, "phases": {"timing": 2.0},
                           "noise": {"rel": 1e-7}})
    solution = _row("fast", {"percent_of_floor": 61.5, "accuracy": {"solution": 2e-6, "reference": 1e-6, "tf32": 5e-4},
                             "kernels": {"own_s": 1e-4, "library_s": 0.0, "own_share": 1.0, "kernels_declared": ["k"],
                                         "top": [["k", 100.0]]},
                             "peak_bytes": {"solution": 8192, "reference": 4096}, "gpu": "1",
                             "protocol": {"rounds": 12}})
    doc, (e, s) = storage.load_run(_v1_file(tmp_path, [eager, solution]))
    assert doc["version"] == storage.VERSION == 4
    assert e.floor == Floor(1e-3, 1e-3, 1e-4, "memory", Work(1e9, 3e9), Ceilings("H100", 3e12, 4e14, "tf32", "2026-11-20"))
    assert e.floor.describe() == "memory-bound: 3.0 GB at 3.0 TB/s"
    assert e.peak == PeakMemory(reference=4096) and e.phases == {"timing": 2.0} and e.extra == {"noise": {"rel": 1e-7}}
    assert s.status == Status.CORRECT and s.percent_of_floor == 61.5 and s.gpu == "1"
    assert s.accuracy == Accuracy(solution=2e-6, reference=1e-6, tf32=5e-4)
    assert s.kernels == KernelShare(own_s=1e-4, library_s=0.0, own_share=1.0, kernels_declared=("k",), top=(("k", 100.0),))
    assert s.peak == PeakMemory(solution=8192, reference=4096) and s.extra == {}
    assert s.diagnostics.protocol.rounds == 12  # and then v4's typed diagnostics (the rest of its figures unknown)


def test_a_version_1_figure_that_is_not_its_record_stays_in_extra():
    doc = migrate.upgrade({"version": 1, "evaluations": [_row("odd", {"accuracy": {"solution": "tiny"}, "gpu": 0})]}, 2)
    row = doc["evaluations"][0]
    assert row["extra"] == {"accuracy": {"solution": "tiny"}, "gpu": 0} and "accuracy" not in row


def test_a_resumed_version_1_run_is_written_as_the_current_version(tmp_path):
    path = _v1_file(tmp_path, [_row("eager", {"phases": {"setup": 1.0}})])
    store = storage.RunStore.resume(path)
    store.save("interrupted")
    written = json.loads(path.read_text())
    assert written["version"] == 4 and written["evaluations"][0]["phases"] == {"setup": 1.0}
    assert "phases" not in written["evaluations"][0]["extra"]


def test_a_file_of_a_newer_version_is_refused_with_what_to_do(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"format": "kbench-run", "version": 5, "evaluations": []}))
    with pytest.raises(ResultsError, match="format version 5; this kbench reads up to 4. Upgrade kbench"):
        storage.load_run(path)


def test_a_version_2_runs_warnings_become_findings_and_an_unknown_code_keeps_its_text(tmp_path):
    row = {**_row("fast", {}), "warnings": ["[timer_mismatch] the reported time is 1.000 ms too low",
                                           "[retired_check] something an older kbench said", "no code at all"]}
    doc = {"format": "kbench-run", "version": 2, "run_id": "20261120-000000-abcd", "started": "2026-11-20T00:00:00",
           "state": "complete", "config": {"device": "cuda"}, "evaluations": [row]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    _, (e,) = storage.load_run(path)
    assert e.warnings == (Finding(FindingCode.TIMER_MISMATCH, "the reported time is 1.000 ms too low"),
                          Finding(FindingCode.OTHER, "[retired_check] something an older kbench said"),
                          Finding(FindingCode.OTHER, "no code at all"))
    assert e.flags == (FindingCode.TIMER_MISMATCH, FindingCode.OTHER, FindingCode.OTHER)


def test_a_version_2_warning_that_is_not_a_string_is_not_dropped_but_refused(tmp_path):
    row = {**_row("fast", {}), "warnings": [["not", "a", "string"]]}
    doc = {"format": "kbench-run", "version": 2, "run_id": "20261120-000000-abcd", "started": "2026-11-20T00:00:00",
           "state": "complete", "config": {"device": "cuda"}, "evaluations": [row]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultsError):
        storage.load_run(path)


def test_a_version_3_suspect_rows_withheld_speedups_move_to_their_field(tmp_path):
    suspect = {**_row("fast", {"speedup_vs_eager": 4.0, "speedup_vs_compile": 2.0, "protocol": {"rounds": 3}}),
               "status": "suspect"}
    honest = _row("slow", {"speedup_vs_eager": 9.0})  # not a suspect row: what its extra holds is not withheld
    doc = {"format": "kbench-run", "version": 3, "run_id": "20261120-000000-abcd", "started": "2026-11-20T00:00:00",
           "state": "complete", "config": {"device": "cuda"}, "evaluations": [suspect, honest]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    _, (s, h) = storage.load_run(path)
    assert s.withheld == Speedups(4.0, 2.0) and s.extra == {} and s.diagnostics.protocol.rounds == 3
    assert h.withheld is None and h.extra == {"speedup_vs_eager": 9.0}


def test_a_version_3_rows_diagnostics_become_typed_records_and_a_malformed_one_stays_in_extra(tmp_path):
    solution = _row("fast", {
        "protocol": {"rounds": 40, "rechecked": 40, "regime": "gpu", "regime_decision": {"issue_s": 1e-5, "gpu_s": 2e-4},
                     "verify_s": [1e-4, 2e-4], "retimed": {"first": "[timer_mismatch] x"},
                     "witness": {"rounds": 0, "failure": "the witness process could not start"},
                     "divisor": {"by": "witness", "calls": 30, "witness_p50_s": 1e-3, "judge_eager_p50_s": 1.1e-3}},
        "machine": {"other_cores": 0.1, "load_average": 1.5, "window_s": 2.0, "cores": 16.0,
                    "gpu": {"sm_mhz": 1980, "max_sm_mhz": 1980, "throttled": [], "compute_processes": 2}},
        "processes": {"ratios": [1.01, None], "fresh_candidates": 1}, "sandbox": "namespaces",
        "state_dict_tensors_copied": 3})
    eager = _row("eager", {"output": {"shape": [8, 4], "dtype": "torch.float32", "constant_pass_share": 0.0,
                                      "zero_share": 0.01, "output_std": 1.2},
                           "noise": {"precision": "fp32", "atol": 1e-4, "rtol": 1e-4, "max_abs": 3e-6,
                                     "exact_passes": True},
                           "primed": False, "regimes": {"eager": "gpu", "compiled": "gpu"},
                           "machine": {"cores": "many"}})  # not a MachineState: it stays in extra
    doc = {"format": "kbench-run", "version": 3, "run_id": "20261120-000000-abcd", "started": "2026-11-20T00:00:00",
           "state": "complete", "config": {"device": "cuda"}, "evaluations": [solution, eager]}
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    _, (s, e) = storage.load_run(path)
    d = s.diagnostics
    assert s.extra == {} and d.sandbox == "namespaces" and d.state_dict_tensors_copied == 3
    assert d.protocol.rounds == 40 and d.protocol.regime_decision == RegimeDecision(issue_s=1e-5, gpu_s=2e-4)
    assert d.protocol.verify_s == (1e-4, 2e-4) and d.protocol.retimed == "[timer_mismatch] x"
    assert d.protocol.witness == WitnessFigures(0, "the witness process could not start")
    assert d.protocol.divisor == Divisor("witness", 30, 1e-3, 1.1e-3)
    assert d.machine == MachineState(0.1, 1.5, 2.0, 16.0, GpuState(1980, 1980, (), 2))
    assert d.processes == ProcessCheck((1.01, None), 1)
    assert e.diagnostics.output == ReferenceOutput((8, 4), "torch.float32", None, Degeneracy(0.0, 0.01, 1.2))
    assert e.diagnostics.noise == ReferenceNoise("fp32", 1e-4, 1e-4, 3e-6, True)
    assert e.diagnostics.primed is False and e.diagnostics.regimes == {"eager": "gpu", "compiled": "gpu"}
    assert e.diagnostics.machine is None and e.extra == {"machine": {"cores": "many"}}
