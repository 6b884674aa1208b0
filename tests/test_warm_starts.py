"""Children started ahead of their jobs (CUDA runs' launcher): each job still gets a fresh child with its own env."""

import os
import time
from pathlib import Path

from kbench.build.compile import BuildContext, child_env, zygote_env
from kbench.config.run_config import TimingPolicy
from kbench.execution import child, isolation, timeline, warm_starts
from kbench.results.records import SolutionSpec
from kbench.wire.jobs import EvaluateJob, ProblemRef, ReferenceJob, SolutionRef
from tests.conftest import FIXTURES

# Prepended to a correct fixture solution: it then loads only if its child sees the TORCH_EXTENSIONS_DIR of its own
# job. Its children were started before that job (and its extension dir) was known, so the worker must apply the
# job's env before it loads the solution.
CHECKS_ENV = '''import os
from pathlib import Path

if os.environ.get("TORCH_EXTENSIONS_DIR") != str(Path(__file__).parent / "ext"):
    raise RuntimeError(f"wrong extension dir: {os.environ.get('TORCH_EXTENSIONS_DIR')}")
# A process that already loaded one of these solutions is not fresh: the mark it left says so.
import builtins
if getattr(builtins, "_kb_test_loaded_before", False):
    raise RuntimeError("this process already ran a job")
builtins._kb_test_loaded_before = True
print("pid", os.getpid(), flush=True)
'''


def _judging():
    problem = FIXTURES / "problems" / "tiny" / "model.py"
    return {"device": "cpu", "seed": 0, "trials": 1, "atol": 1e-4, "rtol": 1e-4,
            "problem": ProblemRef("tiny", str(problem)), "timing": TimingPolicy(max_time_s=0.05)}


def _job(solution):
    return EvaluateJob(**_judging(), solution=SolutionRef(solution.stem, str(solution)))


def _solution(folder):
    folder.mkdir()
    path = folder / "checks_env.py"
    path.write_text(CHECKS_ENV + (FIXTURES / "solutions" / "tiny" / "good.py").read_text())
    return path, {**isolation.worker_path_env(), "TORCH_EXTENSIONS_DIR": str(folder / "ext")}


def test_each_job_gets_its_own_env_in_a_child_started_before_it(tmp_path):
    warm = warm_starts.WarmStarts()
    try:
        outcomes = []
        for name in ("a", "b", "c"):
            path, env = _solution(tmp_path / name)
            outcomes.append(warm(_job(path), 60, env))
            assert warm.waiting() == 1  # the next job's child is already started
        assert [o.result.status for o in outcomes] == ["correct"] * 3, [o.log for o in outcomes]
        # each loaded its solution (which fails in a process that ran a job before): a fresh process for every job
        assert [sum(line.startswith("pid ") for line in o.log.splitlines()) for o in outcomes] == [1, 1, 1]
    finally:
        warm.close()
    assert warm.waiting() == 0


def test_a_child_that_died_while_waiting_is_replaced(tmp_path):
    warm = warm_starts.WarmStarts()
    try:
        path, env = _solution(tmp_path / "a")
        assert warm(_job(path), 60, env).result.status == "correct"
        for child in list(warm._spares.values()):
            os.kill(child.proc.pid, 9)
            child.proc.wait()
        path, env = _solution(tmp_path / "b")
        outcome = warm(_job(path), 60, env)
        assert outcome.result is not None and outcome.result.status == "correct", outcome.log
    finally:
        warm.close()


def test_close_kills_the_waiting_children(tmp_path):
    warm = warm_starts.WarmStarts()
    path, env = _solution(tmp_path / "a")
    warm(_job(path), 60, env)
    spares = list(warm._spares.values())
    warm.close()
    assert spares and all(child.proc.poll() is not None for child in spares)


def test_the_worker_reports_the_end_of_its_timing_and_only_with_the_jobs_token(tmp_path):
    path, env = _solution(tmp_path / "a")
    events: list[str] = []
    outcome = child.JobChild(env).run(_job(path), 60, on_event=events.append)
    assert outcome.result.status == "correct" and events == ["timed"]
    wrong = tmp_path / "wrong.py"
    wrong.write_text((FIXTURES / "solutions" / "tiny" / "wrong_values.py").read_text())
    events.clear()
    outcome = child.JobChild(env).run(_job(wrong), 60, on_event=events.append)
    assert outcome.result.status == "incorrect" and events == []  # stopped before timing


