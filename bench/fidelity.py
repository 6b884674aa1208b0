"""Does kbench's median agree with the field's timers? kbench's rows beside the same call timed in one plain process.

    python bench/fidelity.py compare --out OUT [--problem P ...] [--solution S ...] [--cache-dir C] [--backward]
                                     [--problems-dir D] [--solutions-dir D]
    python bench/fidelity.py hypotheses --out OUT [--problem P] [--solution S|eager] [--cache-dir C] [--backward]
                                        [--problems-dir D]
    python bench/fidelity.py protocol --out RUN.json      # per row: regime, median, the judge's excess, warnings
                                                          # (and with KBENCH_JUDGE_BRACKET=1, the GPU bracket's)

`compare` runs `kbench run` (docs/timing.md's protocol, torch.compile off) on the shipped problems, then times every
row again in a fresh plain Python process: kbench's own timer called directly in the row's regime ("one process"),
and Triton's `do_bench` (L2 cleared before each call, calls back to back; its median). It prints per row the three
medians in ms and kbench's ratio to each, and writes them to OUT/fidelity.json.

`hypotheses` takes one call (default: convtranspose3d_softmax's tf32_igemm) and times it with the host-regime timer
(synchronize, flush, events around the call: kbench's timer before the GPU regime) in a child process that the
parent drives one sample at a time, adding one ingredient of kbench's candidate process at a time: the idle gap of a
round, a second process's CUDA work between samples (context switches), the freeze and thaw around each request,
input buffers mapped from the parent, the harness's Python work before the call, one shared CPU core; then all of
them, and all of them in the GPU regime. Each line is the median of 80 samples and its ratio to the plain one.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROBLEMS = ("convtranspose3d_softmax", "conv3d_logsumexp", "convtranspose3d_layernorm", "conv3d_gelu")
SOLUTIONS = ("tf32_igemm", "cuda_fused", "triton_fused")
SAMPLES = 80


def _model(problem: str, solution: str | None, cache: str, backward: bool = False, problems: str = "",
           solutions: str = ""):
    """The problem's reference (solution None) or the solution's ModelNew with the reference's weights, its inputs,
    on the GPU; a solution's extension loads from kbench's build cache. With `backward`, the model wrapped as
    `--backward` wraps it (kbench.judge.backward: forward and backward as one call) and an upstream gradient after
    the inputs. `problems`, `solutions`: the folders (default problems/, solutions/)."""
    import torch

    from kbench.judge.candidate.loading import import_path
    from kbench.system import toolkit

    folder = Path(problems) if problems else ROOT / "problems"
    module = import_path(f"fidelity_{problem}", str(folder / problem / "model.py"))
    init = module.get_init_inputs()
    torch.manual_seed(0)
    with torch.device("cuda"):
        reference = module.Model(*init).cuda()
    model = reference
    if solution is not None:
        path = (Path(solutions) if solutions else ROOT / "solutions") / problem / f"{solution}.py"
        arch = toolkit.arch_list(torch.cuda.get_device_capability())
        key = toolkit.cache_key(path.read_bytes(), torch.__version__, arch)
        os.environ["TORCH_EXTENSIONS_DIR"] = str(Path(cache) / key)
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
        os.environ.setdefault("TRITON_CACHE_DIR", str(Path(cache).parent / "triton"))
        with torch.device("cuda"):
            model = import_path(f"fidelity_{problem}_{solution}", str(path)).ModelNew(*init).cuda()
        own = model.state_dict()
        model.load_state_dict({k: v for k, v in reference.state_dict().items()
                               if k in own and own[k].shape == v.shape}, strict=False)
    torch.manual_seed(1)
    with torch.device("cuda"):
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    if backward:
        from kbench.judge.backward import Gradients

        with torch.no_grad():
            out = reference(*inputs)
        inputs.append(torch.randn(out.shape, dtype=out.dtype, device=out.device))
        model = Gradients(model, reference=solution is None)
    return model, inputs


def one_process(problem: str, solution: str | None, regime: str, cache: str, backward: str = "", problems: str = "",
                solutions: str = "") -> dict[str, float]:
    """Run in a fresh process: the call timed by kbench's timer in `regime` and by do_bench. `backward` non-empty:
    forward and backward as one call, as `--backward` times it."""
    import torch
    import triton.testing

    from kbench.judge.timing.timers import CudaEventTimer

    model, inputs = _model(problem, solution or None, cache, bool(backward), problems, solutions)
    with torch.no_grad():
        fn = lambda: model(*inputs)  # noqa: E731
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        timer = CudaEventTimer(torch.device("cuda"), regime=regime)
        own = [timer.sample(fn)[0] for _ in range(SAMPLES)]
        bench = triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")
    return {"one_process_ms": statistics.median(own) * 1e3, "do_bench_ms": bench}


def _in_child(function: str, *args: str) -> dict[str, float]:
    code = f"import sys, json; sys.path.insert(0, {str(ROOT)!r}); from bench.fidelity import {function}; " \
           f"print('RESULT', json.dumps({function}(*{list(args)!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{function}{args} failed: {done.stderr[-1500:]}")
    return json.loads(lines[-1][len("RESULT "):])


def compare(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "kbench", "run", "--no-compile-baseline", "--no-progress",
               "--results-dir", str(out / "runs"), "--cache-dir", args.cache_dir]
    for p in args.problem:
        command += ["-p", p]
    if len(args.solution) == 1 and len(args.problem) == 1:  # kbench run takes one solution of one problem
        command += ["-s", args.solution[0]]
    if args.backward:
        command += ["--backward"]
    for option, folder in (("--problems-dir", args.problems_dir), ("--solutions-dir", args.solutions_dir)):
        if folder:
            command += [option, folder]
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    subprocess.run(command, check=False, env={**os.environ, "PYTHONPATH": path}, timeout=3000)
    run = json.loads(sorted((out / "runs").glob("*/run.json"))[-1].read_text())
    rows = []
    for e in run["evaluations"]:
        if e["status"] != "correct" or not e.get("timing") or (
                args.solution and e["solution"] not in (*args.solution, "eager")):
            continue
        solution = None if e["solution"] == "eager" else e["solution"]
        regime = e["timing"].get("regime") or "host"
        kbench_ms = statistics.median(e["timing"]["samples"]) * 1e3
        row = {"problem": e["problem"], "solution": e["solution"], "regime": regime, "kbench_ms": kbench_ms,
               **_in_child("one_process", e["problem"], solution or "", regime, args.cache_dir,
                           "backward" if args.backward else "", args.problems_dir, args.solutions_dir)}
        row["vs_one_process"] = kbench_ms / row["one_process_ms"]
        row["vs_do_bench"] = kbench_ms / row["do_bench_ms"]
        rows.append(row)
        print(f"{row['problem']:26s} {row['solution']:13s} {regime:4s} kbench {kbench_ms:8.4f}  one process "
              f"{row['one_process_ms']:8.4f}  do_bench {row['do_bench_ms']:8.4f}  ratios {row['vs_one_process']:.3f} "
              f"{row['vs_do_bench']:.3f}", flush=True)
    (out / "fidelity.json").write_text(json.dumps({"run": run.get("id"), "rows": rows}, indent=1))


# ---- hypotheses: what of the candidate process adds to a host-regime time ---------------------------------------


INGREDIENTS = ("gap", "switch", "freeze", "ipc", "python", "pinned")


def _timed_child(conn, problem: str, solution: str | None, cache: str, pinned: int | None, backward: bool = False,
                 problems: str = "") -> None:
    """The child of `hypotheses`: one sample per request, in the regime the request names, on its own inputs or on
    the inputs the parent shared."""
    import torch

    from kbench.judge.timing.timers import CudaEventTimer
    from kbench.system import procstate

    os.setpgid(0, 0)
    if pinned is not None:
        os.sched_setaffinity(0, {pinned})
    model, own_inputs = _model(problem, solution or None, cache, backward, problems)
    shared = conn.recv()
    timers = {r: CudaEventTimer(torch.device("cuda"), regime=r) for r in ("host", "gpu")}
    expected = procstate.snapshot()
    with torch.no_grad():
        for _ in range(20):
            model(*own_inputs)
        conn.send("ready")
        while True:
            request = conn.recv()
            if request is None:
                return
            regime, ipc, python = request
            if python:
                procstate.restore(expected, "a call")
            inputs = shared if ipc else own_inputs
            conn.send(timers[regime].sample(lambda: model(*inputs))[0])  # noqa: B023 - called at once


def _drive(problem: str, solution: str, cache: str, used: set[str], regime: str, backward: bool = False,
           problems: str = "") -> float:
    """Median ms of SAMPLES samples of the child with the ingredients `used`."""
    import torch
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    core = sorted(os.sched_getaffinity(0))[-1]
    proc = ctx.Process(target=_timed_child, args=(child, problem, solution, cache, core if "pinned" in used else None,
                                                  backward, problems))
    proc.start()
    reference, inputs = _model(problem, None, cache, backward, problems)
    parent.send([x.clone() for x in inputs])
    assert parent.recv() == "ready"
    if "pinned" in used:
        os.sched_setaffinity(0, {core})
    times = []
    try:
        with torch.no_grad():
            for _ in range(SAMPLES + 5):
                if "switch" in used:
                    reference(*inputs)  # the judge's own call in every round: a context switch before the sample
                    torch.cuda.synchronize()
                if "gap" in used:
                    time.sleep(0.002)
                if "freeze" in used:
                    os.killpg(proc.pid, signal.SIGCONT)
                parent.send((regime, "ipc" in used, "python" in used))
                times.append(parent.recv())
                if "freeze" in used:
                    os.killpg(proc.pid, signal.SIGSTOP)
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
        parent.send(None)
        proc.join(30)
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return statistics.median(times[5:]) * 1e3


def hypotheses(args: argparse.Namespace) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    problem, solution = args.problem[0], (args.solution or ["tf32_igemm"])[0]
    solution = "" if solution == "eager" else solution  # the reference itself in the child
    plans = [("plain", set(), "host")] + [(f"+ {i}", {i}, "host") for i in INGREDIENTS] + [
        ("all", set(INGREDIENTS), "host"), ("all, GPU regime", set(INGREDIENTS), "gpu"),
        ("plain, GPU regime", set(), "gpu")]
    results = {}
    for name, used, regime in plans:
        results[name] = _drive(problem, solution, args.cache_dir, used, regime, args.backward, args.problems_dir)
        base = results["plain"]
        print(f"{problem}/{solution} {name:22s} {results[name]:8.4f} ms  x{results[name] / base:.3f}", flush=True)
    record = {"problem": problem, "solution": solution, "ms": results}
    (out / "hypotheses.json").write_text(json.dumps(record, indent=1))


def protocol(args: argparse.Namespace) -> None:
    """Per row of a run file: its regime, median, the judge's excess over it against the calibration's, warnings."""
    run = json.loads(Path(args.out).read_text())
    for e in run["evaluations"]:
        t = e.get("timing") or {}
        figures = (e.get("diagnostics") or {}).get("protocol") or {}
        samples, judge = t.get("samples", []), t.get("judge_samples", [])
        excess = statistics.median([j - s for j, s in zip(judge, samples)]) * 1e3 if judge else float("nan")
        cal = figures.get("calibration_p50_s")
        parts = {k: round(v * 1e3, 4) for k, v in figures.items()
                 if k.endswith("excess_s") and isinstance(v, (int, float))}
        bracket = sorted(figures.get("bracket_excess_s") or [])
        if bracket:  # KBENCH_JUDGE_BRACKET=1: the judge's GPU bracket less the reported time (us), and calibration's
            cal_bracket = figures.get("calibration_bracket_p50_s")
            parts["bracket_p10_p50_p90_us"] = tuple(round(bracket[int(q * (len(bracket) - 1))] * 1e6, 1)
                                                    for q in (0.1, 0.5, 0.9))
            parts["calibration_bracket_us"] = round(cal_bracket * 1e6, 1) if cal_bracket else None
        print(f"{e['problem']:26s} {e['solution']:14s} {e['status']:8s} {t.get('regime', ''):4s} "
              f"median {statistics.median(samples) * 1e3 if samples else float('nan'):8.4f} ms  excess {excess:7.4f} "
              f"cal {cal * 1e3 if cal else float('nan'):7.4f}  n {len(samples):3d}  "
              f"{' '.join(_code(w) for w in e.get('warnings', []))} {parts or ''} "
              f"witness {figures.get('witness')} retimed {bool(figures.get('retimed'))}")


def _code(warning) -> str:
    """A warning's code, from run.json's {code, message} record."""
    return f"[{warning['code']}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("compare", "hypotheses", "protocol"))
    parser.add_argument("--out", required=True)
    parser.add_argument("-p", "--problem", action="append", default=[])
    parser.add_argument("-s", "--solution", action="append", default=[])
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "kbench" / "extensions"))
    parser.add_argument("--backward", action="store_true", help="forward and backward as one call")
    parser.add_argument("--problems-dir", default="", help="the problems folder (default problems/)")
    parser.add_argument("--solutions-dir", default="", help="compare: the solutions folder (default solutions/)")
    args = parser.parse_args()
    if not args.problem:
        args.problem = list(PROBLEMS) if args.what == "compare" else ["convtranspose3d_softmax"]
    {"compare": compare, "hypotheses": hypotheses, "protocol": protocol}[args.what](args)


if __name__ == "__main__":
    main()
