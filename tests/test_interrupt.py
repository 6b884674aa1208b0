"""Nothing lost: a run stopped by SIGINT or SIGTERM keeps a valid run.json with what finished."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kbench.results.storage import load_run
from tests.conftest import FIXTURES, ROOT


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_run_keeps_a_valid_record_of_what_finished(tmp_path, sig):
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbench", "run", "-p", "tiny", "--device", "cpu", "--no-compile-baseline",
         "--problems-dir", str(FIXTURES / "problems"), "--solutions-dir", str(FIXTURES / "solutions"),
         "--results-dir", str(results), "--cache-dir", str(tmp_path / "cache"), "--max-time", "0.1", "--timeout", "120"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # A shell without job control starts background commands with SIGINT ignored, and the ignore is inherited
        # (a CI script run with '&', say): kbench then rightly keeps running on SIGINT. Start it as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Wait until at least one solution has its verdict (solutions run in name order; 'hangs' comes soon).
    deadline = time.monotonic() + 120
    run_file = None
    while time.monotonic() < deadline:
        found = list(results.glob("*/run.json"))
        if found and len(load_run(found[0].parent)[0].get("evaluations", [])) >= 3:  # run.json and its journal
            run_file = found[0]
            break
        time.sleep(0.5)
    assert run_file is not None, "the run never recorded three evaluations"
    proc.send_signal(sig)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output.decode()
    assert b"Interrupted;" in output and b"saved in" in output
    doc = json.loads(run_file.read_text())
    assert doc["state"] == "interrupted" and doc["format"] == "kbench-run"
    assert len(doc["evaluations"]) >= 3 and doc["evaluations"][0]["solution"] == "eager"
    assert (run_file.parent / "results.csv").exists()
    assert not [p for p in run_file.parent.iterdir() if p.name.startswith(".")]  # no temporary files left
