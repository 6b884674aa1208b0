"""The judge's handle on the candidate: its process (spawned, frozen, killed) and the buffers shared with it.

On CUDA every buffer shared with the candidate comes from a private memory pool, so the IPC mappings it receives
hold nothing of the judge's but those buffers. See kbench.judge.judge for how an evaluation uses them.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from typing import Any, cast

import torch
import torch.multiprocessing as torch_mp

from kbench.judge import backward
from kbench.judge.candidate import candidate, protocol
from kbench.judge.checks import correctness, trust
from kbench.judge.timing import gate, timers
from kbench.judge.verdict import Verdict
from kbench.results.codec import JsonObject, ProtocolError
from kbench.results.records import Status
from kbench.system import escapes
from kbench.system.lifetime import exit_failure
from kbench.system.sandbox import SandboxPlan
from kbench.wire.jobs import Judging

_perf_counter = time.perf_counter
_tensor_type = torch.Tensor
Announce = Callable[..., None]


def _same_kind(value: Any, buffer: Any) -> bool:
    """Can `buffer` take `value`: tensors of one shape, dtype and device, or equal plain values."""
    if isinstance(value, _tensor_type) and isinstance(buffer, _tensor_type):
        return value.shape == buffer.shape and value.dtype == buffer.dtype and value.device == buffer.device
    return not isinstance(value, _tensor_type) and not isinstance(buffer, _tensor_type) and value == buffer


class CandidateProcess:
    """The solution's process as the judge sees it: spawned with a pipe, frozen (SIGSTOP to its process group and to
    whatever it started outside the group) except while it answers a command, and killed with its group at the end."""

    def __init__(self, target: Callable[..., None] = candidate.main, init_cuda: bool = False,
                 fork: bool = False) -> None:
        """Start it: spawned, it imports Python, torch and kbench; forked (`fork`, from a worker the zygote forked,
        before the worker has a job or a CUDA context), it has them already and keeps no descriptor of the worker's but
        its pipe, stdout and stderr. With `init_cuda` (a worker started ahead of its CUDA job) it creates its CUDA
        context before its first command."""
        ctx = torch_mp.get_context("fork") if fork else torch_mp.get_context("spawn")
        self.conn, child_end = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=target, args=(child_end, init_cuda, fork), name="kbench-candidate")
        self.proc.start()
        child_end.close()
        self.pid: int = cast(int, self.proc.pid)  # set once started
        self.pgid = self.pid  # the candidate makes itself a group leader first thing
        self.freezer = escapes.Freezer(self.pid, self.pgid)  # what it starts outside its group, frozen with it

    def announce(self, announce: Announce) -> None:
        """Tell the parent the candidate's process group, so that it is killed too if this judge is killed."""
        announce("group", pgid=self.pgid)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def request(self, command: Any) -> tuple[protocol.Reply, float]:
        """Send one command, wait for its reply; the reply and the judge's clock over the round trip."""
        self.thaw()
        start = _perf_counter()
        self.send(command)
        reply = self.receive()
        seconds = _perf_counter() - start
        self.freeze()
        return reply, seconds

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)
        self.freezer.cont()  # after the group: none of them sees the candidate stopped while it runs

    def freeze(self) -> None:
        """Stop every process it started outside its group (escapes.Freezer), then the group, so that none of them
        runs while the candidate is stopped; then once more for one the group started meanwhile (one read, unless
        the machine's fork count moved)."""
        self.freezer.stop()
        self._signal(signal.SIGSTOP)
        self.freezer.stop()

    def send(self, command: Any) -> None:
        try:
            self.conn.send(command)
        except (EOFError, OSError) as exc:
            raise Verdict(*self._death(exc)) from None

    def ready(self, timeout_s: float) -> bool:
        """Whether a reply is waiting, after at most `timeout_s`."""
        try:
            return bool(self.conn.poll(timeout_s))
        except (EOFError, OSError):
            return True  # receive() says how it ended

    def receive(self) -> protocol.Reply:
        """The next reply, checked (protocol.decode)."""
        try:
            data = self.conn.recv_bytes(protocol.MAX_REPLY_BYTES)
        except (EOFError, OSError) as exc:
            raise Verdict(*self._death(exc)) from None
        try:
            return protocol.decode(data)
        except ProtocolError as exc:
            raise Verdict(Status.RUNTIME_ERROR, f"the solution's process broke the protocol: {exc}") from None

    def _exitcode(self, wait_s: float) -> int | None:
        """The candidate's exit code once it has ended, polled without blocking: multiprocessing's own join trusts a
        pipe the candidate can write to, and would then block for good in waitpid."""
        deadline = _perf_counter() + wait_s
        while True:
            code = self.proc.exitcode  # waitpid(WNOHANG)
            if code is not None or _perf_counter() >= deadline:
                return code
            time.sleep(0.01)

    def _death(self, exc: BaseException) -> tuple[Status, str]:
        code = self._exitcode(2.0)
        if code is None:
            return Status.RUNTIME_ERROR, f"the solution's process broke the protocol ({type(exc).__name__}: {exc})"
        return exit_failure(code, "the solution's process", "before answering")

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        try:
            os.kill(self.pid, signal.SIGKILL)  # in case it never made its own group
        except ProcessLookupError:
            pass
        self._exitcode(5.0)
        self.conn.close()


