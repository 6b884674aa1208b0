"""The candidate's process: the only one that imports a solution. Hostile territory.

The judge (kbench.judge.judge) spawns it and sends it commands (kbench.judge.protocol). It imports the solution, builds
ModelNew with the weights the judge hands it, calls it on input buffers the judge shares and fills, and copies
each output into a buffer the judge allocated. It answers in JSON only. Nothing it says decides a verdict on its
own: the judge compares the outputs in its own process, bounds every reported time by its own clock, and freezes
this process (SIGSTOP to its process group) whenever it is not answering a command.

Before the solution is imported, this process is still kbench's own: the judge uses that window to calibrate the
protocol's cost, and the harness binds its clocks, events and settings functions (timing, procstate, trust).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch

from kbench.system.lifetime import die_with_parent
from kbench.judge import protocol, sealing, trust
from kbench.judge.harness import apply_math_flags, construct, make_timer, set_sizes
from kbench.judge.loading import import_path
from kbench.judge.verdicts import short, Verdict
from kbench.measure import timing
from kbench.results.records import MathFlags
from kbench.system import procstate

_tensor_type, _strided = torch.Tensor, torch.strided
_memory_allocated, _max_memory_allocated = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated
_reset_peak = torch.cuda.reset_peak_memory_stats
_synchronize = timing.synchronize


def warm_cuda() -> None:
    """Create this process's CUDA context (a first allocation), if there is a GPU."""
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")


