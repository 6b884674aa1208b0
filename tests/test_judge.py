"""The judge's side of the protocol: shared buffers, replies checked field by field, a candidate that dies or lies."""

import os
import time
from pathlib import Path

import pytest
import torch

from kbench.judge import judge
from kbench.judge.candidate import protocol
from kbench.judge.harness import build_reference, input_maker, load_problem
from kbench.judge.timing import flags, judge_timing
from kbench.judge.verdict import Verdict
from kbench.results.codec import ProtocolError
from kbench.results.findings import Finding, FindingCode
from kbench.results.diagnostics import MachineState, TimingProtocol
from kbench.results.records import Regime
from kbench.system import procstate
from kbench.wire.jobs import EvaluateJob, ProblemRef, SolutionRef
from tests import judge_targets
from tests.conftest import FIXTURES

TINY = FIXTURES / "problems" / "tiny" / "model.py"


def _job(solution="good"):
    return EvaluateJob(problem=ProblemRef("tiny", str(TINY), {"batch_size": 8, "features": 16}), device="cpu", seed=3,
                       trials=1, atol=1e-4, rtol=1e-4,
                       solution=SolutionRef(solution, str(FIXTURES / "solutions" / "tiny" / f"{solution}.py")))


@pytest.fixture
def session():
    torch.set_grad_enabled(False)
    groups = []
    cand = judge.CandidateProcess()
    cand.announce(lambda event, **fields: groups.append((event, fields)))
    assert groups == [("group", {"pgid": cand.proc.pid})]
    yield judge.Session(cand, "cpu")
    cand.kill()
    torch.set_grad_enabled(True)


def _reference():
    problem = load_problem(_job().problem)
    reference, init = build_reference(problem, 3, "cpu")
    return problem, reference, init, input_maker(problem, "cpu")


def test_shared_buffers_carry_inputs_in_and_outputs_out_and_refills_reach_the_candidate(session):
    problem, reference, init, make = _reference()
    inputs = make(1)
    session.start_calibration(_job(), reference, init, inputs, reference(*inputs))
    assert session.inputs[0].is_shared() and session.buffers["calibration"][0].is_shared()
    out = session.call()[0]
    assert torch.equal(out, reference(*inputs))  # the candidate's copy of the reference, on the judge's buffers
    fresh = make(2)
    pointer = session.inputs[0].data_ptr()
    session.refill(fresh)
    assert session.inputs[0].data_ptr() == pointer  # same buffer, new values
    assert torch.equal(session.call()[0], reference(*fresh))


def test_the_candidate_is_frozen_between_requests(session):
    problem, reference, init, make = _reference()
    inputs = make(1)
    session.start_calibration(_job(), reference, init, inputs, reference(*inputs))
    time.sleep(0.05)
    with open(f"/proc/{session.cand.proc.pid}/stat") as handle:
        state = handle.read().rsplit(")", 1)[1].split()[0]
    assert state == "T"  # stopped
    session.call()  # and thawed for the next request


def test_calibration_measures_the_round_trip_beyond_the_reported_time():
    problem, reference, init, make = _reference()
    cand = judge.CandidateProcess()
    try:
        calibration = judge_timing.calibrate(_job(), judge.Session(cand, "cpu"), reference, init,
                                             make, make(1), reference(*make(1)))
    finally:
        cand.kill()
    low, high = judge_timing.CALIBRATION_ROUNDS
    kept = len(calibration.excess(Regime.HOST))
    assert low - judge_timing.CALIBRATION_DISCARD <= kept <= high - judge_timing.CALIBRATION_DISCARD
    # the judge's window always holds more than the call alone
    assert all(gap > 0 for gap in calibration.excess(Regime.HOST))
    assert calibration.excess(Regime.GPU) == () and calibration.eager_regime == "host"  # the CPU has one regime


