"""The shipped Triton solutions, checked without a GPU through Triton's interpreter (TRITON_INTERPRET=1 runs each
kernel's program instances on the CPU), and Triton kernels as kbench recognises them: declared kernels for the
own-kernel share, no [no_custom_kernel] flag."""

import importlib.util
import os
import subprocess
import sys

import pytest

from kbench.judge.checks.kernel_names import declared_kernels
from kbench.judge.checks.static_checks import analyze
from tests.conftest import ROOT

SHIPPED = ["conv3d_gelu", "conv3d_logsumexp", "convtranspose3d_layernorm", "convtranspose3d_softmax"]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

CHECK = """
import os, sys
from pathlib import Path
import torch
from kbench.judge.checks.comparison import compare
from kbench.judge.harness import build_reference, input_maker, load_problem
from kbench.judge.candidate.loading import import_path
from kbench.problems.discovery import find_problem
from kbench.wire.jobs import ProblemRef
name = sys.argv[1]
spec = find_problem(name, Path("problems"))
problem = load_problem(ProblemRef(name, str(spec.path), spec.overrides("small")))
reference, init = build_reference(problem, 1, "cpu")
model = import_path("triton_solution", f"solutions/{name}/triton_fused.py").ModelNew(*init)
model.load_state_dict(reference.state_dict())
with torch.no_grad():
    for seed in (1, 2):
        inputs = input_maker(problem, "cpu")(seed)
        ok, figures = compare(model(*inputs), reference(*inputs), spec.atol, spec.rtol)
        assert ok, figures
print("ok", name)
"""


@needs_triton
@pytest.mark.parametrize("problem", SHIPPED)
def test_the_shipped_triton_solution_is_correct_under_the_interpreter(problem):
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHECK, problem], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and f"ok {problem}" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize("problem", SHIPPED)
def test_triton_kernels_are_declared_kernels_and_raise_no_custom_kernel_flag(problem):
    source = (ROOT / "solutions" / problem / "triton_fused.py").read_text()
    assert declared_kernels(source), "its @triton.jit function names its GPU kernel"
    assert "no_custom_kernel" not in {f.code for f in analyze(source)}


def test_triton_kernel_names_come_from_the_decorated_functions_only():
    source = '''
import triton
import triton.language as tl
from triton import jit

@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr):
    pass

@jit
def bare(x_ptr):
    pass

@torch.jit.script
def scripted(x):
    return x

def helper():
    pass

CUDA = "__global__ void cuda_kernel(float* x) {}"
'''
    assert declared_kernels(source) == {"tuned", "bare", "cuda_kernel"}


@pytest.mark.parametrize("module, extra", [("tilelang", "tilelang"), ("cutlass.cute", "cute")])
def test_a_solution_in_a_missing_kernel_dsl_is_a_load_error_naming_the_extra(tmp_path, module, extra):
    from kbench.judge.candidate.loading import load_solution
    from kbench.judge.verdict import Verdict

    if importlib.util.find_spec(module.split(".")[0]) is not None:
        pytest.skip(f"{module} is installed here")
    path = tmp_path / "dsl.py"
    path.write_text(f"import {module}\n\nclass ModelNew:\n    pass\n")
    with pytest.raises(Verdict) as caught:
        load_solution(str(path))
    assert caught.value.status == "load_error"
    assert f"pip install 'kbench[{extra}]'" in caught.value.message
