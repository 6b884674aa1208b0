import json

import pytest

from kbench.errors import ResultsError, UsageError
from kbench.results.records import CompileInfo, Evaluation, Measurement, Status, TrialResult
from kbench.results.storage import atomic_write, load_run, new_run_id, RunStore


def _evaluation(name="sol", status=Status.CORRECT):
    return Evaluation(
        problem="p", solution=name, status=status, device="cpu", size="small",
        compile=CompileInfo(ok=True, seconds=1.5, cached=True, log="ok", cache_key="abc"),
        trials=(TrialResult(seed=1, passed=True, max_abs_err=1e-6, max_rel_err=1e-5, mismatched=0, numel=10),),
        timing=Measurement((0.002, 0.001, 0.003), (0.0021, 0.0011, 0.0031), "converged"),
        eager_timing=Measurement((0.004, 0.004, 0.004)), speedup_vs_eager=2.0,
    )


def test_run_ids_sort_by_time():
    from datetime import datetime, timezone

    early = new_run_id(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    late = new_run_id(datetime(2026, 1, 2, 3, 4, 6, tzinfo=timezone.utc))
    assert early.startswith("20260102-030405-") and early < late


def test_evaluations_round_trip_with_statistics_derived_from_samples(tmp_path):
    store = RunStore.create(tmp_path, {"environment": {}})
    store.add(_evaluation())
    store.finish()
    doc, (loaded,) = load_run(tmp_path / store.run_id / "run.json")
    assert loaded == _evaluation()
    stored = doc["evaluations"][0]["timing"]
    assert stored["median"] == 0.002 and stored["samples"] == [0.002, 0.001, 0.003]


def test_every_evaluation_is_saved_as_it_arrives(tmp_path):
    store = RunStore.create(tmp_path, {})
    store.add(_evaluation("a"))
    doc, evaluations = load_run(store.directory)
    assert doc["state"] == "running" and [e.solution for e in evaluations] == ["a"]
    store.finish("interrupted")
    assert load_run(store.directory)[0]["state"] == "interrupted"


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    atomic_write(tmp_path / "f.json", "one")
    atomic_write(tmp_path / "f.json", "two")
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"] and (tmp_path / "f.json").read_text() == "two"


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"evaluations": [', "not a readable kbench result"),
        ('{"format": "other"}', "not a kbench run file"),
        ('{"format": "kbench-run", "version": 99}', "format version 99"),
        ('{"format": "kbench-run", "version": 1, "evaluations": [{"problem": "p"}]}', "malformed evaluation"),
    ],
)
def test_bad_result_files_are_clear_errors(tmp_path, content, message):
    path = tmp_path / "run.json"
    path.write_text(content)
    with pytest.raises(ResultsError, match=message):
        load_run(path)


def test_missing_results_are_a_clear_error(tmp_path):
    with pytest.raises(ResultsError, match="No results at"):
        load_run(tmp_path / "nope")


def test_result_json_is_plain(tmp_path):
    store = RunStore.create(tmp_path, {})
    store.add(_evaluation())
    store.finish()
    raw = json.loads((store.directory / "run.json").read_text())
    assert raw["evaluations"][0]["status"] == "correct"
    assert not (store.directory / "journal.jsonl").exists()


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_rows_reach_the_journal_at_once_and_run_json_at_most_every_flush_interval(tmp_path):
    """Rewriting run.json in full after every row cost O(rows) a row: the journal keeps every row safe as it comes,
    run.json is rewritten when the interval has passed, and a reader sees both as one file."""
    from kbench.results import storage

    clock = _Clock()
    store = RunStore(tmp_path, {"format": "kbench-run", "version": storage.VERSION, "run_id": "r"}, clock=clock)
    store.save("running")
    store.begin("p", "a")
    store.add(_evaluation("a"))
    store.begin("p", "b")
    on_disk = json.loads((tmp_path / "run.json").read_text())
    assert on_disk["evaluations"] == [] and on_disk["journal_seq"] == 0
    doc, rows = load_run(tmp_path)
    assert [e.solution for e in rows] == ["a"] and [x["solution"] for x in doc["in_flight"]] == ["b"]
    clock.now = storage.FLUSH_INTERVAL_S
    store.add(_evaluation("b"))
    on_disk = json.loads((tmp_path / "run.json").read_text())
    assert [e["solution"] for e in on_disk["evaluations"]] == ["a", "b"] and on_disk["journal_seq"] == 4
    assert "in_flight" not in on_disk and not (tmp_path / "journal.jsonl").exists()
    assert [e.solution for e in load_run(tmp_path)[1]] == ["a", "b"]


def test_a_journal_left_beside_a_newer_run_json_adds_nothing_twice(tmp_path):
    """A process that died between writing run.json and removing the journal leaves events run.json holds already:
    they carry sequence numbers at or below its `journal_seq` and are skipped; a line cut short is skipped too."""
    store = RunStore.create(tmp_path, {})
    store.add(_evaluation("a"))
    journal = (store.directory / "journal.jsonl").read_text()
    store.save("running")
    (store.directory / "journal.jsonl").write_text(journal + '{"seq": 2, "evaluation": {"probl')
    doc, rows = load_run(store.directory)
    assert [e.solution for e in rows] == ["a"] and doc["journal_seq"] == 1


def test_a_resumed_run_goes_on_from_its_journal(tmp_path):
    """A run killed mid-way: its finished rows come from the journal, what was under way is `lost`, and the resumed
    run's own events follow the old ones."""
    store = RunStore.create(tmp_path, {"run_id": "x"})
    store.begin("p", "a")
    store.add(_evaluation("a"))
    store.begin("p", "b")  # the process dies here
    resumed = RunStore.resume(store.directory)
    assert [e.solution for e in resumed.evaluations] == ["a"] and [x["solution"] for x in resumed.lost] == ["b"]
    resumed.save("running")
    resumed.add(_evaluation("c"))
    assert [e.solution for e in load_run(store.directory)[1]] == ["a", "c"]


def test_a_python_package_is_never_taken_for_a_results_folder(tmp_path):
    """Run from inside kbench/, the default `results` is kbench's own package: no run is written into it."""
    package = tmp_path / "results"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with pytest.raises(UsageError, match="is a Python package, not a results folder"):
        RunStore.create(package, {})
    assert [p.name for p in package.iterdir()] == ["__init__.py"]


def test_compare_without_arguments_skips_profile_runs(tmp_path):
    """A `kbench profile` run has kernels and no rows: the two latest runs to compare are the two before it."""
    import time

    from kbench.results.profiles import ModelProfile
    from kbench.results.storage import latest_two

    ids = []
    for kind in ("rows", "rows", "profile"):
        store = RunStore.create(tmp_path, {"run_id": ""})
        if kind == "rows":
            store.add(_evaluation())
        else:
            store.profiles = [ModelProfile("p", "eager", ())]
        store.finish()
        ids.append(store.directory.name)
        time.sleep(1.1)  # run ids sort by the second they start
    before, latest = latest_two(tmp_path, [])
    assert (before.path.name, latest.path.name) == (ids[0], ids[1])
