"""The sandbox's decisions (kbench.system.sandbox) without making namespaces: what it is asked, what it may touch."""

from pathlib import Path

import pytest

from kbench.system import sandbox


def test_the_plan_names_the_solution_its_build_folder_and_the_caches(tmp_path):
    solution = tmp_path / "s.py"
    plan = sandbox.plan_for(str(solution), {"TORCH_EXTENSIONS_DIR": "/c/ext/abc", "TRITON_CACHE_DIR": "/c/triton",
                                            "CUTE_DSL_CACHE_DIR": "", "HOME": "/root"}, "cpu")
    assert plan == sandbox.SandboxPlan(str(solution.resolve()), "/c/ext/abc", ("/c/triton",), private_shm=True)
    assert not sandbox.plan_for(str(solution), {}, "cuda").private_shm  # CUDA tensors' reference counts are there
    assert sandbox.plan_for(str(solution), {}, "cuda").private_ipc and plan.private_ipc  # System V IPC: its own


@pytest.mark.parametrize("asked, gpu, expected", [
    ("none", False, False), ("none", True, False), ("on", True, True), ("auto", False, True), ("auto", True, True),
    ("", False, True)])
def test_it_is_on_unless_switched_off_with_or_without_a_gpu(monkeypatch, asked, gpu, expected):
    monkeypatch.setenv(sandbox.ENV, asked)
    monkeypatch.setattr(sandbox.os.path, "exists", lambda path: gpu and path == "/dev/nvidiactl")
    monkeypatch.setattr(sandbox.sys, "platform", "linux")
    assert sandbox.wanted() is expected


def test_it_never_mounts_outside_a_mount_namespace_of_its_own(monkeypatch, tmp_path):
    """restrict() in a process enter() did not move (or could not) would change the whole machine: it only limits."""
    mounted, limited = [], []
    monkeypatch.setattr(sandbox, "_mount", lambda *args, **kw: mounted.append(args))
    monkeypatch.setattr(sandbox, "limit", lambda: limited.append(1))
    monkeypatch.setenv(sandbox.ENV, "on")
    monkeypatch.setattr(sandbox.sys, "platform", "linux")
    plan = sandbox.SandboxPlan(str(tmp_path / "s.py"))
    for entered, level in ((sandbox.NONE, sandbox.NONE), (sandbox.LIMITS, sandbox.LIMITS)):
        monkeypatch.setattr(sandbox, "_entered", [entered])
        assert sandbox.restrict(plan) == level
    assert mounted == [] and limited == [1]


def test_a_build_folder_beside_the_solution_is_kept_and_the_folders_are_emptied_outside_in(tmp_path):
    """The solution's folder and the build cache are emptied but for what the job needs; where one holds the other,
    every folder on the way down keeps only the next step, so that neither hides the other's kept files and nothing
    beside that way stays in view."""
    (tmp_path / "s.py").write_text("")
    (tmp_path / "other.py").write_text("")
    (tmp_path / "data.bin").write_text("")
    beside = sandbox.SandboxPlan(str(tmp_path / "s.py"), str(tmp_path / "ext"))
    assert sandbox._hidden(beside) == [(tmp_path, [tmp_path / "data.bin", tmp_path / "ext", tmp_path / "s.py"])]
    below = sandbox.SandboxPlan(str(tmp_path / "s.py"), str(tmp_path / "cache" / "ext" / "abc"))
    assert sandbox._hidden(below) == [(tmp_path, [tmp_path / "cache", tmp_path / "data.bin", tmp_path / "s.py"]),
                                      (tmp_path / "cache", [tmp_path / "cache" / "ext"]),
                                      (tmp_path / "cache" / "ext", [tmp_path / "cache" / "ext" / "abc"])]
    apart = sandbox.SandboxPlan(str(tmp_path / "s.py"), "/c/ext/abc")
    assert sandbox._hidden(apart) == [(Path("/c/ext"), [Path("/c/ext/abc")]),
                                      (tmp_path, [tmp_path / "data.bin", tmp_path / "s.py"])]


def test_a_solution_sees_its_own_dsl_caches_and_none_of_the_other_solutions(tmp_path):
    (tmp_path / "s.py").write_text("")
    caches = tmp_path / "c" / sandbox.SOLUTION_CACHES
    plan = sandbox.SandboxPlan(str(tmp_path / "s.py"), None, (str(caches / "k1" / "triton"), str(caches / "k1" / "tilelang")))
    assert (caches, [caches / "k1"]) in sandbox._hidden(plan)
    shared = sandbox.SandboxPlan(str(tmp_path / "s.py"), None, (str(tmp_path / "c" / "triton"),))  # kbench's own: kept as is
    assert [folder for folder, _ in sandbox._hidden(shared)] == [tmp_path]