class Reserve:
    """A judge's later candidate processes (a witness, a fresh candidate after processes disagreed): one forked ahead
    by its worker, beside the first candidate and like it (before the worker had a job or a CUDA context), so that it
    starts in milliseconds where a spawned one imports torch for seconds (a witness spawned after a first flag made
    that row's timing 5-8 s on the H100, 2026-11-27); spawned when none is left. The one held is the judge's own
    child, neither the solution's nor escaped (`pids`)."""

    def __init__(self, ready: CandidateProcess | None = None) -> None:
        self._ready = ready

    def take(self, init_cuda: bool = False) -> CandidateProcess:
        """The process held (it makes its CUDA context at its first command), else a new one spawned."""
        ready, self._ready = self._ready, None
        if ready is not None and ready.proc.is_alive():
            return ready
        if ready is not None:
            ready.kill()
        return CandidateProcess(init_cuda=init_cuda)

    def pids(self) -> set[int]:
        """The process held, not yet taken."""
        return {self._ready.pid} if self._ready is not None else set()

    def close(self) -> None:
        if self._ready is not None:
            self._ready.kill()
            self._ready = None


class Session:
    """The buffers the judge shares with the candidate and the calls it asks for. On CUDA every shared buffer comes
    from a private memory pool, so the IPC mappings the candidate gets hold nothing of the judge's but those buffers."""

    def __init__(self, cand: CandidateProcess, device: str, reserve: Reserve | None = None) -> None:
        self.cand = cand
        self.device = device
        self.reserve = reserve or Reserve()  # the judge's next candidate processes (a witness, a fresh candidate)
        self.pool = torch.cuda.MemPool() if device == "cuda" and hasattr(torch.cuda, "MemPool") else None
        self.buffers: dict[str, list[Any]] = {}  # output buffers per model name
        self.name = ""
        self.inputs: list[Any] = []
        self.precision = "fp32"  # the run's (tolerances.PRECISIONS); set with the calibration
        self.values: tuple[Any, ...] = ()
        self.peak_bytes = 0  # the solution's largest peak of GPU memory over a call (as its process reports it)
        # CUDA: the shared page of the gate and the DONE word (kbench.judge.timing.gate), sent with the calibration
        self.page_tensor = gate.shared_page_tensor() if device == "cuda" else None
        self.sandbox_plan: SandboxPlan | None = None  # sent with the calibration (None: namespaces only)
        self.sandbox = ""  # the sandbox the candidate reported before the solution was imported
        # The reference allocates judge.AFTER_MIN_BYTES or more in a call: the candidate keeps the calibration's
        # reference (protocol.Calibrate.keep) and both sides draw their memory anew (kbench.judge.timing.placement)
        self.big_call = False

    def _shared(self, make: Callable[[], torch.Tensor]) -> torch.Tensor:
        if self.pool is not None:
            with torch.cuda.use_mem_pool(self.pool):
                return make()
        return make().share_memory_() if self.device == "cpu" else make()

    def shared_copy(self, x: Any) -> Any:
        if not isinstance(x, _tensor_type):
            return x
        buf = self._shared(lambda: torch.empty_like(x))
        buf.copy_(x)
        return buf

    def ask(self, command: Any) -> protocol.Reply:
        reply, _ = self.cand.request(command)
        if not reply.ok:
            raise Verdict(reply.status, reply.message)
        return reply

    def start_calibration(self, job: Judging, reference: Any, init: list[Any], inputs: list[Any],
                          outputs: Any) -> None:
        """The reference itself, built in the candidate's process before the solution is imported (see
        kbench.judge.timing.judge_timing.calibrate)."""
        self.name = "calibration"
        self.precision = job.precision
        self.buffers[self.name] = self._output_buffers(outputs)
        self.inputs = [self.shared_copy(x) for x in inputs]
        reply = self.ask(protocol.Calibrate(self.device, dataclasses.asdict(job.math), job.problem.path,
                                            job.problem.overrides, init, self._shared_state(reference), self.inputs,
                                            self.buffers[self.name], self.precision, self.page_tensor,
                                            self.sandbox_plan, backward.gradient_names(reference),
                                            self.big_call))
        self.sandbox = reply.sandbox

    def load(self, path: str, env: dict[str, str]) -> None:
        self.ask(protocol.Load(path, env))

    def _shared_state(self, reference: Any) -> dict[str, torch.Tensor]:
        """Copies of the reference's weights to hand over: the candidate never maps the reference's own tensors."""
        return {k: self.shared_copy(v.detach()) for k, v in reference.state_dict().items()}

    def build(self, name: str, reference: Any, init: list[Any], seed: int) -> int:
        reply = self.ask(protocol.Build(name, init, self._shared_state(reference), seed, self.device, self.precision,
                                        backward.gradient_names(reference)))
        return reply.copied

    def _output_buffers(self, outputs: Any) -> list[Any]:
        """Shared buffers shaped like `outputs`: the current model's own when they match (no second set in memory)."""
        outs = list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]
        current = self.buffers.get(self.name, [])
        if len(current) == len(outs) and all(_same_kind(o, b) if b is not None else not isinstance(o, _tensor_type)
                                             for o, b in zip(outs, current)):
            return current
        return [self._shared(partial(torch.empty, o.shape, dtype=o.dtype, device=o.device))
                if isinstance(o, _tensor_type) else None for o in outs]

    def bind(self, name: str, inputs: list[Any], outputs: Any = None) -> None:
        """Model `name` on shared copies of `inputs` (the current buffers when they match); output buffers shaped like
        `outputs` (kept per name)."""
        if outputs is not None:
            self.buffers[name] = self._output_buffers(outputs)
        if len(inputs) == len(self.inputs) and all(_same_kind(v, b) for v, b in zip(inputs, self.inputs)):
            self.copy_in(inputs)
        else:
            self.inputs = []  # the old buffers go before the new ones are made
            self.inputs = [self.shared_copy(x) for x in inputs]
        timers.synchronize(self.device)  # the candidate reads them next
        self.name = name
        self.ask(protocol.Bind(name, self.inputs, self.buffers[name]))
        self.buffers = {k: v for k, v in self.buffers.items() if k != "calibration" or name == "calibration"}

    def fits(self, values: list[Any]) -> bool:
        """Whether the bound input buffers can take `values` (same shapes, dtypes and devices; equal plain values)."""
        return len(values) == len(self.inputs) and all(_same_kind(v, b) for v, b in zip(values, self.inputs))

    def copy_in(self, values: list[Any]) -> None:
        """`values` into the bound input buffers, on the current stream (no synchronize)."""
        for v, b in zip(values, self.inputs):
            if isinstance(v, _tensor_type):
                b.copy_(v)

    def refill(self, values: list[Any]) -> None:
        """New values in the bound input buffers (same shapes, dtypes, pointers); new buffers if the shapes differ."""
        if self.fits(values):
            self.copy_in(values)
            timers.synchronize(self.device)
        else:
            self.bind(self.name, values)

    def outputs(self) -> list[Any]:
        """The latest delivered outputs: the judge's buffers, with the plain numbers from the reply in their places."""
        values = iter(self.values)
        return [b if b is not None else next(values, None) for b in self.buffers[self.name]]

    def call(self) -> list[Any]:
        reply = self.ask(protocol.Call())
        self.values = reply.values
        if reply.peak_bytes is not None:
            self.peak_bytes = max(self.peak_bytes, reply.peak_bytes)
        return self.outputs()

    def place(self, pages: int) -> protocol.Reply:
        """A new draw of the candidate's memory and one untimed call on the bound inputs (protocol.Place): the reply
        locates its outputs (kbench.judge.timing.timed_call.TimedCalls.place maps them); the call's peak is not
        counted (the model bound may be the kept reference)."""
        return self.ask(protocol.Place(pages))

    def call_on(self, inputs: list[Any]) -> tuple[list[Any], bool]:
        """A correctness.CandidateCall: `inputs`' values into the shared buffers, one call; the outputs (the shared
        buffers themselves, valid until the next call) and whether the solution changed its input buffers."""
        self.refill(inputs)
        out = self.call()
        return out, not correctness.inputs_unchanged(inputs, self.inputs)

    def copied_outputs(self, inputs: list[Any]) -> list[Any]:
        """One call's outputs as the judge's own copies (the shared buffers are overwritten by the next call)."""
        out, _ = self.call_on(inputs)
        return [o.clone() if isinstance(o, _tensor_type) else o for o in out]

    def release(self) -> None:
        """End the candidate and free every shared buffer (before the judge's memory-hungry float64 oracle)."""
        self.cand.kill()
        self.buffers, self.inputs = {}, []
        if self.device == "cuda":
            self.pool = None
            torch.cuda.empty_cache()

    def profile(self, inputs: list[Any], source: str) -> JsonObject:
        """The own-kernel share as the candidate sent it (checked as a KernelShare by trust.kernel_profile)."""
        self.refill(inputs)
        return self.ask(protocol.Profile(trust.PROFILED_CALLS, source)).kernels or {}
