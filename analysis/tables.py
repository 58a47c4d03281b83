"""Tables for people and for programs: plain text or GitHub markdown (tabulate), or CSV.

With CSV, standard output carries only table rows: titles, summaries and notes go to standard error
(:func:`print_note`), so ``... --format csv > table.csv`` is a clean CSV file.
"""
from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from tabulate import tabulate

from analysis.errors import ResultsError

FORMATS = {"plain": "simple", "github": "github", "csv": "csv"}
"""``--format`` choice → tabulate style (``csv`` is written by the csv module)."""


def format_cell(value: Any, floatfmt: str = ".2f") -> Any:
    """A float as ``floatfmt`` (NaN as ``-``), None as ``-``, anything else unchanged."""
    if isinstance(value, float):
        return "-" if math.isnan(value) else format(value, floatfmt)
    return "-" if value is None else value


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], fmt: str = "plain",
                 floatfmt: str = ".2f") -> str:
    """Render rows as a plain / GitHub-markdown table (tabulate) or CSV; NaN and None print as ``-``."""
    if fmt not in FORMATS:
        raise ResultsError(f"unknown table format {fmt!r}; use one of {', '.join(FORMATS)}")
    cells = [[format_cell(v, floatfmt) for v in row] for row in rows]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(headers)
        writer.writerows(cells)
        return buf.getvalue().rstrip("\n")
    return tabulate(cells, headers=list(headers), tablefmt=FORMATS[fmt], disable_numparse=True)


def print_note(text: str, fmt: str = "plain") -> None:
    """Print text that is not a table row: to standard output, or to standard error with CSV."""
    print(text, file=sys.stderr if fmt == "csv" else sys.stdout)
