"""The tf32_igemm solutions: shipped files match their generator, whose fragments compile alone and whose templates
parse; the parity-class split they rely on is exact."""

import importlib.util
import itertools
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kbench.system import toolkit
from tests.conftest import ROOT

TOOL = ROOT / "tools" / "tf32_igemm"


def test_shipped_tf32_igemm_files_are_what_the_generator_writes():
    result = subprocess.run([sys.executable, str(TOOL / "assemble.py"), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _defined_names(body: str) -> set[str]:
    """Names a fragment defines at namespace level: functions, kernels, structs, aliases, constants."""
    names = set()
    for line in body.splitlines():
        if m := re.match(r"(?:struct|using) (\w+)", line):
            names.add(m.group(1))
        elif line.startswith("constexpr "):
            names.update(re.findall(r"(\w+) =", line.split("//")[0]))
        elif re.match(r"[A-Za-z_]", line) and not line.startswith(("template", "namespace")):
            names.update(n for n in re.findall(r"(\w+)\(", line)[:1] if n != "__launch_bounds__")
    return names


@pytest.mark.parametrize("problem", ["conv3d_gelu", "conv3d_logsumexp", "convtranspose3d_layernorm",
                                     "convtranspose3d_softmax"])
def test_a_shipped_file_carries_only_fragment_code_its_kernels_use(problem):
    """Every name a carried fragment defines is used elsewhere in the file (comments aside): what only other
    problems use belongs in another fragment, or in its user's .cu."""
    sys.path.insert(0, str(TOOL))
    import assemble

    source = assemble.parse(TOOL / "cuda" / f"{problem}.cu")
    code = re.sub(r"//[^\n]*", "", assemble.combine(source))
    unused = {f"{fragment.name}: {name}" for fragment in assemble.fragments_of(source)
              for name in _defined_names(fragment.body) if len(re.findall(rf"\b{name}\b", code)) < 2}
    assert not unused, sorted(unused)


def _compile_alone(nvcc: Path, header: Path, tmp: Path) -> str:
    """nvcc's front end over a translation unit that includes header and nothing else ('' if it compiles). -cuda
    stops after the full C++/CUDA semantic check (cudafe++): a fifth of a full build, which torch's headers make
    long."""
    unit = tmp / f"{header.stem}.cu"
    unit.write_text(f'#include "{header}"\n')
    torch_include = Path(torch.__file__).parent / "include"
    cmd = [str(nvcc), "-std=c++20", "-gencode=arch=compute_90a,code=sm_90a", "-isystem", str(torch_include),
           "-isystem", str(torch_include / "torch" / "csrc" / "api" / "include"), "-cuda", str(unit),
           "-o", str(tmp / f"{header.stem}.ii")]
    result = subprocess.run(cmd, capture_output=True, text=True)
    return "" if result.returncode == 0 else f"{header.name}:\n{result.stderr[-3000:]}"


@pytest.mark.slow
def test_each_cuda_fragment_compiles_on_its_own(tmp_path):
    """Every header carries its own includes and namespace: included alone, it compiles (sm_90a)."""
    cuda_home = toolkit.find_cuda_home()
    if cuda_home is None:
        pytest.skip("no CUDA toolkit (nvcc) found: set CUDA_HOME to compile the tf32_igemm fragments")
    headers = sorted((TOOL / "cuda").glob("*.cuh"))
    assert headers
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        errors = [e for e in pool.map(lambda h: _compile_alone(cuda_home / "bin" / "nvcc", h, tmp_path), headers) if e]
    assert not errors, "\n".join(errors)


def test_tf32_igemm_templates_are_python_that_ruff_parses():
    """The templates are linted as the Python they are (syntax errors, undefined names, unused imports)."""
    ruff = shutil.which("ruff")
    if ruff is None and importlib.util.find_spec("ruff") is not None:
        from ruff.__main__ import find_ruff_bin

        ruff = find_ruff_bin()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install ruff) to lint the tf32_igemm templates")
    templates = sorted(str(p) for p in (TOOL / "templates").glob("*.py"))
    assert len(templates) == 4
    result = subprocess.run([ruff, "check", "--no-cache", "--select", "E9,F", *templates], capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _by_parity_classes(x, w, bias, pad, out_pad):
    """ConvTranspose3d (stride 2) as the kernels compute it: output 2j + p of each dimension gets input j + s + dmin
    through tap k = p + pad - 2 (s + dmin), for the slots s where that tap exists; one plain correlation per class."""
    ks = w.shape[2]
    deltas = [(p + pad - k) // 2 for p in (0, 1) for k in range(ks) if (p + pad - k) % 2 == 0]
    dmin, slots = min(deltas), max(deltas) - min(deltas) + 1
    n, _, d, h, wd = x.shape
    size = [(s - 1) * 2 - 2 * pad + ks + out_pad for s in (d, h, wd)]
    out = torch.empty(n, w.shape[1], *size, dtype=x.dtype)
    for cls in itertools.product((0, 1), repeat=3):
        sub = torch.zeros(w.shape[1], w.shape[0], slots, slots, slots, dtype=x.dtype)
        for slot in itertools.product(range(slots), repeat=3):
            taps = [p + pad - 2 * (s + dmin) for p, s in zip(cls, slot)]
            if all(0 <= k < ks for k in taps):
                sub[:, :, slot[0], slot[1], slot[2]] = w[:, :, taps[0], taps[1], taps[2]].t()
        extent = [(size[i] - cls[i] + 1) // 2 for i in range(3)]  # j with 2j + p inside the output
        padded = F.pad(x, [-dmin, slots, -dmin, slots, -dmin, slots])
        y = F.conv3d(padded, sub)[:, :, :extent[0], :extent[1], :extent[2]]
        out[:, :, cls[0]::2, cls[1]::2, cls[2]::2] = y + bias.view(1, -1, 1, 1, 1)
    return out


@pytest.mark.parametrize("ks,pad,out_pad", [(3, 1, 1), (3, 1, 0), (4, 1, 0), (2, 0, 0)])
def test_stride_2_transposed_convolution_is_eight_parity_class_convolutions(ks, pad, out_pad):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 4, 5, dtype=torch.float64)
    w = torch.randn(5, 6, ks, ks, ks, dtype=torch.float64)
    bias = torch.randn(6, dtype=torch.float64)
    expected = F.conv_transpose3d(x, w, bias, stride=2, padding=pad, output_padding=out_pad)
    got = _by_parity_classes(x, w, bias, pad, out_pad)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected)
