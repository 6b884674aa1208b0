"""The build cache: keyed by source, reused, and safe when two kbench processes build at once."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from kbench.build.compile import build_one, BuildContext, extension_dir
from kbench.problems.discovery import load_solution_file
from kbench.system.toolkit import BUILT_MARKER
from tests.conftest import FIXTURES

pytestmark = pytest.mark.slow


def test_two_simultaneous_builds_of_one_solution_share_the_cache_safely(tmp_path):
    import torch

    solution = load_solution_file(FIXTURES / "build_solutions" / "tiny" / "cpp_scale.py", "tiny")
    ctx = BuildContext(tmp_path / "cache", None, "9.0", torch.__version__, 600, 1)
    (tmp_path / "cache").mkdir()
    with ThreadPoolExecutor(2) as pool:  # two builders at once, as two kbench runs would be
        first, second = pool.map(lambda _: build_one(ctx, solution, 1), range(2))
    assert first.ok and second.ok, (first.message, second.message)
    assert sorted([first.compile.cached, second.compile.cached]) == [False, True]  # one built, one waited and reused
    directory, key = extension_dir(ctx, solution)
    assert (directory / BUILT_MARKER).exists() and first.compile.cache_key == second.compile.cache_key == key
    again = build_one(ctx, solution, 1)
    assert again.ok and again.compile.cached and again.compile.seconds < max(first.compile.seconds, second.compile.seconds)
