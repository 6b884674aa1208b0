"""A problem's own files read as text and AST: its model.py or KernelBench file, its constants and problem.toml."""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from collections.abc import Iterable
from pathlib import Path

from kbench.config.tolerances import DEFAULT_TOLERANCE, PRECISIONS
from kbench.errors import DiscoveryError
from kbench.results.codec import JsonObject
from kbench.results.records import ProblemSpec

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

MODEL_FILE = "model.py"
META_FILE = "problem.toml"
META_KEYS = ("origin", "atol", "rtol", "small", "precision", "backward")


def source_text(path: Path) -> str:
    """A Python file's text as Python's import reads it: UTF-8 unless its first lines declare another encoding
    (PEP 263), strictly (a byte that is not of the encoding anywhere, comments included, fails the import).
    Raises OSError, UnicodeDecodeError (not text of its encoding) or SyntaxError (a bad declaration)."""
    data = path.read_bytes()
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError:
        data.decode("utf-8")  # first lines that are not UTF-8 and declare nothing: say that (UnicodeDecodeError)
        raise
    return data.decode(encoding)


def _parse(path: Path) -> ast.Module:
    try:
        return ast.parse(source_text(path), filename=str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise DiscoveryError(f"Cannot read {path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    except SyntaxError as exc:
        raise DiscoveryError(f"{path} is not valid Python (line {exc.lineno}: {exc.msg})") from None


def module_constants(tree: ast.Module) -> dict[str, object]:
    """Module-level `name = literal` and `a, b = 1, 2` assignments: a problem's size constants."""
    found: dict[str, object] = {}  # name -> any Python literal (ast.literal_eval)
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, RecursionError):
            continue
        if isinstance(target, ast.Name):
            found[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts):
            for elt, item in zip(target.elts, value):
                if isinstance(elt, ast.Name):
                    found[elt.id] = item
    return found


def _defines(tree: ast.Module, names: Iterable[str]) -> set[str]:
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    return set(names) - defined


def _check_problem_file(path: Path, tree: ast.Module) -> None:
    missing = _defines(tree, ("Model", "get_inputs", "get_init_inputs"))
    if missing:
        raise DiscoveryError(f"{path} is not a KernelBench-format problem: it does not define "
                             f"{', '.join(sorted(missing))}")


def load_problem_file(path: Path, name: str | None = None, meta: JsonObject | None = None) -> ProblemSpec:
    tree = _parse(path)
    _check_problem_file(path, tree)
    meta = meta or {}
    source = path.parent / META_FILE if path.name == MODEL_FILE else path.with_suffix(".toml")
    typos = sorted(set(meta) - set(META_KEYS))
    if typos:  # a misspelt tolerance would otherwise be ignored without a word
        raise DiscoveryError(f"{source}: unknown key {', '.join(typos)}; the keys are {', '.join(META_KEYS)}")
    constants = module_constants(tree)
    small = meta.get("small", {})
    unknown = sorted(set(small) - set(constants))
    if unknown:
        raise DiscoveryError(f"{path.parent / META_FILE}: [small] names {', '.join(unknown)}, which {path.name} "
                             "does not define")
    precision = str(meta.get("precision", "fp32"))
    if precision not in PRECISIONS:
        raise DiscoveryError(f"{source}: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    backward = meta.get("backward", False)
    if not isinstance(backward, bool):
        raise DiscoveryError(f"{source}: backward is {backward!r}; it takes true or false")
    return ProblemSpec(
        name=name or path.stem,
        path=path.resolve(),
        origin=str(meta.get("origin", "user file")),
        atol=float(meta.get("atol", DEFAULT_TOLERANCE)),
        rtol=float(meta.get("rtol", DEFAULT_TOLERANCE)),
        precision=precision,
        backward=backward,
        constants=tuple(constants.items()),
        small=tuple((k, small[k]) for k in constants if k in small),
    )


def read_meta(path: Path) -> JsonObject:
    """problem.toml as parsed (TOML's values are JSON's, and dates); load_problem_file checks its keys."""
    if not path.exists():
        return {}
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DiscoveryError(f"Cannot read {path}: {exc}") from None


def load_problem_dir(directory: Path) -> ProblemSpec:
    model = directory / MODEL_FILE
    if not model.is_file():
        raise DiscoveryError(f"{directory} has no {MODEL_FILE}")
    return load_problem_file(model, name=directory.name, meta=read_meta(directory / META_FILE))
