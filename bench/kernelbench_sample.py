"""KernelBench at its official sizes with honest solutions: prepare a sample, then tabulate a run of it.

    python bench/kernelbench_sample.py prepare ~/KernelBench/KernelBench sample/      # problems/ + solutions/
    kbench run --problems-dir sample/problems --solutions-dir sample/solutions --no-compile-baseline
    python bench/kernelbench_sample.py table results/<run>/run.json                      # the table, per-phase seconds

`prepare` copies the chosen problem files (default: SAMPLE below, 34 problems over levels 1-3: the largest level-1
inputs, scalar-output losses, integer outputs, full level-3 models) and writes for each an honest solution: the
problem's own code with `class ModelNew(Model): pass`. `--level1-all` takes every level-1 file instead. Nothing of
KernelBench is stored in this repository; point `prepare` at a checkout.

`table` prints, per problem: eager ms in the reference's own process and beside the solution (and their ratio), the
solution's ms, peak GPU memory of a reference call and of a solution call, the evaluation's overhead seconds (all but
the timing phase), the verdict and warnings; then the overhead's median and maximum, and per-phase medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

SAMPLE = {
    "level1": [
        "45_Average_Pooling_2D", "39_L2Norm_", "38_L1Norm_", "36_RMSNorm_", "34_InstanceNorm", "23_Softmax",
        "19_ReLU", "76_conv_standard_1D_dilated_strided__", "87_conv_pointwise_2D", "63_conv_standard_2D__square_input__square_kernel",
        "93_masked_cumsum", "51_Argmax_over_a_dimension", "52_Argmin_over_a_dimension", "4_Matrix_vector_multiplication_",
        "94_MSELoss", "95_CrossEntropyLoss", "96_HuberLoss", "98_KLDivLoss", "100_HingeLoss", "99_TripletMarginLoss",
        "1_Square_matrix_multiplication_", "97_ScaledDotProductAttention", "40_LayerNorm",
    ],
    "level2": ["1_Conv2D_ReLU_BiasAdd", "43_Conv3d_Max_LogSumExp_ReLU", "12_Gemm_Multiply_LeakyReLU",
               "34_ConvTranspose3d_LayerNorm_GELU_Scaling", "99_Matmul_GELU_Softmax"],
    "level3": ["20_MobileNetV2", "1_MLP", "9_ResNet18", "43_MinGPTCausalAttention", "35_LSTM", "19_MobileNetV1"],
}
HONEST = "\n\nclass ModelNew(Model):\n    \"\"\"An honest solution: the reference itself.\"\"\"\n"


def prepare(kernelbench: Path, out: Path, level1_all: bool) -> None:
    chosen = ([p.stem for p in sorted((kernelbench / "level1").glob("*.py"))] if level1_all else None)
    picks = {"level1": chosen} if chosen is not None else SAMPLE
    (out / "problems").mkdir(parents=True, exist_ok=True)
    count = 0
    for level, names in picks.items():
        for name in names:
            source = kernelbench / level / f"{name}.py"
            if not source.exists():
                raise SystemExit(f"{source} is missing: is {kernelbench} a KernelBench checkout's KernelBench/ folder?")
            stem = f"{level[-1]}_{name}"  # level1 and level2 share numbers: keep them apart
            shutil.copyfile(source, out / "problems" / f"{stem}.py")
            solution = out / "solutions" / stem / "honest.py"
            solution.parent.mkdir(parents=True, exist_ok=True)
            solution.write_text(source.read_text() + HONEST)
            count += 1
    print(f"{count} problems and honest solutions in {out}")


def _ms(timing: dict | None) -> float | None:
    return timing["median"] * 1e3 if timing else None


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**30:.2f}"


def _run_file(path: Path) -> dict:
    """A run.json as the current version has it (older files migrated: kbench.results.migrate)."""
    from kbench.results import migrate, storage

    return migrate.upgrade(json.loads(path.read_text()), storage.VERSION)


def table(paths: list[Path]) -> None:
    rows = [e for p in paths for e in _run_file(p)["evaluations"]]
    eager = {r["problem"]: r for r in rows if r["solution"] == "eager"}
    solutions = [r for r in rows if r["solution"] not in ("eager", "torch.compile")]
    print("| problem | eager ms (own process) | eager ms (beside solution) | ratio | solution ms | vs eager | regime "
          "| peak GiB ref / sol | overhead s | verdict | warnings |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    overheads, phases = [], {}
    for row in sorted(solutions, key=lambda r: r["problem"]):
        ref = eager.get(row["problem"], {})
        own, beside = _ms(ref.get("timing")), _ms(row.get("eager_timing"))
        peaks = row.get("peak") or {}
        ref_peak = (ref.get("peak") or {}).get("reference")
        spent = row.get("phases") or {}
        overhead = row.get("seconds", 0.0) - spent.get("timing", 0.0)
        if row["status"] in ("correct", "suspect", "incorrect"):
            overheads.append(overhead)
            for name, seconds in spent.items():
                phases.setdefault(name, []).append(seconds)
        codes = sorted({w["code"] for w in row.get("warnings", []) + ref.get("warnings", [])})
        ratio = beside / own if own and beside else None
        regime = (row.get("timing") or {}).get("regime", "")
        print(f"| {row['problem']} | {_fmt(own)} | {_fmt(beside)} | {_fmt(ratio, '.3f')} | {_fmt(_ms(row.get('timing')))} "
              f"| {_fmt(row.get('speedup_vs_eager'), '.3f')} | {regime} "
              f"| {_gib(ref_peak)} / {_gib(peaks.get('solution'))} | {overhead:.1f} | {row['status']} "
              f"| {', '.join(codes)} |")
    ratios = sorted(r["speedup_vs_eager"] for r in solutions if r.get("speedup_vs_eager"))
    if ratios:
        print(f"\nhonest copies against the eager beside them: {ratios[0]:.3f}-{ratios[-1]:.3f}x, median "
              f"{statistics.median(ratios):.3f}x")
    bad = [r for r in solutions if r["status"] != "correct"]
    untimed = [p for p, r in eager.items() if not r.get("timing")]
    print(f"\n{len(solutions)} honest solutions: {len(solutions) - len(bad)} correct"
          + "".join(f"; {r['problem']}: {r['status']} {r.get('message', '')[:160]}" for r in bad))
    print(f"references without a time: {', '.join(untimed) or 'none'}")
    if overheads:
        print(f"evaluation overhead (all but timing): median {statistics.median(overheads):.2f} s, "
              f"max {max(overheads):.2f} s over {len(overheads)}")
        print("per-phase medians: " + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in phases.items()))
    ratios = [_ms(r.get("eager_timing")) / _ms(eager[r["problem"]]["timing"]) for r in solutions
              if r.get("eager_timing") and eager.get(r["problem"], {}).get("timing")]
    if ratios:
        print(f"eager beside / own process: median {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.3f}-{max(ratios):.3f}")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="copy a sample of KernelBench problems and write honest solutions")
    prep.add_argument("kernelbench", type=Path, help="a KernelBench checkout's KernelBench/ folder (level1/ ...)")
    prep.add_argument("out", type=Path)
    prep.add_argument("--level1-all", action="store_true", help="every level-1 problem instead of the sample")
    tab = sub.add_parser("table", help="the markdown table of one or more run.json files of a prepared sample")
    tab.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.kernelbench, args.out, args.level1_all)
    else:
        table(args.runs)


if __name__ == "__main__":
    main(sys.argv[1:])
