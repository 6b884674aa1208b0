"""Static checks: each code fires on a small cheat, not on its near miss nor on the shipped solutions."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from kbench.judge.checks import static_checks
from kbench.judge.checks.static_checks import analyze, SourceFinding as Finding, FINDING_CODES

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "solutions").glob("*/*.py"))

# An honest extension; snippets below append a ModelNew (or a cheat) to it.
HEADER = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <c10/cuda/CUDAStream.h>
__global__ void k(const float* x, float* y, int n) {}
torch::Tensor f(torch::Tensor x) {
    auto y = torch::empty_like(x);
    k<<<1, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), 1);
    return y;
}
"""
CPP = "torch::Tensor f(torch::Tensor x);"
_ext = load_inline(name="k", cpp_sources=CPP, cuda_sources=CUDA, functions=["f"])
'''
MODEL = '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _ext.f(x)
'''


def findings(source: str) -> tuple[Finding, ...]:
    return analyze(dedent(source))


def codes(source: str) -> set[str]:
    return {f.code for f in findings(source)}


def line_of(source: str, marker: str) -> int:
    """1-based number of the first line of `source` (dedented) containing `marker`."""
    return next(i for i, text in enumerate(dedent(source).splitlines(), 1) if marker in text)


def assert_only(source: str, code: str, marker: str | None = None) -> None:
    found = findings(source)
    assert {f.code for f in found} == {code}, found
    if marker is not None:
        assert line_of(source, marker) in {f.line for f in found}, found
    assert all(f.line is None or f"line {f.line}" in f.message for f in found)


def test_honest_header_and_model_are_clean():
    assert analyze(HEADER + MODEL) == ()


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_solutions_have_no_findings(path: Path):
    assert analyze(path.read_text(encoding="utf-8")) == ()


def test_shipped_solutions_exist():
    assert len(SHIPPED) >= 8


def test_syntax_error_gives_no_findings():
    assert analyze("def broken(:\n    pass\n") == ()


def test_every_code_is_listed_and_documented():
    assert len(set(FINDING_CODES)) == len(FINDING_CODES) == 9
    for code in FINDING_CODES:
        assert f"| {code} |" in (static_checks.__doc__ or "")


# no_custom_kernel

def test_plain_pytorch_has_no_custom_kernel():
    src = """
        import torch
        import torch.nn as nn

        class ModelNew(nn.Module):  # here
            def forward(self, x):
                return torch.relu(x)
    """
    assert_only(src, "no_custom_kernel", "# here")


@pytest.mark.parametrize("src", [
    """
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline as li
    ext = li(name="k", cpp_sources="int f();", functions=["f"])
    class ModelNew(nn.Module):
        def forward(self, x):
            return ext.f(x)
    """,
    """
    import torch.nn as nn
    import torch.utils.cpp_extension as cpp
    ext = cpp.load(name="k", sources=["k.cu"])
    class ModelNew(nn.Module):
        def forward(self, x):
            return ext.f(x)
    """,
    """
    import torch, triton
    import triton.language as tl
    @triton.jit
    def relu_kernel(x_ptr, n: tl.constexpr):
        pass
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            relu_kernel[(1,)](x, 4)
            return x
    """,
    """
    import cupy as cp
    import torch
    K = cp.RawKernel(r'extern "C" __global__ void k(float* x) {}', "k")
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            K((1,), (32,), (x.data_ptr(),))
            return x
    """,
], ids=["load_inline_alias", "cpp_extension_load", "triton_jit", "cupy_raw_kernel"])
def test_custom_kernels_in_any_form_are_recognized(src: str):
    assert codes(src) == set()


# kernel_never_called

def test_extension_never_referenced():
    src = HEADER + """
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
    assert_only(src, "kernel_never_called", "_ext = load_inline")


def test_extension_stored_on_self_but_never_used():
    src = HEADER + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.op = _ext
    def forward(self, x):
        return torch.relu(x)
"""
    assert_only(src, "kernel_never_called", "_ext = load_inline")


def test_extension_used_but_no_listed_function_called():
    src = HEADER + """
class ModelNew(nn.Module):
    def forward(self, x):
        print(_ext.__file__)
        return torch.relu(x)
"""
    found = findings(src)
    assert [f.code for f in found] == ["kernel_never_called"]
    assert "none of f is ever called" in found[0].message


def test_build_result_discarded():
    src = """
    import torch
    from torch.utils.cpp_extension import load_inline
    load_inline(name="k", cpp_sources="int f();", functions=["f"])  # here
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return x
    """
    assert_only(src, "kernel_never_called", "# here")


@pytest.mark.parametrize("model", [
    # the seed transcripts' shape: the module object kept on self, called through it
    """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.fused_op = _ext
    def forward(self, x):
        return self.fused_op.f(x)
""",
    """
class ModelNew(nn.Module):
    op = _ext
    def forward(self, x):
        return self.op.f(x)
""",
    """
class ModelNew(nn.Module):
    def forward(self, x):
        return getattr(_ext, "f")(x)
""",
], ids=["self_attribute", "class_attribute", "getattr"])
def test_extension_used_indirectly_is_called(model: str):
    assert codes(HEADER + model) == set()


