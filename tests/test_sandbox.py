"""The sandbox's decisions (kbench.system.sandbox) without making namespaces: what it is asked, what it may touch."""

from pathlib import Path

import pytest

from kbench.system import sandbox


def test_the_plan_names_the_solution_its_build_folder_and_the_caches(tmp_path):
    solution = tmp_path / "s.py"
    plan = sandbox.plan_for(str(solution), {"TORCH_EXTENSIONS_DIR": "/c/ext/abc", "TRITON_CACHE_DIR": "/c/triton",
                                            "CUTE_DSL_CACHE_DIR": "", "HOME": "/root"})
    assert plan == sandbox.Plan(str(solution.resolve()), "/c/ext/abc", ("/c/triton",))


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
    plan = sandbox.Plan(str(tmp_path / "s.py"))
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
    beside = sandbox.Plan(str(tmp_path / "s.py"), str(tmp_path / "ext"))
    assert sandbox._hidden(beside) == [(tmp_path, [tmp_path / "data.bin", tmp_path / "ext", tmp_path / "s.py"])]
    below = sandbox.Plan(str(tmp_path / "s.py"), str(tmp_path / "cache" / "ext" / "abc"))
    assert sandbox._hidden(below) == [(tmp_path, [tmp_path / "cache", tmp_path / "data.bin", tmp_path / "s.py"]),
                                      (tmp_path / "cache", [tmp_path / "cache" / "ext"]),
                                      (tmp_path / "cache" / "ext", [tmp_path / "cache" / "ext" / "abc"])]
    apart = sandbox.Plan(str(tmp_path / "s.py"), "/c/ext/abc")
    assert sandbox._hidden(apart) == [(Path("/c/ext"), [Path("/c/ext/abc")]),
                                      (tmp_path, [tmp_path / "data.bin", tmp_path / "s.py"])]
