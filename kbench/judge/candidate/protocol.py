"""The judge <-> candidate protocol: typed commands one way, validated JSON replies the other.

The judge sends commands pickled (torch's reductions share tensors: CUDA IPC on the GPU, shared memory on the
CPU). Unpickling runs code, so the other direction never uses it: the candidate answers with one JSON object,
which the judge reads with a size limit and checks field by field into a `Reply`. Tensors travel only from the
judge: the candidate writes its outputs into buffers the judge allocated and shared, so nothing the solution
built ever reaches the judge's process.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from kbench.results.codec import JsonObject, ProtocolError  # ProtocolError: raised for a reply that is not valid
from kbench.results.records import Regime, SizeOverrides
from kbench.system.sandbox import SandboxPlan

if TYPE_CHECKING:
    import torch  # the commands' tensors, for annotations only: this module imports no torch

MAX_REPLY_BYTES = 1 << 20


# ---- commands (judge -> candidate) -----------------------------------------------------------------


@dataclass(frozen=True)
class Calibrate:
    """Before the solution is imported: build the reference itself (the problem file at `path` with its size
    `overrides`, `init`, the judge's `state`) on the shared `inputs` and `outputs`, so that the judge can time it
    through the whole sample path and learn what a round trip costs beyond the timed window, on this machine now."""

    device: str
    math: dict[str, bool]
    path: str
    overrides: SizeOverrides
    init: list[Any]
    state: dict[str, torch.Tensor]
    inputs: list[Any]
    outputs: list[Any]
    precision: str = "fp32"
    page: Any = None  # CUDA: a CPU tensor in shared memory holding the signal page (kbench.judge.timing.gate)
    sandbox: SandboxPlan | None = None  # the job's file system, restricted before the solution comes
    grads: tuple[str, ...] | None = None  # --backward: the parameters whose gradients a call returns (judge.backward)
    # Keep the reference built once the solution is imported, under REFERENCE (`Bind` it again): the judge times it
    # after the solution's rounds, on the memory the solution's calls freed (kbench.judge.timing.judge_timing.after)
    keep: bool = False


REFERENCE = "calibration"  # the name the kept reference is bound under


@dataclass(frozen=True)
class Load:
    """Import the solution (its extensions build into env's TORCH_EXTENSIONS_DIR)."""

    path: str
    env: dict[str, str]


@dataclass(frozen=True)
class Build:
    """Seed, construct ModelNew(*init) under the run's settings, copy in the judge's weights (matched by name and
    shape) and keep the model under `name`."""

    name: str
    init: list[Any]
    state: dict[str, torch.Tensor]
    seed: int
    device: str
    precision: str = "fp32"  # ModelNew is cast to it, as the reference is
    grads: tuple[str, ...] | None = None  # --backward: the reference's parameters whose gradients a call returns


@dataclass(frozen=True)
class Bind:
    """Make model `name` current, called on `inputs`, its outputs delivered into `outputs` (None for a non-tensor)."""

    name: str
    inputs: list[Any]
    outputs: list[Any]


@dataclass(frozen=True)
class Call:
    """One untimed call on the bound inputs; outputs delivered."""


@dataclass(frozen=True)
class Place:
    """A new draw of the memory the bound model's calls run on (kbench.judge.timing.placement), then one untimed call
    on the bound inputs, so that what the call allocates lies on the new draw before the next timed call: on CUDA the
    cached blocks handed back and a spacer of `pages` 2 MiB pages held until the next draw (the CPU: the call only).
    Answer as a timed call does: the outputs' locations (the judge maps them now, untimed)."""

    pages: int = 0


@dataclass(frozen=True)
class Arm:
    """Get ready for one timed call (docs/timing.md). In the GPU regime (`Regime.GPU`): issue it now, behind the gate of
    the signal page closed on `value`, between the timing events, with a write of `value` to the page's DONE word
    after the end event; answer with the outputs' locations and the host's time to issue. Otherwise (host regime)
    just answer: the call waits for `Go`. Either way the judge writes the round's inputs only after this answer."""

    regime: Regime
    value: int = 0


@dataclass(frozen=True)
class Go:
    """Host regime: the call now. On CUDA the stream first waits for the gate's `value` (the judge's stream writes it
    once the inputs are in place), then: start event, call, end event, DONE word, synchronize; on the CPU the host
    clock around the call. Answer with the time and the outputs' locations."""

    value: int = 0


@dataclass(frozen=True)
class Report:
    """GPU regime: the armed call's time, once its end event has passed."""


@dataclass(frozen=True)
class Profile:
    """The own-kernel share over `calls` calls on clones of the bound inputs (CUDA)."""

    calls: int
    source: str


@dataclass(frozen=True)
class Finish:
    """Report what changed in the process (replaced functions, settings left changed) and exit."""


# ---- replies (candidate -> judge) ------------------------------------------------------------------


class OwnKernelShare(TypedDict):
    """The candidate's profile as it sends it (the judge reads it as a kbench.results.figures.KernelShare)."""

    own_s: float  # per call
    library_s: float  # per call
    own_share: float
    kernels_declared: list[str]
    top: list[tuple[str, float]]  # the five busiest kernels: (name, microseconds over the profile)


class ReplyFields(TypedDict, total=False):
    """A reply as the candidate's process writes it: `status` always, the rest where its command has them (the judge
    reads it back as a checked `Reply`)."""

    status: str
    message: str
    timed_s: float
    issue_s: float
    values: list[Any]
    outputs: list[Any]
    sandbox: str
    copied: int
    peak_bytes: int
    kernels: OwnKernelShare
    patched: list[str]
    state_changes: list[str]


@dataclass(frozen=True)
class Reply:
    """One validated reply. `status` is "ok" or a verdict the candidate's side reached (load_error, compile_error,
    runtime_error, incorrect) with `message`; the other fields are what its command answers with."""

    status: str
    message: str = ""
    timed_s: float = 0.0
    wall_s: float = 0.0
    issue_s: float = 0.0  # host seconds to issue the timed call (launch-bound when close to timed_s)
    values: tuple[Any, ...] = ()  # non-tensor outputs (numbers), in output order
    # where a timed call's outputs lie (kbench.judge.candidate.outputs), checked by the judge
    outputs: tuple[Any, ...] = ()
    sandbox: str = ""  # Calibrate: the sandbox level the candidate's process entered (kbench.system.sandbox)
    copied: int = 0  # Build: the reference's weights copied into ModelNew
    peak_bytes: int | None = None  # Call, on CUDA: the most memory the call allocated beyond what was before it
    kernels: JsonObject | None = None  # Profile: the own-kernel share as sent (the judge checks it as a KernelShare)
    patched: tuple[str, ...] = ()  # Finish: the library functions the solution replaced
    state_changes: tuple[str, ...] = ()  # Finish: the process-wide settings it changed (restored before each call)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


STATUSES = ("ok", "load_error", "compile_error", "runtime_error", "incorrect")
_SCALARS = (int, float, str, bool, type(None))


def encode(reply: ReplyFields) -> bytes:
    return json.dumps(reply, default=str).encode()


def _seconds(data: JsonObject, key: str) -> float:
    value = data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ProtocolError(f"{key} is {value!r}, not a finite non-negative number")
    return float(value)


def _count(data: JsonObject, key: str) -> int | None:
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ProtocolError(f"{key} is {value!r}, not a count")
    return value


def _texts(data: JsonObject, key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProtocolError(f"{key} is not a list of strings")
    return tuple(value)


def _plain(value: Any, depth: int = 0) -> bool:
    """JSON made of scalars, lists and string-keyed objects, at most 8 levels deep."""
    if depth > 8:
        return False
    if isinstance(value, _SCALARS):
        return True
    if isinstance(value, list):
        return all(_plain(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v, depth + 1) for k, v in value.items())
    return False


def decode(data: bytes) -> Reply:
    """Parse and check one reply; ProtocolError on anything else."""
    if len(data) > MAX_REPLY_BYTES:
        raise ProtocolError(f"a reply of {len(data)} bytes (at most {MAX_REPLY_BYTES})")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"a reply that is not JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"a reply that is a {type(obj).__name__}, not an object")
    status, message = obj.get("status"), obj.get("message", "")
    if status not in STATUSES or not isinstance(message, str):
        raise ProtocolError(f"a reply with status {status!r}")
    values, outputs, kernels = obj.get("values", []), obj.get("outputs", []), obj.get("kernels")
    if not isinstance(values, list) or not _plain(values):
        raise ProtocolError("a reply whose values are not plain JSON")
    if not isinstance(outputs, list) or not _plain(outputs):
        raise ProtocolError("a reply whose output locations are not plain JSON")
    if kernels is not None and (not isinstance(kernels, dict) or not _plain(kernels)):
        raise ProtocolError("a reply whose kernel profile is not a plain JSON object")
    sandbox = obj.get("sandbox", "")
    if not isinstance(sandbox, str):
        raise ProtocolError(f"a reply whose sandbox level is {sandbox!r}")
    return Reply(status, message[:4000], _seconds(obj, "timed_s"), _seconds(obj, "wall_s"), _seconds(obj, "issue_s"),
                 tuple(values), tuple(outputs), sandbox[:100], _count(obj, "copied") or 0, _count(obj, "peak_bytes"),
                 kernels, _texts(obj, "patched"), _texts(obj, "state_changes"))
