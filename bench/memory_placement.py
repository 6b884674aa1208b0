"""Does one call's speed depend on which memory its allocations got? A KernelBench problem's reference, built and
called as kbench's judge does, timed in one process over fresh placements of what it allocates, then in two processes
taking turns on the GPU as the judge and the candidate do.

    python bench/memory_placement.py PROBLEM.py [--draws 60] [--turns 30] [--pool-gib 16]
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python bench/memory_placement.py PROBLEM.py

A draw is the judge's own (kbench.judge.timing.placement.MemoryDraw): every free cached block handed back to the
driver (torch.cuda.empty_cache) and a spacer of a random number of 2 MiB pages (0-255) held in front of what the call
allocates next; the call is then timed (events, L2 flushed before it) twice. In one process each line is: the draw,
the spacer's pages, the two times in ms and the data pointer of the call's first output (the first time includes
what the draw's hand-back makes the call allocate again; only with `--pool-gib` is nothing allocated anew).
With `--pool-gib N` each process first takes one segment of N GiB from the driver and
keeps it: a draw then only moves the spacer inside that segment (nothing is handed back), so the call's memory lies
at another offset of one allocation. In two processes each process's times are printed in turn order with the count
above `--split` ms. On one H200 (2026-11-28) KernelBench level 2's #77 ran its cuDNN kernel in 4.5-5.0 ms or 5.9-6.4 ms,
about half the draws each way, with its output at one of two addresses whatever its speed: where the memory lay
physically decided it. Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbench.judge.timing import placement  # the judge's own draw, which this bench measures


def _built(path: str, pool_gib: int = 0):
    import torch

    from kbench.config.run_config import MathFlags
    from kbench.judge import harness
    from kbench.wire.jobs import ProblemRef

    harness.apply_math_flags(MathFlags())
    if pool_gib:  # one segment the caching allocator keeps and splits for every later allocation
        del_me = torch.empty(pool_gib << 30, dtype=torch.int8, device="cuda")
        del del_me
    torch.set_grad_enabled(False)
    problem = harness.load_problem(ProblemRef("p", path))
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = problem.Model(*problem.get_init_inputs())
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    return model, inputs, torch.empty(256 << 20, dtype=torch.int8, device="cuda")


class Draws:
    """One process's placements and timed calls."""

    def __init__(self, path: str, seed: int, pool_gib: int = 0) -> None:
        import torch

        self.torch = torch
        self.pool = pool_gib > 0
        self.model, self.inputs, self.flush = _built(path, pool_gib)
        self.rng = random.Random(seed)
        self.spacer = None  # --pool-gib: a spacer inside the kept segment
        self.memory = placement.MemoryDraw("cuda")  # else: the judge's draw (kbench.judge.timing.placement)
        self.model(*self.inputs)
        torch.cuda.synchronize()

    def draw(self) -> int:
        pages = placement.spacer_pages(self.rng)
        if not self.pool:
            self.memory.draw(pages)
            return pages
        self.spacer = None  # nothing handed back: the spacer moves inside the kept segment
        self.spacer = self.torch.empty(pages * placement.PAGE_BYTES, dtype=self.torch.int8, device="cuda") if pages \
            else None
        return pages

    def timed(self) -> tuple[float, int]:
        torch = self.torch
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = self.model(*self.inputs)
        end.record()
        torch.cuda.synchronize()
        first = out[0] if isinstance(out, (tuple, list)) else out
        return start.elapsed_time(end), first.data_ptr()


def in_one_process(path: str, draws: int, pool_gib: int, split: float) -> None:
    process = Draws(path, 1, pool_gib)
    slow = 0
    for index in range(draws):
        pages = process.draw()
        (first, ptr), (second, _) = process.timed(), process.timed()
        slow += first > split
        print(f"draw {index:3d}  spacer {pages:3d} pages  {first:7.3f} {second:7.3f} ms  output at {ptr:#x}",
              flush=True)
    print(f"one process: {slow}/{draws} draws above {split} ms", flush=True)


def _turns(path: str, seed: int, pool_gib: int, conn) -> None:
    process = Draws(path, seed, pool_gib)
    while conn.recv():
        process.draw()
        conn.send(process.timed()[0])


def in_two_processes(path: str, turns: int, split: float, pool_gib: int) -> None:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    ends, children = [], []
    for seed in (11, 12):
        here, there = ctx.Pipe()
        child = ctx.Process(target=_turns, args=(path, seed, pool_gib, there))
        child.start()
        ends.append(here)
        children.append(child)
    times: list[list[float]] = [[], []]
    for _ in range(turns):
        for i, end in enumerate(ends):
            end.send(True)
            times[i].append(round(end.recv(), 3))
    for end in ends:
        end.send(False)
    for child in children:
        child.join()
    for i, seen in enumerate(times):
        slow = sum(t > split for t in seen)
        print(f"process {i}: {slow}/{len(seen)} above {split} ms: {json.dumps(seen)}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem")
    parser.add_argument("--draws", type=int, default=60)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--split", type=float, default=5.6, help="ms between the two speeds (#77 on an H200: 5.6)")
    parser.add_argument("--pool-gib", type=int, default=0, help="take one kept segment of N GiB first (0: none)")
    args = parser.parse_args()
    in_one_process(args.problem, args.draws, args.pool_gib, args.split)
    in_two_processes(args.problem, args.turns, args.split, args.pool_gib)


if __name__ == "__main__":
    main()
