"""What the candidate's sandbox costs per evaluation: enter() and restrict() timed in fresh processes.

    python bench/sandbox_cost.py [--runs 20]

Each run forks a process (as the judge forks its candidate), which enters the namespaces (kbench.system.sandbox.enter:
unshare, fork, a fresh /proc) and restricts the file system for a plan of a solution in a scratch folder (a private
tmpfs, the solution's folder and a build cache emptied but for their own, everything read-only): it prints the median
and the maximum of each step in ms, and the level got. KBENCH_SANDBOX=on forces it on where an NVIDIA driver is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kbench.system import sandbox  # noqa: E402


def once(scratch: Path) -> tuple[float, float, str]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        start = time.perf_counter()
        level = sandbox.enter()
        entered = time.perf_counter()
        plan = sandbox.Plan(str(scratch / "solutions" / "p" / "s.py"), str(scratch / "cache" / "key"),
                            (str(scratch / "triton"),))
        level = sandbox.restrict(plan) if level == sandbox.NAMESPACES else level
        done = time.perf_counter()
        os.write(write, f"{entered - start} {done - entered} {level}".encode())
        os._exit(0)
    os.close(write)
    data = os.read(read, 200).decode().split()
    os.waitpid(pid, 0)
    os.close(read)
    return float(data[0]), float(data[1]), data[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        for sub in ("solutions/p", "cache/key", "cache/other", "triton"):
            (scratch / sub).mkdir(parents=True)
        (scratch / "solutions" / "p" / "s.py").write_text("x = 1\n")
        (scratch / "solutions" / "p" / "other.py").write_text("y = 2\n")
        seen = [once(scratch) for _ in range(args.runs)]
    enter, restrict = [s[0] * 1e3 for s in seen], [s[1] * 1e3 for s in seen]
    print(f"level {seen[0][2]}; {args.runs} runs; enter median {statistics.median(enter):.2f} ms (max {max(enter):.2f}), "
          f"restrict median {statistics.median(restrict):.2f} ms (max {max(restrict):.2f}), "
          f"together median {statistics.median(e + r for e, r in zip(enter, restrict)):.2f} ms")


if __name__ == "__main__":
    main()
