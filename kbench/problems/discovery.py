"""Find problems and solutions on disk by convention; reads files as text and AST, imports no user code."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from pathlib import Path

from kbench.config.tolerances import PRECISIONS
from kbench.errors import DiscoveryError
from kbench.judge.verdict import NO_MODELNEW, syntax_error
from kbench.problems.metadata import (
    META_FILE,
    MODEL_FILE,
    load_problem_dir,
    load_problem_file,
    read_meta,
    source_text,
)
from kbench.results.records import ProblemSpec, SolutionSpec

DEVICES_NAME = "DEVICES"
KNOWN_DEVICES = ("cuda", "cpu")
PRECISIONS_NAME = "PRECISIONS"

DEFAULT_DIRS = (Path("problems"), Path("solutions"))


def locate(folder: Path, start: Path | None = None) -> Path:
    """A default folder (`problems` or `solutions`) found from any directory: where it is, else in the nearest of the
    working directory's parents that holds a `problems/` folder (the repository's root). Other folders are taken as
    they are. A Python package is never a problems or solutions folder (kbench's own `problems` package, for one)."""
    here = (start or Path.cwd()).resolve()
    if folder not in DEFAULT_DIRS or (folder.exists() and not _is_package(here / folder)):
        return folder
    for root in here.parents:
        if (root / "problems").is_dir() and not _is_package(root / "problems"):
            return root / folder
    return folder


def _is_package(folder: Path) -> bool:
    return (folder / "__init__.py").is_file()


def _problem_entries(problems_dir: Path) -> list[Path]:
    """Folders holding a model.py, and flat KernelBench files (e.g. a KernelBench checkout's level1/*.py)."""
    if not problems_dir.is_dir():
        raise DiscoveryError(f"No problems folder at {problems_dir}. "
                             "Run kbench from the repository root or pass --problems-dir.")
    return [p for p in sorted(problems_dir.iterdir())
            if (p / MODEL_FILE).is_file() or (p.suffix == ".py" and p.is_file() and not p.name.startswith("_"))]


def _load_entry(entry: Path) -> ProblemSpec:
    if entry.is_dir():
        return load_problem_dir(entry)
    return load_problem_file(entry, meta=read_meta(entry.with_suffix(".toml")))


def scan_problems(problems_dir: Path) -> tuple[list[ProblemSpec], list[tuple[str, str]]]:
    """Every problem under problems_dir, and (name, reason) for each file that breaks the contract."""
    problems, broken = [], []
    for entry in _problem_entries(problems_dir):
        try:
            problems.append(_load_entry(entry))
        except DiscoveryError as exc:
            broken.append((entry.stem, str(exc)))
    return problems, broken


def list_problems(problems_dir: Path) -> list[ProblemSpec]:
    """Every problem under problems_dir; the first broken one is an error."""
    problems, broken = scan_problems(problems_dir)
    if broken:
        raise DiscoveryError(broken[0][1])
    return problems


def is_path_ref(ref: str) -> bool:
    """Whether a problem reference names a path (a .py file or a folder) rather than a problem by name."""
    path = Path(ref)
    return path.suffix == ".py" or path.is_dir()


def find_problem(ref: str, problems_dir: Path) -> ProblemSpec:
    """A problem by name (a folder under problems_dir) or by path (a folder or a KernelBench .py file)."""
    path = Path(ref)
    if is_path_ref(ref):
        if path.is_dir():
            return load_problem_dir(path)
        if not path.is_file():
            raise DiscoveryError(f"No problem file at {path}")
        meta = read_meta(path.parent / META_FILE) if path.name == MODEL_FILE else {}
        name = path.parent.name if path.name == MODEL_FILE else path.stem
        return load_problem_file(path, name=name, meta=meta)
    candidate = problems_dir / ref
    if (candidate / MODEL_FILE).is_file() or (problems_dir / f"{ref}.py").is_file():
        return _load_entry(candidate if candidate.is_dir() else problems_dir / f"{ref}.py")
    if not problems_dir.is_dir():
        raise DiscoveryError(f"Unknown problem '{ref}': there is no problems folder at {problems_dir} (nor in a parent "
                             "folder). Run kbench from the repository root, pass --problems-dir, or give the problem's "
                             "path (-p path/to/problem.py)")
    known = [p.name for p in list_problems(problems_dir)]
    raise DiscoveryError(f"Unknown problem '{ref}'. Available: {', '.join(known) or '(none)'}")


def _declared(tree: ast.Module, path: Path, name: str, known: tuple[str, ...], example: str) -> tuple[str, ...] | None:
    """A solution's literal module-level declaration `name = (...)`, checked against `known`; None when absent."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise DiscoveryError(f"{path}: {name} must be a literal tuple such as {example}") from None
            found = (value,) if isinstance(value, str) else tuple(value)
            bad = [d for d in found if d not in known]
            if bad or not found:
                raise DiscoveryError(f"{path}: {name} lists {bad or 'nothing'}; use any of {', '.join(known)}")
            return found
    return None


def solution_devices(tree: ast.Module, path: Path) -> tuple[str, ...]:
    """The solution's declared `DEVICES = ("cuda",)`; files without it are taken as CUDA-only."""
    return _declared(tree, path, DEVICES_NAME, KNOWN_DEVICES, "('cuda',)") or ("cuda",)


def solution_precisions(tree: ast.Module, path: Path) -> tuple[str, ...]:
    """The solution's declared `PRECISIONS = ("fp32", "bf16")`; files without it are run at any precision."""
    return _declared(tree, path, PRECISIONS_NAME, tuple(PRECISIONS), "('fp32', 'bf16')") or tuple(PRECISIONS)


def _binds(tree: ast.Module, name: str) -> bool:
    """Does the module bind `name` at top level (a class, function, assignment or import), or might it (a star
    import)?"""
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any(a.name == "*" or (a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False


def solution_defect(tree: ast.Module | None, error: SyntaxError | None) -> str:
    """Why a solution file cannot load, told from its text alone ("" when nothing is seen)."""
    if error is not None:
        return syntax_error(error)
    if tree is not None and not _binds(tree, "ModelNew"):
        return NO_MODELNEW
    return ""


def load_solution_file(path: Path, problem: str, name: str | None = None) -> SolutionSpec:
    if not path.is_file():
        raise DiscoveryError(f"No solution file at {path}")
    tree, error, unreadable = None, None, ""
    try:
        tree = ast.parse(source_text(path), filename=str(path))
        devices, precisions = solution_devices(tree, path), solution_precisions(tree, path)
    except SyntaxError as exc:
        devices, precisions, error = KNOWN_DEVICES, tuple(PRECISIONS), exc  # a load_error wherever it is run
    except (OSError, UnicodeDecodeError) as exc:
        devices, precisions, unreadable = KNOWN_DEVICES, tuple(PRECISIONS), unreadable_source(exc)
    return SolutionSpec(problem=problem, name=name or path.stem, path=path.resolve(), devices=devices,
                        precisions=precisions, defect=unreadable or solution_defect(tree, error))


def unreadable_source(exc: OSError | UnicodeDecodeError) -> str:
    """Why Python could not read a source file, in one line."""
    if isinstance(exc, UnicodeDecodeError):
        return (f"the file is not {exc.encoding.upper().replace('UTF-8-SIG', 'UTF-8')} text (byte "
                f"0x{exc.object[exc.start]:02x} at offset {exc.start}): save it as UTF-8, or declare its encoding in "
                "its first lines (PEP 263)")
    return f"cannot read the file: {exc.strerror or exc}"


def list_solutions(problem: str, solutions_dir: Path) -> list[SolutionSpec]:
    folder = solutions_dir / problem
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    return [load_solution_file(p, problem) for p in files]


def find_solutions(problem: ProblemSpec, refs: Sequence[str], solutions_dir: Path) -> list[SolutionSpec]:
    """All of a problem's solutions (no `refs`), or the ones named, in the order given (each a name in its folder or a
    path); a solution named twice is an error, not a second row."""
    if not refs:
        return list_solutions(problem.name, solutions_dir)
    known = {s.name: s for s in list_solutions(problem.name, solutions_dir)}
    chosen: list[SolutionSpec] = []
    for ref in refs:
        if Path(ref).suffix == ".py":
            chosen.append(load_solution_file(Path(ref), problem.name))
        elif ref in known:
            chosen.append(known[ref])
        else:
            available = ", ".join(known) or "(none)"
            raise DiscoveryError(f"Unknown solution '{ref}' for problem '{problem.name}'. Available: {available}")
    names = [s.name for s in chosen]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise DiscoveryError(f"A solution is named twice for problem '{problem.name}': {', '.join(twice)}")
    return chosen


def select(problem_refs: Sequence[str], solution_refs: Sequence[str], problems_dir: Path,
           solutions_dir: Path) -> tuple[list[ProblemSpec], dict[str, list[SolutionSpec]]]:
    """The problems named (all under problems_dir when none is; a broken file there is an error) and each one's
    solutions (all, or those `solution_refs` names)."""
    problems, broken = choose_problems(problem_refs, problems_dir)
    if broken:
        raise DiscoveryError(broken[0][1])
    if solution_refs and len(problems) != 1:
        raise DiscoveryError("--solution needs exactly one --problem")
    names = [p.name for p in problems]
    if len(set(names)) != len(names):
        raise DiscoveryError(f"A problem is named twice: {', '.join(names)}")
    return problems, {p.name: find_solutions(p, solution_refs, solutions_dir) for p in problems}


def choose_problems(problem_refs: Sequence[str], problems_dir: Path) -> tuple[list[ProblemSpec], list[tuple[str, str]]]:
    """The problems named (a bad one is an error), or every problem in the folder, with (name, reason)
    for each file there that breaks the contract: in a suite, a broken file fails alone.
    """
    if problem_refs:
        return [find_problem(ref, problems_dir) for ref in problem_refs], []
    problems, broken = scan_problems(problems_dir)
    if not problems and not broken:
        raise DiscoveryError(f"No problems under {problems_dir}")
    return problems, broken
