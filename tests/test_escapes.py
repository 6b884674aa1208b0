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
