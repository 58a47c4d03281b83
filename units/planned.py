"""What a planned ``train.py`` run will be configured with, read from its command line before it runs (no torch): the
config keys its dataset and trainer yamls, its arguments and its trailing ``KEY VALUE`` pairs set, merged in
train.py's order (``train.command_settings``). The runner's preflight and plan read a job's backbone and teacher from
here, so what they check is what the job's runs will load.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from train import build_parser, command_settings
from units.facts import REPO


def planned_config(argv: Sequence[str]) -> dict[str, Any]:
    """``{dotted key: value}`` of what the ``train.py`` command ``argv`` (from ``train.py`` on, or behind torchrun's
    arguments; relative config paths from the repository root) sets; the engine's and trainers' defaults are not
    included (a key it does not set is absent)."""
    argv = list(argv)
    args = build_parser().parse_args(argv[argv.index("train.py") + 1:])
    for name in ("config_file", "dataset_config_file"):
        if getattr(args, name):
            setattr(args, name, os.path.join(REPO, getattr(args, name)))
    return {key: value for key, (value, _) in command_settings(args).items()}
