"""The package reads as the pipeline: imports run one way, from the command line down to the records."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kbench"

# Highest first: a module may import its own package and any package below its own, never one above.
LAYERS = ["cli", "commands", "reports", "problems", "build", "execution", "judge", "measure", "system", "results",
          "errors"]


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "root"


def _imports(path: Path) -> set[str]:
    """Every kbench module the file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kbench.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kbench") and not node.level:
            found |= {f"{node.module}.{a.name}" if node.module.count(".") == 0 else node.module for a in node.names}
    return found


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in PACKAGE.rglob("*.py")}


def test_every_module_lives_in_a_layer_of_the_pipeline():
    stray = {m for m in _modules() if _layer(m) not in LAYERS and m not in ("kbench", "kbench.__main__")}
    assert stray == set(), f"modules outside the pipeline's packages: {sorted(stray)}"


def test_imports_run_one_way_from_the_command_line_down_to_the_records():
    upward = []
    for module, path in _modules().items():
        mine = _layer(module)
        if mine not in LAYERS:
            continue
        for imported in _imports(path):
            theirs = _layer(imported)
            if theirs in LAYERS and LAYERS.index(theirs) < LAYERS.index(mine):
                upward.append(f"{module} imports {imported}")
    assert upward == [], "\n".join(sorted(upward))


def test_no_two_modules_import_each_other_even_through_others():
    modules = _modules()
    graph = {m: {i if i in modules else i.rpartition(".")[0] for i in _imports(p)} & modules.keys() - {m}
             for m, p in modules.items()}
    cycles = []
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    assert cycles == [], "\n".join(sorted(set(cycles))[:20])


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 300, 60


def test_no_module_is_over_300_lines_and_no_function_over_60():
    long = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text())
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            long.append(f"{module}: {lines} lines")
        long += [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == [], "\n".join(long)
