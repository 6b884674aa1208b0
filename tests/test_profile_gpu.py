"""On a GPU with Nsight Compute: kbench profile's summed kernel durations agree with kbench run's timed median."""

import os
from pathlib import Path

import pytest

from kbench.commands.execute import execute
from kbench.commands.profile import ProfileRequest, profile
from kbench.config.run_config import RunConfig, TimingPolicy
from kbench.errors import UsageError
from kbench.problems.discovery import select
from kbench.profile import ncu
from kbench.results.profiles import profiles_of
from kbench.results.records import EAGER, Status
from kbench.results.storage import load_run
from kbench.system import toolkit
from tests.conftest import ROOT

pytestmark = pytest.mark.cuda

AGREEMENT = 0.10  # the bar: the profile's sum within 10% of the timed median
SOLUTION = "tf32_igemm"
PROBLEMS = ["convtranspose3d_softmax", "conv3d_gelu", "conv3d_logsumexp", "convtranspose3d_layernorm"]


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    """One build cache for the module (KBENCH_TEST_CACHE: one kept between runs, e.g. a `kbench run`'s)."""
    if os.environ.get("KBENCH_TEST_CACHE"):
        return Path(os.environ["KBENCH_TEST_CACHE"])
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module", autouse=True)
def needs_ncu():
    try:
        ncu.find_ncu(toolkit.find_cuda_home())
    except UsageError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("problem", PROBLEMS)
def test_the_solutions_summed_kernel_time_is_within_10_percent_of_its_timed_median(tmp_path, build_cache, problem):
    config = RunConfig(device="cuda", trials=1, two_sizes=False, compile_baseline=False, kernel_profile=False,
                       timing=TimingPolicy(max_time_s=2.0), results_dir=tmp_path / "results", cache_dir=build_cache)
    problems, solutions = select([problem], [SOLUTION], ROOT / "problems", ROOT / "solutions")
    store = execute(config, problems, solutions, ROOT)
    rows = {e.solution: e for e in store.evaluations}
    assert rows[SOLUTION].status == Status.CORRECT, rows[SOLUTION].message
    timed = {name: rows[name].timing.median for name in (EAGER, SOLUTION)}

    run = profile(ProfileRequest([problem], [SOLUTION], ROOT / "problems", ROOT / "solutions", config))
    doc, _ = load_run(run.directory)
    summed = {p.solution: p.total_ns / 1e9 for p in profiles_of(doc)}
    assert list(summed) == [EAGER, SOLUTION]
    report = ", ".join(f"{name}: profile {summed[name] * 1e3:.4f} ms, timed {timed[name] * 1e3:.4f} ms"
                       for name in summed)
    assert abs(summed[SOLUTION] / timed[SOLUTION] - 1) < AGREEMENT, report
