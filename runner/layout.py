"""Where the unit commands write and what they say about a run folder.

Run folders and their states come from their owner, ``engine/runs.py`` (which the scripts ask too); the dataset
tables and names are the scripts' own (``scripts/common.sh``), asked in one ``bash`` call instead of re-implemented.
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from functools import cache

from engine.runs import run_state

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FINISHED_STATES = ("finished", "finished-upstream")
"""Run states of a completed run (ours, or an upstream run whose log holds the final accuracy)."""


def common_sh(script: str, *args: str) -> str:
    """Standard output of ``script`` (bash, arguments in ``$@``) run after sourcing scripts/common.sh."""
    done = subprocess.run(["bash", "-c", f"source scripts/common.sh && {script}", "runner", *args], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(done.stderr.strip().removeprefix("error: ") or f"scripts/common.sh: {script} failed")
    return done.stdout.strip()


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


def base2new_datasets() -> list[str]:
    """The paper's 11 base-to-novel datasets (short names), in the papers' order."""
    return common_sh('echo "${BASE2NEW_DATASETS[*]}"').split()


def xd_targets(source: str) -> list[str]:
    """The cross-dataset targets of ``source`` (ImageNet's ten); other sources name theirs on the command line."""
    if source != "imagenet":
        raise ValueError(f"no default cross-dataset targets for source '{source}': name them with --datasets")
    return common_sh('echo "${XD_TARGETS[*]}"').split()


def dg_targets(source: str) -> list[str]:
    """The domain-generalisation targets of ``source`` (scripts/common.sh ``dg_targets``)."""
    return common_sh('dg_targets "$1"', source).split()


@cache
def dataset_name(short: str) -> str:
    """``DATASET.NAME`` of a dataset short name (its configs/datasets yaml), e.g. ``eurosat`` -> ``EuroSAT`` (asked
    once per name: the plan and every job record ask it)."""
    return common_sh('dataset_name "$1"', short)
