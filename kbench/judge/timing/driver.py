"""The few CUDA driver calls kbench's timing needs that torch does not expose, through ctypes on libcuda.

- Page-locking a host page for the GPU (`cuMemHostRegister`), a stream wait on a word in it (`cuStreamWaitValue32`)
  and a stream write to one (`cuStreamWriteValue32`): the gate of kbench.judge.timing.gate, which holds a stream until
  the host opens it, and the word a stream writes when its work is done.
- Sharing device memory between processes by handle (`cuIpcGetMemHandle`, `cuIpcOpenMemHandle`): the judge reads a
  candidate's outputs where they lie (kbench.judge.candidate.outputs).

The library is loaded on first use. A solution that replaces a name here changes only its own process, and nothing
the judge decides rests on what the candidate's process does with these calls. No call needs a compiler or an
extension.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import lru_cache

CUresult = ctypes.c_int
CU_MEMHOSTREGISTER_PORTABLE = 0x01
CU_MEMHOSTREGISTER_DEVICEMAP = 0x02
CU_STREAM_WAIT_VALUE_GEQ = 0x0  # (int32)(*addr - value) >= 0: a counter that may wrap
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
IPC_HANDLE_BYTES = 64


class DriverError(RuntimeError):
    """A driver call failed (its name and CUresult), or the driver library is not there."""


class IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


_SIGNATURES: dict[str, list[type]] = {
    "cuMemHostRegister_v2": [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint],
    "cuMemHostUnregister": [ctypes.c_void_p],
    "cuMemHostGetDevicePointer_v2": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint],
    "cuStreamWaitValue32_v2": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint],
    "cuStreamWriteValue32_v2": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint],
    "cuIpcGetMemHandle": [ctypes.POINTER(IpcHandle), ctypes.c_uint64],
    "cuIpcOpenMemHandle_v2": [ctypes.POINTER(ctypes.c_uint64), IpcHandle, ctypes.c_uint],
    "cuIpcCloseMemHandle": [ctypes.c_uint64],
    "cuPointerGetAttribute": [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


@lru_cache(maxsize=1)
def _library() -> dict[str, object]:
    """The driver's functions by name, loaded once; DriverError where there is no driver."""
    name = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise DriverError(f"the CUDA driver library could not be loaded ({exc})") from None
    found: dict[str, object] = {}
    for fn_name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, fn_name, None)
        if fn is None:
            continue
        fn.argtypes = argtypes
        fn.restype = CUresult
        found[fn_name] = fn
    return found


def available() -> bool:
    """Whether the driver and every call kbench uses are there."""
    try:
        return all(name in _library() for name in _SIGNATURES)
    except DriverError:
        return False


def _call(name: str, *args: object) -> None:
    fn = _library().get(name)
    if fn is None:
        raise DriverError(f"the CUDA driver has no {name}")
    code = fn(*args)  # type: ignore[operator]
    if code != 0:
        raise DriverError(f"{name} failed: {_error_name(code)}")


def _error_name(code: int) -> str:
    text = ctypes.c_char_p()
    fn = _library().get("cuGetErrorName")
    if fn is not None and fn(code, ctypes.byref(text)) == 0 and text.value:  # type: ignore[operator]
        return f"{text.value.decode()} ({code})"
    return f"CUresult {code}"


def register_host(address: int, nbytes: int) -> int:
    """Page-lock host memory at `address` (page-aligned, `nbytes` a multiple of the page) for every context, mapped
    into the device's address space; returns its device address."""
    _call("cuMemHostRegister_v2", ctypes.c_void_p(address), nbytes,
          CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP)
    device = ctypes.c_uint64()
    _call("cuMemHostGetDevicePointer_v2", ctypes.byref(device), ctypes.c_void_p(address), 0)
    return device.value


def unregister_host(address: int) -> None:
    _call("cuMemHostUnregister", ctypes.c_void_p(address))


def wait_value(stream: int, device_address: int, value: int) -> None:
    """Enqueue on `stream` a wait until the 32-bit word at `device_address` reaches `value` (cyclically: >=)."""
    _call("cuStreamWaitValue32_v2", ctypes.c_void_p(stream), device_address, value & 0xFFFFFFFF,
          CU_STREAM_WAIT_VALUE_GEQ)


def write_value(stream: int, device_address: int, value: int) -> None:
    """Enqueue on `stream` a write of `value` to the 32-bit word at `device_address`, after everything before it on
    the stream, its memory writes included (the default barrier)."""
    _call("cuStreamWriteValue32_v2", ctypes.c_void_p(stream), device_address, value & 0xFFFFFFFF, 0)


def allocation_range(device_address: int) -> tuple[int, int, int]:
    """The start, size and buffer ID of the driver allocation holding `device_address` (the ID is the driver's own,
    unique in the process's lifetime: an allocation freed and made again at the same address gets another)."""
    start, size, buffer = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_uint64()
    _call("cuPointerGetAttribute", ctypes.byref(start), CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, device_address)
    _call("cuPointerGetAttribute", ctypes.byref(size), CU_POINTER_ATTRIBUTE_RANGE_SIZE, device_address)
    _call("cuPointerGetAttribute", ctypes.byref(buffer), CU_POINTER_ATTRIBUTE_BUFFER_ID, device_address)
    return start.value, size.value, buffer.value


def ipc_handle(allocation_start: int) -> bytes:
    """The IPC handle of the device allocation that starts at `allocation_start` (64 bytes)."""
    handle = IpcHandle()
    _call("cuIpcGetMemHandle", ctypes.byref(handle), allocation_start)
    return ctypes.string_at(ctypes.addressof(handle), IPC_HANDLE_BYTES)  # the field itself would stop at a NUL


def ipc_open(handle: bytes) -> int:
    """Map another process's allocation by its handle; the device address of its start in this process."""
    if len(handle) != IPC_HANDLE_BYTES:
        raise DriverError(f"an IPC handle of {len(handle)} bytes (expected {IPC_HANDLE_BYTES})")
    raw = IpcHandle.from_buffer_copy(handle)
    address = ctypes.c_uint64()
    _call("cuIpcOpenMemHandle_v2", ctypes.byref(address), raw, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    return address.value


def ipc_close(address: int) -> None:
    _call("cuIpcCloseMemHandle", address)
