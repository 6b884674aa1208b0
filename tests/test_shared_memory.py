"""The machine's /dev/shm after a worker has exited: what was made since the run started and nobody holds is removed
(kbench.system.shared_memory); what a live process holds, what came before and what is another user's stay."""

import mmap
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kbench.system import shared_memory


def _write(path: Path) -> Path:
    path.write_text("x" * 64)
    return path


def test_a_sweep_removes_what_nobody_holds_and_keeps_what_came_before_or_is_held(tmp_path: Path):
    before = _write(tmp_path / "before")
    time.sleep(0.05)  # ctime is stamped from a coarse clock
    since = time.time()
    time.sleep(0.05)
    loose = _write(tmp_path / "loose")
    folder = tmp_path / "folder"
    folder.mkdir()
    _write(folder / "inside")
    open_here = _write(tmp_path / "open_here")
    mapped = _write(tmp_path / "mapped")
    held_folder = tmp_path / "held_folder"
    held_folder.mkdir()
    held_inside = _write(held_folder / "inside")
    in_child = _write(tmp_path / "in_child")
    with open(open_here) as f, open(mapped, "r+b") as m:
        view = mmap.mmap(m.fileno(), 0)
    with open(open_here) as f, open(held_inside) as g:
        child = subprocess.Popen([sys.executable, "-c", "import sys, time; f = open(sys.argv[1]); print(1, flush=True);"
                                  " time.sleep(60)", str(in_child)], stdout=subprocess.PIPE)
        try:
            child.stdout.readline()  # it holds the file now
            swept = shared_memory.sweep(since, tmp_path)
        finally:
            child.kill()
            child.wait()
        assert not f.closed and not g.closed
    assert sorted(swept.removed) == ["folder", "loose"]
    assert sorted(swept.held) == ["held_folder", "in_child", "mapped", "open_here"]
    assert before.exists() and not loose.exists() and not folder.exists()
    assert all(p.exists() for p in (open_here, mapped, held_inside, in_child))
    view.close()
    # Once nobody holds them, the next sweep takes them
    assert sorted(shared_memory.sweep(since, tmp_path).removed) == ["held_folder", "in_child", "mapped", "open_here"]
    assert [p.name for p in tmp_path.iterdir()] == ["before"]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_a_sweep_never_removes_another_users_file(tmp_path: Path):
    since = time.time() - 1
    theirs = _write(tmp_path / "theirs")
    os.chown(theirs, 4242, 4242)
    assert shared_memory.sweep(since, tmp_path) == shared_memory.Swept() and theirs.exists()


def test_a_folder_that_cannot_be_read_sweeps_nothing(tmp_path: Path):
    assert shared_memory.sweep(0.0, tmp_path / "absent") == shared_memory.Swept()


def test_held_paths_reads_open_and_mapped_files_as_proc_shows_them(tmp_path: Path):
    opened, mapped = _write(tmp_path / "opened"), _write(tmp_path / "mapped (deleted)")
    with open(opened) as f, open(mapped, "r+b") as m:
        view = mmap.mmap(m.fileno(), 0)
        held = shared_memory.held_paths(str(tmp_path))
        assert not f.closed
    try:
        assert {str(opened), str(mapped)} <= held  # a name ending like the kernel's mark for a deleted file too
    finally:
        view.close()
