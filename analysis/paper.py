"""The published numbers kept in ``results/paper_results.json`` (tables, methods, aliases, sources)."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from analysis.errors import ResultsError

PAPER_FILE = Path(__file__).resolve().parents[1] / "results" / "paper_results.json"
METRICS = ("base", "novel", "hm")


def load_paper(path: str | os.PathLike = PAPER_FILE) -> dict[str, Any]:
    """The published numbers (results/paper_results.json)."""
    if not os.path.isfile(path):
        raise ResultsError(f"paper results file not found: {path}")
    with open(path) as f:
        return json.load(f)


def canonical_name(name: str, paper: dict[str, Any]) -> str:
    """The method name the paper file uses for ``name`` (through its case-insensitive aliases)."""
    aliases = {k.lower(): v for k, v in paper.get("aliases", {}).items()}
    return aliases.get(name.lower(), name)


def paper_rows(paper: dict[str, Any], method: str, table: str = "base2novel") -> dict[str, dict[str, float]] | None:
    """``{dataset: {metric: value}}`` published for ``method`` (matched case-insensitively, via aliases)."""
    methods = paper["tables"][table]["methods"]
    wanted = canonical_name(method, paper).lower()
    for name, entry in methods.items():
        if name.lower() == wanted:
            return entry["rows"]
    return None


def paper_as_summary(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    """Published base-to-novel rows in the shape of a measured summary (missing metrics as NaN)."""
    return {ds: {m: float(r.get(m, math.nan)) for m in METRICS} for ds, r in rows.items()}
