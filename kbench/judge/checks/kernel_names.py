"""The GPU kernels a solution's source declares, and how each shows up by name in a profile.

A CUDA `__global__` function keeps its name (C++ mangling around it); a Triton kernel is named after its
`@triton.jit` function (older Triton appends `_0d1d...`); TileLang names the kernel of a `@T.prim_func` function
`<name>_kernel`; CuTe DSL names a `@cute.kernel` function `kernel_cutlass_<name>_<mangled arguments>_<n>`.
Read with `ast` and regular expressions; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kbench.judge.checks.pynames import import_aliases, qualname, undecorate

# Decorators that make a Python function a GPU kernel, by the DSL they belong to.
KERNEL_DECORATORS = {"triton.jit": "triton", "tilelang.language.prim_func": "tilelang",
                     "tilelang.prim_func": "tilelang", "cutlass.cute.kernel": "cute"}

# __global__ [qualifiers] void [qualifiers] name( -- __launch_bounds__ may stand before or after the return type.
_QUALIFIERS = r"(?:(?:__launch_bounds__\s*\([^)]*\)|static|inline|__forceinline__|__noinline__|extern\s+\"C\")\s*)*"
_CUDA_KERNEL = re.compile(rf"__global__\s+{_QUALIFIERS}void\s+{_QUALIFIERS}(\w+)\s*\(")

# How the profiler's kernel name carries the declared name, by backend ({} is the escaped name).
_PATTERNS = {"cuda": r"\b{}(\b|_\d)", "triton": r"\b{}(\b|_\d)", "tilelang": r"\b{}_kernel\b",
             "cute": r"\bkernel_cutlass_{}(_|\b)"}


@dataclass(frozen=True)
class DeclaredKernel:
    name: str  # as the source spells it
    backend: str  # cuda, triton, tilelang or cute

    def matches(self, profiled: str) -> bool:
        """Whether a kernel name from the profiler is this kernel."""
        return re.search(_PATTERNS[self.backend].format(re.escape(self.name)), profiled) is not None


def _python_kernels(source: str) -> set[DeclaredKernel]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    aliases = import_aliases(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                backend = KERNEL_DECORATORS.get(qualname(undecorate(decorator), aliases) or "")
                if backend:
                    found.add(DeclaredKernel(node.name, backend))
    return found


def declared(source: str) -> set[DeclaredKernel]:
    """Every kernel the source declares: CUDA __global__ functions in its strings, and DSL kernel functions."""
    return {DeclaredKernel(n, "cuda") for n in _CUDA_KERNEL.findall(source)} | _python_kernels(source)


def declared_kernels(source: str) -> set[str]:
    """The names of the kernels the source declares."""
    return {k.name for k in declared(source)}


def is_own(profiled: str, kernels: set[DeclaredKernel]) -> bool:
    """Whether a profiled kernel is one of the solution's own."""
    return any(k.matches(profiled) for k in kernels)
