"""The package reads as the pipeline: imports run one way, from the command line down to the records
(the figures come from tools/layout.py, which prints them)."""

import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("kbench_layout_tool", ROOT / "tools" / "layout.py")
layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(layout)


def test_every_module_lives_in_a_layer_of_the_pipeline():
    assert layout.stray(layout.modules(ROOT)) == []


def test_imports_run_one_way_from_the_command_line_down_to_the_records():
    found = layout.upward(layout.modules(ROOT))
    assert found == [], "\n".join(found)


def test_no_two_modules_import_each_other_even_through_others():
    found = layout.cycles(layout.modules(ROOT))
    assert found == [], "\n".join(found[:20])


def _package(tmp_path, files):
    for name, text in files.items():
        path = tmp_path / "kbench" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return layout.modules(tmp_path)


def test_the_tool_finds_an_upward_import_a_cycle_a_long_function_and_a_stray_module(tmp_path):
    """The checks above can fail: on a small package that breaks each rule, each rule reports it; a long function is
    listed for review and breaks no rule (length is never a reason to split a concept)."""
    long_body = "".join(f"    x{i} = {i}\n" for i in range(61))
    mods = _package(tmp_path, {
        "__init__.py": "", "results/__init__.py": "", "cli/__init__.py": "", "misc/__init__.py": "",
        "results/a.py": "from kbench.cli import b\n",
        "cli/b.py": "import kbench.results.a\n",
        "results/c.py": "def f():\n" + long_body,
    })
    assert layout.upward(mods) == ["kbench.results.a imports kbench.cli.b"]
    assert "kbench.cli.b -> kbench.results.a -> kbench.cli.b" in layout.cycles(mods)
    assert layout.too_long(mods) == ["kbench.results.c.f: 62 lines"]
    assert layout.stray(mods) == ["kbench.misc"]
    text, ok = layout.report(tmp_path)
    assert not ok and "cycles: 2" in text and "kbench.results.c.f: 62 lines" in text


def test_a_long_function_alone_breaks_no_rule(tmp_path):
    _package(tmp_path, {"__init__.py": "", "results/__init__.py": "",
                        "results/c.py": "def f():\n" + "".join(f"    x{i} = {i}\n" for i in range(80))})
    text, ok = layout.report(tmp_path)
    assert ok and "for review, over 300 / 60 lines: 1" in text


def test_the_tool_prints_this_checkouts_figures_and_passes():
    text, ok = layout.report(ROOT)
    assert ok, text
    assert "subpackages" in text and "longest function" in text
