"""Static checks on a solution's source: patterns that hide a broken kernel or game the harness.

Nothing is imported or run. The module is read with `ast`; regular expressions only search the kernel
source strings handed to load_inline (or cupy).

| code | catches | why it matters |
|---|---|---|
| no_custom_kernel | no load_inline, cpp_extension, triton.jit or cupy kernel | nothing custom to judge |
| kernel_never_called | the extension, or every function it exports, is never used | timed path is PyTorch |
| try_except_fallback | try/except or suppress() around a kernel call or the build | hides a broken kernel |
| threads | threading, multiprocessing, concurrent.futures, subprocess, os.fork | work escapes timer |
| new_stream | torch.cuda.Stream/stream/ExternalStream; cudaStreamCreate*, getStreamFromPool | off the timer |
| precision_downcast | .half(), fp16/bf16 dtypes, autocast, TF32; __half, at::kHalf in kernels | less math |
| harness_access | kbench, sys.modules/argv, frames, gc, /proc/self, KBENCH_* env, fds, results/ | forgery |
| monkey_patch | assigning, or setattr on, attributes of torch, time, builtins, any import | fakes checks |
| caching | forward stores input-derived values on self, reads them back; global; lru_cache | skips work |
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from kbench.judge.checks.pynames import undecorate
from kbench.judge.checks.source_model import (
    KEYWORD_ONLY,
    Function,
    SourceModel,
    call_arg,
    call_args,
    calls_builtin,
    const_str,
    copies_values,
    flat_targets,
    holder_keys,
    input_derived,
    self_attr,
    under,
    writes,
)
from kbench.results.findings import FindingCode

FINDING_CODES = ("no_custom_kernel", "kernel_never_called", "try_except_fallback", "threads", "new_stream",
                 "precision_downcast", "harness_access", "monkey_patch", "caching")

_WHY = {
    "no_custom_kernel": "the solution is plain PyTorch, so there is no kernel to judge",
    "kernel_never_called": "the timed path never runs the custom kernel",
    "try_except_fallback": "a PyTorch fallback would hide a kernel that fails",
    "threads": "work on other threads or processes escapes the timer",
    "new_stream": "work on a side stream escapes the timer's CUDA events",
    "precision_downcast": "reduced-precision math is cheaper and may still pass the tolerance",
    "harness_access": "harness internals can leak the reference output or forge the verdict",
    "monkey_patch": "patched library code can fake the timer or the correctness check",
    "caching": "a stored output lets later calls skip the work being timed",
}

THREAD_IMPORTS = ("threading", "_thread", "multiprocessing", "concurrent.futures", "subprocess", "os.fork",
                  "os.forkpty", "torch.multiprocessing")
THREAD_USES = ("os.fork", "os.forkpty", "torch.multiprocessing")  # reached through an innocent import
STREAM_CALLS = frozenset({"torch.cuda.Stream", "torch.cuda.stream", "torch.cuda.ExternalStream",
                          "torch.cuda.streams.Stream", "torch.Stream", "torch.cuda.StreamContext"})
STREAM_SOURCE = re.compile(r"\b(cudaStreamCreate\w*|getStreamFromPool)\b")
LOW_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16", "torch.HalfTensor",
                        "torch.BFloat16Tensor", "torch.cuda.HalfTensor", "torch.cuda.BFloat16Tensor",
                        "triton.language.float16", "triton.language.bfloat16"})
LOW_FLAGS = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
MATMUL_PRECISION = "torch.set_float32_matmul_precision"
AUTOCAST_CALLS = frozenset({"torch.autocast", "torch.amp.autocast", "torch.cuda.amp.autocast"})
LOW_SOURCE = re.compile(r"\b(__half2?|__nv_bfloat162?|half2|at::kHalf|at::kBFloat16|torch::kFloat16"
                        r"|torch::kBFloat16|torch::kHalf)\b|\b__float2(half|bfloat16)\w*")
HARNESS_USES = ("sys.modules", "sys._getframe", "sys._current_frames", "sys.argv", "sys.orig_argv",
                "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.trace",
                "gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.fdopen", "os.write")
ENV_READS = frozenset({"os.environ.get", "os.getenv", "os.environ.pop", "os.environ.setdefault"})
HARNESS_ENV = ("KBENCH", "TORCH_EXTENSIONS_DIR")
RESULT_PATH = re.compile(r"(^|[/\\])results([/\\]|$)|run\.json")
CACHE_DECORATORS = frozenset({"functools.lru_cache", "functools.cache"})


@dataclass(frozen=True)
class SourceFinding:
    """A finding of the static checks, with the line of the source it is about."""

    code: FindingCode
    message: str
    line: int | None


def _finding(code: str, line: int | None, what: str) -> SourceFinding:
    where = f"line {line}: " if line else ""
    return SourceFinding(FindingCode(code), f"{where}{what}; {_WHY[code]}", line)


def _no_custom_kernel(mod: SourceModel) -> Iterator[SourceFinding]:
    if not mod.factories and not mod.jitted:
        classes = (n for n in mod.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
        line = next((n.lineno for n in classes), None)
        yield _finding("no_custom_kernel", line, "no load_inline, cpp_extension, triton.jit or cupy kernel")


def _kernel_never_called(mod: SourceModel) -> Iterator[SourceFinding]:
    getattrs = [c for c in mod.calls if calls_builtin(c, "getattr") and len(c.args) > 1]
    accessed = {n.attr for n in mod.nodes if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
    accessed |= {const_str(c.args[1]) or "" for c in getattrs}
    dynamic = any(const_str(c.args[1]) is None for c in getattrs)  # getattr(ext, name): names unknowable
    statements = {id(n.value) for n in mod.nodes if isinstance(n, ast.Expr)}
    for build in mod.builds:
        keys, functions = holder_keys(mod.assigned_to.get(id(build), [])), mod.functions(build) or ()
        python_module = call_arg(build, "is_python_module", KEYWORD_ONLY)
        if isinstance(python_module, ast.Constant) and python_module.value is False:  # registers torch.ops
            if not any(mod.uses(["torch.ops"])):
                yield _finding("kernel_never_called", build.lineno, "torch.ops is never used")
        elif id(build) in statements or (keys and not mod.used(mod.spread(keys))):
            yield _finding("kernel_never_called", build.lineno, "the extension built here is never used")
        elif functions and not dynamic and not set(functions) & accessed:
            what = f"none of {', '.join(functions)} is ever called"
            yield _finding("kernel_never_called", build.lineno, what)


TRY_NODES: tuple[type[ast.Try], ...] = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except*: Python 3.11+


def _try_except_fallback(mod: SourceModel) -> Iterator[SourceFinding]:
    for node in mod.nodes:
        if isinstance(node, TRY_NODES) and node.handlers:
            reraises = all(isinstance(h.body[-1], ast.Raise) for h in node.handlers)
            if mod.calls_kernel(node.body) and not reraises:
                yield _finding("try_except_fallback", node.lineno, "try/except around a kernel call or build")
        elif isinstance(node, (ast.With, ast.AsyncWith)) and mod.calls_kernel(node.body):
            if any(mod.qual(undecorate(i.context_expr)) == "contextlib.suppress" for i in node.items):
                yield _finding("try_except_fallback", node.lineno, "suppress() around a kernel call or build")


def _threads(mod: SourceModel) -> Iterator[SourceFinding]:
    for name, line in mod.imports():
        if under(name, THREAD_IMPORTS):
            yield _finding("threads", line, f"imports {name}")
    for name, line in mod.uses(THREAD_USES):
        yield _finding("threads", line, f"uses {name}")


def _new_stream(mod: SourceModel) -> Iterator[SourceFinding]:
    for call in mod.calls:
        if (name := mod.qual(call.func)) in STREAM_CALLS:
            yield _finding("new_stream", call.lineno, f"calls {name}")
    for line, text in mod.source_hits(STREAM_SOURCE):
        yield _finding("new_stream", line, f"kernel source uses {text}")


def _precision_downcast(mod: SourceModel) -> Iterator[SourceFinding]:
    for call in mod.calls:
        name = mod.qual(call.func)
        method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
        low = [q for q in map(mod.qual, call_args(call)) if q in LOW_DTYPES]
        if (method in ("half", "bfloat16") and not call.args) or name in AUTOCAST_CALLS or low:
            what = low[0] if low else name or f".{method}()"
            yield _finding("precision_downcast", call.lineno, f"uses {what}")
        elif name == MATMUL_PRECISION and const_str(call_arg(call, "precision", 0)) != "highest":
            yield _finding("precision_downcast", call.lineno, "lowers float32 matmul precision")
    for node in mod.nodes:  # torch.backends.cuda.matmul.allow_tf32 = True
        if isinstance(node, ast.Assign) and any((mod.qual(t) or "").endswith(LOW_FLAGS) for t in node.targets):
            yield _finding("precision_downcast", node.lineno, "enables TF32 or reduced-precision reductions")
    for line, text in mod.source_hits(LOW_SOURCE):
        yield _finding("precision_downcast", line, f"kernel source uses {text}")


def _env_key(mod: SourceModel, node: ast.AST) -> str | None:
    """The literal name in `os.environ[...]`, `os.getenv(...)`, `... in os.environ`."""
    if isinstance(node, ast.Subscript) and mod.qual(node.value) == "os.environ":
        return const_str(node.slice)
    if isinstance(node, ast.Call) and mod.qual(node.func) in ENV_READS and node.args:
        return const_str(node.args[0])
    if isinstance(node, ast.Compare) and any(mod.qual(c) == "os.environ" for c in node.comparators):
        return const_str(node.left)
    return None


def _harness_access(mod: SourceModel) -> Iterator[SourceFinding]:
    for name, line in mod.imports():
        if under(name, ["kbench"]):
            yield _finding("harness_access", line, f"imports {name}")
    yield from (_finding("harness_access", line, f"uses {name}") for name, line in mod.uses(HARNESS_USES))
    for node in (n for n in mod.nodes if isinstance(n, ast.expr)):
        key, text = _env_key(mod, node), const_str(node)
        if key and key.startswith(HARNESS_ENV):
            yield _finding("harness_access", node.lineno, f"reads the environment variable {key}")
        elif text and "/proc/self" in text:
            yield _finding("harness_access", node.lineno, "names /proc/self")
    for call in mod.calls:
        is_open = calls_builtin(call, "open") or mod.qual(call.func) == "io.open"
        first = call.args[0] if call.args else None
        paths = (cast(str, s.value) for a in call_args(call) for s in mod.strings(a))  # string constants only
        if is_open and isinstance(first, ast.Constant) and type(first.value) is int:
            yield _finding("harness_access", call.lineno, "opens an inherited file descriptor")
        elif not mod.is_factory(call) and any(RESULT_PATH.search(p) for p in paths):
            yield _finding("harness_access", call.lineno, "names a results folder or run.json")


def _monkey_patch(mod: SourceModel) -> Iterator[SourceFinding]:
    for node in mod.nodes:
        if not isinstance(node, (ast.Assign, ast.Delete, ast.AugAssign, ast.AnnAssign)):
            continue
        targets: list[ast.expr] = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
        for t in flat_targets(targets):
            name = mod.qual(t) if isinstance(t, ast.Attribute) else None
            inner = (mod.qual(t.value) if isinstance(t, ast.Subscript) else None) or ""
            if name or inner == "builtins" or inner.endswith(".__dict__"):
                yield _finding("monkey_patch", node.lineno, f"assigns {name or inner}")
    for call in mod.calls:
        if calls_builtin(call, "setattr", "delattr") and call.args and (target := mod.qual(call.args[0])):
            yield _finding("monkey_patch", call.lineno, f"{ast.unparse(call.func)} on {target}")


def _forward_caching(mod: SourceModel, fn: Function) -> Iterator[SourceFinding]:
    shared = {t.id for n in mod.tree.body if isinstance(n, ast.Assign) for t in flat_targets(n.targets)
              if isinstance(t, ast.Name)} | {n.name for n in mod.tree.body if isinstance(n, ast.ClassDef)}
    shared -= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    tests = [n.test for n in ast.walk(fn) if isinstance(n, (ast.If, ast.IfExp, ast.While))]
    tests += [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    read = {self_attr(n) for t in tests for n in ast.walk(t) if isinstance(n, ast.Attribute)} - {None}
    derived = input_derived(fn)
    yield from (_finding("caching", n.lineno, f"forward declares global {', '.join(n.names)}")
                for n in ast.walk(fn) if isinstance(n, ast.Global))
    for targets, value, line in writes(fn):
        if not copies_values(value, derived):
            continue
        for t in flat_targets(targets):
            root = t
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if self_attr(t) in read:
                yield _finding("caching", line, f"forward stores self.{self_attr(t)} and reads it back")
            elif isinstance(root, ast.Name) and root.id in shared:
                yield _finding("caching", line, f"forward writes the module-level {root.id}")


def _caching(mod: SourceModel) -> Iterator[SourceFinding]:
    for node in mod.nodes:
        if isinstance(node, Function):
            for d in node.decorator_list:
                if mod.qual(undecorate(d)) in CACHE_DECORATORS:
                    yield _finding("caching", d.lineno, f"{node.name} is memoized")
        elif isinstance(node, ast.ClassDef):
            for fn in node.body:
                if isinstance(fn, Function) and fn.name == "forward":
                    yield from _forward_caching(mod, fn)


_CHECKS = (_no_custom_kernel, _kernel_never_called, _try_except_fallback, _threads, _new_stream,
           _precision_downcast, _harness_access, _monkey_patch, _caching)


def analyze(source: str) -> tuple[SourceFinding, ...]:
    """Findings for one solution's source, ordered by line; () when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the worker reports these itself
        return ()
    mod = SourceModel(tree)
    found: dict[tuple[str, int | None], SourceFinding] = {}
    for check in _CHECKS:
        for finding in check(mod):
            found.setdefault((finding.code, finding.line), finding)
    return tuple(sorted(found.values(), key=lambda f: (f.line or 0, FINDING_CODES.index(f.code))))