def test_torch_ops_registration():
    build = """
    import torch
    from torch.utils.cpp_extension import load_inline
    load_inline(name="k", cpp_sources="TORCH_LIBRARY(k, m) {}", is_python_module=False)
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return RESULT
    """
    assert codes(build.replace("RESULT", "torch.ops.k.f(x)")) == set()
    assert codes(build.replace("RESULT", "torch.relu(x)")) == {"kernel_never_called"}


# try_except_fallback

def test_fallback_in_forward():
    src = HEADER + """
class ModelNew(nn.Module):
    def forward(self, x):
        try:  # here
            return _ext.f(x)
        except Exception:
            return torch.relu(x)
"""
    assert_only(src, "try_except_fallback", "# here")


def test_fallback_around_the_build_at_module_level():
    src = """
    import torch
    from torch.utils.cpp_extension import load_inline
    try:  # here
        _ext = load_inline(name="k", cpp_sources="int f();", functions=["f"])
    except Exception:
        _ext = None
    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return _ext.f(x) if _ext is not None else torch.relu(x)
    """
    assert_only(src, "try_except_fallback", "# here")


def test_fallback_through_a_helper_and_through_suppress():
    src = HEADER + """
import contextlib

def _run(x):
    return _ext.f(x)

class ModelNew(nn.Module):
    def _fused(self, x):
        return _run(x)
    def forward(self, x):
        out = torch.relu(x)
        with contextlib.suppress(RuntimeError):  # suppress
            out = self._fused(x)
        try:  # helper
            return _run(x)
        except RuntimeError:
            return out
"""
    found = findings(src)
    assert {f.code for f in found} == {"try_except_fallback"}
    assert {f.line for f in found} == {line_of(src, "# suppress"), line_of(src, "# helper")}


def test_try_unrelated_to_kernels_or_reraising_is_fine():
    src = HEADER + """
import json

try:
    CONFIG = json.loads(open("config.json").read())
except (OSError, ValueError):
    CONFIG = {}

class ModelNew(nn.Module):
    def forward(self, x):
        try:
            return _ext.f(x)
        except RuntimeError as exc:
            raise RuntimeError(f"kernel failed on {tuple(x.shape)}") from exc
"""
    assert codes(src) == set()


# threads

@pytest.mark.parametrize("cheat, marker", [
    ("import threading  # here\n\ndef _bg():\n    threading.Thread(target=print).start()\n", "# here"),
    ("from concurrent.futures import ThreadPoolExecutor  # here\n", "# here"),
    ("import subprocess  # here\n", "# here"),
    ("import os\n\ndef _bg():\n    if os.fork() == 0:  # here\n        pass\n", "# here"),
    ("import torch.multiprocessing as mp  # here\n", "# here"),
])
def test_threads_and_processes(cheat: str, marker: str):
    src = HEADER + cheat + MODEL
    assert_only(src, "threads", marker)


def test_os_without_fork_is_fine():
    src = HEADER + "import os\nN = os.cpu_count()\nP = os.path.join('a', 'b')\n" + MODEL
    assert codes(src) == set()


# new_stream

def test_side_stream_in_python():
    src = HEADER + """
import torch.cuda as tc

class ModelNew(nn.Module):
    def forward(self, x):
        s = tc.Stream()  # created
        with torch.cuda.stream(s):  # entered
            return _ext.f(x)
"""
    found = findings(src)
    assert {f.code for f in found} == {"new_stream"}
    assert {f.line for f in found} == {line_of(src, "# created"), line_of(src, "# entered")}


def test_stream_created_in_kernel_source():
    src = HEADER.replace("auto y = torch::empty_like(x);",
                         "auto y = torch::empty_like(x);\n    cudaStream_t s; cudaStreamCreate(&s);") + MODEL
    assert_only(src, "new_stream", "cudaStreamCreate(&s)")


def test_current_stream_is_fine():
    src = HEADER + """
class ModelNew(nn.Module):
    def forward(self, x):
        torch.cuda.current_stream().synchronize()
        return _ext.f(x)
"""
    assert codes(src) == set()


# precision_downcast

@pytest.mark.parametrize("expr", [
    "_ext.f(x.half())",
    "_ext.f(x.to(torch.float16))",
    "_ext.f(x.to(device=x.device, dtype=torch.bfloat16))",
    "_ext.f(torch.empty(x.shape, dtype=torch.half, device=x.device))",
])
def test_python_downcasts(expr: str):
    src = HEADER + MODEL.replace("_ext.f(x)", expr + "  # here")
    assert_only(src, "precision_downcast", "# here")


def test_half_types_in_kernel_source():
    src = HEADER.replace("__global__ void k(const float* x", "__global__ void k(const __half* x") + MODEL
    assert_only(src, "precision_downcast", "__global__ void k(const __half* x")


