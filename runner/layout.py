"""The runner's files and the states of its run folders.

Run folders and their states come from their owner, ``engine/runs.py``; the dataset tables, names and methods from
the unit commands' own (:mod:`units.facts`, :mod:`units.methods`).
"""
from __future__ import annotations

from collections.abc import Sequence

from engine.runs import run_state
from units.facts import REPO as REPO
from units.unit import FINISHED_STATES as FINISHED_STATES


def run_states(paths: Sequence[str]) -> dict[str, str]:
    """The state of each run folder (``engine.runs.run_state``: new, failed, resumable, running, finished,
    finished-upstream), as the unit commands decide."""
    return {path: run_state(path) for path in paths}
