"""Spreading evaluations over GPUs: one per GPU at a time, pinned, all done (scheduler tested without GPUs)."""

import sys
import threading
import time

import pytest

from kbench.execution.pool import gpu_slots, pinned_env, run_on_slots


def test_slots_follow_the_visible_gpus():
    assert gpu_slots("cpu", 8) == [None]
    assert gpu_slots("cuda", 1) == [None]
    assert gpu_slots("cuda", 4) == ["0", "1", "2", "3"]
    assert gpu_slots("cuda", 2, visible="5, 7") == ["5", "7"]
    assert gpu_slots("cuda", 1, visible="3") == [None]


def test_pinned_env_sets_cuda_visible_devices_only_when_pinned():
    assert pinned_env({"A": "1"}, "3") == {"A": "1", "CUDA_VISIBLE_DEVICES": "3"}
    assert pinned_env({"A": "1"}, None) == {"A": "1"}


def test_never_two_items_on_one_slot_and_all_slots_used():
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def work(item: int, slot: str) -> int:
        start = time.monotonic()
        time.sleep(0.05)
        with lock:
            spans.append((slot, start, time.monotonic()))
        return item * 10

    done: dict[int, int] = {}
    caller = threading.get_ident()
    threads_seen = set()

    def on_done(item: int, result: int) -> None:
        threads_seen.add(threading.get_ident())
        done[item] = result

    run_on_slots(list(range(9)), ["0", "1", "2"], work, on_done)
    assert done == {i: i * 10 for i in range(9)}
    assert threads_seen == {caller}  # results are recorded in the caller's thread only
    assert {slot for slot, _, _ in spans} == {"0", "1", "2"}
    for slot in ("0", "1", "2"):
        mine = sorted((a, b) for s, a, b in spans if s == slot)
        assert all(prev_end <= next_start for (_, prev_end), (next_start, _) in zip(mine, mine[1:]))
    overlapping = any(a1 < b2 and a2 < b1 for s1, a1, b1 in spans for s2, a2, b2 in spans if s1 != s2)
    assert overlapping  # the slots really ran at the same time


def test_one_slot_runs_in_order_in_the_callers_thread():
    order, caller = [], threading.get_ident()
    run_on_slots([3, 1, 2], [None], lambda item, slot: (item, slot, threading.get_ident()),
                 lambda item, result: order.append(result))
    assert order == [(3, None, caller), (1, None, caller), (2, None, caller)]


def test_executor_choices_are_checked():
    import pytest

    from kbench.errors import UsageError
    from kbench.execution.executors import make_executor

    with pytest.raises(UsageError, match="Unknown executor 'dask'"):
        make_executor("dask", "cpu", 0, None, None)
    with pytest.raises(UsageError, match="--address goes with --executor ray"):
        make_executor("local", "cpu", 0, "ray://head:10001", None)
    local = make_executor("local", "cuda", 2, None, None)
    env = local.env({}, "1")
    assert local.pins and local.slots == ("0", "1") and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert local.cores is not None and env["KBENCH_TIMING_CORE"] == str(local.cores.core("1"))  # system.cores



def test_an_interrupt_cancels_queued_builds_and_kills_running_ones(monkeypatch, tmp_path):
    """Ctrl-C or SIGTERM during the build phase must not wait for every queued compile to finish."""
    from kbench.build import compile as build
    from kbench.execution import process_tree
    from kbench.results.records import SolutionSpec

    started, killed, lock = [], threading.Event(), threading.Lock()

    def fake_build(ctx, solution, max_jobs, launch=None):
        with lock:
            started.append(solution.name)
            first = len(started) == 1
        if not first:
            killed.wait(timeout=5)  # a compiler that runs until it is killed
        return build.BuildResult(solution=solution, ok=False, status="crashed", message="stopped", compile=None)

    def interrupt(result, done, total):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "build_one", fake_build)
    monkeypatch.setattr(process_tree, "kill_all", killed.set)
    solutions = [SolutionSpec(problem="p", name=f"s{i}", path=tmp_path / f"s{i}.py", devices=("cpu",)) for i in range(6)]
    ctx = build.BuildContext(tmp_path / "cache", None, "9.0", "torch", 60, 2)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        build.build_all(ctx, solutions, interrupt)
    assert time.monotonic() - t0 < 4  # not 5 s per queued build
    assert killed.is_set()
    assert len(started) <= 3, started  # the first, the one running beside it, at most one picked up meanwhile


