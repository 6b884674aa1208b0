"""A timed call's outputs, read by the judge where they lie: no copy of the harness's inside the judge's clock.

A copy of the outputs into the judge's buffers after each timed call would lie inside the window the judge's own
clock measures, and a solution that wrote its outputs straight into those buffers could skip it and report that
much less. So on CUDA the candidate's harness reports where each output lies (the IPC handle of its device
allocation, the offset, the strides) and the judge maps the allocation and reads the output there, checking every
figure against the reference's output and the allocation's size. On the CPU, and for a dtype CUDA's array
interface cannot describe, the harness copies the output into the judge's buffer, as for an untimed call.

The candidate's side (`locate`) runs in hostile territory: it only describes; the judge's side (`OutputViews`)
decides what to read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict, TypeGuard

import torch

from kbench.judge import backward
from kbench.judge.timing import driver
from kbench.judge.verdict import Verdict
from kbench.results.records import Status

_tensor_type, _strided = torch.Tensor, torch.strided
# Array-interface type strings; bfloat16 is read as 16-bit words and viewed back.
_TYPESTR = {torch.float32: "<f4", torch.float16: "<f2", torch.float64: "<f8", torch.bfloat16: "<u2",
            torch.int64: "<i8", torch.int32: "<i4", torch.int16: "<i2", torch.int8: "|i1", torch.uint8: "|u1",
            torch.bool: "|b1", torch.complex64: "<c8", torch.complex128: "<c16"}
MAX_OPEN = 64  # allocations mapped at once; the oldest are unmapped beyond this
HANDLE_HEX = 2 * driver.IPC_HANDLE_BYTES


def check_output(o: Any, buf: Any, label: str) -> None:
    """Only an exact, dense, strided torch.Tensor of the buffer's shape, dtype and device is an output."""
    if type(o) is not _tensor_type:
        raise Verdict(Status.INCORRECT, f"{label} is a {type(o).__module__}.{type(o).__name__}, "
                                   "not a plain torch.Tensor (no subclasses or lazy wrappers)")
    if o.layout != _strided:
        raise Verdict(Status.INCORRECT, f"{label} has layout {o.layout}, expected a dense strided tensor")
    if o.device != buf.device:
        raise Verdict(Status.INCORRECT, f"{label} is on {o.device}, the reference's on {buf.device}")
    if tuple(o.shape) != tuple(buf.shape):
        raise Verdict(Status.INCORRECT, f"{label} shape {tuple(o.shape)} != reference {tuple(buf.shape)}")
    if o.dtype != buf.dtype:
        raise Verdict(Status.INCORRECT, f"{label} dtype {o.dtype} != reference {buf.dtype}")


def each_output(out: Any, buffers: list[Any], take: Callable[[Any, Any], Any]) -> tuple[list[Any], list[Any]]:
    """A call's outputs against the judge's buffers (None for a number): each tensor checked (`check_output`) and
    passed to `take(output, buffer)`. The plain numbers, and what `take` returned for each output (None for a
    number)."""
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if len(outs) != len(buffers):
        raise Verdict(Status.INCORRECT, f"returned {len(outs)} outputs, the reference returns {len(buffers)}")
    values: list[Any] = []
    taken: list[Any] = []
    for i, (o, buf) in enumerate(zip(outs, buffers)):
        label = backward.label(out, i, len(outs))
        if buf is None:
            if isinstance(o, bool) or not isinstance(o, (int, float)):
                raise Verdict(Status.INCORRECT, f"{label} is a {type(o).__name__}, expected a number")
            values.append(o)
            taken.append(None)
            continue
        check_output(o, buf, label)
        taken.append(take(o, buf))
    return values, taken


class Location(TypedDict, total=False):
    """Where a timed call's output lies, as the candidate's process writes it: `copied` (into the judge's buffer), or
    the allocation's IPC handle (hex), the output's byte offset in it, the allocation's size and the output's strides
    (the judge checks each, `OutputViews.view`)."""

    copied: bool
    handle: str
    offset: int
    size: int
    stride: list[int]


