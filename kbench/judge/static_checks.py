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
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from kbench.judge.kernel_names import KERNEL_DECORATORS as GPU_KERNEL_DECORATORS
from kbench.judge.pynames import import_aliases, qualname, undecorate

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

EXTENSION_BUILDERS = frozenset({"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"})
KERNEL_FACTORIES = frozenset({"cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel",
                              "cupy.ReductionKernel"})
# Decorators that make a function a GPU kernel, or a host function that compiles and launches DSL kernels.
KERNEL_DECORATORS = frozenset(GPU_KERNEL_DECORATORS) | {"triton.autotune", "numba.cuda.jit", "tilelang.jit",
                                                         "cutlass.cute.jit"}
KEYWORD_ONLY = 99  # an argument position no call reaches
EXTENSION_SOURCES = (("cpp_sources", 1), ("cuda_sources", 2), ("sycl_sources", KEYWORD_ONLY))
FACTORY_SOURCES = (("code", 0),)  # cupy.RawKernel(code, name)
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
METADATA = frozenset({"shape", "device", "dtype", "size", "dim", "ndim", "numel", "is_cuda", "stride",
                      "empty_like", "zeros_like", "ones_like", "full_like"})  # reads that copy no values
MUTATORS = frozenset({"append", "update", "setdefault", "__setitem__"})
SELF = ("self", "cls")
Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Finding:
    code: str
    message: str
    line: int | None


def _finding(code: str, line: int | None, what: str) -> Finding:
    where = f"line {line}: " if line else ""
    return Finding(code, f"{where}{what}; {_WHY[code]}", line)


