"""Ctrl-C or SIGTERM at any point leaves no process kbench started: not the worker, not the candidate, not what they
started in process groups of their own (as ninja runs compilers) or in sessions of their own."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import FIXTURES, ROOT

# The solution starts two sleepers that carry a marker in their argv, then never finishes importing. With `build`
# it mentions cpp_extension, so the run's build step imports it; without, the candidate does at its load.
SOLUTION = '''import os, subprocess, sys, time
SLEEP = [sys.executable, "-c", "import time; time.sleep(300)", "{marker}"]
subprocess.Popen(SLEEP, preexec_fn=os.setpgrp)  # a process group of its own, as ninja runs each compiler
subprocess.Popen(SLEEP, start_new_session=True)  # a session of its own
print("sleepers started", flush=True)
time.sleep(300)
{build}


class ModelNew:
    pass
'''


def _marked(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


@pytest.mark.parametrize(("stage", "sig"), [("build", signal.SIGTERM), ("evaluation", signal.SIGINT),
                                            ("evaluation", signal.SIGTERM)])
def test_nothing_kbench_started_outlives_it(tmp_path, stage, sig):
    marker = f"kbench-stray-{uuid.uuid4().hex}"
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    build = "# torch.utils.cpp_extension: built by the run's build step" if stage == "build" else ""
    (folder / "sleeper.py").write_text(SOLUTION.format(marker=marker, build=build) + 'DEVICES = ("cpu",)\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbench", "run", "-p", "tiny", "--device", "cpu", "--no-compile-baseline",
         "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(tmp_path / "solutions"),
         "--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), "--max-time", "0.1"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a terminal starts it (test_interrupt)
    )
    try:
        deadline = time.monotonic() + 120
        while len(_marked(marker)) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert len(_marked(marker)) == 2, "the sleepers never started"
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, output.decode()
        deadline = time.monotonic() + 5
        while _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _marked(marker) == []
    finally:
        proc.kill()
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)
