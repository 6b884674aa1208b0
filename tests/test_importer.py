"""`kbench import`: the code taken from each kind of LLM response, the names written, the exit codes."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kbench.cli import app
from kbench.errors import ImportFailure, UsageError
from kbench.problems.discovery import list_solutions
from kbench.problems.importer import extract_code, fenced_blocks, import_responses, solution_name
from tests.conftest import FIXTURES, ROOT

runner = CliRunner()
RESPONSES = FIXTURES / "responses"
PROBLEMS = ROOT / "problems"
SEEDS = ROOT.parent / "shared" / "seeds"
HEADER = "# Imported by kbench from "


def _fixture(name: str) -> str:
    return (RESPONSES / name).read_text(encoding="utf-8")


def _import(tmp_path: Path, *args: str) -> object:
    dirs = ["--problems-dir", str(PROBLEMS), "--solutions-dir", str(tmp_path)]
    return runner.invoke(app, ["import", *args, *dirs])


def _defines_model_new(code: str) -> bool:
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.parse(code).body)


# --- extract_code on the fixture responses ---------------------------------------------------------


def test_last_model_new_block_wins_over_drafts_helpers_and_later_blocks():
    code = extract_code(_fixture("thinking_several_blocks.md"))
    assert code.startswith("import torch\nimport torch.nn as nn\n\n# FINAL ANSWER\n")
    assert code.endswith("return torch.nn.functional.gelu(torch.clamp(x, min=-1.0, max=1.0))\n")
    assert "DRAFT" not in code and "def helper" not in code and "kbench run" not in code


def test_a_python_file_is_taken_as_it_is():
    text = _fixture("plain_solution.py")
    assert extract_code(text) == text


def test_tilde_fence_in_a_list_item_loses_only_the_fence_indentation():
    code = extract_code(_fixture("tilde_indented.md"))
    assert code == (
        "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        return x\n")


def test_cut_off_final_block_is_refused_even_with_a_complete_draft_before_it():
    with pytest.raises(ImportFailure) as info:
        extract_code(_fixture("cut_off_mid_block.md"))
    assert str(info.value) == (
        "the response was cut off inside the code block that opens at line 16: "
        "the transcript ends before its final answer is complete")


def test_code_without_model_new():
    with pytest.raises(ImportFailure) as info:
        extract_code(_fixture("no_model_new.md"))
    assert str(info.value) == "2 fenced code block(s), but none defines class ModelNew in valid Python"


def test_model_new_block_with_a_syntax_error_gives_its_line():
    with pytest.raises(ImportFailure) as info:
        extract_code(_fixture("syntax_error.md"))
    assert str(info.value) == (
        "the ModelNew code block at line 3 is not valid Python: expected ':' at line 8 of the response "
        "(line 5 of the block)")


def test_no_fenced_code_at_all():
    with pytest.raises(ImportFailure, match=r"^no fenced code block \(```python"):
        extract_code("I would fuse the GELU into the convolution's epilogue.\n")


def test_no_fence_in_a_response_that_is_broken_python():
    with pytest.raises(ImportFailure) as info:
        extract_code("import torch.nn as nn\nclass ModelNew(nn.Module)\n    pass\n")
    assert str(info.value) == (
        "no fenced code block, and the whole response is not valid Python (line 2: expected ':')")


def test_unclosed_thinking_is_a_cut_off_even_with_closed_drafts():
    text = "<think>\nDraft:\n```python\nclass ModelNew:\n    pass\n```\nHmm, but"
    with pytest.raises(ImportFailure, match=r"inside its thinking section .* 1 code block\(s\) are drafts$"):
        extract_code(text)


def test_the_ast_decides_not_the_text():
    # A ModelNew in a comment or in a non-Python block does not count.
    text = "```python\n# class ModelNew would go here\nx = 1\n```\n```cpp\nclass ModelNew {};\n```\n"
    with pytest.raises(ImportFailure, match="none defines class ModelNew"):
        extract_code(text)


def test_fences_inline_or_longer_are_read_as_commonmark_does():
    text = "Use ```python``` blocks.\n````python\n```\nclass ModelNew: ...\n````\n"
    [block] = fenced_blocks(text)
    assert block.language == "python" and block.code == "```\nclass ModelNew: ...\n" and block.closed


# --- the four real transcripts -----------------------------------------------------------------------

SEED_CASES = [
    ("001_3601f73f51b507d8.txt", "conv3d_gelu", None),
    ("002_c8ac500a80aaab85.txt", "convtranspose3d_layernorm", r"^no fenced code block .*cut off before"),
    ("003_ce324ecf5e99d034.txt", "convtranspose3d_softmax", r"^the response was cut off inside its thinking"),
    ("004_74929675d2072bf0.txt", "conv3d_logsumexp", None),
]


@pytest.mark.parametrize(("seed", "problem", "failure"), SEED_CASES, ids=[c[0][:3] for c in SEED_CASES])
def test_seed_transcripts(tmp_path, seed, problem, failure):
    if not SEEDS.is_dir():
        pytest.skip(f"no seed transcripts at {SEEDS}")
    [result] = import_responses([SEEDS / seed], problem, None, PROBLEMS, tmp_path, force=False)
    if failure is not None:
        assert not result.ok and result.solution is None
        assert re.search(failure, result.reason), result.reason
        assert not (tmp_path / problem).exists()
        return
    assert result.ok, result.reason
    assert result.solution == tmp_path / problem / f"r_{Path(seed).stem}.py"
    written = result.solution.read_text(encoding="utf-8")
    first, code = written.split("\n", 1)
    assert first == f"{HEADER}{seed}"
    # Exactly the final fenced block: the lines between the transcript's last pair of fences.
    lines = (SEEDS / seed).read_text(encoding="utf-8").split("\n")
    fences = [i for i, line in enumerate(lines) if line.startswith("```")]
    assert code == "\n".join(lines[fences[-2] + 1:fences[-1]]) + "\n"
    assert _defines_model_new(code) and "load_inline" in code


# --- names and files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("stem", "name"), [
    ("answer-1", "answer_1"), ("001_abc", "r_001_abc"), ("_hidden", "r__hidden"), ("gpt 4.o", "gpt_4_o"),
])
def test_solution_names_are_identifiers_starting_with_a_letter(stem, name):
    assert solution_name(stem) == name


def test_library_refuses_unknown_problem_and_bad_name(tmp_path):
    response = [RESPONSES / "plain_solution.py"]
    with pytest.raises(UsageError, match="Unknown problem 'nope'. Available: conv3d_gelu"):
        import_responses(response, "nope", None, PROBLEMS, tmp_path, force=False)
    with pytest.raises(UsageError, match="Bad solution name '../evil'"):
        import_responses(response, "conv3d_gelu", "../evil", PROBLEMS, tmp_path, force=False)
    assert list(tmp_path.iterdir()) == []


# --- the CLI -----------------------------------------------------------------------------------------


def _responses_dir(tmp_path: Path, names: dict[str, str]) -> Path:
    folder = tmp_path / "responses"
    folder.mkdir()
    for target, fixture in names.items():
        shutil.copy(RESPONSES / fixture, folder / target)
    return folder


def test_cli_imports_a_folder_with_unique_names(tmp_path):
    solutions = tmp_path / "solutions"
    (solutions / "conv3d_gelu").mkdir(parents=True)
    (solutions / "conv3d_gelu" / "answer_1.py").write_text("# mine\n")
    folder = _responses_dir(tmp_path, {
        "answer-1.md": "thinking_several_blocks.md", "answer_1.txt": "tilde_indented.md",
        "1st.py": "plain_solution.py", ".notes.md": "thinking_several_blocks.md",
    })
    result = _import(solutions, str(folder), "-p", "conv3d_gelu")
    assert result.exit_code == 0, result.output
    target = solutions / "conv3d_gelu"
    assert result.output.splitlines() == [
        f"imported {folder / '1st.py'} -> {target / 'r_1st.py'}",
        f"imported {folder / 'answer-1.md'} -> {target / 'answer_1_2.py'}",
        f"imported {folder / 'answer_1.txt'} -> {target / 'answer_1_3.py'}",
    ]
    assert (target / "answer_1.py").read_text() == "# mine\n"
    assert (target / "answer_1_2.py").read_text().startswith(f"{HEADER}answer-1.md\nimport torch\n")
    # kbench finds them like any solution; the one without DEVICES is taken as CUDA-only.
    devices = {s.name: s.devices for s in list_solutions("conv3d_gelu", solutions)}
    assert devices == {
        "answer_1": ("cuda",), "answer_1_2": ("cpu", "cuda"), "answer_1_3": ("cuda",), "r_1st": ("cuda",)}
    assert not [p for p in target.iterdir() if p.name.startswith(".")]  # no temporary files left


def test_cli_name_is_never_overwritten_without_force(tmp_path):
    response = str(RESPONSES / "plain_solution.py")
    first = _import(tmp_path, response, "-p", "conv3d_gelu", "--name", "mine")
    assert first.exit_code == 0, first.output
    target = tmp_path / "conv3d_gelu" / "mine.py"
    target.write_text("# edited by hand\n")
    again = _import(tmp_path, str(RESPONSES / "tilde_indented.md"), "-p", "conv3d_gelu", "--name", "mine")
    assert again.exit_code == 1
    reason = f"{target} already exists; pass --force to overwrite it"
    assert again.output == f"skipped {RESPONSES / 'tilde_indented.md'}: {reason}\n"
    assert target.read_text() == "# edited by hand\n"
    tilde = str(RESPONSES / "tilde_indented.md")
    forced = _import(tmp_path, tilde, "-p", "conv3d_gelu", "-n", "mine", "--force")
    assert forced.exit_code == 0, forced.output
    assert target.read_text() == f"{HEADER}tilde_indented.md\n" + extract_code(_fixture("tilde_indented.md"))


def test_cli_derived_name_with_force_overwrites_the_same_file(tmp_path):
    response = str(RESPONSES / "plain_solution.py")
    assert _import(tmp_path, response, "-p", "conv3d_gelu").exit_code == 0
    assert _import(tmp_path, response, "-p", "conv3d_gelu").exit_code == 0
    assert _import(tmp_path, response, "-p", "conv3d_gelu", "--force").exit_code == 0
    written = sorted(p.name for p in (tmp_path / "conv3d_gelu").iterdir())
    assert written == ["plain_solution.py", "plain_solution_2.py"]


def test_cli_name_is_a_prefix_for_several_responses(tmp_path):
    responses = [str(RESPONSES / "plain_solution.py"), str(RESPONSES / "tilde_indented.md")]
    result = _import(tmp_path, *responses, "-p", "conv3d_logsumexp", "-n", "try")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "conv3d_logsumexp").iterdir()) == ["try_1.py", "try_2.py"]


def test_cli_a_failing_response_exits_1_after_importing_the_others(tmp_path):
    solutions = tmp_path / "solutions"
    folder = _responses_dir(tmp_path, {
        "a.md": "cut_off_mid_block.md", "b.md": "thinking_several_blocks.md", "c.md": "syntax_error.md",
    })
    result = _import(solutions, str(folder), str(tmp_path / "missing.md"), "-p", "conv3d_gelu")
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith(f"skipped {folder / 'a.md'}: the response was cut off inside the code block")
    assert lines[1] == f"imported {folder / 'b.md'} -> {solutions / 'conv3d_gelu' / 'b.py'}"
    assert lines[2].startswith(f"skipped {folder / 'c.md'}: the ModelNew code block at line 3 is not valid")
    assert lines[3] == f"skipped {tmp_path / 'missing.md'}: no such file"
    assert [p.name for p in (solutions / "conv3d_gelu").iterdir()] == ["b.py"]


def test_cli_usage_errors_exit_2(tmp_path):
    missing = _import(tmp_path, str(tmp_path / "none.md"), "-p", "conv3d_gelu")
    assert missing.exit_code == 2 and f"[error] No response files at {tmp_path / 'none.md'}" in missing.output
    unknown = _import(tmp_path, str(RESPONSES / "plain_solution.py"), "-p", "nope")
    assert unknown.exit_code == 2
    assert "[error] Unknown problem 'nope'. Available: conv3d_gelu" in unknown.output
    no_problem = _import(tmp_path, str(RESPONSES / "plain_solution.py"))
    assert no_problem.exit_code == 2
    assert "Traceback" not in missing.output + unknown.output
    assert list(tmp_path.iterdir()) == []


def test_cli_help_shows_examples():
    result = runner.invoke(app, ["import", "--help"])
    assert result.exit_code == 0, result.output
    assert "kbench import" in result.output and "--force" in result.output


def test_a_python_file_without_model_new_is_told_so_not_that_it_lacks_fences():
    with pytest.raises(ImportFailure, match="the file defines no class ModelNew: add `class ModelNew"):
        extract_code("import torch\n", python_file=True)
    with pytest.raises(ImportFailure, match=r"the file is not valid Python \(line 1: "):
        extract_code("def broken(:\n", python_file=True)
    with pytest.raises(ImportFailure, match="no fenced code block"):  # a response text is still read as one
        extract_code("import torch\n")
