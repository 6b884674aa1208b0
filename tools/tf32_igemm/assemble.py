"""Write the `tf32_igemm` solutions from one CUDA core, so the core is maintained once.

A solution file must stand alone (the KernelBench contract; kbench's build cache keys on the file's text), so each
`solutions/<problem>/tf32_igemm.py` carries its own copy of `core.cu`: docstring + Python head + CUDA (headers, core,
`tma.cu` for the kernels that stage by TMA, the problem's tail). `tests/test_tf32_igemm.py` checks that the shipped
files are what this script writes.

    python tools/tf32_igemm/assemble.py           # rewrite the shipped solutions
    python tools/tf32_igemm/assemble.py --check   # exit 1 if any shipped file differs

`solutions/conv3d_gelu/tf32_igemm.py` is frozen: it was written by this script from the core of commit c40d399, and
the current core (attempt 5: fragment rounding, 32-bit tile loop, unrolled copies) measured slower for it (3.80 ms
against 3.01 ms, side by side on the H100). Its epilogue was then edited in place to attempt 7's two-pass form (2.79
against 3.09 ms), the same edit as in `gelu_tail.cu`, and its Python head got `PRECISIONS = ("fp32",)` as the
templates did. `--check` pins its hash instead; `gelu_tail.cu` still
assembles with today's core (`python tools/tf32_igemm/assemble.py --print gelu`) for whoever takes it further.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOLUTIONS = HERE.parent.parent / "solutions"
HEADERS = """#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

"""
SHIPPED = {  # problem: file prefix of its docstring, Python head and CUDA tail
    "convtranspose3d_softmax": "softmax",
    "convtranspose3d_layernorm": "ln",
    "conv3d_logsumexp": "lse",
}
FROZEN = {  # problem: sha256 of its shipped file, written by an earlier core and edited (see the docstring)
    "conv3d_gelu": "dfaacf57c5a80a6cc2ebbabd2d93fa3f9b6af88d772a116e1116c0c6f7eccea1",
}


TMA_USERS = {"softmax", "ln", "lse"}  # prefixes whose kernels stage by TMA (tma.cu, Hopper)
WGMMA_USERS = {"lse"}  # prefixes whose kernels multiply by wgmma (wgmma.cu; built for sm_90a alone: see lse_py.txt)
TMA_HEADERS = HEADERS.replace("<torch/extension.h>\n", "<torch/extension.h>\n#include <cuda.h>\n")  # + CUtensorMap


def assemble(prefix: str) -> str:
    tma = prefix in TMA_USERS
    cuda = ((TMA_HEADERS if tma else HEADERS) + (HERE / "core.cu").read_text()
            + ((HERE / "tma.cu").read_text() if tma else "")
            + ((HERE / "wgmma.cu").read_text() if prefix in WGMMA_USERS else "") + (HERE / f"{prefix}_tail.cu").read_text())
    doc = (HERE / f"{prefix}_doc.txt").read_text().rstrip()
    head = (HERE / f"{prefix}_py.txt").read_text().replace("@CUDA@", cuda.rstrip() + "\n")
    return f"{doc}\n\n{head}"


def main() -> int:
    if sys.argv[1:2] == ["--print"]:
        print(assemble(sys.argv[2]), end="")
        return 0
    check = "--check" in sys.argv[1:]
    stale = [str(SOLUTIONS / problem / "tf32_igemm.py") for problem, digest in FROZEN.items()
             if hashlib.sha256((SOLUTIONS / problem / "tf32_igemm.py").read_bytes()).hexdigest() != digest]
    for problem, prefix in SHIPPED.items():
        target, text = SOLUTIONS / problem / "tf32_igemm.py", assemble(prefix)
        if check:
            if not target.is_file() or target.read_text() != text:
                stale.append(str(target))
        else:
            target.write_text(text)
    if stale:
        print("out of date (run tools/tf32_igemm/assemble.py; frozen files: restore them from git):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
