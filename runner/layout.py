"""The runner's files and the states of its run folders.

Run folders and their states come from their owner, ``engine/runs.py``; the dataset tables, names and methods from
the unit commands' own (:mod:`units.facts`, :mod:`units.methods`).
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from engine.runs import run_state
from units.facts import REPO as REPO
from units.unit import FINISHED_STATES as FINISHED_STATES


def write_text(text: str, path: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary file, then rename), so a reader never sees half a file; the
    runner's own files (tables, records), written without the engine's torch-importing helpers."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run_states(paths: Sequence[str]) -> dict[str, str]:
    """The state of each run folder (``engine.runs.run_state``: new, failed, resumable, running, finished,
    finished-upstream), as the unit commands decide."""
    return {path: run_state(path) for path in paths}