def test_rounds_timed_beside_a_witness_carry_the_protocol_cost_of_those_rounds(session):
    """What settles a first [timer_mismatch] or [unfinished_work]: the rounds timed again with a witness (a fresh
    process holding only the reference) timed through the same protocol in every round."""
    import dataclasses

    from kbench.config.run_config import TimingPolicy

    problem, reference, init, make = _reference()
    job = dataclasses.replace(_job(), timing=TimingPolicy(min_samples=12, min_time_s=0.05, max_time_s=0.5))
    inputs = make(1)
    calibration = judge_timing.calibrate(job, session, reference, init, make, inputs, reference(*inputs))
    witness = judge_timing.start_witness(job, session, reference, init, make)
    assert witness is not None and witness.cand.pid != session.cand.pid
    try:
        timed = judge_timing.time_rounds(job, session, reference, make, calibration, witness)
    finally:
        witness.cand.kill()
    rounds, figures = len(timed.solution.samples), timed.protocol.witness
    assert figures.failure is None and figures.rounds == rounds  # one witness call per timed round
    assert timed.witness is not None and len(timed.witness.verify) == rounds
    assert len(timed.witness.excess(Regime.HOST)) == rounds
    assert all(gap > 0 for gap in timed.witness.excess(Regime.HOST))  # its window holds more than its call
    assert timed.witness.eager == calibration.eager and timed.witness.eager_regime == calibration.eager_regime
    assert figures.p50_s == pytest.approx(sorted(timed.witness.excess(Regime.HOST))[rounds // 2], rel=0.5)
    # the same model in both processes here (the session holds the reference): reported times alike
    assert figures.timed_p50_s == pytest.approx(timed.solution.median, rel=1.0)
    # the witness is the judge's own process: its CPU time over the rounds is not the solution's escaped work
    assert FindingCode.ESCAPED_PROCESS not in [w.code for w in timed.findings], timed.findings


def test_a_witness_that_fails_is_the_harness_problem_and_the_rounds_go_on(session):
    import dataclasses

    from kbench.config.run_config import TimingPolicy

    problem, reference, init, make = _reference()
    job = dataclasses.replace(_job(), timing=TimingPolicy(min_samples=10, min_time_s=0.02, max_time_s=0.3))
    inputs = make(1)
    calibration = judge_timing.calibrate(job, session, reference, init, make, inputs, reference(*inputs))
    witness = judge_timing.start_witness(job, session, reference, init, make)
    assert witness is not None
    witness.cand.kill()  # dies before the rounds: its first call fails
    timed = judge_timing.time_rounds(job, session, reference, make, calibration, witness)
    assert timed.solution.samples and timed.witness is None  # too few witness calls to calibrate anything
    assert timed.protocol.witness.rounds == 0 and timed.protocol.witness.failure


def test_the_witness_calls_become_a_calibration_per_regime():
    from kbench.judge.timing.checks import Calibration
    from kbench.judge.timing.timed_call import Observed

    base = Calibration({Regime.HOST: (1.0,)}, eager=(2e-3,) * 3, eager_regime="gpu", arm_overhead=(5e-6,))
    host = [Observed(1e-3, 2e-3, 0.1e-3, 0.05e-3, "host", done=1.5e-3) for _ in range(6)]
    gpu = [Observed(1e-3, 1.8e-3, 0.3e-3, 0.2e-3, "gpu", done=1.2e-3) for _ in range(6)]
    cal = judge_timing.witnessed_calibration(host + gpu, base)
    assert cal.excess(Regime.HOST) == pytest.approx((0.5e-3,) * 6)
    assert cal.excess(Regime.GPU) == pytest.approx((0.2e-3,) * 6)
    assert sorted(cal.verify) == pytest.approx((0.5e-3,) * 6 + (0.6e-3,) * 6)  # every call's, in any order
    assert cal.arm_overhead == pytest.approx((0.1e-3,) * 6)  # the witness's own, where it had gated calls
    assert cal.eager == base.eager and cal.eager_regime == "gpu"
    low = judge_timing.CALIBRATION_ROUNDS[0]
    assert judge_timing.witnessed_calibration(host[: low - 1], base) is None  # too few to calibrate


THREADS = Finding(FindingCode.THREADS, "x")


def _measured(reported_s: float, round_trip_s: float):
    from kbench.results.records import Measurement

    return Measurement(samples=(reported_s,) * 20, judge_samples=(round_trip_s,) * 20)


def test_a_timer_mismatch_has_the_rounds_timed_again_and_only_the_second_count():
    """A burst of host load over the first rounds clears; a solution that shaves only while first timed gets the
    honest time of its second rounds; one that shaves both times keeps the flag."""
    from kbench.judge.timing.checks import Calibration, timer_mismatch_warning

    then = Calibration({Regime.HOST: (0.5e-3,) * 10})

    def check(measured, p):
        return [w for w in (timer_mismatch_warning(measured, then, p=p), THREADS) if w is not None]

    def sequence(*measured):
        left = list(measured)
        return lambda *found: left.pop(0)

    shaved, honest = _measured(0.1e-3, 1.5e-3), _measured(1.0e-3, 1.5e-3)
    def twice(*measured):
        left = sequence(*measured)
        return left, left

    assert flags.retime_mismatch(*twice(honest), check) == (honest, [THREADS], None)
    measured, found, first = flags.retime_mismatch(*twice(shaved, honest), check)
    assert measured is honest and found == [THREADS] and first.code == FindingCode.TIMER_MISMATCH
    measured, found, first = flags.retime_mismatch(*twice(shaved, shaved), check)
    assert measured is shaved and found[0].code == FindingCode.TIMER_MISMATCH and first == found[0]


def test_a_timer_mismatch_stays_only_when_the_witness_of_the_same_rounds_cannot_explain_it_either():
    """The second rounds are checked against the witness's calls of those rounds: a host that got slower since
    calibration slows the witness's protocol as much (cleared); a shave shows against the witness as against the
    calibration (kept)."""
    from kbench.judge.timing.checks import CONFIRM_P, Calibration, timer_mismatch_warning
    from kbench.judge.timing.timed_call import Observed

    then = Calibration({Regime.HOST: (0.5e-3,) * 10})  # the protocol's cost at calibration
    slower = [Observed(1.0e-3, 2.5e-3, 0, 0, "host", done=(2.05 + 0.01 * i) * 1e-3) for i in range(20)]
    witness = judge_timing.witnessed_calibration(slower, then)  # the protocol costs ~1.1 ms in these rounds
    honest = _measured(0.4e-3, 1.5e-3)  # 1.1 ms beyond the call
    assert timer_mismatch_warning(honest, then, p=CONFIRM_P) is not None  # against the old calibration: flagged
    assert timer_mismatch_warning(honest, witness, p=CONFIRM_P) is None  # against the witness: cleared
    liar = _measured(0.1e-3, 1.5e-3)  # reports 0.1 ms of a call that took 0.4 ms
    kept = timer_mismatch_warning(liar, witness, p=CONFIRM_P)
    assert kept is not None and kept.code == FindingCode.TIMER_MISMATCH


def test_the_judge_checks_the_first_rounds_against_calibration_and_the_second_against_their_witness():
    """The check the judge hands retime_mismatch (flags.mismatch_check): an honest row on a host that got
    slower after calibration is flagged by its first rounds, and cleared by its second, whose witness slowed too."""
    from kbench.judge.timing.checks import CONFIRM_P, Calibration
    from kbench.judge.timing.timed_call import Observed

    then = Calibration({Regime.HOST: (0.5e-3,) * 10})
    honest = _measured(0.4e-3, 1.5e-3)  # 1.1 ms beyond the call: the protocol got slower since calibration
    slower = [Observed(1.0e-3, 2.5e-3, 0, 0, "host", done=(2.05 + 0.01 * i) * 1e-3) for i in range(20)]
    first = judge_timing.TimedRounds(honest, honest, TimingProtocol(), MachineState(), [])
    second = judge_timing.TimedRounds(honest, honest, TimingProtocol(), MachineState(), [],
                                      judge_timing.witnessed_calibration(slower, then))
    check = flags.mismatch_check("cpu", then)
    measured, found, flag = flags.retime_mismatch(lambda: first, lambda found: second, check)
    assert measured is second and found == [] and flag is not None and flag.code == FindingCode.TIMER_MISMATCH
    assert [w.code for w in check(first, CONFIRM_P)] == [
        FindingCode.TIMER_MISMATCH]  # the same rounds without their witness: still flagged


def test_a_load_error_is_the_candidates_verdict(session):
    problem, reference, init, make = _reference()
    inputs = make(1)
    session.start_calibration(_job(), reference, init, inputs, reference(*inputs))
    with pytest.raises(Verdict) as caught:
        session.load(str(FIXTURES / "solutions" / "tiny" / "no_modelnew.py"), {})
    assert caught.value.status == "load_error" and "ModelNew" in caught.value.message


@pytest.mark.parametrize("target, status, words", [
    (judge_targets.answers_garbage, "runtime_error", "not JSON"),
    (judge_targets.writes_raw_bytes, "runtime_error", "broke the protocol"),
    (judge_targets.answers_too_much, "runtime_error", "broke the protocol"),
    (judge_targets.answers_negative_time, "runtime_error", "timed_s"),
    (judge_targets.dies_mid_reply, "crashed", "exited with code 7"),
])
def test_a_candidate_that_lies_or_dies_gets_a_verdict_and_no_hang(target, status, words):
    cand = judge.CandidateProcess(target=target)
    start = time.monotonic()
    try:
        with pytest.raises(Verdict) as caught:
            cand.request(protocol.Call())
    finally:
        cand.kill()
    assert caught.value.status == status and words in caught.value.message, caught.value.message
    assert time.monotonic() - start < 10
    with pytest.raises(ProcessLookupError):
        os.kill(cand.proc.pid, 0)  # killed and reaped


def test_kill_ends_the_candidates_whole_process_group(session):
    problem, reference, init, make = _reference()
    inputs = make(1)
    session.start_calibration(_job(), reference, init, inputs, reference(*inputs))
    pgid = session.cand.pgid
    session.cand.kill()
    time.sleep(0.1)
    assert _running_in_group(pgid) == []  # in the sandbox its namespace's first process may linger as a zombie


def _running_in_group(pgid):
    """The processes of a group that have not ended (zombies have: they only wait for their parent to reap them)."""
    running = []
    for name in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except (OSError, ValueError):
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if name.isdigit() and int(fields[2]) == pgid and fields[0] != "Z":
            running.append(int(name))
    return running


@pytest.mark.parametrize("raw, words", [
    (b"[1, 2]", "a list"),
    (b'{"status": "fine"}', "status"),
    (b'{"status": "ok", "wall_s": "1"}', "wall_s"),
    (b'{"status": "ok", "timed_s": NaN}', "timed_s"),
    (b'{"status": "ok", "values": [{"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}]}', "plain JSON"),
    (b'{"status": "ok", "copied": -1}', "copied"),
    (b'{"status": "ok", "peak_bytes": true}', "peak_bytes"),
    (b'{"status": "ok", "patched": ["a", 2]}', "patched"),
    (b'{"status": "ok", "state_changes": "x"}', "state_changes"),
    (b'{"status": "ok", "kernels": [1]}', "kernel profile"),
    (b'{"status": "ok", "sandbox": 3}', "sandbox"),
])
def test_replies_are_checked_field_by_field(raw, words):
    with pytest.raises(ProtocolError, match=words):
        protocol.decode(raw)


def test_a_valid_reply_is_typed():
    reply = protocol.decode(b'{"status": "ok", "timed_s": 0.002, "wall_s": 0.0021, "values": [1.5], "copied": 2, '
                            b'"peak_bytes": 4096, "patched": ["torch.matmul"], "sandbox": "namespaces"}')
    assert reply.ok and reply.timed_s == 0.002 and reply.values == (1.5,) and reply.copied == 2
    assert reply.peak_bytes == 4096 and reply.patched == ("torch.matmul",) and reply.sandbox == "namespaces"
    assert reply.kernels is None and reply.state_changes == ()  # what the command did not answer with


def test_process_state_changes_are_found_named_and_restored():
    expected = procstate.snapshot()
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        torch.set_num_threads(1 if threads > 1 else 2)
        torch.backends.cudnn.enabled = not torch.backends.cudnn.enabled
        changes = procstate.restore(expected, "call 3")
        assert {c.name for c in changes} == {"default_dtype", "num_threads", "cudnn.enabled"}
        assert all(c.restored and c.when == "call 3" for c in changes)
        assert torch.get_default_dtype() == dtype and torch.get_num_threads() == threads
        assert procstate.restore(expected, "call 4") == []
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        torch.backends.cudnn.enabled = expected["cudnn.enabled"]


def test_flush_denormal_has_a_getter_that_sees_the_switch():
    assert procstate.SETTINGS["flush_denormal"][0]() is False
    if torch.set_flush_denormal(True):  # only CPUs with SSE3 support it
        try:
            assert procstate.SETTINGS["flush_denormal"][0]() is True
        finally:
            torch.set_flush_denormal(False)


def test_a_gpu_regime_call_the_judge_saw_launch_bound_is_regime_changed():
    """[regime_changed]: the judge's own clock saw the host take more than REGIME_SLACK times the call's GPU time to
    issue it, in the GPU regime; nothing below that, nothing in the host regime (no judged figures)."""
    slack = flags.REGIME_SLACK
    found = flags.regime_warning(TimingProtocol(judged_issue_s=43e-6, judged_gpu_s=20e-6))
    assert found is not None and found.code == FindingCode.REGIME_CHANGED and "0.043 ms" in found.message
    assert flags.regime_warning(TimingProtocol(judged_issue_s=20e-6 * slack * 0.99, judged_gpu_s=20e-6)) is None
    assert flags.regime_warning(TimingProtocol(regime="host")) is None


def test_a_regime_change_has_the_rounds_timed_again_in_the_host_regime():
    """A call decided GPU-bound and seen launch-bound (gamed, or misjudged from five calls) is timed again in the
    host regime, whose time has the host's in it: the GPU regime cannot be bought."""
    changed = Finding(FindingCode.REGIME_CHANGED, "x")
    mismatch = Finding(FindingCode.TIMER_MISMATCH, "y")
    assert flags.host_only_again([mismatch, changed]) and not flags.host_only_again([mismatch])
    asked = []

    def again(found):
        asked.append(flags.host_only_again(found))
        return "second"

    measured, kept, first = flags.retime_mismatch(
        lambda: "first", again, lambda timed, p: [changed] if timed == "first" else [])
    assert (measured, kept, first, asked) == ("second", [], changed, [True])


def test_a_regime_change_in_the_second_rounds_has_them_timed_a_third_time_in_the_host_regime():
    """A first flag of another kind has the rounds timed again in the GPU regime; a call launch-bound there
    (`[regime_changed]` in the second rounds: an honest plain-PyTorch copy of a call of microseconds on an H200) is
    timed a third time, in the host regime, and only that timing and its own flags count. No regime change in the
    second rounds: no third."""
    changed = Finding(FindingCode.REGIME_CHANGED, "x")
    mismatch = Finding(FindingCode.TIMER_MISMATCH, "y")
    flagged = {"first": [mismatch], "second": [changed, mismatch], "third": []}
    asked = []

    def again(found):
        asked.append(flags.host_only_again(found))
        return ["second", "third"][len(asked) - 1]

    measured, kept, first = flags.retime_mismatch(lambda: "first", again, lambda timed, p: flagged[timed])
    assert (measured, kept, first, asked) == ("third", [], mismatch, [False, True])
    flagged["third"] = [mismatch]  # a shave the host regime's rounds still show stands
    asked.clear()
    assert flags.retime_mismatch(lambda: "first", again, lambda timed, p: flagged[timed]) == (
        "third", [mismatch], mismatch)
    flagged["second"] = [mismatch]  # no regime change in the second rounds: they count
    asked.clear()
    assert flags.retime_mismatch(lambda: "first", again, lambda timed, p: flagged[timed]) == (
        "second", [mismatch], mismatch)
    assert asked == [False]
    below = flags.regime_warning(TimingProtocol(judged_issue_s=38e-6, judged_gpu_s=-15e-6))
    assert below is not None and "below what the judge's clock resolves" in below.message


def test_rounds_timed_host_only_skip_the_regime_decision(session):
    import dataclasses

    from kbench.config.run_config import TimingPolicy

    _problem, reference, init, make = _reference()
    job = dataclasses.replace(_job(), timing=TimingPolicy(min_samples=10, min_time_s=0.02, max_time_s=0.3))
    inputs = make(1)
    calibration = judge_timing.calibrate(job, session, reference, init, make, inputs, reference(*inputs))
    timed = judge_timing.time_rounds(job, session, reference, make, calibration, host_only=True)
    assert timed.protocol.regime == "host" and "host regime" in timed.protocol.regime_decision.why
    assert timed.solution.samples and timed.solution.regime == "host"


def test_unfinished_work_has_the_rounds_timed_again_and_is_settled_against_the_witness():
    """A gap between the signal and the outputs verified that one burst opened clears in the second rounds; a
    solution that leaves work running past its signal does it again, and the witness's verification of the same
    rounds does not explain it; a verification that got slower for everyone does."""
    from kbench.judge.timing.checks import CONFIRM_P, Calibration, unfinished_warning
    from kbench.judge.timing.timed_call import Observed

    then = Calibration({Regime.HOST: (0.5e-3,) * 10}, verify=(0.40e-3,) * 10)
    honest = _measured(1.0e-3, 1.5e-3)

    def check(verify):
        return lambda measured, p: [w for w in (unfinished_warning(verify.pop(0), measured.median, then, p=p),) if w]

    once = [(0.60e-3,) * 10, (0.40e-3,) * 10]
    measured, found, first = flags.retime_mismatch(lambda: honest, lambda found: honest, check(once))
    assert found == [] and first.code == FindingCode.UNFINISHED_WORK

    def witness(verify_s):
        return judge_timing.witnessed_calibration(
            [Observed(1e-3, 1.5e-3 + verify_s + i * 1e-6, 0, 0, "host", done=1.5e-3) for i in range(12)], then)

    left_running = (0.90e-3,) * 10
    kept = unfinished_warning(left_running, honest.median, witness(0.41e-3), p=CONFIRM_P)
    assert kept is not None and kept.code == FindingCode.UNFINISHED_WORK
    assert unfinished_warning(left_running, honest.median, witness(0.89e-3), p=CONFIRM_P) is None


def test_a_flag_is_confirmed_in_the_rounds_timed_again_at_a_lower_significance():
    """The first timing flags at p < 1e-3; the second confirms at p < 0.05. A 10% shave whose second timing was
    significant only at p = 0.017 got through on the H100 when the second timing asked for 1e-3 again."""
    from kbench.judge.timing.checks import CONFIRM_P, TIMER_BOUND_P, Calibration, timer_mismatch_warning
    from kbench.results.records import Measurement

    asked: list[float] = []
    flag = Finding(FindingCode.TIMER_MISMATCH, "x")
    flags.retime_mismatch(lambda: _measured(1e-3, 1.5e-3), lambda found: _measured(1e-3, 1.5e-3),
                                 lambda m, p: asked.append(p) or [flag])
    assert asked == [TIMER_BOUND_P, CONFIRM_P]
    base = [0.50e-3 + i * 0.01e-3 for i in range(10)]  # the protocol's cost at calibration
    then = Calibration({Regime.HOST: tuple(base)})
    shaved = Measurement(samples=(0.3e-3,) * 10, judge_samples=tuple(0.3e-3 + b + 0.04e-3 for b in base))
    assert timer_mismatch_warning(shaved, then) is None  # p = 0.017: not enough for a first flag
    confirmed = timer_mismatch_warning(shaved, then, p=CONFIRM_P)
    assert confirmed is not None and confirmed.code == FindingCode.TIMER_MISMATCH


def _spin(conn, init_cuda=False, forked=False):  # a reserve that burns CPU while it waits: the judge's, not escaped
    os.setpgid(0, 0)
    while True:
        pass


def test_the_reserve_forked_ahead_becomes_the_witness_and_a_held_one_is_the_judges_own():
    """A judge's later candidate processes come from its reserve (forked by the worker beside its first candidate):
    the witness is that process, not a new one; a reserve still held while the solution is timed is the judge's
    own child, whose CPU time is not the solution's escaped work; once taken, the next is spawned."""
    import dataclasses

    from kbench.config.run_config import TimingPolicy
    from kbench.judge.candidate.session import Reserve

    torch.set_grad_enabled(False)
    problem, reference, init, make = _reference()
    job = dataclasses.replace(_job(), timing=TimingPolicy(min_samples=12, min_time_s=0.3, max_time_s=0.6))
    ready = judge.CandidateProcess()  # spawned: a fork of this process, which ran torch already, could hang in it
    reserve = Reserve(ready)
    cand = judge.CandidateProcess()
    session = judge.Session(cand, "cpu", reserve)
    try:
        inputs = make(1)
        calibration = judge_timing.calibrate(job, session, reference, init, make, inputs, reference(*inputs))
        assert reserve.pids() == {ready.pid}
        witness = judge_timing.start_witness(job, session, reference, init, make)
        assert witness is not None and witness.cand is ready and reserve.pids() == set()
        witness.cand.kill()
        busy = judge.CandidateProcess(target=_spin, fork=True)  # held through the rounds, spinning
        session.reserve = Reserve(busy)
        time.sleep(0.1)
        timed = judge_timing.time_rounds(job, session, reference, make, calibration)
        assert FindingCode.ESCAPED_PROCESS not in [w.code for w in timed.findings], timed.findings
        session.reserve.close()
        assert busy.proc.exitcode is not None and session.reserve.pids() == set()
        spawned = session.reserve.take()  # none held: a new process
        try:
            assert spawned.pid not in (ready.pid, busy.pid) and spawned.proc.is_alive()
        finally:
            spawned.kill()
    finally:
        cand.kill()
        reserve.close()
        session.reserve.close()
        torch.set_grad_enabled(True)


def test_calibration_of_a_long_call_stops_at_what_the_process_check_needs(monkeypatch):
    """Past CALIBRATION_S a calibration stops at CALIBRATION_LEAST rounds per regime rather than the usual least:
    a long call's bound is far above the protocol's spread. A clock that moves 60 ms per reading stands in for it."""
    problem, reference, init, make = _reference()
    clock = [0.0]

    def slow() -> float:
        clock[0] += 0.06
        return clock[0]

    monkeypatch.setattr(judge_timing, "_perf_counter", slow)
    cand = judge.CandidateProcess()
    try:
        calibration = judge_timing.calibrate(_job(), judge.Session(cand, "cpu"), reference, init,
                                             make, make(1), reference(*make(1)))
    finally:
        cand.kill()
    kept = judge_timing.CALIBRATION_LEAST - judge_timing.CALIBRATION_DISCARD
    assert kept < judge_timing.CALIBRATION_ROUNDS[0] - judge_timing.CALIBRATION_DISCARD
    # enough for the process check, no more
    assert len(calibration.excess(Regime.HOST)) == len(calibration.reference) == kept


def _with_helper(conn, init_cuda=False, forked=False):  # a candidate that starts a process in a session of its own
    import subprocess

    from kbench.judge.candidate import candidate

    subprocess.Popen(["sleep", "60"], start_new_session=True)
    candidate.main(conn, init_cuda, forked)


def _command(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].rsplit(b"/", 1)[-1]
    except OSError:
        return b""


def test_what_the_candidate_starts_outside_its_group_is_frozen_and_thawed_with_it():
    """Nothing the solution starts runs while the judge times the reference: a process in a session of its own is
    stopped whenever the candidate is frozen, and continued with it (escapes.Freezer)."""
    from kbench.system import escapes, procfs

    cand = judge.CandidateProcess(target=_with_helper)
    try:
        def helpers():  # the `sleep` it started (a process of torch's import, say, may come and go meanwhile)
            table = procfs.processes()
            below = escapes.descendants([cand.pid], table)
            return [p.pid for p in table if p.pid in below and p.pgid != cand.pgid and _command(p.pid) == b"sleep"]

        deadline = time.monotonic() + 30
        while not helpers() and time.monotonic() < deadline:
            time.sleep(0.05)
        (helper,) = helpers()

        def state():
            with open(f"/proc/{helper}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]

        cand.freeze()
        time.sleep(0.05)
        assert state() == "T"
        cand.thaw()
        time.sleep(0.05)
        assert state() != "T"
        cand.freeze()
        time.sleep(0.05)
        assert state() == "T"
    finally:
        cand.kill()
        escapes.kill_escaped(cand.pid, cand.pgid)