def test_a_job_that_never_times_still_leaves_the_next_child_started(tmp_path):
    wrong = tmp_path / "wrong.py"
    wrong.write_text((FIXTURES / "solutions" / "tiny" / "wrong_values.py").read_text())
    warm = warm_starts.WarmStarts()
    try:
        outcome = warm(_job(wrong), 60, isolation.worker_path_env())
        assert outcome.result.status == "incorrect"
        assert warm.waiting() == 1
    finally:
        warm.close()


def _record_children(monkeypatch) -> list[float]:
    """When each child of the warm starts is started, from now on."""
    created: list[float] = []

    class Recording(child.JobChild):
        def __init__(self, *args, **kwargs):
            created.append(time.monotonic())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(warm_starts, "JobChild", Recording)
    return created


def test_the_next_child_starts_only_after_the_running_job_has_timed(tmp_path, monkeypatch):
    created = _record_children(monkeypatch)
    path, env = _solution(tmp_path / "slow")
    path.write_text("import time\ntime.sleep(2)\n" + path.read_text())  # 2 s of loading, before any timing
    warm = warm_starts.WarmStarts()
    try:
        assert warm(_job(path), 60, env).result.status == "correct"
    finally:
        warm.close()
    assert len(created) == 2 and created[1] - created[0] >= 2.0


def test_reference_and_solution_children_differ_only_by_the_per_job_env(tmp_path):
    ctx = BuildContext(cache_dir=tmp_path, cuda_home=None, arch="9.0", torch_version="x", timeout_s=1, jobs=1)
    path, _ = _solution(tmp_path / "a")
    solution = SolutionSpec(name="checks_env", problem="tiny", path=path, devices=("cpu",))
    reference, candidate = child_env(ctx, None, 1), child_env(ctx, solution, 1)
    differ = {k for k in reference.keys() | candidate.keys() if reference.get(k) != candidate.get(k)}
    # the build folder and the kernel DSLs' caches: a solution's own
    assert differ == {"TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR", "TILELANG_CACHE_DIR", "CUTE_DSL_CACHE_DIR"}
    assert differ <= set(child.JOB_ENV)
    # and what they share is known before the probe: the run's first zygote serves both
    assert child.shared_env(reference) == child.shared_env(candidate) == zygote_env(ctx.cuda_home)


def test_the_reference_child_reports_the_end_of_its_timing(tmp_path):
    """...before its checks, which time nothing: the slot's next worker makes its CUDA context meanwhile, rather than
    after the job while the next job waits for it."""
    job = ReferenceJob(**_judging())
    events: list[str] = []
    outcome = child.JobChild(isolation.worker_path_env()).run(job, 60, on_event=events.append)
    assert outcome.result.status == "correct" and events == ["timed"]
    eager = outcome.result.rows[0]  # the reference's child fills the eager row
    order = list(eager.phases)
    assert order.index("timing") < order.index("degenerate_check") < order.index("noise_check")
    assert eager.diagnostics.noise is not None  # the checks still ran


def test_every_kernel_dsls_compile_cache_lives_beside_kbenchs_builds_and_travels_with_the_job(tmp_path):
    """Triton, TileLang and CuTe DSL would otherwise cache in the user's home; a zygote started before the run's
    cache folder was known must not fix them either, so they are per-job variables."""
    ctx = BuildContext(cache_dir=tmp_path / "ext", cuda_home=None, arch="9.0", torch_version="x", timeout_s=1, jobs=1)
    env = child_env(ctx, None, 1)
    for var in ("TRITON_CACHE_DIR", "TILELANG_CACHE_DIR", "CUTE_DSL_CACHE_DIR"):
        assert Path(env[var]).parent == tmp_path and var in child.JOB_ENV
    assert len({env[v] for v in ("TRITON_CACHE_DIR", "TILELANG_CACHE_DIR", "CUTE_DSL_CACHE_DIR")}) == 3


def test_each_solution_has_kernel_dsl_caches_of_its_own(tmp_path):
    """A solution that writes into its Triton cache (a kernel another solution would load) writes where no other
    solution looks: the caches are keyed like its build folder; the references keep kbench's own."""
    ctx = BuildContext(cache_dir=tmp_path / "ext", cuda_home=None, arch="9.0", torch_version="x", timeout_s=1, jobs=1)
    one, other = tmp_path / "one.py", tmp_path / "other.py"
    one.write_text("class ModelNew: pass\n")
    other.write_text("class ModelNew: pass  # another\n")
    envs = [child_env(ctx, SolutionSpec("tiny", path.stem, path), 1) for path in (one, other)]
    reference = child_env(ctx, None, 1)
    for var in ("TRITON_CACHE_DIR", "TILELANG_CACHE_DIR", "CUTE_DSL_CACHE_DIR"):
        mine, theirs = Path(envs[0][var]), Path(envs[1][var])
        assert mine != theirs and reference[var] not in (str(mine), str(theirs))
        assert tmp_path in mine.parents and tmp_path in theirs.parents
    again = child_env(ctx, SolutionSpec("tiny", "one", one), 1)
    assert again["TRITON_CACHE_DIR"] == envs[0]["TRITON_CACHE_DIR"]  # the same file keeps its kernels between runs


