"""What a planned ``train.py`` run will be configured with, read from its command line before it runs (no torch): the
config keys its dataset and trainer yamls, its flags and its trailing ``KEY VALUE`` pairs set, merged in train.py's
order. The runner's preflight and plan read a job's backbone and teacher from here, so what they check is what the
job's runs will load.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from engine.schema import config_leaves
from train import build_parser, flag_settings, read_yaml
from units.facts import REPO


def planned_config(argv: Sequence[str]) -> dict[str, Any]:
    """``{dotted key: value}`` of what the ``train.py`` command ``argv`` (from ``train.py`` on, or behind torchrun's
    arguments) sets: dataset yaml, trainer yaml (and its CONFIG_NAME), flags, then trailing pairs; the engine's and
    trainers' defaults are not included (a key it does not set is absent)."""
    argv = list(argv)
    args = build_parser().parse_args(argv[argv.index("train.py") + 1:])
    flat: dict[str, Any] = {}
    for path, what in ((args.dataset_config_file, "dataset config file"), (args.config_file, "trainer config file")):
        if path:
            flat.update(config_leaves(read_yaml(os.path.join(REPO, path), what)))
    if args.config_file:
        flat["CONFIG_NAME"] = os.path.splitext(os.path.basename(args.config_file))[0]
    flat.update(flag_settings(args))
    opts = args.opts or []
    flat.update(zip(opts[0::2], opts[1::2]))
    return flat
