"""The Ray executor on a local Ray instance: the same verdicts as local runs, children run as Ray tasks."""

from pathlib import Path

import pytest

from kbench.commands.execute import execute
from kbench.commands.progress import plain
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.problems.discovery import select
from kbench.results.records import EAGER, Status
from tests.conftest import FIXTURES

ray = pytest.importorskip("ray")

EXPECTED = {
    EAGER: Status.CORRECT,
    "good": Status.CORRECT,
    "wrong_values": Status.INCORRECT,
    "exits": Status.CRASHED,
    "raises_in_forward": Status.RUNTIME_ERROR,
}


def test_ray_tasks_give_the_same_verdicts_as_local_children(tmp_path):
    config = RunConfig(device="cpu", trials=2, compile_baseline=False, timeout_s=120,
                       timing=TimingPolicy(max_time_s=0.1), results_dir=tmp_path / "results",
                       cache_dir=tmp_path / "cache", executor="ray", parallel=2)
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", FIXTURES / "solutions")
    solutions = {"tiny": [s for s in solutions["tiny"] if s.name in EXPECTED]}
    messages: list[str] = []
    try:
        store = execute(config, problems, solutions, Path.cwd(), plain(messages.append))
    finally:
        ray.shutdown()
    rows = {e.solution: e for e in store.evaluations}
    assert {name: row.status for name, row in rows.items()} == EXPECTED
    assert "exited with code 3" in rows["exits"].message
    assert rows["good"].timing is not None and rows["good"].speedup_vs_eager > 0
    assert {row.gpu for row in rows.values()} <= {"ray-0", "ray-1"}  # each ran in a Ray slot
    assert any("evaluating 2 at once (ray" in m for m in messages)


def test_each_ray_slot_is_an_actor_that_forks_its_jobs_from_one_zygote():
    from kbench.execution.ray_executor import SLOT_ENV, RayLauncher
    from kbench.wire.jobs import ProbeJob

    launcher = RayLauncher("cpu", None)
    try:
        launcher.start(2)
        outcomes = [launcher(ProbeJob(), 120, {SLOT_ENV: slot}) for slot in ("ray-0", "ray-1", "ray-0", "ray-0")]
        described = launcher.describe()
    finally:
        launcher.close()
        ray.shutdown()
    assert all(o.result is not None and o.result.status == "ok" for o in outcomes), [o.log for o in outcomes]
    assert [(d["jobs"], d["zygotes"]) for d in described] == [(3, 1), (1, 1)]  # one zygote a slot, all its jobs
    assert described[0]["pid"] != described[1]["pid"]  # a process per slot


def test_a_slot_actor_starts_its_next_job_at_the_release_and_chains_their_turns():
    """The actor class itself (no Ray): `start` returns once the job has timed, so the slot's next job can be handed
    in while the first finishes its checks; each job's turn is the one before's end."""
    from kbench.execution.ray_executor import SlotActor
    from kbench.wire.jobs import ReferenceJob
    from tests.test_warm_starts import _judging

    slot = SlotActor("cpu")
    try:
        first_turn = slot._ended
        slot.start("a", ReferenceJob(**_judging()), 120, {}, {})
        after_first = slot._ended
        slot.start("b", ReferenceJob(**_judging()), 120, {}, {})
        outcomes = [slot.finish("a"), slot.finish("b")]
    finally:
        slot.close()
    assert [o.result.status for o in outcomes] == ["correct", "correct"], [o.log for o in outcomes]
    assert first_turn is not after_first and after_first is not slot._ended and after_first.is_set()
    assert all("waiting" in o.result.rows[0].phases for o in outcomes) and slot.launch.zygotes_started == 1
