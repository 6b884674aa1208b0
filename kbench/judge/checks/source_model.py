"""The source model of a solution: one `ast` parse and the facts about it that the static checks share."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from typing import Any, cast

from kbench.judge.checks.kernel_names import KERNEL_DECORATORS as GPU_KERNEL_DECORATORS
from kbench.judge.checks.pynames import import_aliases, qualname, undecorate

EXTENSION_BUILDERS = frozenset({"torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load"})
KERNEL_FACTORIES = frozenset({"cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel",
                              "cupy.ReductionKernel"})
# Decorators that make a function a GPU kernel, or a host function that compiles and launches DSL kernels.
KERNEL_DECORATORS = frozenset(GPU_KERNEL_DECORATORS) | {"triton.autotune", "numba.cuda.jit", "tilelang.jit",
                                                         "cutlass.cute.jit"}
KEYWORD_ONLY = 99  # an argument position no call reaches
EXTENSION_SOURCES = (("cpp_sources", 1), ("cuda_sources", 2), ("sycl_sources", KEYWORD_ONLY))
FACTORY_SOURCES = (("code", 0),)  # cupy.RawKernel(code, name)
METADATA = frozenset({"shape", "device", "dtype", "size", "dim", "ndim", "numel", "is_cuda", "stride",
                      "empty_like", "zeros_like", "ones_like", "full_like"})  # reads that copy no values
MUTATORS = frozenset({"append", "update", "setdefault", "__setitem__"})
SELF = ("self", "cls")
Function = ast.FunctionDef | ast.AsyncFunctionDef


def holder_key(node: ast.AST) -> str | None:
    """A name an extension object can be held under: `ext` or `self.ext`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in SELF:
        return f"self.{node.attr}"
    return None


def holder_keys(targets: Iterable[ast.expr], class_body: bool = False) -> set[str]:
    """Holder keys of assignment targets; a class attribute `op = ext` is read back as `self.op`."""
    keys = {f"self.{t.id}" if class_body and isinstance(t, ast.Name) else holder_key(t) for t in targets}
    return {k for k in keys if k}


def const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def call_arg(call: ast.Call, name: str, pos: int) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[pos] if len(call.args) > pos else None


def call_args(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords)]


def calls_builtin(call: ast.Call, *names: str) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id in names


def under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def flat_targets(targets: Iterable[ast.expr]) -> Iterator[ast.expr]:
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            yield from flat_targets(t.elts)
        else:
            yield t.value if isinstance(t, ast.Starred) else t