def test_with_early_a_slots_next_job_starts_at_the_release_and_its_turn_comes_when_the_first_ends():
    """Two jobs share a slot only from the first's release to its end; the second sees its turn (`previous`) set only
    once the first has ended; never three at once on a slot."""
    from kbench.execution.pool import current_turn

    events: list[tuple[str, int, float]] = []
    lock = threading.Lock()

    def log(what: str, item: int) -> None:
        with lock:
            events.append((what, item, time.monotonic()))

    def work(item: int, slot: str | None) -> int:
        turn = current_turn()
        assert turn is not None and turn.slot == slot
        log("start", item)
        assert turn.previous.wait(5)  # what a launcher does before its job times
        log("turn", item)
        time.sleep(0.05)  # timed
        turn.release()  # "timed": the slot's next job may start
        time.sleep(0.1)  # checks after the timing
        log("end", item)
        return item

    done: list[int] = []
    run_on_slots([0, 1, 2, 3], [None], work, lambda item, result: done.append(result), early=True)
    assert sorted(done) == [0, 1, 2, 3]
    at = {(what, item): t for what, item, t in events}
    for item in (1, 2, 3):
        assert at[("start", item)] < at[("end", item - 1)]  # it started while the one before finished its checks
        assert at[("turn", item)] >= at[("end", item - 1)]  # but its turn came only once that one had ended
    for item in (2, 3):
        assert at[("start", item)] >= at[("end", item - 2)]  # never three on the slot


def test_without_early_there_is_no_turn_to_release():
    from kbench.execution.pool import current_turn

    seen = []
    run_on_slots([1, 2], ["0", "1"], lambda item, slot: seen.append(current_turn()), lambda item, result: None)
    assert seen == [None, None]


def test_a_turn_the_launcher_ends_later_holds_the_next_job_until_then():
    """A launcher whose child answered but still exits (its CUDA contexts going) ends the turn itself: the slot's
    next job gets its turn only then, not when the first job's result came."""
    from kbench.execution.pool import current_turn

    at: dict[str, float] = {}

    def work(item: int, slot: str | None) -> int:
        turn = current_turn()
        assert turn is not None and turn.previous.wait(5)
        at[f"turn {item}"] = time.monotonic()
        if item == 0:
            done = turn.end_later()
            threading.Timer(0.3, lambda: (at.__setitem__("exited 0", time.monotonic()), done())).start()
            at["result 0"] = time.monotonic()
        return item

    run_on_slots([0, 1], [None], work, lambda item, result: None, early=True)
    assert at["turn 1"] >= at["exited 0"] > at["result 0"] + 0.2


@pytest.mark.parametrize(("address", "said"), [(None, "a local Ray cluster did not start"),
                                               ("ray://head:10001", "the Ray cluster at ray://head:10001")])
def test_a_ray_cluster_that_does_not_start_is_one_line_not_a_traceback(monkeypatch, address, said):
    """On the GPU machine a Ray unpacked without its execute bits raised PermissionError from deep in ray.init, and
    `kbench run --executor ray` ended with Ray's traceback (2026-11-28): now one ClusterError line says what failed."""
    import types

    from kbench.errors import ClusterError, KbenchError
    from kbench.execution.executors import make_executor

    def init(**kwargs):
        raise PermissionError("[Errno 13] Permission denied: '/tmp/ray-site/ray/core/src/ray/gcs/gcs_server'\nmore")

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(init=init, remote=None))
    with pytest.raises(ClusterError) as caught:
        make_executor("ray", "cpu", 0, address, None)
    message = str(caught.value)
    assert said in message and "PermissionError: [Errno 13]" in message and "\n" not in message
    assert isinstance(caught.value, KbenchError)
