"""The sweep report beside each protocol's table (``<output>/<protocol>/report.md`` and ``report.png``:
``analysis.report``), made at the end of every sweep from the runs it verified, and ``python -m runner report
OUTPUT_ROOT`` for an existing output tree. Reading the routing dumps imports torch, which the runner itself never
imports: the report is made in a local slot's warm worker, else in a child process."""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from units.facts import REPO

PROTOCOLS = ("base2new", "xd", "dg")
EXIT_NOTHING = 2


def write_report(root: str, protocol: str, out_dir: str, source: str = "imagenet",
                 targets: Sequence[str] = (), methods: Sequence[str] = (),
                 call: Callable[..., Any] | None = None) -> tuple[int, str]:
    """``python -m analysis.report`` on the output root ``root``, run by ``call`` (a warm process of the executor's)
    or as a child process; its exit status and output (the line naming the files, or one ``error:`` line)."""
    argv = [root, protocol, out_dir, "--source", source, *(["--targets", *targets] if targets else []),
            *(["--methods", *methods] if methods else [])]
    if call is not None:
        return call(report_here, argv)
    done = subprocess.run([sys.executable, "-m", "analysis.report", *argv], cwd=REPO, capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


def report_here(argv: list[str]) -> tuple[int, str]:
    """``python -m analysis.report ARGV`` in this process: its exit status and what it printed."""
    from analysis.report import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main(argv)
    return status, out.getvalue().strip()


REPORT_DESCRIPTION = ("Write report.md and report.png beside each protocol's runs of an output tree (base-to-novel, "
                      "cross-dataset, DG); exit status 2 when it holds none.")


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    """``python -m runner report``'s options."""
    p.add_argument("output", metavar="OUTPUT_ROOT",
                   help="the output root a sweep wrote (holding base2new/, xd/ or dg/)")
    p.add_argument("--protocols", nargs="+", choices=PROTOCOLS, default=list(PROTOCOLS),
                   help="the protocols to report (default: each one found under OUTPUT_ROOT)")
    p.add_argument("--source", default="imagenet", help="the cross-dataset / DG source (default imagenet)")


def write_reports(args: argparse.Namespace) -> int:
    """``python -m runner report OUTPUT_ROOT [--protocols ...] [--source S]``: the report of each protocol found
    under it; 0 when one was written, 2 when none could be."""
    output = os.path.abspath(args.output)
    found = [protocol for protocol in args.protocols if os.path.isdir(os.path.join(output, protocol))]
    if not found:
        print(f"error: {output} holds no {' / '.join(args.protocols)} folder of runs: give the output root of a "
              "sweep", file=sys.stderr)
        return EXIT_NOTHING
    written = 0
    for protocol in found:
        status, text = write_report(output, protocol, os.path.join(output, protocol), args.source)
        print(text, file=sys.stderr if status else sys.stdout)
        written += status == 0
    return 0 if written else EXIT_NOTHING