class SourceModel:
    """One parse of the solution plus the facts several checks share."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree, self.nodes, self.aliases = tree, list(ast.walk(tree)), import_aliases(tree)
        self.assigns: dict[str, list[ast.expr]] = {}  # name -> every value assigned to it
        self.assigned_to: dict[int, list[ast.expr]] = {}  # id(value) -> its targets, also via `a if c else b`
        self.copies: list[tuple[set[str], ast.expr]] = []  # `self.op = ext`: who may hold an extension
        in_class = {id(s) for n in self.nodes if isinstance(n, ast.ClassDef) for s in n.body}
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                targets: list[ast.expr] = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.copies.append((holder_keys(targets, id(node) in in_class), node.value))
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
        self.holders = self.spread({k for c in self.builds for k in holder_keys(self.assigned_to.get(id(c), []))})
        self.find_wrappers()

    def qual(self, node: ast.AST) -> str | None:
        return qualname(node, self.aliases)

    def is_factory(self, call: ast.Call) -> bool:
        name = self.qual(call.func) or ""
        return name.startswith("torch.utils.cpp_extension.") or name in KERNEL_FACTORIES

    def functions(self, build: ast.Call) -> tuple[str, ...] | None:
        """load_inline's `functions=`, a literal or a name bound once to one; None when unknown."""
        value = call_arg(build, "functions", KEYWORD_ONLY)
        if isinstance(value, ast.Name) and len(self.assigns.get(value.id, [])) == 1:
            value = self.assigns[value.id][0]
        try:
            names: Any = ast.literal_eval(value) if value is not None else None
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
                if holder_key(value) in keys:
                    self.moved.add(id(value))
                    changed |= not targets <= keys
                    keys |= targets
        return keys

    def used(self, keys: set[str]) -> bool:
        return any(isinstance(n, (ast.Name, ast.Attribute)) and isinstance(n.ctx, ast.Load)
                   and holder_key(n) in keys and id(n) not in self.moved for n in self.nodes)

    def is_kernel_call(self, call: ast.Call) -> bool:
        func = call.func.value if isinstance(call.func, ast.Subscript) else call.func  # kernel[grid](...)
        if self.is_factory(call) or holder_key(func) in self.wrappers | self.jitted:
            return True
        if not isinstance(func, ast.Attribute):
            return False
        return func.attr in self.exported or holder_key(func.value) in self.holders

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
            for const in (c for name, pos in places for c in self.strings(call_arg(call, name, pos))):
                text = cast(str, const.value)  # strings() yields string constants only
                for match in pattern.finditer(text):
                    yield const.lineno + text.count("\n", 0, match.start()), match.group(0)

    def imports(self) -> Iterator[tuple[str, int]]:
        """Every module or name imported, statically or through __import__ / importlib.import_module."""
        for node in self.nodes:
            if isinstance(node, ast.Import):
                yield from ((a.name, node.lineno) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                yield node.module, node.lineno
                yield from ((f"{node.module}.{a.name}", node.lineno) for a in node.names)
            elif isinstance(node, ast.Call) and node.args and (name := const_str(node.args[0])):
                if calls_builtin(node, "__import__") or self.qual(node.func) == "importlib.import_module":
                    yield name, node.lineno

    def uses(self, prefixes: Iterable[str]) -> Iterator[tuple[str, int]]:
        for node in self.nodes:
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                name = self.qual(node)
                if name is not None and under(name, prefixes):
                    yield name, node.lineno


# ---- data flow inside one function (what the caching check follows) ----------------------------------------------
def copies_values(node: ast.AST, names: set[str]) -> bool:
    """Whether an expression carries values of `names`; shape, device and dtype reads do not."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Attribute) and node.attr in METADATA:
            continue
        if isinstance(node, ast.Call) and (holder_key(node.func) or getattr(node.func, "attr", "")) in METADATA:
            continue
        if isinstance(node, ast.Name) and node.id in names:
            return True
        stack += ast.iter_child_nodes(node)
    return False


def writes(fn: Function) -> Iterator[tuple[list[ast.expr], ast.AST, int]]:
    """(targets, value, line) of every assignment-like statement in a function, mutator calls included."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            yield node.targets, node.value, node.lineno
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
            yield [node.target], node.value, node.lineno
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            yield [node.target], node.iter, node.lineno
        elif isinstance(node, ast.Call) and isinstance(f := node.func, ast.Attribute) and f.attr in MUTATORS:
            yield [f.value], ast.Tuple(elts=call_args(node)), node.lineno


def input_derived(fn: Function) -> set[str]:
    """The function's arguments and the local names whose values are computed from them."""
    a = fn.args
    names = {x.arg for x in [*a.posonlyargs, *a.args[1:], *a.kwonlyargs, a.vararg, a.kwarg] if x}
    changed = True
    while changed:
        new = {t.id for targets, value, _ in writes(fn) if copies_values(value, names)
               for t in flat_targets(targets) if isinstance(t, ast.Name)}
        changed = not new <= names
        names |= new
    return names


def self_attr(node: ast.AST) -> str | None:
    """'cache' for `self.cache`, `self.cache[k]` or `self.cache.field`."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Attribute) and holder_key(node):
            return node.attr
        node = node.value
    return None
