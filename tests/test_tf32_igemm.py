"""The tf32_igemm solutions: shipped files match their generator; the parity-class split they rely on is exact."""

import itertools
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import ROOT


def test_shipped_tf32_igemm_files_are_what_the_generator_writes():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "tf32_igemm" / "assemble.py"), "--check"],
                            capture_output=True, text=True)
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
