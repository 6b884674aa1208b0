"""`kbench import`: the final ModelNew code of LLM responses, written as solutions/<problem>/<name>.py."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kbench.errors import ImportFailure, UsageError
from kbench.problems.discovery import find_problem
from kbench.results.storage import atomic_write

MODEL_NEW = "ModelNew"
PYTHON_LANGUAGES = ("", "python", "py", "python3")
HEADER = "# Imported by kbench from "
DERIVED_PREFIX = "r_"
# Any indentation is allowed because answers often nest their code in a list item.
_OPEN_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_THINK_OPEN = re.compile(r"^\s*<think>", re.MULTILINE)
_THINK_CLOSE = "</think>"
# Text search only to explain a failure: whether a ModelNew is defined is decided on the AST.
_MENTIONS_MODEL_NEW = re.compile(rf"^\s*class\s+{MODEL_NEW}\b", re.MULTILINE)
# Solution files starting with "_" are skipped by discovery, so a name must start with a letter.
_SOLUTION_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a response; `line` is the 1-based line of its opening fence."""

    language: str
    code: str
    line: int
    closed: bool


@dataclass(frozen=True)
class ImportResult:
    """What became of one response: the solution file written, or the reason none was."""

    source: Path
    solution: Path | None
    ok: bool
    reason: str = ""


def fenced_blocks(text: str) -> list[CodeBlock]:
    """Every ``` or ~~~ block, as CommonMark reads them: an unclosed fence runs to the end of the text."""
    lines = text.replace("\r\n", "\n").split("\n")
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        opening = _OPEN_FENCE.match(lines[i])
        # A backtick in a backtick fence's info string makes the line inline code, not a fence.
        if opening is None or (opening["fence"][0] == "`" and "`" in opening["info"]):
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = i + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = [_dedent(line, indent) for line in lines[i + 1:end]]
        info = opening["info"].split()
        language = info[0].lower() if info else ""
        blocks.append(CodeBlock(language, "\n".join(body) + "\n", i + 1, end < len(lines)))
        i = end + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    """Drop up to `indent` leading blanks: the fence's own indentation, not the code's."""
    blank = len(line) - len(line.lstrip(" \t"))
    return line[min(indent, blank):]


def _defines_model_new(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == MODEL_NEW for node in tree.body)


def _syntax_error(code: str) -> tuple[int, str] | None:
    """(line, message) of the reason `code` does not parse, or None when it does."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return exc.lineno or 0, exc.msg
    except (ValueError, RecursionError) as exc:  # null bytes; absurdly deep nesting
        return 0, str(exc)
    return None


def _cut_off_in_thinking(text: str) -> bool:
    opens = [m.start() for m in _THINK_OPEN.finditer(text)]
    return bool(opens) and opens[-1] > text.rfind(_THINK_CLOSE)


def _no_blocks_reason(text: str) -> str:
    if _MENTIONS_MODEL_NEW.search(text) and (error := _syntax_error(text)):
        line, message = error
        return f"no fenced code block, and the whole response is not valid Python (line {line}: {message})"
    return ("no fenced code block (```python ... ```) in the response, so nothing to import "
            "(a transcript cut off before its final answer looks like this)")


def _last_model_new(blocks: list[CodeBlock]) -> str:
    python = [b for b in reversed(blocks) if b.language in PYTHON_LANGUAGES]
    for block in python:
        if _defines_model_new(block.code):
            return block.code
    for block in python:
        error = _syntax_error(block.code) if _MENTIONS_MODEL_NEW.search(block.code) else None
        if error:
            line, message = error
            raise ImportFailure(
                f"the ModelNew code block at line {block.line} is not valid Python: {message} at line "
                f"{block.line + line} of the response (line {line} of the block)")
    raise ImportFailure(
        f"{len(blocks)} fenced code block(s), but none defines class {MODEL_NEW} in valid Python")


def extract_code(text: str, python_file: bool = False) -> str:
    """The response itself when it is a Python file defining ModelNew, else its last fenced ModelNew block. A
    `python_file` (a .py) is taken whole: what is wrong with it is said of the file, not of missing code fences."""
    if _defines_model_new(text):
        return text
    if python_file and "```" not in text:
        error = _syntax_error(text)
        if error:
            raise ImportFailure(f"the file is not valid Python (line {error[0]}: {error[1]})")
        raise ImportFailure(f"the file defines no class {MODEL_NEW}: add `class {MODEL_NEW}(nn.Module)` whose "
                            "constructor takes the problem's get_init_inputs() and whose forward takes its "
                            "get_inputs()")
    blocks = fenced_blocks(text)
    # An earlier complete block is only a draft when the final answer was cut off, so none is imported.
    if blocks and not blocks[-1].closed:
        raise ImportFailure(
            f"the response was cut off inside the code block that opens at line {blocks[-1].line}: "
            "the transcript ends before its final answer is complete")
    if _cut_off_in_thinking(text):
        drafts = f"; its {len(blocks)} code block(s) are drafts" if blocks else ""
        raise ImportFailure(
            "the response was cut off inside its thinking section (<think> is never closed): "
            f"the transcript ends before its final answer{drafts}")
    if not blocks:
        raise ImportFailure(_no_blocks_reason(text))
    return _last_model_new(blocks)


def solution_name(stem: str) -> str:
    """A response file's stem as a solution name: letters, digits and _, starting with a letter."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", stem)
    return name if _SOLUTION_NAME.fullmatch(name) else DERIVED_PREFIX + name


