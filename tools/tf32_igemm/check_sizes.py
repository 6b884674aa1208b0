"""On a GPU: a `tf32_igemm` solution against its reference at odd channel counts and sizes.

kbench checks every solution at the problem's full and small size. These kernels also have paths that those sizes
never take: input channels that are not a multiple of 8, more than 64 output channels (two channel blocks),
tiles cut by the output edge. This script runs them at such sizes and prints the max abs error and kbench's verdict
(`kbench.judge.checks.comparison.compare`) at the problem's own tolerance. A development aid, not a benchmark (it times nothing).

    python tools/tf32_igemm/check_sizes.py convtranspose3d_softmax conv3d_gelu
    python tools/tf32_igemm/check_sizes.py --file SCRATCH/tf32_variant.py convtranspose3d_softmax

Exit status 1 if any case is outside the tolerance or raises.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kbench.judge.checks.comparison import compare  # noqa: E402
from kbench.problems.discovery import load_problem_dir  # noqa: E402

# problem: [(constructor arguments, input shape[, "nan"])]; None, None: the problem's own sizes. "nan": some inputs
# are NaN, among them the GPU's own NaN (0x7fffffff), whose TF32 rounding needs care (cuda/tma.cuh, tf32_a).
CASES = {
    "conv3d_gelu": [(None, None), ([5, 40, 3, (40, 1, 1, 1)], (2, 5, 7, 13, 37)),
                    ([16, 80, 3, (80, 1, 1, 1)], (1, 16, 5, 9, 70))],
    "conv3d_logsumexp": [(None, None), ([5, 24, 3, 1, 1], (2, 5, 7, 13, 37)), ([3, 64, 3, 1, 0], (1, 3, 9, 11, 66)),
                         # padding 2 and 3: input windows that start 2 and 1 widths before a 16-byte boundary
                         ([8, 64, 3, 1, 2], (1, 8, 4, 9, 21)), ([16, 40, 3, 1, 3], (2, 16, 3, 6, 30)),
                         ([12, 64, 3, 1, 1], (2, 12, 6, 10, 36), "nan")],
    "convtranspose3d_softmax": [(None, None), ([12, 20, 3, 2, 1, 1], (2, 12, 5, 7, 9)),
                                ([8, 64, 3, 2, 1, 0], (1, 8, 4, 5, 40)),
                                # 64 channels, output width a multiple of 4 (TMA-stored), every tile cut by an edge
                                ([20, 64, 3, 2, 1, 1], (3, 20, 3, 5, 10)),
                                # padding 0 and 3: input windows that do not start on a 16-byte boundary
                                ([8, 64, 3, 2, 0, 1], (2, 8, 4, 6, 9)), ([8, 64, 3, 2, 3, 1], (1, 8, 5, 6, 12)),
                                ([20, 64, 3, 2, 1, 1], (3, 20, 3, 5, 10), "nan")],
    "convtranspose3d_layernorm": [(None, None), ([12, 48, 4, 2, 1, True, 1e-5, 0.5], (2, 12, 3, 5, 24)),
                                  ([32, 40, 4, 2, 1], (1, 32, 2, 3, 20)),
                                  ([12, 64, 4, 2, 1, True, 1e-5, 0.5], (2, 12, 3, 5, 32), "nan")],
}


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(problem: str, solution: Path) -> bool:
    spec = load_problem_dir(ROOT / "problems" / problem)
    ref = _module(spec.path, f"ref_{problem}")
    sol = _module(solution, f"sol_{problem}")
    ok_all = True
    for init, shape, *marks in CASES[problem]:
        args = init if init is not None else ref.get_init_inputs()
        try:
            torch.manual_seed(0)
            reference = ref.Model(*args).cuda()
            candidate = sol.ModelNew(*args).cuda()
            candidate.load_state_dict(reference.state_dict())
            inputs = ([t.cuda() for t in ref.get_inputs()] if shape is None
                      else [torch.rand(*shape, device="cuda")])
            if "nan" in marks:
                flat = inputs[0].view(-1)
                flat.view(torch.int32)[::997] = 0x7FFFFFFF  # the GPU's own NaN
                flat[500::1009] = float("nan")  # 0x7fc00000
            with torch.no_grad():
                want, got = reference(*inputs), candidate(*[t.clone() for t in inputs])
            ok, figures = compare(got, want, spec.atol, spec.rtol)
            detail = f"max_abs_err={figures['max_abs_err']:.3g}" if ok else figures.get("message", "")
            if marks:  # compare() requires NaN exactly where the reference has NaN
                detail += f" (reference NaNs: {int(torch.isnan(want).sum())} of {want.numel()})"
            print(f"{problem} init={args} x={tuple(inputs[0].shape)}{' with NaNs' if marks else ''} "
                  f"out={tuple(got.shape)} {detail} "
                  f"{'ok' if ok else 'FAILED'}", flush=True)
        except Exception as exc:  # a development aid: report and go on with the next case
            ok = False
            print(f"{problem} init={args} FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        ok_all = ok_all and ok
    return ok_all


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="+", choices=sorted(CASES))
    parser.add_argument("--file", type=Path, help="solution file (default: solutions/PROBLEM/tf32_igemm.py)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    files = {p: args.file or ROOT / "solutions" / p / "tf32_igemm.py" for p in args.problems}
    missing = [str(f) for f in files.values() if not f.is_file()]
    if missing:
        print(f"no such solution file: {', '.join(missing)}", file=sys.stderr)
        return 2
    results = [check(p, f) for p, f in files.items()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
