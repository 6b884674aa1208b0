"""run.json's published JSON schema (docs/run.schema.json) is generated from the records and describes real runs."""

import dataclasses
import json
from pathlib import Path

import pytest

from kbench.results.findings import Finding, FindingCode, from_legacy
from kbench.config.run_config import RunConfig
from kbench.results.records import CompileInfo, Evaluation, Measurement, Speedups, Status, TrialResult
from kbench.results.storage import RunStore

from kbench.results import schema
from kbench.results.diagnostics import Diagnostics, GpuState, MachineState, TimingProtocol
from kbench.results.figures import Accuracy, KernelShare, PeakMemory

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "docs" / "run.schema.json"


def _run_file(tmp_path) -> dict:
    config = {**dataclasses.asdict(RunConfig()), "device": "cpu", "size": "small"}  # as kbench.commands.execute writes it
    store = RunStore.create(tmp_path, {"environment": {"gpu": None}, "git": None, "config": config, "selection": {},
                                       "problems": {}})
    store.add(Evaluation("p", "s", Status.CORRECT, "cpu", "small", compile=CompileInfo(ok=True),
                         trials=(TrialResult(seed=43, passed=True, max_abs_err=0.0),),
                         timing=Measurement((0.002, 0.001, 0.003)), speedup_vs_eager=1.5, warnings=(Finding(FindingCode.FEW_SAMPLES, "y"),),
                         accuracy=Accuracy(1e-6, 2e-6), kernels=KernelShare(own_s=1e-3, own_share=0.5, top=(("k", 9.0),)),
                         peak=PeakMemory(solution=1 << 20), phases={"load": 0.5}, extra={"noise": {"x": 1}},
                         withheld=Speedups(2.0, None),
                         diagnostics=Diagnostics(protocol=TimingProtocol(rounds=3, verify_s=(1e-4,)), sandbox="none",
                                                 machine=MachineState(cores=2.0, gpu=GpuState(sm_mhz=1980)))))
    store.finish()
    return json.loads((store.directory / "run.json").read_text())


def test_the_published_schema_is_the_one_the_records_generate():
    assert json.loads(PUBLISHED.read_text()) == schema.run_schema(), \
        "regenerate it: python -m kbench.results.schema > docs/run.schema.json"


def test_a_run_file_kbench_writes_follows_the_published_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    doc = _run_file(tmp_path)
    jsonschema.validate(doc, json.loads(PUBLISHED.read_text()))
    schema.check(doc)


def test_a_run_file_with_an_unknown_status_or_a_missing_field_is_refused(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    published = json.loads(PUBLISHED.read_text())
    doc = _run_file(tmp_path)
    wrong_status = {**doc, "evaluations": [{**doc["evaluations"][0], "status": "great"}]}
    no_problem = {**doc, "evaluations": [{k: v for k, v in doc["evaluations"][0].items() if k != "problem"}]}
    for bad in (wrong_status, no_problem, {k: v for k, v in doc.items() if k != "run_id"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, published)