def response_files(paths: Sequence[Path]) -> list[Path]:
    """Each path as given, a folder replaced by its regular, non-hidden files in sorted order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")))
        else:
            files.append(path)
    if not any(p.is_file() for p in files):
        raise UsageError(f"No response files at {', '.join(str(p) for p in paths) or '(none given)'}")
    return files


def _read(source: Path) -> str:
    if not source.is_file():
        raise ImportFailure("no such file" if not source.exists() else "not a regular file")
    try:
        return source.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ImportFailure("not UTF-8 text") from None
    except OSError as exc:
        raise ImportFailure(f"cannot read it: {exc.strerror or exc}") from None


def _with_header(code: str, source: Path) -> str:
    if code.startswith(HEADER):  # re-importing an imported file keeps one header
        code = code.split("\n", 1)[1] if "\n" in code else ""
    # A newline in a file name would end the comment and turn the rest of the name into code.
    shown = source.name if source.name.isprintable() else ascii(source.name)
    return f"{HEADER}{shown}\n{code}"


def _free_name(base: str, folder: Path, taken: set[str], force: bool) -> str:
    candidate, n = base, 1
    while candidate in taken or (not force and (folder / f"{candidate}.py").exists()):
        n += 1
        candidate = f"{base}_{n}"
    return candidate


def _import_one(source: Path, explicit: str | None, folder: Path, taken: set[str],
                force: bool) -> ImportResult:
    try:
        code = extract_code(_read(source), python_file=source.suffix == ".py")
        name = explicit or _free_name(solution_name(source.stem), folder, taken, force)
        target = folder / f"{name}.py"
        if explicit and not force and target.exists():
            raise ImportFailure(f"{target} already exists; pass --force to overwrite it")
    except ImportFailure as exc:
        return ImportResult(source, None, False, str(exc))
    try:
        atomic_write(target, _with_header(code, source))
    except OSError as exc:
        return ImportResult(source, None, False, f"cannot write {target}: {exc.strerror or exc}")
    taken.add(name)
    return ImportResult(source, target, True)


def import_responses(paths: Sequence[Path], problem: str, name: str | None, problems_dir: Path,
                     solutions_dir: Path, force: bool) -> list[ImportResult]:
    """Write each response's ModelNew to solutions_dir/<problem>/; one failing response stops no other."""
    spec = find_problem(problem, problems_dir)
    if name is not None and not _SOLUTION_NAME.fullmatch(name):
        raise UsageError(f"Bad solution name '{name}': use letters, digits and _, starting with a letter")
    sources = response_files(paths)
    folder = solutions_dir / spec.name
    taken: set[str] = set()
    results = []
    for index, source in enumerate(sources, start=1):
        explicit = name if name is None or len(sources) == 1 else f"{name}_{index}"
        results.append(_import_one(source, explicit, folder, taken, force))
    return results
