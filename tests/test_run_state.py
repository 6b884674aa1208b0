"""A run file's state as it stands now: complete, interrupted, still running, or incomplete (its process died)."""

import dataclasses
import json
import os
import socket
from pathlib import Path

from kbench.results import schema
from kbench.results.storage import (
    RunProcess,
    RunStore,
    load_run,
    process_alive,
    recorded_process,
    run_state,
    this_process,
)

DEAD_PID = 2**22 + 12345  # above Linux's largest pid (2**22): no process can have it


def doc(state="running", **process):
    """A run file's header whose process is this one, but for the fields `process` changes."""
    return {"state": state, "process": {**dataclasses.asdict(this_process()), **process}}


def test_a_finished_run_keeps_its_state_whatever_its_process():
    assert run_state(doc("complete", pid=DEAD_PID)) == "complete"
    assert run_state(doc("interrupted", pid=DEAD_PID)) == "interrupted"


def test_a_running_run_whose_process_is_alive_is_running():
    assert run_state(doc()) == "running"  # this very process


def test_a_running_run_whose_process_is_gone_is_incomplete():
    assert run_state(doc(pid=DEAD_PID)) == "incomplete"
    assert not process_alive(RunProcess(pid=DEAD_PID, host=socket.gethostname(), boot_id=this_process().boot_id))


def test_a_pid_of_another_boot_or_host_does_not_count_as_alive():
    assert run_state(doc(boot_id="another-boot")) == "incomplete"  # rebooted since: the pid is someone else's
    assert run_state(doc(host=socket.gethostname() + "-elsewhere")) == "incomplete"


def test_a_running_file_without_a_process_record_or_without_a_state_is_incomplete():
    assert run_state({"state": "running"}) == "incomplete"  # written before kbench recorded its process
    assert run_state({"process": dataclasses.asdict(this_process())}) == "incomplete"  # never marked running


def test_a_malformed_process_record_is_no_record():
    assert recorded_process({"process": {"pid": "x", "host": "h"}}) is None
    assert recorded_process({"process": {"host": "h"}}) is None
    assert recorded_process({"process": "pid 12"}) is None
    assert recorded_process({"process": {"pid": 12, "host": "h"}}) == RunProcess(12, "h", "")


def test_a_new_run_records_its_process_and_a_resumed_one_the_resuming_process(tmp_path):
    store = RunStore.create(tmp_path, {})
    written, _ = load_run(store.directory)
    boot_file = Path("/proc/sys/kernel/random/boot_id")
    boot = boot_file.read_text().strip() if boot_file.is_file() else ""
    assert written["process"] == {"pid": os.getpid(), "host": socket.gethostname(), "boot_id": boot}
    assert run_state(written) == "running"
    path = store.directory / "run.json"
    path.write_text(json.dumps({**written, "process": {**written["process"], "pid": DEAD_PID}}))
    assert run_state(load_run(path)[0]) == "incomplete"
    resumed = RunStore.resume(path)
    resumed.save("running")
    assert load_run(path)[0]["process"]["pid"] == os.getpid() and run_state(load_run(path)[0]) == "running"


def test_files_without_a_process_record_still_load_and_follow_the_schema(tmp_path):
    store = RunStore.create(tmp_path, {"config": {}})
    store.finish()
    path = store.directory / "run.json"
    written = json.loads(path.read_text())
    schema.check(written)
    del written["process"]
    path.write_text(json.dumps(written))
    loaded, _ = load_run(path)
    schema.check(loaded)
    assert "process" not in loaded and run_state(loaded) == "complete"
