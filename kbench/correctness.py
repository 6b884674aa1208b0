"""Output comparison and seeded correctness trials.

The worker imports this module before any solution, and the torch functions it compares with are
bound here at import time, so a solution that later replaces `torch.allclose` and friends cannot
change a verdict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from kbench.records import TrialResult

_isfinite = torch.isfinite
_isnan = torch.isnan
_abs = torch.abs
_sub = torch.sub
_max = torch.max
_le = torch.le
_logical_or = torch.logical_or
_logical_and = torch.logical_and
_logical_not = torch.logical_not
_eq = torch.eq
_count_nonzero = torch.count_nonzero
_clamp_min = torch.clamp_min
_div = torch.div
_tensor_type = torch.Tensor
_float64 = torch.float64


def _flatten_outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def compare(candidate: Any, reference: Any, atol: float, rtol: float) -> tuple[bool, dict[str, Any]]:
    """allclose-style comparison of candidate against reference outputs, with error figures.

    An element passes when |c - r| <= atol + rtol * |r|, or when both are the same non-finite value
    (NaN with NaN, +Inf with +Inf). Shapes and dtypes must match exactly, and are checked first.
    """
    cands, refs = _flatten_outputs(candidate), _flatten_outputs(reference)
    if len(cands) != len(refs):
        return False, {"message": f"returned {len(cands)} outputs, reference returns {len(refs)}"}
    figures: dict[str, Any] = {"max_abs_err": 0.0, "max_rel_err": 0.0, "mismatched": 0, "numel": 0}
    for i, (c, r) in enumerate(zip(cands, refs)):
        label = f"output {i}" if len(refs) > 1 else "output"
        if not isinstance(r, _tensor_type):  # a plain number (a Python scalar the reference returns)
            if isinstance(c, _tensor_type) or not _close_numbers(c, r, atol, rtol):
                return False, {"message": f"{label} is {c!r}, reference {r!r}"}
            continue
        if not isinstance(c, _tensor_type):
            return False, {"message": f"{label} is {type(c).__name__}, expected a tensor"}
        if tuple(c.shape) != tuple(r.shape):
            return False, {"message": f"{label} shape {tuple(c.shape)} != reference {tuple(r.shape)}"}
        if c.dtype != r.dtype:
            return False, {"message": f"{label} dtype {c.dtype} != reference {r.dtype}"}
        if c.device != r.device:
            return False, {"message": f"{label} is on {c.device}, reference on {r.device}"}
        _accumulate(figures, c.detach().to(_float64), r.detach().to(_float64), atol, rtol)
    ok = figures["mismatched"] == 0
    if not ok:
        figures["message"] = (
            f"{figures['mismatched']} of {figures['numel']} elements outside atol={atol:g}, rtol={rtol:g}"
            f" (max abs err {figures['max_abs_err']:.3g})"
        )
    return ok, figures


def _close_numbers(c: Any, r: Any, atol: float, rtol: float) -> bool:
    if isinstance(c, bool) or isinstance(r, bool) or not isinstance(c, (int, float)) or not isinstance(r, (int, float)):
        return c == r
    if c != c or r != r:  # NaN
        return c != c and r != r
    return c == r or abs(c - r) <= atol + rtol * abs(r)


def _accumulate(figures: dict[str, Any], c: torch.Tensor, r: torch.Tensor, atol: float, rtol: float) -> None:
    finite_c, finite_r = _isfinite(c), _isfinite(r)
    both_finite = _logical_and(finite_c, finite_r)
    diff = _abs(_sub(c, r))
    close = _logical_and(both_finite, _le(diff, atol + rtol * _abs(r)))
    same_nonfinite = _logical_and(
        _logical_and(_logical_not(finite_c), _logical_not(finite_r)),
        _logical_or(_logical_and(_isnan(c), _isnan(r)), _eq(c, r)),
    )
    good = _logical_or(close, same_nonfinite)
    figures["numel"] += c.numel()
    figures["mismatched"] += int(c.numel() - _count_nonzero(good).item())
    if c.numel() == 0:
        return
    # Error figures over finite pairs; a non-finite candidate where the reference is finite is infinite error.
    bad_nonfinite = _logical_and(finite_r, _logical_not(finite_c))
    if bool(bad_nonfinite.any()):
        figures["max_abs_err"] = float("inf")
        figures["max_rel_err"] = float("inf")
        return
    if bool(both_finite.any()):
        finite_diff = diff[both_finite]
        rel = _div(finite_diff, _clamp_min(_abs(r[both_finite]), 1e-12))
        figures["max_abs_err"] = max(figures["max_abs_err"], float(_max(finite_diff).item()))
        figures["max_rel_err"] = max(figures["max_rel_err"], float(_max(rel).item()))


def clone_inputs(inputs: Sequence[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, _tensor_type) else x for x in inputs]


def inputs_unchanged(before: Sequence[Any], after: Sequence[Any]) -> bool:
    """True when every tensor input is bit-identical after the call (NaNs compared as equal)."""
    for b, a in zip(before, after):
        if isinstance(b, _tensor_type):
            same = _logical_or(_eq(a, b), _logical_and(_isnan(a), _isnan(b)))
            if not bool(same.all()):
                return False
    return True


def run_trials(
    make_inputs: Callable[[int], list[Any]],
    candidate: Callable[..., Any],
    reference: Callable[..., Any],
    seeds: Sequence[int],
    atol: float,
    rtol: float,
    sync: Callable[[], None] = lambda: None,
) -> tuple[list[TrialResult], list[str]]:
    """One trial per seed: fresh inputs, candidate first then reference, each on its own clone.

    The candidate runs first so that it cannot pick up the reference's output from freed memory
    of the same trial; a fresh seed per trial makes stale results from an earlier trial wrong.
    `sync` waits for all device work after the candidate, so work it left on another stream is done
    before its output is read (the timer, not the verdict, is what such work fools).
    Returns the trials (stopping at the first failure) and warnings (e.g. inputs modified in place).
    """
    results: list[TrialResult] = []
    warnings: list[str] = []
    for seed in seeds:
        inputs = make_inputs(seed)
        cand_inputs = clone_inputs(inputs)
        cand_out = candidate(*cand_inputs)
        sync()
        if not inputs_unchanged(inputs, cand_inputs) and not warnings:
            warnings.append("[modifies_inputs] the solution modifies its inputs in place")
        ref_out = reference(*clone_inputs(inputs))
        sync()
        ok, fig = compare(cand_out, ref_out, atol, rtol)
        results.append(
            TrialResult(
                seed=seed,
                passed=ok,
                max_abs_err=fig.get("max_abs_err"),
                max_rel_err=fig.get("max_rel_err"),
                mismatched=fig.get("mismatched"),
                numel=fig.get("numel"),
                message=fig.get("message", ""),
            )
        )
        del cand_out, ref_out
        if not ok:
            break
    return results, warnings


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest |a - b| over all outputs, in float64 (inf where exactly one side is non-finite)."""
    worst = 0.0
    for x, y in zip(_flatten_outputs(a), _flatten_outputs(b)):
        x64, y64 = x.detach().to(_float64), y.detach().to(_float64)
        if x64.numel() == 0:
            continue
        diff = _abs(_sub(x64, y64))
        same = _logical_or(_eq(x64, y64), _logical_and(_isnan(x64), _isnan(y64)))
        diff = torch.where(same, torch.zeros_like(diff), diff)
        worst = max(worst, float(_max(torch.nan_to_num(diff, nan=float("inf"))).item()))
    return worst


