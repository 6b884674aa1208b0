"""Elementwise comparison of outputs in bounded memory: chunking, NaN-equal equality, error figures."""

# The worker imports this module (through kbench.judge.checks.correctness) before any solution, and the torch functions
# it compares with are bound here at import time, so a solution that later replaces `torch.allclose` and friends
# cannot change a verdict.

from __future__ import annotations

import os
from typing import Any, TypedDict

import torch

from kbench.judge import backward

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
_full_like = torch.full_like
_where = torch.where
_stack = torch.stack
_tensor = torch.tensor
_nan_to_num = torch.nan_to_num
_tensor_type = torch.Tensor
_float64 = torch.float64
_mem_get_info = torch.cuda.mem_get_info
_memory_reserved = torch.cuda.memory_reserved
_memory_allocated = torch.cuda.memory_allocated
_environ = os.environ


def flatten_outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


# ---- bounded memory ------------------------------------------------------------------------------------------------
# Comparisons work on the flattened outputs a chunk at a time, in float64 only within the chunk: a 2 G-element output
# is compared without whole-output float64 copies, and the chunk is sized to the memory that is free.

WORKING_COPIES = 8  # float64 temporaries alive per compared element (both sides, difference, bound, masks)
CHUNK_BYTES_MAX = 1 << 30  # float64 working set of one chunk at most (a larger one is no faster on a GPU)
CHUNK_FREE_SHARE = 0.25  # and at most this share of the memory free on the device
CHUNK_MIN_ELEMENTS = 1 << 12
# On the CPU a chunk's float64 working set stays within the caches: a comparison is a dozen passes over its chunk, and
# an 18.7 M-element comparison took 780 ms at 64 MiB chunks against 222 ms at 8 MiB (2-core AMD EPYC VM, 2026-11-27;
# bench/cpu_samples.py shows what it costs a CPU row's samples).
CPU_CHUNK_BYTES = 8 << 20
BUDGET_ENV = "KBENCH_COMPARE_BUDGET_BYTES"  # fixes the budget (tests, diagnosis); else sized to the free memory


def memory_budget(device: Any) -> int:
    """Bytes one comparison chunk may use on `device`: the free memory's share (CUDA: free on the device plus what
    this process's allocator holds unused), capped; on the CPU what stays within its caches (CPU_CHUNK_BYTES);
    `KBENCH_COMPARE_BUDGET_BYTES` overrides it."""
    fixed = _environ.get(BUDGET_ENV)
    if fixed:
        return max(int(fixed), 1)
    if getattr(device, "type", device) == "cuda":
        free, _ = _mem_get_info(device)
        free += _memory_reserved(device) - _memory_allocated(device)
        return int(min(CHUNK_BYTES_MAX, CHUNK_FREE_SHARE * free))
    return CPU_CHUNK_BYTES


