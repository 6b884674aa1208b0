"""The candidate's process: the only one that imports a solution. Hostile territory.

The judge (kbench.judge.judge) spawns it and sends it commands (kbench.judge.candidate.protocol). It imports the
solution, builds ModelNew with the weights the judge hands it, calls it on input buffers the judge shares and fills,
and copies each output into a buffer the judge allocated. It answers in JSON only. Nothing it says decides a verdict
on its own: the judge compares the outputs in its own process, bounds every reported time by its own clock, and freezes
this process (SIGSTOP to its process group) whenever it is not answering a command.

Before the solution is imported, this process is still kbench's own: the judge uses that window to calibrate the
protocol's cost, and this module binds its clocks, events and settings functions (timing, procstate, trust).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from kbench.config.run_config import MathFlags
from kbench.judge import backward
from kbench.judge.candidate import protocol
from kbench.judge.candidate.loading import import_path, load_solution
from kbench.judge.candidate.outputs import Locator, each_output
from kbench.judge.checks import trust
from kbench.judge.harness import apply_math_flags, construct, set_sizes
from kbench.judge.timing import timers
from kbench.judge.timing.gate import Gate, SignalPage
from kbench.judge.timing.placement import MemoryDraw
from kbench.judge.verdict import Verdict, short
from kbench.results.records import Regime, Status
from kbench.system import procstate, sandbox
from kbench.system.lifetime import die_with_parent

_memory_allocated, _max_memory_allocated = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated
_reset_peak = torch.cuda.reset_peak_memory_stats
_synchronize = timers.synchronize
_perf_counter = time.perf_counter
_cuda_event, _elapsed_time = torch.cuda.Event, torch.cuda.Event.elapsed_time


def warm_cuda() -> None:
    """Create this process's CUDA context, if there is a GPU, and initialise the libraries most calls use: a small
    convolution (cuDNN's handle and the libraries it loads on first use) and a small matrix product (cuBLAS's). In a
    process started ahead of its job these first-use costs (tenths of a second) are paid while nobody is timed on
    its GPU, not in the job's first calls. Nothing of it stays but the libraries' state: the memory goes back."""
    if not torch.cuda.is_available():
        return
    x = torch.ones(1, 2, 6, 6, device="cuda")
    torch.nn.functional.conv2d(x, torch.ones(2, 2, 3, 3, device="cuda"))
    a = torch.ones(16, 16, device="cuda")
    torch.mm(a, a)
    _synchronize("cuda")
    del x, a
    torch.cuda.empty_cache()


def preload() -> None:
    """What loading a solution imports (torch.utils.cpp_extension, around whose load_inline an extension's build is
    timed): half a second of every load on the H100 machine, paid here before the first command, ahead of the job
    for a candidate started ahead. Not in the zygote: the import asks torch about CUDA, and torch then refuses CUDA
    in every process forked after it."""
    from torch.utils import cpp_extension  # noqa: F401 - imported ahead of the load that needs it


def window(call: Callable[[], Any]) -> tuple[Any, float]:
    """The candidate's timed window: the call alone, the garbage collector paused (as in every process that times),
    between two reads of the host clock: its time on the CPU, the time to issue it between the events on CUDA."""
    with timers.no_collection():
        start = _perf_counter()
        out = call()
        return out, _perf_counter() - start


class CommandServer:
    """Answers the judge's commands, one method each, and keeps the candidate's state between them: the run's settings,
    the timer, the models, the bound buffers."""

    def __init__(self) -> None:
        self.device = "cpu"
        self.expected: dict[str, object] = {}
        self.changes: list[procstate.Change] = []
        self.page: SignalPage | None = None
        self.gate: Gate | None = None
        self.locator = Locator()
        self.armed: tuple[Any, ...] = ()  # the GPU regime's call in flight: start, end, outputs, host issue seconds
        self.guarded: dict[str, object] = {}  # trust.snapshot_attributes: label -> the object there
        self.module: Any = None
        self.models: dict[str, Callable[..., Any]] = {}  # ModelNew by size name (or its backward.Gradients)
        self.kept: Callable[..., Any] | None = None  # the calibration's reference, kept (protocol.Calibrate.keep)
        self.draw = MemoryDraw(self.device)  # where the next allocations lie (protocol.Place; made again by calibrate)
        self.model: Callable[..., Any] = lambda *args: None
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self.calls = 0

    # ---- commands ----------------------------------------------------------------------------------

    def calibrate(self, cmd: protocol.Calibrate) -> protocol.ReplyFields:
        """Still kbench's own process: the reference, built here, is what the judge's calibration samples time."""
        self.device = cmd.device
        self.draw = MemoryDraw(cmd.device)
        apply_math_flags(MathFlags(**cmd.math))
        torch.set_grad_enabled(False)
        self.expected = procstate.snapshot()
        if cmd.page is not None:
            self.page = SignalPage.within(cmd.page)
            self.gate = Gate(self.page)
        level = sandbox.restrict(cmd.sandbox) if cmd.sandbox is not None else sandbox.entered()
        problem = import_path("kbench_calibration_problem", cmd.path)
        set_sizes(problem, cmd.overrides)
        model = construct(lambda: problem.Model(*cmd.init), 0, cmd.device, cmd.precision)  # the judge's weights go in
        model.load_state_dict(cmd.state)
        if cmd.grads is not None:
            model = backward.Gradients(model, cmd.grads, reference=True)
        self.model, self.inputs, self.outputs = model, list(cmd.inputs), list(cmd.outputs)
        self.kept = model if cmd.keep else None
        return {"status": "ok", "sandbox": level}

    def load(self, cmd: protocol.Load) -> protocol.ReplyFields:
        os.environ.update(cmd.env)
        # The calibration's reference goes (unless kept: its weights stay), and the memory its calls cached
        self.model = lambda *args: None
        if self.device == "cuda":
            torch.cuda.empty_cache()
        self.guarded = trust.snapshot_attributes()
        self.module, _ = load_solution(cmd.path)
        self._restore("import")
        return {"status": "ok"}

    def build(self, cmd: protocol.Build) -> protocol.ReplyFields:
        self._restore("the import" if not self.models else f"model {len(self.models)}")
        try:
            model = construct(lambda: self.module.ModelNew(*cmd.init), cmd.seed, cmd.device, cmd.precision)
            own = model.state_dict()
            shared = {k: v for k, v in cmd.state.items() if k in own and own[k].shape == v.shape}
            model.load_state_dict(shared, strict=False)
            _synchronize(self.device)
        except BaseException as exc:
            raise Verdict(Status.RUNTIME_ERROR, f"ModelNew(*get_init_inputs()) raised {short(exc)}") from exc
        self.models[cmd.name] = model if cmd.grads is None else backward.Gradients(model, cmd.grads)
        return {"status": "ok", "copied": len(shared)}

    def bind(self, cmd: protocol.Bind) -> protocol.ReplyFields:
        model = self.kept if cmd.name == protocol.REFERENCE and self.kept is not None else self.models[cmd.name]
        self.model, self.inputs, self.outputs = model, list(cmd.inputs), list(cmd.outputs)
        return {"status": "ok"}

    def call(self) -> protocol.ReplyFields:
        """One untimed call; on CUDA with the peak of memory it allocated beyond what was allocated before it."""
        cuda = self.device == "cuda"
        if cuda:
            before = _memory_allocated()
            _reset_peak()
        out = self._untimed()
        reply: protocol.ReplyFields = {"status": "ok", "values": self._deliver(out)}
        if cuda:
            reply["peak_bytes"] = max(_max_memory_allocated() - before, 0)
        return reply

    def place(self, cmd: protocol.Place) -> protocol.ReplyFields:
        """A new draw of the memory the calls run on, then one untimed call whose outputs are described where they
        lie, as a timed call's are, so that the judge maps their allocations now, outside any timed call
        (protocol.Place)."""
        self.draw.draw(cmd.pages)
        out = self._untimed()
        values, where = self._locate(out)
        _synchronize(self.device)
        self.armed = (None, None, out, 0.0)  # alive until the next call, as a timed call's outputs are
        return {"status": "ok", "values": values, "outputs": where}

    def arm(self, cmd: protocol.Arm) -> protocol.ReplyFields:
        """Ready for a timed call (protocol.Arm): in the GPU regime, the call issued behind the closed gate now."""
        self._before_call()
        self.armed = ()
        if cmd.regime != Regime.GPU:
            return {"status": "ok"}
        assert self.gate is not None and self.page is not None
        stream = timers.current_stream_handle()
        start, end = _cuda_event(enable_timing=True), _cuda_event(enable_timing=True)
        self.gate.close(stream, cmd.value)
        try:
            start.record()
            out, issue = window(lambda: self.model(*self.inputs))
            end.record()
        except BaseException as exc:
            self.gate.open(cmd.value)  # nothing may stay queued behind it
            if isinstance(exc, Verdict):
                raise
            raise Verdict(Status.RUNTIME_ERROR, f"the solution raised {short(exc)} in a timed call") from exc
        values, where = self._locate(out)  # an output that must be copied is copied before the DONE word
        self.page.write_on(stream, SignalPage.DONE, cmd.value)
        self.armed = (start, end, out, issue)
        return {"status": "ok", "issue_s": issue, "values": values, "outputs": where}

    def go(self, cmd: protocol.Go) -> protocol.ReplyFields:
        """The host regime's timed call (protocol.Go)."""
        cuda = self.device == "cuda"
        try:
            if cuda:
                assert self.gate is not None and self.page is not None
                stream = timers.current_stream_handle()
                self.gate.close(stream, cmd.value)
                start, end = _cuda_event(enable_timing=True), _cuda_event(enable_timing=True)
                # The judge opened the gate before its `Go`: once the stream is past it (and the GPU has switched to
                # this process), the host starts issuing with the GPU idle, as the judge's host-regime timer does.
                _synchronize(self.device)
                start.record()
                out, issue = window(lambda: self.model(*self.inputs))
                end.record()
                values, where = self._locate(out)
                self.page.write_on(stream, SignalPage.DONE, cmd.value)
                _synchronize(self.device)
                timed = _elapsed_time(start, end) / 1e3
            else:
                out, timed = window(lambda: self.model(*self.inputs))
                issue = timed
                values, where = self._locate(out)
        except Verdict:
            raise
        except BaseException as exc:
            raise Verdict(Status.RUNTIME_ERROR, f"the solution raised {short(exc)} in a timed call") from exc
        self.armed = (None, None, out, issue)
        return {"status": "ok", "timed_s": timed, "issue_s": issue, "values": values, "outputs": where}

    def report(self) -> protocol.ReplyFields:
        """The armed call's time (protocol.Report)."""
        if not self.armed or self.armed[0] is None:
            return {"status": "runtime_error", "message": "a report was asked for with no call armed"}
        start, end, _, issue = self.armed
        try:
            end.synchronize()
            timed = _elapsed_time(start, end) / 1e3
        except BaseException as exc:
            raise Verdict(Status.RUNTIME_ERROR, f"the solution raised {short(exc)} in a timed call") from exc
        return {"status": "ok", "timed_s": timed, "issue_s": issue}

    def profile(self, cmd: protocol.Profile) -> protocol.ReplyFields:
        self._before_call()
        # The bound inputs for every call, no copies (the profile names kernels; values do not matter, memory does).
        arg_sets = [self.inputs] * cmd.calls
        share = trust.own_kernel_share(self.model, arg_sets, cmd.source)
        return {"status": "ok", "kernels": share}

    def finish(self) -> protocol.ReplyFields:
        self._restore("the last call")
        patched = trust.replaced_attributes(self.guarded) if self.guarded else []
        return {"status": "ok", "patched": patched, "state_changes": [c.describe() for c in self.changes]}

    # ---- helpers -----------------------------------------------------------------------------------

    def _restore(self, when: str) -> None:
        if self.expected:
            found = procstate.restore(self.expected, when)
            self.changes += [c for c in found if c.name not in {x.name for x in self.changes}]

    def _before_call(self) -> None:
        self.calls += 1
        self._restore("the import" if self.calls == 1 else f"call {self.calls - 1}")

    def _untimed(self) -> Any:
        """The bound model called once on the bound inputs, synchronized: its outputs."""
        self._before_call()
        try:
            out = self.model(*self.inputs)
            _synchronize(self.device)
        except Verdict:  # a verdict of kbench's own (judge.backward): what the gradients lack
            raise
        except BaseException as exc:
            raise Verdict(Status.RUNTIME_ERROR, f"the solution raised {short(exc)}") from exc
        return out

    def _deliver(self, out: Any) -> list[Any]:
        """Copy each output into the judge's buffer (an untimed call); plain numbers go back in the reply."""
        values, _ = each_output(out, self.outputs, lambda o, buf: buf.copy_(o))
        _synchronize(self.device)
        return values

    def _locate(self, out: Any) -> tuple[list[Any], list[Any]]:
        """A timed call's outputs: plain numbers, and where each tensor lies for the judge
        (kbench.judge.candidate.outputs)."""
        return each_output(out, self.outputs, self.locator.locate)


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
    sandbox.enter()  # from here on PID 1 of namespaces of its own (kbench.system.sandbox), before CUDA starts
    if init_cuda:
        warm_cuda()
    preload()
    server = CommandServer()
    handlers: dict[type, Callable[[Any], protocol.ReplyFields]] = {
        protocol.Calibrate: server.calibrate,
        protocol.Load: server.load, protocol.Build: server.build, protocol.Bind: server.bind,
        protocol.Call: lambda c: server.call(), protocol.Place: server.place,
        protocol.Arm: server.arm, protocol.Go: server.go,
        protocol.Report: lambda c: server.report(),
        protocol.Profile: server.profile, protocol.Finish: lambda c: server.finish(),
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

