"""kbench.system.escapes: the candidate's processes outside its frozen group, their CPU time, and which hold the GPU."""

import os
import subprocess
import sys
import time

from kbench.system import escapes

SLEEPER = [sys.executable, "-c", "import time; time.sleep(30)"]
SPINNER = [sys.executable, "-c", "import time\nend = time.time() + 30\nwhile time.time() < end: pass"]


def _start(cmd, **kw):
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, **kw)


def test_a_process_in_a_session_of_its_own_is_escaped_and_one_in_the_group_is_not():
    group = os.getpgid(0)
    inside, outside = _start(SLEEPER), _start(SLEEPER, start_new_session=True)
    try:
        found = escapes.tree_cpu(os.getpid(), group, judge=-1)
        assert outside.pid in found.escaped and inside.pid not in found.escaped
    finally:
        for p in (inside, outside):
            p.kill()
            p.wait()


def test_cpu_taken_between_two_readings_is_summed_and_warned_about():
    spinner = _start(SPINNER, start_new_session=True)
    try:
        before = escapes.tree_cpu(os.getpid(), os.getpgid(0), judge=-1)
        time.sleep(0.5)
        after = escapes.tree_cpu(os.getpid(), os.getpgid(0), judge=-1)
    finally:
        spinner.kill()
        spinner.wait()
    seconds, count = escapes.escaped_cpu(before, after)
    assert seconds > 0.1 and count == 1
    assert escapes.escaped_warning(seconds, count, 0.5).text.startswith("[escaped_process] 1 process(es)")
    assert escapes.escaped_warning(0.01, 1, 0.5) is None  # below max(50 ms, 2% of the window)


def test_an_escaped_process_holding_the_gpu_device_is_named_whatever_its_cpu():
    """With /dev/null standing in for /dev/nvidia*: an open device file is what a CUDA context leaves in /proc."""
    outside = _start(SLEEPER, start_new_session=True)  # stdin is /dev/null
    try:
        found = escapes.tree_cpu(os.getpid(), os.getpgid(0), judge=-1, gpu_prefix="/dev/null")
        assert outside.pid in found.gpu
        assert escapes.tree_cpu(os.getpid(), os.getpgid(0), judge=-1).gpu == frozenset()  # no /dev/nvidia here
    finally:
        outside.kill()
        outside.wait()
    warning = escapes.escaped_warning(0.0, 0, 1.0, gpu_holders=1)
    assert warning.text.startswith("[escaped_process] 1 process(es)") and "had the GPU open" in warning.text


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_for(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_the_freezer_stops_what_the_candidate_started_outside_its_group_and_finds_later_ones(monkeypatch):
    """A stand-in candidate (a group leader) with a process in its group, one in a session of its own at once and
    another 0.5 s later: `stop` stops the two outside the group (never the group's: the judge's SIGSTOP to the
    group covers those), `cont` continues them, and the later one is found once the machine's fork count moved;
    while the count stays, no look is taken."""
    script = "sleep 60 & setsid sleep 60 & (sleep 0.5; setsid sleep 61) & wait"
    cand = _start(["bash", "-c", script], process_group=0)
    try:
        def outside():
            return sorted(p.pid for p in escapes.subtree(cand.pid) if p.pgid != cand.pid)

        assert _wait_for(lambda: len(outside()) >= 1)
        freezer = escapes.Freezer(cand.pid, cand.pid)
        freezer.stop()
        first = set(freezer.known)
        assert first and _wait_for(lambda: all(_state(pid) == "T" for pid in first))
        inside = [p.pid for p in escapes.processes() if p.ppid == cand.pid and p.pgid == cand.pid]
        assert inside and all(_state(pid) != "T" for pid in inside)  # the group's are the judge's SIGSTOP's
        freezer.cont()
        assert _wait_for(lambda: all(_state(pid) != "T" for pid in first))
        assert _wait_for(lambda: len(outside()) == 2)  # the later one has started
        freezer.stop()
        assert len(freezer.known) == 2 and _wait_for(lambda: all(_state(pid) == "T" for pid in freezer.known))
        freezer.cont()
        looks = []
        monkeypatch.setattr(escapes, "forks", lambda: 7)
        real = escapes.subtree
        monkeypatch.setattr(escapes, "subtree", lambda pid: looks.append(pid) or real(pid))
        freezer.stop()  # the count moved (to 7): one look
        freezer.stop()  # it stayed: none, but the known ones are stopped again
        assert looks == [cand.pid] and len(freezer.known) == 2
        assert _wait_for(lambda: all(_state(pid) == "T" for pid in freezer.known))
        freezer.cont()
    finally:
        for pid in outside():
            os.kill(pid, 9)
        os.killpg(cand.pid, 9)
        cand.wait()


def test_a_fork_during_a_look_makes_the_next_freeze_look_again(monkeypatch):
    """The fork count is the one read before the look: a process started while the freezer looked (the group still
    running) is found at the next stop, not taken as already seen."""
    count, looks = [10], []

    def look(pid):
        looks.append(pid)
        if len(looks) == 1:
            count[0] += 1  # a fork while the first look ran
        return []

    monkeypatch.setattr(escapes, "forks", lambda: count[0])
    monkeypatch.setattr(escapes, "subtree", look)
    freezer = escapes.Freezer(os.getpid(), os.getpgid(0))
    freezer.stop()
    freezer.stop()  # the count moved during the first look: look again
    freezer.stop()  # it has not moved since: no look
    assert len(looks) == 2
