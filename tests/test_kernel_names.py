"""Which GPU kernels a solution declares, and which profiled kernels are its own, per kernel DSL (no GPU needed:
the profiled names below are the ones each DSL gives, read off their compilers: TileLang 0.1.15's generated CUDA
source, CuTe DSL 4.3's name mangling)."""

from pathlib import Path

import pytest

from kbench.judge.checks import kernel_names, static_checks
from kbench.judge.checks.kernel_names import DeclaredKernel

ROOT = Path(__file__).resolve().parent.parent

TILELANG = '''
import tilelang
import tilelang.language as T
from tilelang import language as TL

@tilelang.jit
def make(n):
    @T.prim_func
    def fused(x: T.Tensor((n,), "float32")):
        pass

    @TL.prim_func
    def other(x: T.Tensor((n,), "float32")):
        pass
    return fused
'''

CUTE = '''
import cutlass
import cutlass.cute as cute
from cutlass import cute as c2

@cute.kernel
def scale(x: cute.Tensor):
    pass

@c2.kernel
def shift(x: cute.Tensor):
    pass

@cute.jit
def launch(x: cute.Tensor):
    scale(x).launch(grid=(1, 1, 1), block=(32, 1, 1))
'''


def test_tilelang_prim_funcs_are_kernels_named_after_them_with_kernel_appended():
    kernels = kernel_names.declared(TILELANG)
    assert kernels == {DeclaredKernel("fused", "tilelang"), DeclaredKernel("other", "tilelang")}
    assert kernel_names.is_own("fused_kernel", kernels)
    assert kernel_names.is_own("void other_kernel(float*)", kernels)
    assert not kernel_names.is_own("fused", kernels)  # a TileLang kernel is never named like its function
    assert not kernel_names.is_own("unfused_kernel", kernels)
    assert not kernel_names.is_own("fused_kernel_extra", kernels)
    assert "make" not in kernel_names.declared_kernels(TILELANG)  # @tilelang.jit builds kernels: it is not one


def test_cute_kernels_carry_cutes_prefix_and_their_mangled_arguments():
    kernels = kernel_names.declared(CUTE)
    assert kernels == {DeclaredKernel("scale", "cute"), DeclaredKernel("shift", "cute")}  # @cute.jit is host code
    assert kernel_names.is_own("kernel_cutlass_scale_0", kernels)
    assert kernel_names.is_own("kernel_cutlass_shift_Float32_128_1", kernels)
    assert kernel_names.is_own("kernel_cutlass_scale_tensorptrf32gmemalign16o1_tensorptrf32gmemal", kernels)  # H100
    assert not kernel_names.is_own("scale_kernel", kernels)
    assert not kernel_names.is_own("kernel_cutlass_scaled_0", kernels)
    assert not kernel_names.is_own("void at::native::vectorized_elementwise_kernel<4, scale>", kernels)


def test_cuda_and_triton_names_keep_their_rules():
    source = 'import triton\n@triton.jit\ndef tri(x):\n    pass\nCUDA = "__global__ void cu(float* x) {}"\n'
    kernels = kernel_names.declared(source)
    assert kernels == {DeclaredKernel("tri", "triton"), DeclaredKernel("cu", "cuda")}
    assert kernel_names.is_own("tri_0d1d", kernels) and kernel_names.is_own("cu(float*)", kernels)
    assert not kernel_names.is_own("tri_kernel", kernels) and not kernel_names.is_own("cuda_copy", kernels)


def test_a_decorator_of_another_library_with_the_same_last_name_declares_nothing():
    source = "import numba\nfrom mylib import kernel\n@kernel\ndef a(x):\n    pass\n@numba.jit\ndef b(x):\n    pass\n"
    assert kernel_names.declared(source) == set()


@pytest.mark.parametrize("name", ["tilelang_fused", "cute_fused"])
def test_the_shipped_dsl_solutions_declare_their_kernel_and_raise_no_static_flag(name):
    source = (ROOT / "solutions" / "conv3d_gelu" / f"{name}.py").read_text()
    assert len(kernel_names.declared(source)) == 1
    assert static_checks.analyze(source) == ()


def test_a_dsl_source_without_any_kernel_is_flagged_plain_pytorch():
    source = "import tilelang\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
    assert [f.code for f in static_checks.analyze(source)] == ["no_custom_kernel"]