def _flatten(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


class Harness:
    """The candidate's state between commands: the run's settings, the timer, the models, the bound buffers."""

    def __init__(self) -> None:
        self.device = "cpu"
        self.expected: dict[str, object] = {}
        self.changes: list[procstate.Change] = []
        self.timer: timing.Timer | None = None
        self.guarded: dict[str, Any] = {}
        self.module: Any = None
        self.models: dict[str, Any] = {}
        self.model: Callable[..., Any] = lambda *args: None
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.calls = 0

    # ---- commands ----------------------------------------------------------------------------------

    def calibrate(self, cmd: protocol.Calibrate) -> dict[str, Any]:
        """Still kbench's own process: the reference, built here, is what the judge's calibration samples time."""
        self.device = cmd.device
        apply_math_flags(MathFlags(**cmd.math))
        torch.set_grad_enabled(False)
        self.expected = procstate.snapshot()
        self.timer = make_timer(cmd.device)
        problem = import_path("kbench_calibration_problem", cmd.path)
        set_sizes(problem, cmd.overrides)
        model = construct(lambda: problem.Model(*cmd.init), 0, cmd.device, cmd.precision)  # the judge's weights go in
        model.load_state_dict(cmd.state)
        self.model, self.inputs, self.outputs = model, list(cmd.inputs), list(cmd.outputs)
        return {"status": "ok"}

    def load(self, cmd: protocol.Load) -> dict[str, Any]:
        from kbench.judge.loading import load_solution

        os.environ.update(cmd.env)
        self.model = lambda *args: None  # the calibration's reference goes, and the memory its calls cached
        if self.device == "cuda":
            torch.cuda.empty_cache()
        self.guarded = trust.snapshot_attributes()
        self.module, info = load_solution(cmd.path)
        self._restore("import")
        return {"status": "ok", "figures": info}

    def build(self, cmd: protocol.Build) -> dict[str, Any]:
        self._restore("the import" if not self.models else f"model {len(self.models)}")
        try:
            model = construct(lambda: self.module.ModelNew(*cmd.init), cmd.seed, cmd.device, cmd.precision)
            own = model.state_dict()
            shared = {k: v for k, v in cmd.state.items() if k in own and own[k].shape == v.shape}
            model.load_state_dict(shared, strict=False)
            _synchronize(self.device)
        except BaseException as exc:  # noqa: BLE001
            raise Verdict("runtime_error", f"ModelNew(*get_init_inputs()) raised {short(exc)}") from exc
        self.models[cmd.name] = model
        return {"status": "ok", "figures": {"copied": len(shared)}}

    def bind(self, cmd: protocol.Bind) -> dict[str, Any]:
        self.model, self.inputs, self.outputs = self.models[cmd.name], list(cmd.inputs), list(cmd.outputs)
        return {"status": "ok"}

    def call(self) -> dict[str, Any]:
        """One untimed call; on CUDA with the peak of memory it allocated beyond what was allocated before it."""
        self._before_call()
        cuda = self.device == "cuda"
        if cuda:
            before = _memory_allocated()
            _reset_peak()
        try:
            out = self.model(*self.inputs)
            _synchronize(self.device)
        except BaseException as exc:  # noqa: BLE001
            raise Verdict("runtime_error", f"the solution raised {short(exc)}") from exc
        figures = {"peak_bytes": max(_max_memory_allocated() - before, 0)} if cuda else {}
        return {"status": "ok", "values": self._deliver(out), "figures": figures}

    def sample(self, cmd: protocol.Sample) -> dict[str, Any]:
        self._before_call()
        if cmd.seal:
            sealing.apply(self.inputs, cmd.seal)  # before the timer: the judge's clock still sees it
        held: list[Any] = []
        assert self.timer is not None
        try:
            timed, wall = self.timer.sample(lambda: held.append(self.model(*self.inputs)))
        except BaseException as exc:  # noqa: BLE001
            raise Verdict("runtime_error", f"the solution raised {short(exc)} in a timed call") from exc
        return {"status": "ok", "timed_s": timed, "wall_s": wall, "issue_s": self.timer.last_issue,
                "values": self._deliver(held[0])}

    def profile(self, cmd: protocol.Profile) -> dict[str, Any]:
        self._before_call()
        # The bound inputs for every call, no copies (the profile names kernels; values do not matter, memory does).
        arg_sets = [self.inputs] * cmd.calls
        share = trust.own_kernel_share(self.model, arg_sets, cmd.source)
        return {"status": "ok", "figures": {"kernels": share}}

    def finish(self) -> dict[str, Any]:
        self._restore("the last call")
        patched = trust.replaced_attributes(self.guarded) if self.guarded else []
        return {"status": "ok", "figures": {"patched": patched, "state_changes": [c.describe() for c in self.changes],
                                            "state_changed": sorted({c.name for c in self.changes})}}

    # ---- helpers -----------------------------------------------------------------------------------

    def _restore(self, when: str) -> None:
        if self.expected:
            found = procstate.restore(self.expected, when)
            self.changes += [c for c in found if c.name not in {x.name for x in self.changes}]

    def _before_call(self) -> None:
        self.calls += 1
        self._restore("the import" if self.calls == 1 else f"call {self.calls - 1}")

    def _deliver(self, out: Any) -> list[Any]:
        """Copy each output into the judge's buffer; plain numbers go back in the reply. Only an exact, dense, strided
        torch.Tensor of the expected shape, dtype and device is copied: a subclass or lazy wrapper is not an output."""
        outs = _flatten(out)
        if len(outs) != len(self.outputs):
            raise Verdict("incorrect", f"returned {len(outs)} outputs, the reference returns {len(self.outputs)}")
        values = []
        for i, (o, buf) in enumerate(zip(outs, self.outputs)):
            label = f"output {i}" if len(outs) > 1 else "output"
            if buf is None:
                if isinstance(o, bool) or not isinstance(o, (int, float)):
                    raise Verdict("incorrect", f"{label} is a {type(o).__name__}, expected a number")
                values.append(o)
                continue
            if type(o) is not _tensor_type:
                raise Verdict("incorrect", f"{label} is a {type(o).__module__}.{type(o).__name__}, "
                                           "not a plain torch.Tensor (no subclasses or lazy wrappers)")
            if o.layout != _strided:
                raise Verdict("incorrect", f"{label} has layout {o.layout}, expected a dense strided tensor")
            if o.device != buf.device:
                raise Verdict("incorrect", f"{label} is on {o.device}, the reference's on {buf.device}")
            if tuple(o.shape) != tuple(buf.shape):
                raise Verdict("incorrect", f"{label} shape {tuple(o.shape)} != reference {tuple(buf.shape)}")
            if o.dtype != buf.dtype:
                raise Verdict("incorrect", f"{label} dtype {o.dtype} != reference {buf.dtype}")
            buf.copy_(o)
        _synchronize(self.device)
        return values


def _only_own_descriptors(conn: Any) -> None:
    """A forked candidate inherits every descriptor of its worker: keep stdout, stderr and the judge's pipe, nothing
    else (the worker's result pipe, its stdin), whatever opened them."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's stdin, never closed
    keep = {0, 1, 2, conn.fileno()}
    try:
        found = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        found = list(range(3, 1024))
    for fd in found:
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def main(conn: Any, init_cuda: bool = False, forked: bool = False) -> None:
    """The process's target: own process group (the judge freezes it), commands in, JSON replies out, until Finish.

    With `init_cuda` (started ahead of a CUDA job) the CUDA context is made now, while nobody is timed, rather than
    on the first command. A `forked` candidate first closes what it inherited (`_only_own_descriptors`)."""
    os.setpgid(0, 0)
    die_with_parent()
    if forked:
        _only_own_descriptors(conn)
    if init_cuda:
        warm_cuda()
    harness = Harness()
    handlers: dict[type, Callable[[Any], dict[str, Any]]] = {
        protocol.Calibrate: harness.calibrate,
        protocol.Load: harness.load, protocol.Build: harness.build, protocol.Bind: harness.bind,
        protocol.Call: lambda c: harness.call(), protocol.Sample: harness.sample,
        protocol.Profile: harness.profile, protocol.Finish: lambda c: harness.finish(),
    }
    while True:
        try:
            command = conn.recv()
        except (EOFError, OSError):
            os._exit(0)
        try:
            reply = handlers[type(command)](command)
        except Verdict as v:
            reply = {"status": v.status, "message": v.message}
        except BaseException as exc:  # noqa: BLE001
            reply = {"status": "runtime_error", "message": f"the solution's process failed: {short(exc)}"}
        conn.send_bytes(protocol.encode(reply))
        if isinstance(command, protocol.Finish):
            os._exit(0)