WRITES_CACHE = '''import os
from pathlib import Path

Path(os.environ["TRITON_CACHE_DIR"]).mkdir(parents=True, exist_ok=True)
(Path(os.environ["TRITON_CACHE_DIR"]) / "planted_kernel.py").write_text("poisoned")
assert (Path(os.environ["TRITON_CACHE_DIR"]) / "planted_kernel.py").read_text() == "poisoned"  # its own write reads back
'''
LOOKS_FOR_IT = '''import os
from pathlib import Path

found = [str(p) for p in Path(os.environ["TRITON_CACHE_DIR"]).parents[1].rglob("planted_kernel.py")]
if found:
    raise RuntimeError(f"another solution's cache entry is visible: {found}")
'''


def test_a_kernel_one_solution_writes_into_its_triton_cache_is_not_there_for_the_next(tmp_path):
    """A solution plants a file in its Triton cache; the solution evaluated after it looks for it in every solution's
    cache folder and finds nothing (its own cache is another folder, the sandbox hides the others, and the planted
    file went into an overlay that ended with the planting candidate: it is nowhere on disk after the run)."""
    from kbench.commands.execute import execute
    from kbench.config.run_config import RunConfig, TimingPolicy
    from kbench.problems.discovery import select
    from kbench.results.records import Status
    from tests.conftest import FIXTURES

    good = (FIXTURES / "solutions" / "tiny" / "good.py").read_text()
    folder = tmp_path / "solutions" / "tiny"
    folder.mkdir(parents=True)
    (folder / "a_plants.py").write_text(WRITES_CACHE + good)
    (folder / "b_looks.py").write_text(LOOKS_FOR_IT + good)
    config = RunConfig(device="cpu", trials=1, timeout_s=60, timing=TimingPolicy(max_time_s=0.1), compile_baseline=False,
                       results_dir=tmp_path / "results", cache_dir=tmp_path / "cache" / "extensions")
    problems, solutions = select(["tiny"], [], FIXTURES / "problems", tmp_path / "solutions")
    store = execute(config, problems, solutions, Path.cwd(), lambda event: None)
    rows = {e.solution: e for e in store.evaluations}
    assert rows["a_plants"].status == Status.CORRECT, rows["a_plants"].message
    assert rows["b_looks"].status == Status.CORRECT, rows["b_looks"].message
    # it was written (a_plants checks that its own write reads back), into an overlay that ended with its candidate
    assert list((tmp_path / "cache").rglob("planted_kernel.py")) == []
    assert rows["a_plants"].diagnostics.sandbox == sandbox.NAMESPACES


def _restricting(monkeypatch, tmp_path, mount):
    monkeypatch.setenv(sandbox.ENV, "on")
    monkeypatch.setattr(sandbox.sys, "platform", "linux")
    monkeypatch.setattr(sandbox, "_entered", [sandbox.NAMESPACES])
    monkeypatch.setattr(sandbox, "_private_tmp", lambda: str(tmp_path / "tmp"))
    monkeypatch.setattr(sandbox, "_empty_but", lambda folder, keep: None)
    monkeypatch.setattr(sandbox, "_read_only", lambda writable: None)
    monkeypatch.setattr(sandbox, "limit", lambda: None)
    monkeypatch.setattr(sandbox, "_mount", mount)


def test_the_build_folder_and_caches_are_overlays_whose_writes_stay_in_the_private_tmp(monkeypatch, tmp_path):
    mounted = []
    _restricting(monkeypatch, tmp_path, lambda *args: mounted.append(args))
    build, cache = tmp_path / "ext" / "abc", tmp_path / "c" / "triton"
    plan = sandbox.SandboxPlan(str(tmp_path / "s.py"), str(build), (str(cache),), private_shm=True)
    assert sandbox.restrict(plan) == sandbox.NAMESPACES
    overlays = {args[1]: args[4] for args in mounted if args[2] == "overlay"}
    assert set(overlays) == {str(build), str(cache)}
    for folder, options in overlays.items():
        assert f"lowerdir={folder}," in options and f"upperdir={tmp_path / 'tmp' / sandbox.SCRATCH}" in options
    assert ("tmpfs", sandbox.SHM, "tmpfs") in [args[:3] for args in mounted]  # the CPU's /dev/shm of its own


def test_without_an_overlay_the_folders_stay_writable_and_the_level_says_so(monkeypatch, tmp_path, capfd):
    def mount(source, target, kind, flags, data=None):
        if kind == "overlay":
            raise OSError(19, "No such device")

    _restricting(monkeypatch, tmp_path, mount)
    plan = sandbox.SandboxPlan(str(tmp_path / "s.py"), str(tmp_path / "ext" / "abc"))
    assert sandbox.restrict(plan) == sandbox.WRITES_KEPT
    assert "stays writable in place" in capfd.readouterr().err