def _key(node: ast.AST) -> str | None:
    """A name an extension object can be held under: `ext` or `self.ext`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in SELF:
        return f"self.{node.attr}"
    return None


def _keys(targets: Iterable[ast.expr], class_body: bool = False) -> set[str]:
    """Holder keys of assignment targets; a class attribute `op = ext` is read back as `self.op`."""
    keys = {f"self.{t.id}" if class_body and isinstance(t, ast.Name) else _key(t) for t in targets}
    return {k for k in keys if k}


def _const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _arg(call: ast.Call, name: str, pos: int) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[pos] if len(call.args) > pos else None


def _call_args(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def _calls_builtin(call: ast.Call, *names: str) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in names


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _flat(targets: Iterable[ast.expr]) -> Iterator[ast.expr]:
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from _flat(t.elts)
        else:
            yield t.value if isinstance(t, ast.Starred) else t


class _Module:
    """One parse of the solution plus the facts several checks share."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree, self.nodes, self.aliases = tree, list(ast.walk(tree)), import_aliases(tree)
        self.assigns: dict[str, list[ast.expr]] = {}  # name -> every value assigned to it
        self.assigned_to: dict[int, list[ast.expr]] = {}  # id(value) -> its targets, also via `a if c else b`
        self.copies: list[tuple[set[str], ast.expr]] = []  # `self.op = ext`: who may hold an extension
        in_class = {id(s) for n in self.nodes if isinstance(n, ast.ClassDef) for s in n.body}
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.copies.append((_keys(targets, id(node) in in_class), node.value))
                branches = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else []
                self.assigned_to.update({id(v): targets for v in (node.value, *branches)})
                for t in (t for t in targets if isinstance(t, ast.Name)):
                    self.assigns.setdefault(t.id, []).append(node.value)
        self.calls = [n for n in self.nodes if isinstance(n, ast.Call)]
        self.builds = [c for c in self.calls if self.qual(c.func) in EXTENSION_BUILDERS]
        self.factories = [c for c in self.calls if self.is_factory(c)]
        self.jitted = {n.name for n in self.nodes if isinstance(n, Function)
                       and any(self.qual(undecorate(d)) in KERNEL_DECORATORS for d in n.decorator_list)}
        self.exported = {f for c in self.builds for f in self.functions(c) or ()}
        self.moved: set[int] = set()
        self.wrappers: set[str] = set()
        self.holders = self.spread({k for c in self.builds for k in _keys(self.assigned_to.get(id(c), []))})
        self.find_wrappers()

    def qual(self, node: ast.AST) -> str | None:
        return qualname(node, self.aliases)

    def is_factory(self, call: ast.Call) -> bool:
        name = self.qual(call.func) or ""
        return name.startswith("torch.utils.cpp_extension.") or name in KERNEL_FACTORIES

    def functions(self, build: ast.Call) -> tuple[str, ...] | None:
        """load_inline's `functions=`, a literal or a name bound once to one; None when unknown."""
        value = _arg(build, "functions", KEYWORD_ONLY)
        if isinstance(value, ast.Name) and len(self.assigns.get(value.id, [])) == 1:
            value = self.assigns[value.id][0]
        try:
            names = ast.literal_eval(value) if value is not None else None
        except (ValueError, TypeError, SyntaxError, RecursionError):
            return None
        names = [names] if isinstance(names, str) else names
        ok = isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)
        return tuple(names) if ok else None

    def spread(self, keys: set[str]) -> set[str]:
        """Follow `self.op = ext` and `f = ext` copies; the copied expressions are not uses."""
        changed = bool(keys)
        while changed:
            changed = False
            for targets, value in self.copies:
                if _key(value) in keys:
                    self.moved.add(id(value))
                    changed |= not targets <= keys
                    keys |= targets
        return keys

    def used(self, keys: set[str]) -> bool:
        return any(isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load)
                   and _key(n) in keys and id(n) not in self.moved for n in self.nodes)

    def is_kernel_call(self, call: ast.Call) -> bool:
        func = call.func.value if isinstance(call.func, ast.Subscript) else call.func  # kernel[grid](...)
        if self.is_factory(call) or _key(func) in self.wrappers | self.jitted:
            return True
        if not isinstance(func, ast.Attribute):
            return False
        return func.attr in self.exported or _key(func.value) in self.holders

    def calls_kernel(self, nodes: Iterable[ast.AST]) -> bool:
        return any(isinstance(n, ast.Call) and self.is_kernel_call(n) for top in nodes for n in ast.walk(top))

    def find_wrappers(self) -> None:
        """Functions and methods that reach a kernel call: calling one counts as calling the kernel."""
        defs = [n for n in self.nodes if isinstance(n, Function)]
        changed = True
        while changed:
            new = {k for d in defs if self.calls_kernel(d.body) for k in (d.name, f"self.{d.name}")}
            changed = not new <= self.wrappers
            self.wrappers |= new

    def strings(self, node: ast.AST | None) -> Iterator[ast.Constant]:
        """String constants an expression is built from, following names to what was assigned to them."""
        stack, seen = [node], set()  # a loop, not recursion: `"a" + "b" + ...` nests one level per term
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield node
            elif isinstance(node, ast.Name) and node.id not in seen:
                seen.add(node.id)
                stack += reversed(self.assigns.get(node.id, []))
            elif isinstance(node, (ast.List, ast.Tuple, ast.BinOp, ast.JoinedStr, ast.Call, ast.Attribute)):
                stack += reversed(list(ast.iter_child_nodes(node)))

    def source_hits(self, pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
        """(line, text) of each match in the kernel source strings handed to a build or a cupy kernel."""
        for call in self.factories:
            places = FACTORY_SOURCES if self.qual(call.func) in KERNEL_FACTORIES else EXTENSION_SOURCES
            for const in (c for name, pos in places for c in self.strings(_arg(call, name, pos))):
                for match in pattern.finditer(const.value):
                    yield const.lineno + const.value.count("\n", 0, match.start()), match.group(0)

    def imports(self) -> Iterator[tuple[str, int]]:
        """Every module or name imported, statically or through __import__ / importlib.import_module."""
        for node in self.nodes:
            if isinstance(node, ast.Import):
                yield from ((a.name, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                yield node.module, node.lineno
                yield from ((f"{node.module}.{a.name}", node.lineno) for a in node.names)
            elif isinstance(node, ast.Call) and node.args and (name := _const_str(node.args[0])):
                if _calls_builtin(node, "__import__") or self.qual(node.func) == "importlib.import_module":
                    yield name, node.lineno

    def uses(self, prefixes: Iterable[str]) -> Iterator[tuple[str, int]]:
        for node in self.nodes:
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                name = self.qual(node)
                if name is not None and _under(name, prefixes):
                    yield name, node.lineno


def _no_custom_kernel(mod: _Module) -> Iterator[Finding]:
    if not mod.factories and not mod.jitted:
        classes = (n for n in mod.tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
        line = next((n.lineno for n in classes), None)
        yield _finding("no_custom_kernel", line, "no load_inline, cpp_extension, triton.jit or cupy kernel")


def _kernel_never_called(mod: _Module) -> Iterator[Finding]:
    getattrs = [c for c in mod.calls if _calls_builtin(c, "getattr") and len(c.args) > 1]
    accessed = {n.attr for n in mod.nodes if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)}
    accessed |= {_const_str(c.args[1]) or "" for c in getattrs}
    dynamic = any(_const_str(c.args[1]) is None for c in getattrs)  # getattr(ext, name): names unknowable
    statements = {id(n.value) for n in mod.nodes if isinstance(n, ast.Expr)}
    for build in mod.builds:
        keys, functions = _keys(mod.assigned_to.get(id(build), [])), mod.functions(build) or ()
        python_module = _arg(build, "is_python_module", KEYWORD_ONLY)
        if isinstance(python_module, ast.Constant) and python_module.value is False:  # registers torch.ops
            if not any(mod.uses(["torch.ops"])):
                yield _finding("kernel_never_called", build.lineno, "torch.ops is never used")
        elif id(build) in statements or (keys and not mod.used(mod.spread(keys))):
            yield _finding("kernel_never_called", build.lineno, "the extension built here is never used")
        elif functions and not dynamic and not set(functions) & accessed:
            what = f"none of {', '.join(functions)} is ever called"
            yield _finding("kernel_never_called", build.lineno, what)


def _try_except_fallback(mod: _Module) -> Iterator[Finding]:
    for node in mod.nodes:
        if isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) and node.handlers:
            reraises = all(isinstance(h.body[-1], ast.Raise) for h in node.handlers)
            if mod.calls_kernel(node.body) and not reraises:
                yield _finding("try_except_fallback", node.lineno, "try/except around a kernel call or build")
        elif isinstance(node, (ast.With, ast.AsyncWith)) and mod.calls_kernel(node.body):
            if any(mod.qual(undecorate(i.context_expr)) == "contextlib.suppress" for i in node.items):
                yield _finding("try_except_fallback", node.lineno, "suppress() around a kernel call or build")


def _threads(mod: _Module) -> Iterator[Finding]:
    for name, line in mod.imports():
        if _under(name, THREAD_IMPORTS):
            yield _finding("threads", line, f"imports {name}")
    for name, line in mod.uses(THREAD_USES):
        yield _finding("threads", line, f"uses {name}")


def _new_stream(mod: _Module) -> Iterator[Finding]:
    for call in mod.calls:
        if (name := mod.qual(call.func)) in STREAM_CALLS:
            yield _finding("new_stream", call.lineno, f"calls {name}")
    for line, text in mod.source_hits(STREAM_SOURCE):
        yield _finding("new_stream", line, f"kernel source uses {text}")


def _precision_downcast(mod: _Module) -> Iterator[Finding]:
    for call in mod.calls:
        name = mod.qual(call.func)
        method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
        low = [q for q in map(mod.qual, _call_args(call)) if q in LOW_DTYPES]
        if (method in ("half", "bfloat16") and not call.args) or name in AUTOCAST_CALLS or low:
            what = low[0] if low else name or f".{method}()"
            yield _finding("precision_downcast", call.lineno, f"uses {what}")
        elif name == MATMUL_PRECISION and _const_str(_arg(call, "precision", 0)) != "highest":
            yield _finding("precision_downcast", call.lineno, "lowers float32 matmul precision")
    for node in mod.nodes:  # torch.backends.cuda.matmul.allow_tf32 = True
        names = [mod.qual(t) or "" for t in node.targets] if isinstance(node, ast.Assign) else []
        if any(n.endswith(LOW_FLAGS) for n in names):
            yield _finding("precision_downcast", node.lineno, "enables TF32 or reduced-precision reductions")
    for line, text in mod.source_hits(LOW_SOURCE):
        yield _finding("precision_downcast", line, f"kernel source uses {text}")


def _env_key(mod: _Module, node: ast.AST) -> str | None:
    """The literal name in `os.environ[...]`, `os.getenv(...)`, `... in os.environ`."""
    if isinstance(node, ast.Subscript) and mod.qual(node.value) == "os.environ":
        return _const_str(node.slice)
    if isinstance(node, ast.Call) and mod.qual(node.func) in ENV_READS and node.args:
        return _const_str(node.args[0])
    if isinstance(node, ast.Compare) and any(mod.qual(c) == "os.environ" for c in node.comparators):
        return _const_str(node.left)
    return None


def _harness_access(mod: _Module) -> Iterator[Finding]:
    for name, line in mod.imports():
        if _under(name, ["kbench"]):
            yield _finding("harness_access", line, f"imports {name}")
    yield from (_finding("harness_access", line, f"uses {name}") for name, line in mod.uses(HARNESS_USES))
    for node in (n for n in mod.nodes if isinstance(n, ast.expr)):
        key, text = _env_key(mod, node), _const_str(node)
        if key and key.startswith(HARNESS_ENV):
            yield _finding("harness_access", node.lineno, f"reads the environment variable {key}")
        elif text and "/proc/self" in text:
            yield _finding("harness_access", node.lineno, "names /proc/self")
    for call in mod.calls:
        is_open = _calls_builtin(call, "open") or mod.qual(call.func) == "io.open"
        first = call.args[0] if call.args else None
        paths = (s.value for a in _call_args(call) for s in mod.strings(a))
        if is_open and isinstance(first, ast.Constant) and type(first.value) is int:
            yield _finding("harness_access", call.lineno, "opens an inherited file descriptor")
        elif not mod.is_factory(call) and any(RESULT_PATH.search(p) for p in paths):
            yield _finding("harness_access", call.lineno, "names a results folder or run.json")


def _monkey_patch(mod: _Module) -> Iterator[Finding]:
    for node in mod.nodes:
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in _flat(targets):
            name = mod.qual(t) if isinstance(t, ast.Attribute) else None
            inner = (mod.qual(t.value) if isinstance(t, ast.Subscript) else None) or ""
            if name or inner == "builtins" or inner.endswith(".__dict__"):
                yield _finding("monkey_patch", node.lineno, f"assigns {name or inner}")
    for call in mod.calls:
        if _calls_builtin(call, "setattr", "delattr") and call.args and (target := mod.qual(call.args[0])):
            yield _finding("monkey_patch", call.lineno, f"{ast.unparse(call.func)} on {target}")


def _copies_values(node: ast.AST, names: set[str]) -> bool:
    """Whether an expression carries values of `names`; shape, device and dtype reads do not."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Attribute) and node.attr in METADATA:
            continue
        if isinstance(node, ast.Call) and (_key(node.func) or getattr(node.func, "attr", "")) in METADATA:
            continue
        if isinstance(node, ast.Name) and node.id in names:
            return True
        stack += ast.iter_child_nodes(node)
    return False


def _writes(fn: Function) -> Iterator[tuple[list[ast.expr], ast.AST, int]]:
    """(targets, value, line) of every assignment-like statement in a function, mutator calls included."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            yield node.targets, node.value, node.lineno
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            yield [node.target], node.value, node.lineno
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            yield [node.target], node.iter, node.lineno
        elif isinstance(node, ast.Call) and isinstance(f := node.func, ast.Attribute) and f.attr in MUTATORS:
            yield [f.value], ast.Tuple(elts=_call_args(node)), node.lineno


def _input_derived(fn: Function) -> set[str]:
    """The function's arguments and the local names whose values are computed from them."""
    a = fn.args
    names = {x.arg for x in [*a.posonlyargs, *a.args[1:], *a.kwonlyargs, a.vararg, a.kwarg] if x}
    changed = True
    while changed:
        new = {t.id for targets, value, _ in _writes(fn) if _copies_values(value, names)
               for t in _flat(targets) if isinstance(t, ast.Name)}
        changed = not new <= names
        names |= new
    return names


def _self_attr(node: ast.AST) -> str | None:
    """'cache' for `self.cache`, `self.cache[k]` or `self.cache.field`."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Attribute) and _key(node):
            return node.attr
        node = node.value
    return None


def _forward_caching(mod: _Module, fn: Function) -> Iterator[Finding]:
    shared = {t.id for n in mod.tree.body if isinstance(n, ast.Assign) for t in _flat(n.targets)
              if isinstance(t, ast.Name)} | {n.name for n in mod.tree.body if isinstance(n, ast.ClassDef)}
    shared -= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    tests = [n.test for n in ast.walk(fn) if isinstance(n, (ast.If, ast.IfExp, ast.While))]
    tests += [n.value for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None]
    read = {_self_attr(n) for t in tests for n in ast.walk(t) if isinstance(n, ast.Attribute)} - {None}
    derived = _input_derived(fn)
    yield from (_finding("caching", n.lineno, f"forward declares global {', '.join(n.names)}")
                for n in ast.walk(fn) if isinstance(n, ast.Global))
    for targets, value, line in _writes(fn):
        if not _copies_values(value, derived):
            continue
        for t in _flat(targets):
            root = t
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if _self_attr(t) in read:
                yield _finding("caching", line, f"forward stores self.{_self_attr(t)} and reads it back")
            elif isinstance(root, ast.Name) and root.id in shared:
                yield _finding("caching", line, f"forward writes the module-level {root.id}")


def _caching(mod: _Module) -> Iterator[Finding]:
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


def analyze(source: str) -> tuple[Finding, ...]:
    """Findings for one solution's source, ordered by line; () when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # the worker reports these itself
        return ()
    mod = _Module(tree)
    found: dict[tuple[str, int | None], Finding] = {}
    for check in _CHECKS:
        for finding in check(mod):
            found.setdefault((finding.code, finding.line), finding)
    return tuple(sorted(found.values(), key=lambda f: (f.line or 0, FINDING_CODES.index(f.code))))
