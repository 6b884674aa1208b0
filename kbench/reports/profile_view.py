"""`kbench profile`'s kernels as the terminal shows them (a table per model, the sums and their ratio) and as the HTML
report's section on profiles."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import jinja2
import markupsafe
from tabulate import tabulate

from kbench.results.profiles import KernelProfile, ModelProfile, profiles_of

NAME_WIDTH = 48  # characters of a kernel's name in the terminal (the HTML report and run.json keep it whole)
TEMPLATE = Path(__file__).with_name("templates") / "profiles.html.j2"

# (header, what it means, the figure as text): the columns of both tables, in order; docs/commands.md explains each.
Column = tuple[str, str, Callable[[KernelProfile], str]]


def _num(value: float | None, pattern: str) -> str:
    return "" if value is None else pattern.format(value)


COLUMNS: tuple[Column, ...] = (
    ("ms", "duration of the kernel (gpu__time_duration)", lambda k: f"{k.duration_ns / 1e6:.4f}"),
    ("DRAM GB/s", "achieved DRAM bandwidth", lambda k: _num(k.dram_bytes_per_s and k.dram_bytes_per_s / 1e9, "{:.0f}")),
    ("DRAM %", "DRAM throughput, % of peak", lambda k: _num(k.dram_pct, "{:.1f}")),
    ("mem %", "busiest memory unit (DRAM, L2, L1), % of peak", lambda k: _num(k.memory_pct, "{:.1f}")),
    ("SM %", "SM throughput (busiest pipe), % of peak", lambda k: _num(k.sm_pct, "{:.1f}")),
    ("tensor %", "tensor-core pipe active, % of peak", lambda k: _num(k.tensor_pct, "{:.1f}")),
    ("occupancy %", "achieved occupancy: active warps, % of the SM's maximum",
     lambda k: _num(k.occupancy_pct, "{:.1f}")),
    ("regs", "registers per thread", lambda k: _num(k.registers_per_thread, "{}")),
    ("smem KiB", "shared memory per block (static + dynamic)",
     lambda k: _num(k.shared_mem_per_block and k.shared_mem_per_block / 1024, "{:.1f}")),
    ("block", "threads per block", lambda k: _num(k.block_size, "{}")),
    ("grid", "blocks in the grid", lambda k: _num(k.grid_size, "{}")),
    ("limit", "the roofline limit it sits closest to", lambda k: str(k.limit)),
)


def short_name(name: str, width: int = NAME_WIDTH) -> str:
    """A kernel's name without its leading `void`, cut to `width` characters."""
    name = name.removeprefix("void ")
    return name if len(name) <= width else name[: width - 1] + "…"


def model_table(profile: ModelProfile) -> str:
    """One model's kernels, in launch order, and a total line."""
    rows = [[str(i), short_name(k.name), *(cell(k) for _, _, cell in COLUMNS)] for i, k in enumerate(profile.kernels)]
    rows.append(["", f"total: {len(profile.kernels)} kernel(s)", f"{profile.total_ns / 1e6:.4f}",
                 *[""] * (len(COLUMNS) - 1)])
    return tabulate(rows, headers=["#", "kernel", *(h for h, _, _ in COLUMNS)], tablefmt="simple",
                    disable_numparse=True, colalign=("right", "left", *["right"] * (len(COLUMNS) - 1), "left"))


def ratio(profiles: Sequence[ModelProfile]) -> float | None:
    """The last model's summed kernel time over the first's (the solution's over eager's)."""
    if len(profiles) < 2 or not profiles[0].total_ns:
        return None
    return profiles[-1].total_ns / profiles[0].total_ns


def terminal(profiles: Sequence[ModelProfile]) -> str:
    """Every model's table, its sum of kernel durations, and the ratio of the sums."""
    parts = []
    for p in profiles:
        parts.append(f"{p.problem} / {p.solution}: sum of kernel durations {p.total_ns / 1e6:.4f} ms\n{model_table(p)}")
    found = ratio(profiles)
    if found is not None:
        parts.append(f"{profiles[-1].solution} / {profiles[0].solution}: {found:.3f}× the summed kernel time")
    return "\n\n".join(parts)


def section(doc: Mapping[str, object]) -> markupsafe.Markup:
    """The HTML report's section on a run's profiles; empty where the run has none."""
    profiles = profiles_of(doc)
    if not profiles:
        return markupsafe.Markup("")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    template = env.from_string(TEMPLATE.read_text(encoding="utf-8"))
    return markupsafe.Markup(template.render(profiles=profiles, columns=COLUMNS, ratio=ratio(profiles)))
