"""The package's layout in figures: subpackages, imports against the pipeline's order, cycles, long modules and
functions, untyped dicts. `python tools/layout.py` prints them (exit 1 when a rule is broken: a stray module, an
import against the pipeline, a cycle); tests/test_layout.py checks the same rules. Length is a figure for review,
never a rule: a concept split over two files to fit a line count reads worse than one long, well-ordered module.

Usage: python tools/layout.py [--root PATH]
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

# Highest first: a module may import its own package and any package below its own, never one above.
LAYERS = ["cli", "commands", "reports", "problems", "profile", "build", "execution", "judge", "measure", "system", "wire",
          "results", "config", "errors"]
OUTSIDE_LAYERS = ("kbench", "kbench.__main__")
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 60  # past these, a module or function is listed for review


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


def modules(root: Path) -> dict[str, Path]:
    """Every module of the kbench package under `root`, by dotted name."""
    return {".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted((root / "kbench").rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """Every kbench module the file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kbench.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kbench") and not node.level:
            found |= {f"{node.module}.{a.name}" for a in node.names}  # a module's name, or a name in a module
    return found


def stray(mods: dict[str, Path]) -> list[str]:
    return sorted(m for m in mods if layer(m) not in LAYERS and m not in OUTSIDE_LAYERS)


def upward(mods: dict[str, Path]) -> list[str]:
    """Imports of a package above the importer's own."""
    found = []
    for module, path in mods.items():
        mine = layer(module)
        if mine not in LAYERS:
            continue
        for imported in imports(path):
            theirs = layer(imported)
            if theirs in LAYERS and LAYERS.index(theirs) < LAYERS.index(mine):
                found.append(f"{module} imports {imported}")
    return sorted(found)


def cycles(mods: dict[str, Path]) -> list[str]:
    """Modules that import themselves through others (each cycle once per module on it)."""
    graph = {m: {i if i in mods else i.rpartition(".")[0] for i in imports(p)} & mods.keys() - {m}  # name -> module
             for m, p in mods.items()}
    found = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    found.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return sorted(set(found))


def lengths(mods: dict[str, Path]) -> tuple[dict[str, int], dict[str, int]]:
    """Lines per module, and per function (module.function)."""
    module_lines, function_lines = {}, {}
    for module, path in mods.items():
        text = path.read_text()
        module_lines[module] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                function_lines[f"{module}.{node.name}"] = node.end_lineno - node.lineno + 1
    return module_lines, function_lines


def too_long(mods: dict[str, Path]) -> list[str]:
    module_lines, function_lines = lengths(mods)
    return ([f"{m}: {n} lines" for m, n in module_lines.items() if n > MAX_MODULE_LINES]
            + [f"{f}: {n} lines" for f, n in function_lines.items() if n > MAX_FUNCTION_LINES])


def report(root: Path) -> tuple[str, bool]:
    """The figures as text, and whether every rule holds."""
    mods = modules(root)
    module_lines, function_lines = lengths(mods)
    per_package = Counter(layer(m) for m in mods)
    lines_per_package = Counter()
    for m, n in module_lines.items():
        lines_per_package[layer(m)] += n
    untyped = sum(p.read_text().count("dict[str, Any]") for p in mods.values())
    broken = {"modules outside the pipeline's packages": stray(mods), "imports against the pipeline": upward(mods),
              "cycles": cycles(mods)}
    out = [f"{len(mods)} modules, {sum(module_lines.values())} lines, {len(LAYERS) - 1} subpackages (+ errors.py)"]
    out += [f"  {name:<10} {per_package[name]:>3} modules {lines_per_package[name]:>6} lines"
            for name in LAYERS if per_package[name]]
    out.append(f"longest module: {max(module_lines.values())} lines; "
               f"longest function: {max(function_lines.values())} lines")
    out.append(f"`dict[str, Any]` annotations: {untyped}")
    for rule, found in broken.items():
        out.append(f"{rule}: {len(found)}" + "".join(f"\n    {f}" for f in found[:20]))
    long = too_long(mods)
    out.append(f"for review, over {MAX_MODULE_LINES} / {MAX_FUNCTION_LINES} lines: {len(long)}"
               + "".join(f"\n    {f}" for f in long[:20]))
    return "\n".join(out), not any(broken.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout holding the kbench package (default: this one)")
    text, ok = report(parser.parse_args().root)
    print(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
