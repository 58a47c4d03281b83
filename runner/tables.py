"""The sweep's final table: ``parse_test_res.py`` (b2n, xd or dg mode) on its output root, printed and written
next to the runs as plain text and CSV."""
from __future__ import annotations

import contextlib
import io
import os

import parse_test_res
from runner.layout import write_text
from runner.protocols import Sweep

MODES = {"base2new": "b2n", "xd": "xd", "dg": "dg"}


def table_argv(sweep: Sweep, fmt: str = "plain") -> list[str]:
    """``parse_test_res.py`` arguments of the sweep's table, its methods in the order given."""
    trainers = list(dict.fromkeys(m.trainer for m in sweep.methods))
    mode = MODES[sweep.protocol]
    if mode == "b2n":
        return [mode, os.path.join(sweep.output, "base2new"), "--methods", *trainers, "--format", fmt]
    return [mode, sweep.output, "--source", sweep.source, "--targets", *sweep.datasets, "--methods", *trainers,
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


def write_tables(sweep: Sweep) -> tuple[int, str]:
    """Write the plain and CSV tables (atomically) and return the exit status and the plain text."""
    status, text = render(table_argv(sweep))
    if status != 0:
        return status, text
    for ext, fmt in (("txt", "plain"), ("csv", "csv")):
        content = text if fmt == "plain" else _csv_rows(table_argv(sweep, fmt))
        path = table_path(sweep, ext)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_text(content, path)
    return status, text


def _csv_rows(argv: list[str]) -> str:
    """Only the CSV rows (parse_test_res sends its notes to standard error with ``--format csv``)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        parse_test_res.main(argv)
    return out.getvalue()
