"""The sweep's final table: ``parse_test_res.py`` (b2n, xd or dg mode) on the runs this sweep verified, printed and
written next to the runs as plain text and CSV, and its report (``runner.report``: report.md and report.png) beside
it.

A run counts only when a job of this sweep finished it or found it finished by itself (the job record, or train.py
skipping the same run), so that a table never shows the numbers of a run that a refused or failed job left behind,
nor runs of other seeds or configs under the same output root. parse_test_res reads folders: it is given a view of
the output root holding only the verified run folders (their files linked, not copied).
"""
from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

import parse_test_res
from engine.atomic import atomic_write_text
from runner.protocols import Sweep
from runner.report import write_report

MODES = {"base2new": "b2n", "xd": "xd", "dg": "dg"}


def table_argv(sweep: Sweep, root: str, fmt: str = "plain") -> list[str]:
    """``parse_test_res.py`` arguments of the sweep's table over the output root ``root``, its methods in the order
    given."""
    methods = [m.name for m in sweep.methods]
    mode = MODES[sweep.protocol]
    if mode == "b2n":
        return [mode, os.path.join(root, "base2new"), "--methods", *methods, "--format", fmt]
    return [mode, root, "--source", sweep.source, "--targets", *sweep.datasets, "--methods", *methods,
            "--format", fmt]


def table_path(sweep: Sweep, ext: str) -> str:
    """``<output>/<protocol>/<mode>_table.<ext>``: next to the protocol's runs."""
    return os.path.join(sweep.output, sweep.protocol, f"{MODES[sweep.protocol]}_table.{ext}")


def render(argv: list[str]) -> tuple[int, str]:
    """Exit status and everything ``parse_test_res.py argv`` prints (standard output and error)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = parse_test_res.main(argv)
    return status, out.getvalue()


def link_runs(output: str, runs: Iterable[str], view: str) -> int:
    """Mirror each run folder of ``runs`` (under ``output``) in ``view``: the same relative folder, holding links to
    the run's files and sub-folders. Returns how many were mirrored."""
    count = 0
    for run in runs:
        rel = os.path.relpath(run, output)
        if not os.path.isdir(run) or rel.startswith(os.pardir):
            continue
        mirror = os.path.join(view, rel)
        os.makedirs(mirror, exist_ok=True)
        for entry in os.listdir(run):
            os.symlink(os.path.join(run, entry), os.path.join(mirror, entry))
        count += 1
    return count


def write_tables(sweep: Sweep, verified: Iterable[str],
                 call: Callable[..., Any] | None = None) -> tuple[int, str, str]:
    """Write the plain and CSV tables of the ``verified`` run folders (atomically), then their report (made by
    ``call``, a warm process of the executor's, else in a child process); return the exit status, the plain text and
    the report's line (the files it wrote, or why none); nothing is written without a verified run (status 1, no text)
    or when parse_test_res fails."""
    with tempfile.TemporaryDirectory(prefix="table-view-") as view:
        if not link_runs(sweep.output, verified, view):
            return 1, "", ""
        status, text = render(table_argv(sweep, view))
        text = text.replace(view, sweep.output)
        if status != 0:
            return status, text, ""
        for ext, fmt in (("txt", "plain"), ("csv", "csv")):
            content = text if fmt == "plain" else _csv_rows(table_argv(sweep, view, fmt))
            path = table_path(sweep, ext)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write_text(content, path)
        targets = sweep.datasets if sweep.protocol != "base2new" else ()
        _, line = write_report(view, sweep.protocol, os.path.dirname(table_path(sweep, "txt")), sweep.source,
                               targets, [m.name for m in sweep.methods], call)
    return status, text, line.replace(view, sweep.output)


def _csv_rows(argv: list[str]) -> str:
    """Only the CSV rows (parse_test_res sends its notes to standard error with ``--format csv``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        parse_test_res.main(argv)
    return out.getvalue()