# Prepended to the tiny problem: imported by the judge (the worker), it prints the worker's parent (the zygote that
# forked it) and the GPU the worker was placed on.
PLACES = '''import os
print("placed", os.getppid(), os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
'''


def test_one_zygote_serves_every_gpu_and_each_worker_is_placed_on_its_own(tmp_path):
    """A zygote per GPU was started just in time, so its workers missed its warm-up (seconds of imports each on a
    4-GPU run); one zygote now forks every slot's workers, each placed on its GPU before CUDA starts there."""
    import dataclasses

    problem = tmp_path / "problem.py"
    problem.write_text(PLACES + (FIXTURES / "problems" / "tiny" / "model.py").read_text())
    job = _job(FIXTURES / "solutions" / "tiny" / "good.py")
    job = dataclasses.replace(job, problem=dataclasses.replace(job.problem, path=str(problem)))
    warm = warm_starts.WarmStarts()
    try:
        workers, candidates = [], []
        for slot in ("7", "8", "7"):
            outcome = warm(job, 60, {**isolation.worker_path_env(), "CUDA_VISIBLE_DEVICES": slot})
            assert outcome.result.status == "correct", outcome.log
            lines = [line.split()[1:] for line in outcome.log.splitlines() if line.startswith("placed ")]
            workers += [w for w in lines if w[0] != "0"][:1]  # the judge's import (the candidates: PID 1, parent 0)
            candidates += [w[1] for w in lines if w[0] == "0"]
        assert [gpu for _, gpu in workers] == ["7", "8", "7"]
        assert len({zygote for zygote, _ in workers}) == 1  # every worker forked by the same zygote
        assert set(candidates) <= {"7", "8"} and candidates  # a candidate is where its worker is
        assert warm.waiting() == 2  # a spare per slot
    finally:
        warm.close()


