"""Regenerate the docs/ screenshots of `kbench report --html`'s page: its first screen, and a problem's section.

    python tools/html_report_screenshot.py                      # the tests' fixture run (tests/test_html_report.py)
    python tools/html_report_screenshot.py RUN_DIR [NAME]       # a real run's report.html, written first

Writes docs/NAME-first-screen.png (the page as it opens) and docs/NAME-problem.png (the first problem's section);
NAME defaults to "html-report". Needs playwright and Chromium at /usr/bin/chromium (or CHROMIUM=/path/to/chrome).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
VIEWPORT = {"width": 1280, "height": 1000}


def report(run_dir: Path | None, scratch: Path) -> Path:
    from kbench.reports.html import write_html_report

    if run_dir is not None:
        return write_html_report(str(run_dir), run_dir.parent)
    from tests.test_html_report import HOSTILE, problem_rows, store

    def plain(text: str) -> str:  # the tests' hostile markup, as a reader would see a real message
        return text.replace(HOSTILE, "'torch.nn.functional.gelu' was replaced")

    rows = [dataclasses.replace(e, message=plain(e.message), warnings=tuple(plain(w) for w in e.warnings))
            for e in problem_rows("conv") + problem_rows("gemm")[:4]]
    directory = store(scratch, rows)
    return write_html_report(str(directory), scratch)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright

    from tests.test_html_report import CHROMIUM, CHROMIUM_ARGS

    name = sys.argv[2] if len(sys.argv) > 2 else "html-report"
    with tempfile.TemporaryDirectory() as scratch, sync_playwright() as playwright:
        page_file = report(Path(sys.argv[1]) if len(sys.argv) > 1 else None, Path(scratch))
        browser = playwright.chromium.launch(executable_path=os.environ.get("CHROMIUM", str(CHROMIUM)),
                                             args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(page_file.as_uri())
        page.wait_for_function("document.body.getAttribute('data-sections') !== null")  # sections inflated
        shots = [DOCS / f"{name}-first-screen.png", DOCS / f"{name}-problem.png"]
        page.screenshot(path=str(shots[0]))
        page.evaluate("document.querySelector('section.problem').scrollIntoView()")
        page.screenshot(path=str(shots[1]))
        browser.close()
    for shot in shots:
        print(f"{shot}: {shot.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main()