def chunk_elements(budget_bytes: int) -> int:
    """Elements per chunk so that the float64 working set of one chunk fits in `budget_bytes`."""
    return max(CHUNK_MIN_ELEMENTS, budget_bytes // (8 * WORKING_COPIES))


def _flat(t: torch.Tensor) -> torch.Tensor:
    """The tensor as one dimension: a view when it is contiguous (a copy in its own dtype otherwise)."""
    return t.detach().reshape(-1)


def chunks(t: torch.Tensor, size: int) -> Any:
    flat = _flat(t)
    for start in range(0, flat.numel(), size):
        yield flat[start:start + size]


class ErrorFigures(TypedDict, total=False):
    """A comparison's figures: its errors over the elements compared, or a `message` saying what differs (and, where
    elements are outside the tolerance, how many)."""

    max_abs_err: float
    max_rel_err: float
    mismatched: int
    numel: int
    chunks: int
    message: str


class Figures:
    """Running totals of an elementwise comparison, accumulated chunk by chunk on the chunks' device: the host reads
    them once, when the comparison is done (`to_dict`), not once per chunk."""

    def __init__(self) -> None:
        self.numel = self.chunks = 0
        self._parts: list[torch.Tensor] = []  # per chunk: [mismatched, max abs err, max rel err, infinite error]

    def add(self, c: torch.Tensor | float, r: torch.Tensor, atol: float, rtol: float) -> None:
        """One chunk: r a float64 tensor, c a float64 tensor of the same shape (or one number for all of r)."""
        self.chunks += 1
        n = r.numel()
        if n == 0:
            return
        c = c if isinstance(c, _tensor_type) else _full_like(r, c)
        # Non-finite pairs match when both are NaN or both the same infinity; a non-finite candidate where the
        # reference is finite is an infinite error.
        same_nonfinite = nan_equal(c, r)
        infinite = _logical_and(_isfinite(r), _logical_not(_isfinite(c))).any()
        diff = _abs(_sub(c, r))
        finite = _isfinite(diff)  # both finite (float64 of float32 values cannot overflow)
        abs_r = _abs(r)
        close = _logical_and(finite, _le(diff, abs_r * rtol + atol))
        good = _logical_or(close, _logical_and(_logical_not(finite), same_nonfinite))
        masked = _where(finite, diff, 0.0)
        rel = _div(masked, _clamp_min(abs_r, 1e-12))
        self.numel += n
        self._parts.append(_stack([(n - _count_nonzero(good)).to(_float64), _max(masked), _max(rel),
                                   infinite.to(_float64)]))

    @property
    def mismatched(self) -> int:
        return self.to_dict()["mismatched"]

    def to_dict(self) -> ErrorFigures:
        if not self._parts:
            return {"max_abs_err": 0.0, "max_rel_err": 0.0, "mismatched": 0, "numel": self.numel, "chunks": self.chunks}
        parts = _stack(self._parts)
        mismatched, max_abs, max_rel, infinite = _stack(  # one sync
            [parts[:, 0].sum(), parts[:, 1].max(), parts[:, 2].max(), parts[:, 3].max()]).tolist()
        self._parts = [_tensor([mismatched, max_abs, max_rel, infinite], dtype=_float64, device=parts.device)]
        if infinite:
            max_abs = max_rel = float("inf")
        return {"max_abs_err": max_abs, "max_rel_err": max_rel, "mismatched": int(mismatched), "numel": self.numel,
                "chunks": self.chunks}


def compare(candidate: Any, reference: Any, atol: float, rtol: float,
            budget_bytes: int | None = None) -> tuple[bool, ErrorFigures]:
    """allclose-style comparison of candidate against reference outputs, with error figures.

    Args:
        candidate, reference: a tensor, a number, or a (nested) tuple or list of them.
        atol, rtol: absolute and relative tolerance.
        budget_bytes: the most memory a chunk of the float64 comparison may take (default: `memory_budget`).

    Returns:
        (passed, figures): figures hold max_abs_err, max_rel_err, mismatched (elements), numel and chunks, or a
        "message" saying what differs (count, shape, dtype, device, values).

    An element passes when |c - r| <= atol + rtol * |r|, or when both are the same non-finite value
    (NaN with NaN, +Inf with +Inf). Shapes and dtypes must match exactly, and are checked first. The values are
    compared in float64 a chunk at a time (see `memory_budget`), on the outputs' device.
    """
    cands, refs = flatten_outputs(candidate), flatten_outputs(reference)
    if len(cands) != len(refs):
        return False, {"message": f"returned {len(cands)} outputs, reference returns {len(refs)}"}
    figures = Figures()
    wrong: list[str] = []  # the outputs with a mismatched element, by label
    for i, (c, r) in enumerate(zip(cands, refs)):
        label = backward.label(reference, i, len(refs))
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
        size = chunk_elements(memory_budget(r.device) if budget_bytes is None else budget_bytes)
        before = figures.mismatched if len(refs) > 1 else 0  # one host read per output, only to name them
        for cc, rc in zip(chunks(c, size), chunks(r, size)):
            figures.add(cc.to(_float64), rc.to(_float64), atol, rtol)
        if len(refs) > 1 and figures.mismatched > before:
            wrong.append(label)
    out = figures.to_dict()
    if out["mismatched"]:
        where = f"{', '.join(wrong)}: " if len(refs) > 1 else ""
        out["message"] = (
            f"{where}{out['mismatched']} of {out['numel']} elements outside atol={atol:g}, rtol={rtol:g}"
            f" (max abs err {out['max_abs_err']:.3g})"
        )
    return out["mismatched"] == 0, out


# `surely_close` works in float32 with this margin on the bound: the rounding of float32's difference, product and sum
# (a few units of 2**-24 each, relative) cannot turn a failing element into a passing one.
SURE_MARGIN = 1e-6
_float32 = torch.float32
_float_types = (torch.float16, torch.bfloat16, torch.float32)


def surely_close(candidate: Any, reference: Any, atol: float, rtol: float) -> bool:
    """True only if `compare` would pass the candidate: every element within atol + rtol * |r| by a margin
    (SURE_MARGIN), in float32 for float32 and narrower outputs (float64 for float64), a chunk at a time, with a
    few passes over each chunk where `compare` makes a dozen in float64. False also where it cannot tell (a NaN or
    infinity, an element within the margin of its bound, another dtype, shapes that differ): ask `compare`, which
    says why. For the timed rounds' full rechecks, where nearly every call passes."""
    cands, refs = flatten_outputs(candidate), flatten_outputs(reference)
    if len(cands) != len(refs):
        return False
    for c, r in zip(cands, refs):
        if not isinstance(c, _tensor_type) or not isinstance(r, _tensor_type):
            return False
        if c.shape != r.shape or c.dtype != r.dtype or c.device != r.device:
            return False
        if r.dtype not in _float_types and r.dtype != _float64:
            return False
        work = _float64 if r.dtype == _float64 else _float32
        scale, floor = rtol * (1 - SURE_MARGIN), atol * (1 - SURE_MARGIN)
        size = chunk_elements(memory_budget(r.device)) * 2  # two working copies of up to 4 bytes, not eight of 8
        for cc, rc in zip(chunks(c, size), chunks(r, size)):
            diff = _abs(_sub(cc.to(work), rc.to(work)))
            bound = _abs(rc.to(work)).mul_(scale).add_(floor)
            if not bool(_le(diff, bound).all()):  # a NaN compares False: `compare` decides it
                return False
    return True


def _close_numbers(c: Any, r: Any, atol: float, rtol: float) -> bool:
    if isinstance(c, bool) or isinstance(r, bool) or not isinstance(c, (int, float)) or not isinstance(r, (int, float)):
        return c == r
    return nan_equal(c, r) or abs(c - r) <= atol + rtol * abs(r)  # a NaN on one side only fails the bound


def nan_equal(x: Any, y: Any) -> Any:
    """x == y with NaN equal to NaN: elementwise (a bool tensor) for tensors, one bool for numbers."""
    if isinstance(x, _tensor_type):
        return _logical_or(_eq(x, y), _logical_and(_isnan(x), _isnan(y)))
    return x == y or (x != x and y != y)


def same_bits(a: torch.Tensor, b: torch.Tensor, size: int) -> bool:
    """Bit-identical elementwise (NaN equal to NaN), a chunk at a time."""
    for x, y in zip(chunks(a, size), chunks(b, size)):  # noqa: SIM110 - a loop: one builtin fewer (see the note on top)
        if not bool(nan_equal(x, y).all()):
            return False
    return True


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest |a - b| over all outputs, in float64 a chunk at a time (inf where exactly one side is non-finite)."""
    worst = 0.0
    for x, y in zip(flatten_outputs(a), flatten_outputs(b)):
        if not isinstance(x, _tensor_type) or not isinstance(y, _tensor_type):
            worst = max(worst, 0.0 if x == y else float("inf"))
            continue
        size = chunk_elements(memory_budget(x.device))
        for xc, yc in zip(chunks(x, size), chunks(y, size)):
            x64, y64 = xc.to(_float64), yc.to(_float64)
            if x64.numel() == 0:
                continue
            same = nan_equal(x64, y64)
            diff = _where(same, 0.0, _abs(_sub(x64, y64)))
            worst = max(worst, float(_max(_nan_to_num(diff, nan=float("inf"))).item()))
    return worst


def identical(a: Any, b: Any) -> bool:
    """Bit-identical outputs (NaN equal to NaN)."""
    for x, y in zip(flatten_outputs(a), flatten_outputs(b)):
        if not isinstance(x, _tensor_type) or not isinstance(y, _tensor_type):
            if x != y:
                return False
            continue
        if x.shape != y.shape or not same_bits(x, y, chunk_elements(memory_budget(x.device))):
            return False
    return True
