"""``python -m units [--print-argv] METHOD COMMAND ARGS``: run one unit command (scripts/<method>/<command>.sh).

Knobs come from the environment (DATA, OUTPUT_ROOT, CFG, SHOTS, ..., docs/usage.md); relative paths are taken from
UNITS_CALLER_DIR (the directory the script was called from; default: the current one). UNITS_SCRIPT names the
calling script in usage lines. Exit status: 0, 1 after one ``error:`` line, or train.py's status (75 preempted).
"""
from __future__ import annotations

import os
import signal
import sys

from units.commands import COMMANDS
from units.facts import UnitError
from units.methods import by_scripts
from units.unit import StepFailed, Unit

EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--print-argv`` print) the unit command of ``argv``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    dry = bool(argv) and argv[0] == "--print-argv"
    argv = argv[dry:]
    if len(argv) < 2 or argv[1] not in COMMANDS.get(argv[0], {}):
        commands = "; ".join(f"{m}: {' '.join(c)}" for m, c in COMMANDS.items())
        print(f"error: usage: python -m units [--print-argv] METHOD COMMAND ARGS ({commands})", file=sys.stderr)
        return 2
    folder, command, args = argv[0], argv[1], argv[2:]
    unit = Unit(by_scripts(folder), os.environ.get("UNITS_SCRIPT") or f"scripts/{folder}/{command}.sh",
                os.environ, os.environ.get("UNITS_CALLER_DIR") or os.getcwd(), dry=dry)
    try:
        COMMANDS[folder][command](unit, args)
    except UnitError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except StepFailed as e:
        return e.status
    return 0


if __name__ == "__main__":
    status = main()
    if status == EXIT_INTERRUPTED:  # end by SIGINT itself, so a calling shell loop stops too (as train.py does)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(status)
