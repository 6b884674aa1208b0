"""`kbench run --backward` on honest copies: the four shipped problems and ten KernelBench level-1/2 files.

    python bench/backward_check.py prepare ~/KernelBench/KernelBench OUT     # OUT/problems + OUT/solutions
    kbench run --backward --problems-dir OUT/problems --solutions-dir OUT/solutions
    python bench/backward_check.py table results/<run>/run.json [...]        # per row: verdict and ratios

`prepare` writes, for each of the four shipped problems (problems/<name>/) and for BACKWARD_SAMPLE's KernelBench files
(copied from a checkout: nothing of KernelBench is stored here), an honest solution that is the reference itself
(`class ModelNew(Model): pass`), and copies the shipped forward+backward solution (solutions/conv3d_gelu/
triton_backward.py) beside conv3d_gelu's. An honest copy must be `correct` at 1.00x of eager, forward and backward
timed as one call.

`table` prints per row: problem, solution, status, median ms, vs eager, vs torch.compile and the warnings' codes;
then the honest copies' ratio to eager (median, min, max) and how many of them lie within 1.00 +- 0.03.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("conv3d_gelu", "conv3d_logsumexp", "convtranspose3d_layernorm", "convtranspose3d_softmax")
BACKWARD_SAMPLE = {  # inputs that fit forward and backward twice (judge and candidate) on an 80 GB GPU
    "level1": ["1_Square_matrix_multiplication_", "2_Standard_matrix_multiplication_", "40_LayerNorm",
               "88_MinGPTNewGelu"],
    "level2": ["1_Conv2D_ReLU_BiasAdd", "12_Gemm_Multiply_LeakyReLU", "99_Matmul_GELU_Softmax",
               "43_Conv3d_Max_LogSumExp_ReLU", "9_Matmul_Subtract_Multiply_ReLU", "40_Matmul_Scaling_ResidualAdd"],
}
HONEST = "\n\nclass ModelNew(Model):\n    \"\"\"An honest solution: the reference itself.\"\"\"\n"
SHIPPED_BACKWARD = ("conv3d_gelu", "triton_backward")


def prepare(kernelbench: Path, out: Path) -> None:
    problems, solutions = out / "problems", out / "solutions"
    problems.mkdir(parents=True, exist_ok=True)
    for name in SHIPPED:
        shutil.copytree(ROOT / "problems" / name, problems / name, dirs_exist_ok=True)
        honest = solutions / name / "honest.py"
        honest.parent.mkdir(parents=True, exist_ok=True)
        honest.write_text((ROOT / "problems" / name / "model.py").read_text() + HONEST)
    problem, solution = SHIPPED_BACKWARD
    shutil.copyfile(ROOT / "solutions" / problem / f"{solution}.py", solutions / problem / f"{solution}.py")
    count = len(SHIPPED)
    for level, names in BACKWARD_SAMPLE.items():
        for name in names:
            source = kernelbench / level / f"{name}.py"
            if not source.exists():
                raise SystemExit(f"{source} is missing: is {kernelbench} a KernelBench checkout's KernelBench/ folder?")
            stem = f"{level[-1]}_{name}"
            shutil.copyfile(source, problems / f"{stem}.py")
            honest = solutions / stem / "honest.py"
            honest.parent.mkdir(parents=True, exist_ok=True)
            honest.write_text(source.read_text() + HONEST)
            count += 1
    print(f"{count} problems with honest solutions, and {problem}/{solution}, in {out}")


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def table(paths: list[Path]) -> None:
    sys.path.insert(0, str(ROOT))
    from kbench.results import migrate, storage

    rows = [e for p in paths for e in migrate.upgrade(json.loads(p.read_text()), storage.VERSION)["evaluations"]]
    print("| problem | solution | calls | status | median ms | vs eager | vs compile | warnings |")
    print("|---|---|---|---|---|---|---|---|")
    honest = []
    for e in rows:
        timing = e.get("timing")
        median = f"{timing['median'] * 1e3:.3f}" if timing else "-"
        codes = ", ".join(w["code"] for w in e.get("warnings", ()))
        calls = "fwd+bwd" if e.get("backward") else "fwd"
        print(f"| {e['problem']} | {e['solution']} | {calls} | {e['status']} | {median} | "
              f"{_ratio(e.get('speedup_vs_eager'))} | {_ratio(e.get('speedup_vs_compile'))} | {codes} |")
        if e["solution"] == "honest" and e.get("speedup_vs_eager") is not None:
            honest.append(e["speedup_vs_eager"])
    if honest:
        within = sum(abs(r - 1) <= 0.03 for r in honest)
        print(f"\nhonest copies: {len(honest)} timed, vs eager median {statistics.median(honest):.3f}x, "
              f"min {min(honest):.3f}x, max {max(honest):.3f}x; {within} of {len(honest)} within 1.00 +- 0.03")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("kernelbench", type=Path)
    p.add_argument("out", type=Path)
    t = sub.add_parser("table")
    t.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.kernelbench, args.out)
    else:
        table(args.runs)


if __name__ == "__main__":
    main()
