"""``python -m units [--print-argv | --check-argv] METHOD COMMAND ARGS``: run one unit command
(scripts/<method>/<command>.sh).

Knobs come from the environment (DATA, OUTPUT_ROOT, CFG, SHOTS, ..., docs/usage.md); relative paths are taken from
UNITS_CALLER_DIR (the directory the script was called from; default: the current one). UNITS_SCRIPT names the
calling script in usage lines. Exit status: 0, 2 after one ``error:`` line, or train.py's status (75 preempted).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from trainers.catalog import scripts_folder
from units.call import UnitCall, usage_list

EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse, with a wrong command line as one ``error:`` line naming the usage (exit status 2), as every unit
    error is."""

    def error(self, message: str) -> None:
        print(f"error: {message}; usage: python -m units [--print-argv | --check-argv] METHOD COMMAND ARGS "
              "(python -m units --help lists them)", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    """The command line: the method (a scripts folder), its command and the command's arguments; --help lists every
    method's commands."""
    p = Parser(
        prog="python -m units", description="Run one unit command: what scripts/METHOD/COMMAND.sh ARGS runs (its "
        "train.py runs, their folders and arguments composed from the method's catalog row and the environment's "
        "knobs).", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"methods and their commands: {usage_list()}\n"
               "knobs (environment): DATA, OUTPUT_ROOT, CFG, SHOTS, BACKBONE, TEACHER_NAME, TEACHER_DIR, "
               "TEACHER_CKPT, EXTRA_OPTS, NPROC, ... (docs/usage.md)\n"
               "exit status: 0; 2 after one 'error:' line; a run's train.py status (75: preempted, its state saved)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--print-argv", action="store_true", help="print each run's folder and train.py arguments "
                      "instead of running it; needs no data, teacher or weights")
    mode.add_argument("--check-argv", action="store_true", help="as --print-argv, but stop as the command would on a "
                      "missing prerequisite (DATA, the finished run it reads, a teacher)")
    p.add_argument("method", help="a scripts folder (petr, coop, petr_coop, ...) or a method as the tables name it "
                                  "(PETR+CoOp)")
    p.add_argument("command", help="one of the method's commands: base2new_train, base2new_test, ...")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the command's arguments (dataset, seed, ...)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run (or with ``--print-argv`` / ``--check-argv`` print) the unit command of ``argv``; returns the exit
    status."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    call = UnitCall(scripts_folder(args.method), args.command, tuple(args.args), os.environ,
                    os.environ.get("UNITS_CALLER_DIR") or os.getcwd())
    return call(dry=args.print_argv or args.check_argv, check=not args.print_argv)


if __name__ == "__main__":
    status = main()
    if status == EXIT_INTERRUPTED:  # end by SIGINT itself, so a calling shell loop stops too (as train.py does)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(status)