def test_a_spare_started_after_a_reference_job_holds_no_candidate_process(tmp_path):
    """A run times its references first: a spare forked for the next of them starts no candidate (its CUDA context,
    then its kill and teardown, cost each reference row tenths of a second); one for a solution's job does."""
    warm = warm_starts.WarmStarts()
    env = isolation.worker_path_env()
    try:
        assert warm(ReferenceJob(**_judging()), 60, env).result.status == "correct"
        (spare,) = warm._spares.values()
        assert not _children_of(spare.proc.pid)
        path, solution_env = _solution(tmp_path / "a")
        assert warm(_job(path), 60, solution_env).result.status == "correct"  # no candidate ready: one is forked
        (spare,) = warm._spares.values()
        deadline = time.monotonic() + 30
        while not _children_of(spare.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _children_of(spare.proc.pid)
    finally:
        warm.close()


def _children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_a_worker_that_has_answered_does_not_hold_up_the_next_job_while_it_exits(tmp_path, monkeypatch):
    """Its result is a worker's last word; its exit (CUDA contexts torn down) happens while the next job starts, and
    the parent still reaps it."""
    import subprocess
    import sys

    from kbench.execution import process_tree

    script = tmp_path / "slow_exit.py"
    script.write_text("import json, os, sys, time\n"
                      "fd = int(sys.argv[1])\n"
                      "token = json.loads(sys.stdin.read())['token']\n"
                      "os.write(fd, (json.dumps({'token': token, 'result': {'status': 'runtime_error', "
                      "'message': 'answered'}}) + '\\n').encode())\n"
                      "time.sleep(4)\n")

    def spawn(self, env, write_fd, warm, candidate):
        return subprocess.Popen([sys.executable, str(script), str(write_fd)], stdin=subprocess.PIPE,
                                stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(write_fd,),
                                start_new_session=True)

    monkeypatch.setattr(child.JobChild, "_spawn", spawn)
    started = time.monotonic()
    worker = child.JobChild(None)
    outcome = worker.run(_job(FIXTURES / "solutions" / "tiny" / "good.py"), 60)
    assert time.monotonic() - started < 3 and outcome.result is not None and outcome.result.message == "answered"
    deadline = time.monotonic() + 10
    while worker.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert worker.proc.returncode is not None  # reaped: killed with its group, no zombie left
    assert worker.proc.pid not in process_tree.tracked()


def _turn_after(seconds: float):
    import threading

    turn = threading.Event()
    threading.Timer(seconds, turn.set).start()
    return turn


def test_a_job_handed_before_its_turn_prepares_and_times_nothing_until_the_turn_comes():
    """A solution's judge builds and calls the reference (and so does its candidate), then waits for its turn before
    the calibration rounds; a reference's child waits before its timing. The wait is the `waiting` phase, and the
    timeout counts from the turn."""
    from kbench.execution.zygote import Zygote

    env = isolation.worker_path_env()
    forks = Zygote(child.zygote_env_of(env))  # workers with everything imported: the turn comes after their start
    try:
        # 5 s: a busy 2-core host took 2.75 s to start and prepare a reference (CI, 2026-11-27)
        solution = child.JobChild(env, zygote=forks).run(_job(FIXTURES / "solutions" / "tiny" / "good.py"), 60,
                                                       turn=_turn_after(5.0))
        reference = child.JobChild(env, zygote=forks).run(ReferenceJob(**_judging()), 60, turn=_turn_after(5.0))
    finally:
        forks.close()
    assert solution.result.status == "correct" and reference.result.status == "correct", solution.log + reference.log
    phases = solution.result.phases
    assert list(phases)[:3] == ["setup", "calibration_start", "waiting"]
    assert phases["waiting"] > 0.3  # the start-up and the preparation came first, then the wait for the turn
    assert solution.seconds > 5.0 and reference.seconds > 5.0  # neither could end before its turn
    steps = list(reference.result.rows[0].phases)
    assert reference.result.rows[0].phases["waiting"] > 0.3 and steps.index("setup") < steps.index("waiting") < steps.index(
        "timing")


def test_a_job_whose_preparation_fails_answers_without_its_turn(tmp_path):
    """A reference that raises in its first call ends the job before it would time: the child answers at once,
    though its turn never comes."""
    import threading

    never = threading.Event()
    problem = tmp_path / "raises.py"
    problem.write_text((FIXTURES / "problems" / "tiny" / "model.py").read_text().replace(
        "return torch.tanh(self.linear(x)) * self.scale", "raise ValueError('no forward here')"))
    broken = {**_judging(), "problem": ProblemRef("raises", str(problem))}
    started = time.monotonic()
    outcome = child.JobChild(isolation.worker_path_env()).run(ReferenceJob(**broken), 60, turn=never)
    assert outcome.result is not None and outcome.result.status == "runtime_error", outcome.log
    assert "no forward here" in outcome.result.message
    assert time.monotonic() - started < 30


def _a_job_then_one_that_loads_slowly(tmp_path, monkeypatch) -> tuple[list[float], dict[str, float]]:
    """Two solutions on one slot with early turns, the second loading for 2 s after its turn (before it times): when
    each child was started, and when each job ended."""
    from kbench.execution.pool import run_on_slots

    created = _record_children(monkeypatch)
    first, env = _solution(tmp_path / "first")
    slow, _ = _solution(tmp_path / "slow")
    slow.write_text(slow.read_text().replace(str(tmp_path / "slow" / "ext"), str(tmp_path / "first" / "ext")))
    slow.write_text("import time\ntime.sleep(2)\n" + slow.read_text())  # loaded after its turn, before it times
    ended: dict[str, float] = {}
    warm = warm_starts.WarmStarts()
    try:
        run_on_slots([first, slow], [None], lambda path, slot: warm(_job(path), 60, env),
                     lambda path, outcome: ended.setdefault(path.parent.name, time.monotonic()), early=True)
    finally:
        warm.close()
    return created, ended


def test_after_a_job_that_timed_the_child_after_next_starts_when_it_ends(tmp_path, monkeypatch):
    """With early turns the next job takes the spare started when the running job timed; when the running job ends,
    the child for the job after next starts at once (its CUDA contexts made ahead, not while that job waits), here
    while the second job still loads (2 s)."""
    created, ended = _a_job_then_one_that_loads_slowly(tmp_path, monkeypatch)
    # the first job's child, the spare the second took at the first's timing, the one started at the first's end
    assert len(created) >= 3
    assert created[2] - ended["first"] < 1.0  # at the first's end, not 2 s later at the second's timing


def test_without_the_child_after_next_a_slots_children_start_only_at_its_jobs_timing(tmp_path, monkeypatch):
    """KBENCH_AFTER_NEXT=0 (a measurement: what the contexts made while the next job times cost it): the first job's
    end starts nothing (the second job loads for 2 s after it); the second job's child is the spare started at the
    first's timing."""
    monkeypatch.setenv(warm_starts.AFTER_NEXT_ENV, "0")
    created, ended = _a_job_then_one_that_loads_slowly(tmp_path, monkeypatch)
    assert len(created) >= 2  # the first job's child and the spare the second took at the first's timing
    assert not any(-0.1 < made - ended["first"] < 1.5 for made in created), (created, ended)  # none at the first's end


def test_a_job_that_ends_before_the_next_takes_its_spare_leaves_the_child_after_next_owed(monkeypatch):
    """The race of a busy host: the running job ends while the spare started at its timing still waits (the next job's
    thread not yet come for it). The child after next then starts when the next job takes the spare, before that job
    runs, not at that job's own timing."""
    from types import SimpleNamespace

    made: list[object] = []
    seen_at_run: list[int] = []

    class Fake:
        def __init__(self, env, warm, zygote=None, candidate=False):
            self.candidate, self.ended_before_turn, self.started_at = candidate, False, 0.0
            self.proc = SimpleNamespace(poll=lambda: None)
            made.append(self)

        def discard(self):
            pass

        def run(self, job, timeout_s, env, on_event, turn=None, on_exit=None):
            seen_at_run.append(len(made))
            on_event("timed")
            if on_exit is not None:
                on_exit()
            return SimpleNamespace(result=None)

    monkeypatch.setattr(warm_starts, "JobChild", Fake)
    monkeypatch.setattr(warm_starts.WarmStarts, "_zygote", lambda self, env: None)
    warm = warm_starts.WarmStarts()
    job, env = SimpleNamespace(mode="evaluate"), isolation.worker_path_env()
    try:
        warm(job, 60, env)  # its own child, then the spare at its timing; it ends with that spare untaken
        assert len(made) == 2 and warm.waiting() == 1
        warm(job, 60, env)  # takes the spare: the child after next is started before it runs
        assert seen_at_run == [1, 3]
        assert len(made) == 3 and warm.waiting() == 1  # not one more at its timing or end: one waits, one is owed
        warm(job, 60, env)
        assert seen_at_run == [1, 3, 4]
    finally:
        warm.close()


def test_the_timeline_holds_each_jobs_events_in_the_order_they_came(tmp_path, monkeypatch):
    """KBENCH_TIMELINE (bench/scale.py's view of where a slot's wall goes): every job handed, given its turn, timed,
    answered, its worker exited and swept, in order on the parent's clock, and when its worker was started and was
    ready for a job (the worker's own clock reading, the same CLOCK_MONOTONIC); without the variable, nothing marked."""
    path = tmp_path / "timeline.jsonl"
    monkeypatch.setenv(timeline.ENV, str(path))
    warm = warm_starts.WarmStarts()
    try:
        for name in ("a", "b"):
            solution, env = _solution(tmp_path / name)
            assert warm(_job(solution), 60, env).result.status == "correct"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and path.read_text().count('"swept"') < 2:
            time.sleep(0.05)  # the last worker is reaped in a thread of its own
    finally:
        warm.close()
    events = timeline.read(str(path))
    jobs = sorted({e.job for e in events}, key=lambda j: [e.job for e in events].index(j))
    assert len(jobs) == 2 and {(e.what, e.mode) for e in events} == {("tiny/checks_env", "evaluate")}
    for job in jobs:
        mine = [e for e in events if e.job == job]
        # the result line is seen by the parent's reader thread, which a fast worker's exit may beat
        assert sorted(e.event for e in mine) == sorted(timeline.EVENTS)
        at = {e.event: e.t for e in mine}
        assert at["started"] <= at["ready"] <= at["timed"] and at["started"] <= at["handed"]
        slot = [e for e in mine if e.event not in ("started", "ready")]  # marked as they come, on the parent's clock
        order = [e.event for e in slot]
        assert order[:3] == ["handed", "turn", "timed"] and order.index("exited") + 1 == order.index("swept")
        assert [e.t for e in slot] == sorted(e.t for e in slot)
    monkeypatch.delenv(timeline.ENV)
    assert timeline.Timeline().marker("0", "x", "evaluate") is timeline.no_mark


def test_a_timeline_the_run_cannot_write_is_said_once_and_the_run_goes_on(tmp_path, capsys):
    nowhere = timeline.Timeline(str(tmp_path / "missing" / "timeline.jsonl"))
    assert nowhere.path is None and nowhere.marker("0", "x", "evaluate") is timeline.no_mark
    assert "[warning] KBENCH_TIMELINE=" in capsys.readouterr().err