def test_tf32_and_lower_matmul_precision():
    src = HEADER + "torch.backends.cuda.matmul.allow_tf32 = True  # flag\n" + \
        "torch.set_float32_matmul_precision('high')  # call\n" + MODEL
    found = findings(src)
    assert {(f.code, f.line) for f in found} == {
        ("precision_downcast", line_of(src, "# flag")), ("monkey_patch", line_of(src, "# flag")),
        ("precision_downcast", line_of(src, "# call")),
    }
    assert codes(HEADER + "torch.set_float32_matmul_precision('highest')\n" + MODEL) == set()


def test_float32_is_not_a_downcast():
    src = HEADER.replace("auto y", "TORCH_CHECK(x.scalar_type() == torch::kFloat32);\n    auto y") + """
class ModelNew(nn.Module):
    def forward(self, x):
        if x.dtype == torch.float16:
            raise TypeError("float32 only")
        return _ext.f(x.float().to(torch.float32).contiguous())
"""
    assert codes(src) == set()


# harness_access

@pytest.mark.parametrize("cheat", [
    "import kbench.execution.worker  # here",
    "from kbench import records  # here",
    "import sys\nREF = sys.modules['__main__']  # here",
    "import inspect\nFRAME = inspect.currentframe()  # here",
    "import gc\nALL = gc.get_objects()  # here",
    "FD = open('/proc/self/fdinfo/3').read()  # here",
    "import os\nOUT = os.environ.get('KBENCH_RESULT_FD')  # here",
    "import os\nDIR = os.environ['TORCH_EXTENSIONS_DIR']  # here",
    "import os\nOUT = os.fdopen(3, 'w')  # here",
    "OUT = open(4, 'w')  # here",
    "OLD = open('results/run.json').read()  # here",
])
def test_harness_access(cheat: str):
    src = HEADER + cheat + "\n" + MODEL
    assert_only(src, "harness_access", "# here")


def test_ordinary_environment_and_files_are_fine():
    ordinary = "import os, sys\nDEV = os.environ.get('CUDA_VISIBLE_DEVICES')\nPY = sys.version_info\n"
    src = HEADER + ordinary + "W = open('weights/w.txt').read()\n" + MODEL
    assert codes(src) == set()


# monkey_patch

@pytest.mark.parametrize("cheat", [
    "torch.cuda.Event = object  # here",
    "import time\ntime.perf_counter = lambda: 0.0  # here",
    "torch.allclose = lambda *a, **k: True  # here",
    "setattr(torch.cuda, 'synchronize', lambda: None)  # here",
    "import torch.nn.functional as F\nF.gelu = torch.relu  # here",
    "import builtins\nbuiltins.print = lambda *a: None  # here",
    "__builtins__['open'] = None  # here",
    "torch.Tensor.__sub__ = lambda a, b: a  # here",
])
def test_monkey_patches(cheat: str):
    src = HEADER + cheat + "\n" + MODEL
    assert_only(src, "monkey_patch", "# here")


def test_own_attributes_are_not_patches():
    src = HEADER + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
    def forward(self, x):
        return _ext.f(x) * self.scale
ModelNew.version = 2
"""
    assert codes(src) == set()


# caching

def test_output_cached_on_self():
    src = HEADER + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._cache = None
    def forward(self, x):
        if self._cache is not None:
            return self._cache
        self._cache = _ext.f(x)  # here
        return self._cache
"""
    assert_only(src, "caching", "# here")


def test_output_cached_in_a_keyed_dict():
    src = HEADER + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cached = {}
    def forward(self, x):
        key = x.data_ptr()
        if key in self.cached:
            return self.cached[key]
        out = _ext.f(x)
        self.cached[key] = out  # here
        return out
"""
    assert_only(src, "caching", "# here")


@pytest.mark.parametrize("cheat", [
    "_LAST = None\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        global _LAST  # here\n"
    "        _LAST = _LAST if _LAST is not None else _ext.f(x)\n        return _LAST\n",
    "_SEEN = {}\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        out = _ext.f(x)\n"
    "        _SEEN[x.shape] = out  # here\n        return out\n",
    "import functools\n@functools.lru_cache(maxsize=None)  # here\ndef run(x):\n    return _ext.f(x)\n"
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        return run(x)\n",
])
def test_module_level_caches(cheat: str):
    src = HEADER + cheat
    assert_only(src, "caching", "# here")


def test_layers_counters_and_lazy_weights_are_not_caching():
    src = HEADER + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)
        self._wt = None
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        if self._wt is None or self._wt.device != x.device:
            self._wt = self.conv.weight.to(x.device).contiguous()
        return _ext.f(self.conv(x)) if self.calls else None
"""
    assert codes(src) == set()


def test_findings_are_sorted_and_deduplicated():
    src = HEADER + "import threading\nimport subprocess\ntorch.cuda.Event = object\n" + MODEL
    found = analyze(src)
    assert [f.code for f in found] == ["threads", "threads", "monkey_patch"]
    assert [f.line for f in found] == sorted(f.line for f in found)
