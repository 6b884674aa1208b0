"""kbench compare and report: what the stored runs say."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from kbench.cli.app import command
from kbench.cli.options import DEFAULT, ResultsDir, fraction
from kbench.errors import UsageError


@command("compare")
def compare_command(
    a: Annotated[str | None, typer.Argument(help="Before: a run id, run directory, run.json or baseline. Default: the run before the latest.")] = None,
    b: Annotated[str | None, typer.Argument(help="After: likewise. Default: the latest run.")] = None,
    baseline: Annotated[str | None, typer.Option(help="Compare against a stored baseline (name under results/baselines/ or a file) instead.")] = None,
    threshold: Annotated[str, typer.Option(help="Smallest change that counts (below it: same).")] = "1%",
    fmt: Annotated[str, typer.Option("--format", help="table, md, csv or json.")] = "table",
    fail_on_regression: Annotated[bool, typer.Option("--fail-on-regression", help="Exit 1 when a row is slower or newly failing.")] = False,
    ignore_env: Annotated[bool, typer.Option("--ignore-env", help="Compare runs from different GPUs or torch versions anyway.")] = False,
    html: Annotated[bool, typer.Option("--html", help="Also write compare-<before>.html beside the after run's run.json: both runs' samples per row, verdicts and status changes.")] = False,
    changes_only: Annotated[bool, typer.Option("--changes-only", help="List only the rows that changed (not those the same in both runs).")] = False,
    results_dir: ResultsDir = DEFAULT.results_dir,
) -> None:
    """Did it get faster or slower for real? Compare two runs row by row.

    Each row's verdict comes from the raw samples of both runs (Mann-Whitney U test, p < 0.05) and a
    minimum effect (--threshold). Marks: + slower, - faster, ~ unclear, ! newly failing, x failing,
    * fixed, n new, r removed. Both runs and their machines come first, then a summary line and the suite's
    fast_p and geomean before and after; rows follow, status changes first, then by the size of the change.
    Runs on different GPUs (--ignore-env) compare each row's time relative to its own run's eager, so the
    hardware is not a change; each row shows both speedups. Problems that only one run has are listed once
    after the table, not as rows; a run that did not finish gets a warning.

    Examples:

      kbench compare

      kbench compare 20261122-074644-be41 20261122-091500-a1b2 --format md

      kbench compare --baseline h100 --fail-on-regression

      kbench compare --html

      kbench compare A100RUN H100RUN --ignore-env --changes-only
    """
    from kbench.reports.compare import compare  # slow: the pipeline; not for --help
    from kbench.reports.tables import (  # heavy: pandas; not for --help
        FORMATS,
        comparison_frame,
        readable_comparison,
        render,
        terminal_line,
    )

    if fmt not in FORMATS:
        raise UsageError(f"Unknown format '{fmt}'. Use one of: {', '.join(FORMATS)}")
    result = compare(a, b, baseline, results_dir, fraction(threshold), ignore_env)
    for warning in result.warnings:
        typer.secho(f"[warning] {warning}", err=True, fg=typer.colors.YELLOW)
    chosen = result.changes if changes_only else result.rows
    frame, folded = (comparison_frame(chosen), []) if fmt in ("csv", "json") else readable_comparison(chosen)
    aside = [o.line() for o in result.one_run_only]
    if fmt == "json":
        typer.echo(json.dumps(result.document(json.loads(render(frame, fmt))), indent=1))
    elif fmt == "csv":  # the rows alone on stdout; the machines and the problems they leave out on stderr
        for line in (result.machines, *aside):
            typer.echo(line, err=True)
        typer.echo(render(frame, fmt))
    else:
        prose = terminal_line if fmt == "table" else str
        typer.echo(prose(result.machines))
        typer.echo(prose(result.summary.line))
        typer.echo(prose(result.suite) + "\n")
        if fmt == "table":
            typer.echo(f"before: {result.before.label}\nafter:  {result.after.label}\n")
        typer.echo(render(frame, fmt) + "".join(f"\n{line}" for line in (["", *folded] if folded else []))
                   + ("\n\n" + "\n\n".join(aside) if aside else ""))
    if html:
        from kbench.reports.html import write_html_compare  # heavy: pandas and jinja2; only --html needs them

        typer.echo(f"html: {write_html_compare(result, changes_only)}", err=fmt != "table")
    if fail_on_regression and result.regressions:
        typer.secho(f"[error] {len(result.regressions)} regression(s)", err=True, fg=typer.colors.RED)
        raise typer.Exit(code=1)


@command("report")
def report_command(
    run: Annotated[str | None, typer.Argument(help="A run id, run directory or run.json. Default: the latest run.")] = None,
    no_chart: Annotated[bool, typer.Option("--no-chart", help="Skip the PNG chart.")] = False,
    format: Annotated[str, typer.Option("--format", help="markdown (report.md and the chart) or kernelbench (eval_results.json in KernelBench's field names).")] = "markdown",
    html: Annotated[bool, typer.Option("--html", help="Also write report.html beside run.json: one self-contained page (leaderboards, sample charts, every row's details) to open in a browser.")] = False,
    results_dir: ResultsDir = DEFAULT.results_dir,
) -> None:
    """Rank each problem's solutions and summarize the suite (fast_p, geometric-mean speedup).

    Writes report.md and speedups.png (needs matplotlib: pip install 'kbench\\[plot]') next to run.json; with
    --format kernelbench, eval_results.json as KernelBench's eval_from_generations.py writes it; with --html, also
    report.html (self-contained: open it from disk in any browser).

    Examples:

      kbench report

      kbench report 20261122-074644-be41 --no-chart

      kbench report --format kernelbench

      kbench report --html
    """
    from kbench.reports.leaderboard import write_kernelbench  # slow: the pipeline; not for --help
    from kbench.reports.report_text import write_report  # slow: tabulate and the pipeline; not for --help

    if format not in ("markdown", "kernelbench"):
        raise UsageError(f"Unknown report format '{format}'. Use markdown or kernelbench.")
    if format == "kernelbench":
        typer.echo(f"eval_results: {write_kernelbench(run, results_dir)}")
    else:
        md_path, png, text = write_report(run, results_dir, with_chart=not no_chart)
        typer.echo(text)
        skipped = ("" if no_chart
                   else "\nchart:  skipped (matplotlib is not installed; pip install 'kbench[plot]' draws it)")
        typer.echo(f"report: {md_path}" + (f"\nchart:  {png}" if png else skipped))
    if html:
        from kbench.reports.html import write_html_report  # heavy: pandas and jinja2; only --html needs them

        typer.echo(f"html:   {write_html_report(run, results_dir)}")
