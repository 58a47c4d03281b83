"""Every command line of the project explains itself: each program the docs name, and each of its subcommands and
modes, has its own ``--help`` (its usage names the subcommand) with a whole-sentence description, and every flag and
argument a help text.

The parsers are read in one child process: each program's ``__main__`` runs with ``--help`` until it builds its parser
and parses, where the parser is taken (``argparse.ArgumentParser.parse_args`` replaced) and the program stopped, so
nothing else of it runs.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

from tests.helpers_docs import documented_commands
from tests.helpers_run import HANG_GUARD_S, REPO

READ_PARSERS = r'''
import argparse, json, os, runpy, sys

class Parsed(BaseException):
    """Raised where a program parses its arguments: its parser is taken, the program stops."""

taken = []

def take(self, args=None, namespace=None):
    taken.append(self)
    raise Parsed

argparse.ArgumentParser.parse_args = take
argparse.ArgumentParser.parse_known_args = take


def problems(parser, name):
    """Flags without help, a description cut off, a subcommand whose usage does not name it."""
    out = []
    description = " ".join((parser.description or "").split("\n\n")[0].split())
    if description and (not description.endswith((".", ")", "]")) or description.count("``") % 2):
        out.append(f"{name}: its description is cut off: {description[-60:]!r}")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                if not sub.prog.endswith(f" {sub_name}"):
                    out.append(f"{name} {sub_name}: its --help is {sub.prog!r}'s")
                out += problems(sub, f"{name} {sub_name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            out.append(f"{name}: {'/'.join(action.option_strings) or action.dest} has no help text")
    return out


found = []
for entry in json.loads(sys.argv[1]):
    program, *words = entry
    taken.clear()
    sys.argv = [program, *words, "--help"]
    try:
        if program.endswith(".py"):
            sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
            runpy.run_path(program, run_name="__main__")
        else:
            runpy.run_module(program, run_name="__main__", alter_sys=True)
        found.append(f"{' '.join(entry)}: parsed no arguments")
    except Parsed:
        found += problems(taken[-1], " ".join(entry))
    except SystemExit as e:
        found.append(f"{' '.join(entry)}: exited {e.code} before parsing its arguments")
print(json.dumps(found))
'''


def programs() -> list[list[str]]:
    """The project's programs the docs run (``python -m MODULE``, ``python FILE.py``), with each mode of
    ``parse_test_res.py`` (its modes are words before the arguments, not argparse subcommands)."""
    import parse_test_res

    found = set()
    for command in documented_commands():
        words = re.sub(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*", "", command.text).split()
        if words[:2] == ["python", "-m"] and len(words) > 2:
            spec = importlib.util.find_spec(words[2])
            if spec and spec.origin and spec.origin.startswith(REPO + os.sep) and \
                    not spec.origin.startswith(sys.prefix + os.sep):  # not a package of a venv inside the checkout
                found.add((words[2],))
        elif words[:1] == ["python"] and len(words) > 1 and os.path.isfile(os.path.join(REPO, words[1])):
            found.add((words[1],))
    found |= {("parse_test_res.py", mode) for mode in parse_test_res.MODES}
    return sorted(list(entry) for entry in found)


def test_every_program_and_subcommand_has_its_own_help_and_every_flag_a_help_text():
    entries = programs()
    assert ["runner"] in entries and ["train.py"] in entries and ["parse_test_res.py", "b2n"] in entries
    done = subprocess.run([sys.executable, "-c", READ_PARSERS, json.dumps(entries)], cwd=REPO, capture_output=True,
                          text=True, timeout=HANG_GUARD_S, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    problems = json.loads(done.stdout.splitlines()[-1])
    assert problems == [], "\n".join(problems)


def test_a_subcommand_prints_its_own_help():
    """``python -m runner base2new --help`` is the base-to-novel sweep's help, not the top level's; the top level
    names every subcommand, ``report`` included."""
    def help_of(*words: str) -> str:
        done = subprocess.run([sys.executable, "-m", "runner", *words, "--help"], cwd=REPO, capture_output=True,
                              text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert help_of().startswith("usage: python -m runner [-h] {base2new,xd,dg,report} ...")
    sweep = help_of("base2new")
    assert sweep.startswith("usage: python -m runner base2new ") and "--seeds SEEDS [SEEDS ...]" in sweep
    assert "--source" not in sweep and "--source SOURCE" in help_of("xd")
    assert help_of("report").startswith("usage: python -m runner report ")
