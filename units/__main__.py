"""``python -m units [--print-argv] METHOD COMMAND ARGS``: run one unit command (scripts/<method>/<command>.sh).

Knobs come from the environment (DATA, OUTPUT_ROOT, CFG, SHOTS, ..., docs/usage.md); relative paths are taken from
UNITS_CALLER_DIR (the directory the script was called from; default: the current one). UNITS_SCRIPT names the
calling script in usage lines. Exit status: 0, 1 after one ``error:`` line, or train.py's status (75 preempted).
"""
from __future__ import annotations

import os
import signal
import sys

from units.call import UnitCall

EXIT_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--print-argv`` print) the unit command of ``argv``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    dry = bool(argv) and argv[0] == "--print-argv"
    argv = argv[dry:]
    if len(argv) < 2:
        argv = [*argv, "", ""][:2]
    call = UnitCall(argv[0], argv[1], tuple(argv[2:]), os.environ, os.environ.get("UNITS_CALLER_DIR") or os.getcwd())
    return call(dry=dry)


if __name__ == "__main__":
    status = main()
    if status == EXIT_INTERRUPTED:  # end by SIGINT itself, so a calling shell loop stops too (as train.py does)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(status)
