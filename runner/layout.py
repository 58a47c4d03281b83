"""Where the unit commands write and what they say about a run folder, asked of ``scripts/common.sh``.

The scripts are the unit commands, so their shell helpers stay the one definition of the dataset tables, the
dataset names and the run states; this module asks them (one ``bash`` call for many folders) instead of
re-implementing them. :func:`run_dir` mirrors ``run_dir`` of ``scripts/common.sh`` with the signature of the run
layout's owner.
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

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


def run_states(paths: Sequence[str]) -> dict[str, str]:
    """``run_state`` of each folder (new, finished, finished-upstream, resumable, failed), as the scripts decide."""
    if not paths:
        return {}
    out = common_sh('for d in "$@"; do run_state "$d"; done', *paths).split("\n")
    return dict(zip(paths, out))


def run_dir(output_root: str, protocol: str, role: str, dataset: str, shots: int, trainer: str, config: str,
            seed: int) -> str:
    """``<output_root>/<protocol>/<role>/<dataset>/shots_<K>/<trainer>/<config>/seed<S>`` (docs/ARCHITECTURE.md)."""
    return os.path.join(output_root, protocol, role, dataset, f"shots_{shots}", trainer, config, f"seed{seed}")


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


def dataset_name(short: str) -> str:
    """``DATASET.NAME`` of a dataset short name (its configs/datasets yaml), e.g. ``eurosat`` -> ``EuroSAT``."""
    return common_sh('dataset_name "$1"', short)
