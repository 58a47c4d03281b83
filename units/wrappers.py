"""The unit commands' wrapper scripts, rendered from the catalog: ``python -m units.wrappers [--check]``.

Every method row (``trainers/catalog.py``) gets ``scripts/<folder>/<command>.sh`` for each command of its family
(``units.commands.COMMANDS``): the shebang, its family's header for the command (``units/headers.py``) with the
row's fields filled in, and the line that execs ``scripts/unit.sh``. ``make scripts`` writes them (and removes the
wrappers no row renders); ``--check`` writes nothing and exits 1 naming each file that differs.
"""
from __future__ import annotations

import argparse
import glob
import os
import string
import sys
import textwrap
from collections.abc import Iterable
from dataclasses import asdict
from typing import IO

from engine.atomic import atomic_write
from trainers.catalog import METHODS, PETR_X_LEARNERS, Method
from units.commands import COMMANDS, X_LEARNERS
from units.facts import DG_TARGETS, REPO
from units.headers import HEADERS, Header

WIDTH = 120
"""Line length of the headers (the project's)."""
EXEC_LINE = 'exec bash "$(dirname "$0")/../unit.sh" "$0" {folder} {command} "$@"\n'
"""A wrapper's one command: scripts/unit.sh with the script, the scripts folder, the command and the arguments."""
UNIT_MARK = '"$(dirname "$0")/../unit.sh" "$0" '
"""What every wrapper's exec line holds (a ``scripts/*/*.sh`` file without it is written by hand and left alone)."""


def x_configs() -> str:
    """Per prompt learner PETR+X routes on, the config of the base-to-novel run it reads by default (and the script
    that trains it where that is not the learner's own default)."""
    described = []
    for key, learner in PETR_X_LEARNERS.items():
        text = f"{key} {learner.x_config('')}"
        if learner.routed_config:
            text += (f" (scripts/{learner.scripts}/base2new_train.sh with that CFG and the students' CLIP as "
                     "TEACHER_NAME)")
        elif learner.imagenet_config:
            text += f" ({learner.imagenet_config} on imagenet)"
        described.append(text)
    return ", ".join(described)


def fields(method: Method) -> dict[str, str]:
    """The values a header may name: the row's fields, ``folder``, ``learner_xd_note``, the lists the unit commands
    check arguments against (``dg_targets``, ``imagenet_dg``, ``x_learners``) and PETR+X's default runs
    (``x_configs``)."""
    note = ("the base-to-novel config: no separate cross-dataset config ships for it"
            if method.learner_xd_config == method.config else
            f"its cross-dataset config; configs/trainers/{method.trainer}/ has its settings")
    dg_targets = "; ".join(f"{source}: {', '.join(targets)}" for source, targets in DG_TARGETS.items())
    return {**{key: str(value) for key, value in asdict(method).items()}, "folder": method.scripts,
            "learner_xd_note": note, "dg_targets": dg_targets, "imagenet_dg": "|".join(DG_TARGETS["imagenet"]),
            "x_learners": X_LEARNERS, "x_configs": x_configs()}


def comment(header: Header, values: dict[str, str], where: str) -> str:
    """``header``'s paragraphs with ``values`` filled in, as ``# `` lines of at most :data:`WIDTH` columns;
    ValueError naming ``where`` for a field the row leaves empty or lacks."""
    lines = []
    for paragraph in header:
        for name in {name for _, name, _, _ in string.Formatter().parse(paragraph) if name}:
            if not values.get(name):
                raise ValueError(f"{where}: the header needs the catalog field '{name}', which the row leaves empty")
        for line in paragraph.format_map(values).split("\n"):
            lines += textwrap.wrap(line, WIDTH, initial_indent="# ", subsequent_indent="# ", break_long_words=False,
                                   break_on_hyphens=False)
    return "".join(f"{line}\n" for line in lines)


def render(methods: Iterable[Method]) -> dict[str, str]:
    """Every wrapper of ``methods``: path under ``scripts/`` -> text; ValueError when a family lacks a header for
    one of its commands or two rows of one scripts folder render one file differently."""
    scripts: dict[str, str] = {}
    for method in methods:
        headers, commands = HEADERS.get(method.commands, {}), COMMANDS.get(method.commands, {})
        if not commands or set(headers) != set(commands):
            raise ValueError(f"{method.name}: family '{method.commands}' needs its commands in units/commands.py and "
                             "one header per command in units/headers.py")
        for command in commands:
            path = f"{method.scripts}/{command}.sh"
            text = ("#!/usr/bin/env bash\n" + comment(headers[command], fields(method), f"{method.name} {path}")
                    + EXEC_LINE.format(folder=method.scripts, command=command))
            if scripts.setdefault(path, text) != text:
                raise ValueError(f"scripts/{path}: two catalog rows of folder '{method.scripts}' render it differently")
    return scripts


def on_disk(root: str) -> dict[str, str]:
    """The unit wrappers in ``<root>/scripts/*/`` (files whose text execs scripts/unit.sh): path -> text."""
    found = {}
    for file in sorted(glob.glob(os.path.join(root, "scripts", "*", "*.sh"))):
        with open(file, encoding="utf-8") as f:
            text = f.read()
        if UNIT_MARK in text:
            found[os.path.relpath(file, os.path.join(root, "scripts"))] = text
    return found


def compare(root: str, scripts: dict[str, str]) -> dict[str, str]:
    """Each wrapper under ``root`` that is not as rendered, with what is wrong: ``differs``, ``missing``, ``not
    executable`` or ``stray`` (a wrapper no row renders)."""
    present = on_disk(root)
    states = {}
    for path, text in scripts.items():
        file = os.path.join(root, "scripts", path)
        if not os.path.exists(file):
            states[path] = "missing"
        elif present.get(path) != text:
            states[path] = "differs"
        elif not os.access(file, os.X_OK):
            states[path] = "not executable"
    return states | {path: "stray" for path in present if path not in scripts}


def write(root: str, scripts: dict[str, str]) -> dict[str, str]:
    """Write every wrapper that is not as rendered (executable, each file replaced whole) and remove the stray ones
    (and a folder they leave empty); returns what it changed (:func:`compare`)."""
    changes = compare(root, scripts)
    for path, state in changes.items():
        file = os.path.join(root, "scripts", path)
        if state == "stray":
            os.remove(file)
            if not os.listdir(os.path.dirname(file)):
                os.rmdir(os.path.dirname(file))
            continue

        def put(f: IO, text: str = scripts[path]) -> None:
            f.write(text.encode("utf-8"))
            os.fchmod(f.fileno(), 0o755)

        atomic_write(file, put, binary=True)
    return changes


def main(argv: list[str] | None = None, root: str = REPO) -> int:
    """Write (or, ``--check``, compare) the wrappers of every catalog row under ``root``; the exit status."""
    parser = argparse.ArgumentParser(prog="python -m units.wrappers", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming each file not as rendered")
    args = parser.parse_args(argv)
    try:
        scripts = render(METHODS.values())
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        problems = compare(root, scripts)
        if problems:
            listed = ", ".join(f"scripts/{path} ({state})" for path, state in problems.items())
            print(f"error: unit wrappers not as rendered from the catalog: {listed}; run make scripts", file=sys.stderr)
        return 1 if problems else 0
    for path, state in write(root, scripts).items():
        print(f"{'removed' if state == 'stray' else 'wrote'} scripts/{path} ({state})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
