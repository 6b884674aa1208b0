"""Precisions a run evaluates in and the tolerances its comparisons use at each."""

from __future__ import annotations

# Precisions a run can evaluate in, KernelBench's names: models and floating inputs are cast to the dtype.
PRECISIONS: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# A problem's atol and rtol where its problem.toml declares none.
DEFAULT_TOLERANCE = 1e-2
# The problem's own tolerance (problem.toml) is for fp32; at a reduced precision it is at least this loose.
REDUCED_PRECISION_TOLERANCE = 1e-2


# Tolerance profiles: (atol, rtol) per precision, or None for the problem's own (problem.toml). KernelBench's current
# harness compares fp32 at 1e-4 and fp16/bf16 at 1e-2; its v0 and v0.1 used 1e-2 for every precision.
TOLERANCE_PROFILES: dict[str, dict[str, tuple[float, float]] | None] = {
    "problem": None,
    "kernelbench": {"fp32": (1e-4, 1e-4), "fp16": (1e-2, 1e-2), "bf16": (1e-2, 1e-2)},
    "kernelbench-v0.1": {"fp32": (1e-2, 1e-2), "fp16": (1e-2, 1e-2), "bf16": (1e-2, 1e-2)},
}


def tolerance(profile: str, precision: str, problem: tuple[float, float],
              explicit: tuple[float | None, float | None] = (None, None)) -> tuple[float, float]:
    """The (atol, rtol) a run compares one problem's outputs with.

    Args:
        profile: a key of TOLERANCE_PROFILES ("problem" uses each problem's own tolerance).
        precision: the run's precision for the problem, a key of PRECISIONS ("fp32", "tf32", "bf16", "fp16").
        problem: the problem's declared (atol, rtol) (problem.toml, else the default).
        explicit: --atol and --rtol; either may be None (not given).

    Returns:
        (atol, rtol), absolute and relative (an element passes when |out - ref| <= atol + rtol * |ref|). Explicit
        values win, then the profile's value for the precision, then the problem's own, raised to at least
        REDUCED_PRECISION_TOLERANCE at a reduced precision.
    """
    table = TOLERANCE_PROFILES[profile]
    if table is not None:
        base = table[precision]
    elif precision == "fp32":
        base = problem
    else:
        base = (max(problem[0], REDUCED_PRECISION_TOLERANCE), max(problem[1], REDUCED_PRECISION_TOLERANCE))
    return (explicit[0] if explicit[0] is not None else base[0], explicit[1] if explicit[1] is not None else base[1])