class Locator:
    """The candidate's side: each output's location, with the handles of allocations already described kept (by the
    driver's buffer ID: an allocation handed back and made again at the same address, by a memory draw or by the
    solution, has another handle, and a stale one would have the judge read the old allocation, or fail to map)."""

    def __init__(self) -> None:
        self._handles: dict[int, tuple[str, int]] = {}

    def locate(self, o: torch.Tensor, buf: torch.Tensor) -> Location:
        """Where `o` lies, for the judge to read it; or, where it cannot be described, `o` copied into `buf`."""
        if o.device.type != "cuda" or o.dtype not in _TYPESTR or o.numel() == 0:
            buf.copy_(o)
            return {"copied": True}
        address = o.data_ptr()
        try:
            start, size, buffer = driver.allocation_range(address)
            if buffer not in self._handles:
                if len(self._handles) >= MAX_OPEN:  # the judge keeps no more mapped: the oldest go
                    del self._handles[next(iter(self._handles))]
                self._handles[buffer] = (driver.ipc_handle(start).hex(), size)
        except driver.DriverError:
            buf.copy_(o)
            return {"copied": True}
        handle, size = self._handles[buffer]
        return {"handle": handle, "offset": address - start, "size": size, "stride": list(o.stride())}


class OutputViews:
    """The judge's side: views of the candidate's outputs, each checked against the reference's buffer it stands for,
    over allocations mapped once and kept until `close`."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def view(self, location: Any, buf: torch.Tensor, label: str) -> torch.Tensor:
        """The output described by `location` (as `Locator.locate` writes it): `buf` itself when it was copied there."""
        if not isinstance(location, dict):
            raise Verdict(Status.RUNTIME_ERROR, f"the solution's process described {label} as {location!r}")
        if location.get("copied") is True:
            return buf
        handle, offset, size, stride = (location.get(k) for k in ("handle", "offset", "size", "stride"))
        if not (isinstance(handle, str) and len(handle) == HANDLE_HEX and _natural(offset) and _natural(size)
                and isinstance(stride, list) and len(stride) == buf.dim() and all(_natural(s) for s in stride)):
            raise Verdict(Status.RUNTIME_ERROR,
                          f"the solution's process described {label} with bad figures: {location!r}")
        item = buf.element_size()
        extent = item * (1 + sum((n - 1) * s for n, s in zip(buf.shape, stride))) if buf.numel() else 0
        if offset + extent > size or offset % item:
            raise Verdict(Status.RUNTIME_ERROR, f"the solution's process placed {label} outside its allocation "
                                           f"({offset} + {extent} bytes of {size})")
        base = self._map(handle)
        return _as_tensor(base + offset, buf, stride)

    def _map(self, handle: str) -> int:
        if handle not in self._open:
            if len(self._open) >= MAX_OPEN:
                oldest = next(iter(self._open))
                driver.ipc_close(self._open.pop(oldest))
            try:
                self._open[handle] = driver.ipc_open(bytes.fromhex(handle))
            except (driver.DriverError, ValueError) as exc:
                raise Verdict(Status.RUNTIME_ERROR, f"the solution's output could not be mapped: {exc}") from None
        return self._open[handle]

    def close(self) -> None:
        """Unmap everything (no view of it may be used afterwards)."""
        for address in self._open.values():
            try:
                driver.ipc_close(address)
            except driver.DriverError:
                pass
        self._open.clear()


def _natural(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class _Interface:
    """CUDA's array interface for a region the judge mapped (torch.as_tensor takes it without a copy)."""

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str, strides: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (address, False),
                                         "strides": strides, "version": 3}


def _as_tensor(address: int, like: torch.Tensor, stride: list[int]) -> torch.Tensor:
    item = like.element_size()
    raw = torch.as_tensor(_Interface(address, tuple(like.shape), _TYPESTR[like.dtype], tuple(s * item for s in stride)),
                          device=like.device)
    return raw.view(like.dtype) if raw.dtype != like.dtype else raw
