"""Process-wide torch settings: a snapshot taken before a solution is imported, compared and restored before each call.

A solution can change settings that outlive its own calls (switch TF32 or cuDNN off, make float64 the default
dtype, cut the thread count). In the candidate's process every call therefore starts from the run's settings,
and each change found is recorded by name. The getters and setters are bound here, when the candidate's harness
imports this module, before any solution code runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

_get_default_dtype, _set_default_dtype = torch.get_default_dtype, torch.set_default_dtype
_get_num_threads, _set_num_threads = torch.get_num_threads, torch.set_num_threads
_get_interop, _set_interop = torch.get_num_interop_threads, torch.set_num_interop_threads
_is_grad_enabled, _set_grad_enabled = torch.is_grad_enabled, torch.set_grad_enabled
_get_precision, _set_precision = torch.get_float32_matmul_precision, torch.set_float32_matmul_precision
_det_enabled, _use_det = torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms
_set_flush_denormal = torch.set_flush_denormal
_get_default_device = getattr(torch, "get_default_device", None)
_set_default_device = torch.set_default_device
_autocast_enabled, _set_autocast_enabled = torch.is_autocast_enabled, torch.set_autocast_enabled
_tensor, _float32 = torch.tensor, torch.float32
_cudnn, _matmul, _cuda_backends = torch.backends.cudnn, torch.backends.cuda.matmul, torch.backends.cuda


def _flush_denormal() -> bool:
    """torch has no getter: a float32 denormal survives a multiply unless denormals are flushed to zero."""
    return float(_tensor([1e-40], dtype=_float32).mul(1.0).item()) == 0.0


def _default_device() -> str:
    return str(_get_default_device()) if _get_default_device is not None else "cpu"


def _restore_device(value: object) -> None:
    _set_default_device(None if value == "cpu" else value)  # type: ignore[arg-type]


def _attr(owner: object, name: str) -> tuple[Callable[[], object], Callable[[object], None]]:
    return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))


def _autocast(device: str) -> tuple[Callable[[], object], Callable[[object], None]]:
    return (lambda: _autocast_enabled(device)), (lambda value: _set_autocast_enabled(device, value))


def _sdp(name: str) -> tuple[Callable[[], object], Callable[[object], None]]:
    getter, setter = (getattr(_cuda_backends, f"{name}_sdp_enabled", None),
                      getattr(_cuda_backends, f"enable_{name}_sdp", None))
    if getter is None or setter is None:
        return (lambda: None), (lambda value: None)
    return getter, setter


# name -> (getter, setter); the names are what a finding reports.
SETTINGS: dict[str, tuple[Callable[[], object], Callable[[object], None]]] = {
    "cudnn.allow_tf32": _attr(_cudnn, "allow_tf32"),
    "cuda.matmul.allow_tf32": _attr(_matmul, "allow_tf32"),
    "float32_matmul_precision": (_get_precision, _set_precision),  # type: ignore[dict-item]
    "cuda.matmul.allow_fp16_reduced_precision_reduction": _attr(_matmul, "allow_fp16_reduced_precision_reduction"),
    "cuda.matmul.allow_bf16_reduced_precision_reduction": _attr(_matmul, "allow_bf16_reduced_precision_reduction"),
    "cudnn.enabled": _attr(_cudnn, "enabled"),
    "cudnn.benchmark": _attr(_cudnn, "benchmark"),
    "cudnn.deterministic": _attr(_cudnn, "deterministic"),
    "deterministic_algorithms": (_det_enabled, _use_det),  # type: ignore[dict-item]
    "default_dtype": (_get_default_dtype, _set_default_dtype),  # type: ignore[dict-item]
    "default_device": (_default_device, _restore_device),
    "num_threads": (_get_num_threads, _set_num_threads),  # type: ignore[dict-item]
    "num_interop_threads": (_get_interop, _set_interop),  # type: ignore[dict-item]
    "grad_enabled": (_is_grad_enabled, _set_grad_enabled),  # type: ignore[dict-item]
    "autocast.cuda": _autocast("cuda"),
    "autocast.cpu": _autocast("cpu"),
    "sdp.flash": _sdp("flash"),
    "sdp.mem_efficient": _sdp("mem_efficient"),
    "sdp.math": _sdp("math"),
    "sdp.cudnn": _sdp("cudnn"),
    "flush_denormal": (_flush_denormal, _set_flush_denormal),  # type: ignore[dict-item]
}


@dataclass(frozen=True)
class Change:
    """A setting found changed: its name, the run's value, the value found, and when (import, build, call N)."""

    name: str
    expected: str
    found: str
    when: str
    restored: bool

    def describe(self) -> str:
        note = "" if self.restored else " (could not be restored)"
        return f"{self.name} {self.expected} -> {self.found} after {self.when}{note}"


def snapshot() -> dict[str, object]:
    """The current value of every setting."""
    return {name: getter() for name, (getter, _) in SETTINGS.items()}


def restore(expected: dict[str, object], when: str) -> list[Change]:
    """Put every changed setting back to its expected value; the changes found, each once per call."""
    changes = []
    for name, value in expected.items():
        getter, setter = SETTINGS[name]
        try:
            found = getter()
        except Exception as exc:  # noqa: BLE001 - a solution may break a getter; that is a change too
            found = f"<{type(exc).__name__}>"
        if found == value:
            continue
        try:
            setter(value)
            restored = getter() == value
        except Exception:  # noqa: BLE001 - e.g. the inter-op thread count is fixed once parallel work has run
            restored = False
        changes.append(Change(name, str(value), str(found), when, restored))
    return changes