def identical(a: Any, b: Any) -> bool:
    """Bit-identical outputs (NaN equal to NaN)."""
    for x, y in zip(_flatten_outputs(a), _flatten_outputs(b)):
        if x.shape != y.shape:
            return False
        if not bool(_logical_or(_eq(x, y), _logical_and(_isnan(x), _isnan(y))).all()):
            return False
    return True


def degenerate_findings(first: Any, second: Any, atol: float, rtol: float) -> tuple[list[str], dict[str, float]]:
    """Is this problem able to tell a right answer from a wrong one at its tolerance?

    `first` and `second` are reference outputs for two different input seeds. Findings: a constant
    tensor (the mean) passes; outputs for different inputs agree within tolerance; most outputs are zero.
    """
    out1, out2 = _flatten_outputs(first)[0].detach().to(_float64), _flatten_outputs(second)[0].detach().to(_float64)
    constant = torch.full_like(out1, float(out1.mean().item()))
    const_ok, const_fig = compare(constant, out1, atol, rtol)
    seeds_ok, _ = compare(out2, out1, atol, rtol) if out1.shape == out2.shape else (False, {})
    zero_share = float((out1 == 0).to(_float64).mean().item()) if out1.numel() else 0.0
    n = max(const_fig.get("numel", 0), 1)
    figures = {
        "constant_pass_share": 1 - const_fig.get("mismatched", 0) / n,
        "zero_share": zero_share,
        "output_std": float(out1.std().item()) if out1.numel() > 1 else 0.0,
    }
    findings = []
    if const_ok:
        findings.append(f"[degenerate_constant] a constant tensor (the output's mean) passes at atol={atol:g}, rtol={rtol:g}")
    if seeds_ok:
        findings.append("[degenerate_inputs] outputs for two different input seeds agree within the tolerance")
    if zero_share > DEGENERATE_ZERO_SHARE:
        findings.append(f"[degenerate_zeros] {zero_share:.0%} of the outputs are exactly zero")
    return findings, figures


DEGENERATE_ZERO_SHARE = 0.5
