"""A unit command, or a ``train.py`` command line, as a Python callable: what the runner's executors (a warm worker, a
SLURM job) run in their own process, and what ``python -m units`` runs with the environment's knobs.

The knobs are passed as a mapping, never read from ``os.environ``, so the same call runs the same runs whatever the
calling process's environment holds. ``argv`` is the command a user runs for the same call (its knobs set first).
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainers.catalog import METHODS, Method, by_scripts
from units.commands import COMMANDS, Command
from units.facts import REPO, UnitError
from units.unit import StepFailed, Unit, run_train

EXIT_USER_ERROR = 2
"""Exit status after one ``error:`` line: an unknown method or command, or a mistake in its arguments, knobs or
prerequisites (train.py's status for a user error too)."""


def usage_list() -> str:
    """Every scripts folder with its commands, family by family (``cocoop: base2new_train ...; maple: ...``)."""
    folders = dict.fromkeys((m.scripts, m.commands) for m in METHODS.values())
    return "; ".join(f"{folder}: {' '.join(commands)}" for family, commands in COMMANDS.items()
                     for folder, of in folders if of == family)


@dataclass(frozen=True)
class UnitCall:
    """``scripts/<method>/<command>.sh ARGS`` with ``knobs`` (DATA, OUTPUT_ROOT, CFG, ...); relative paths are taken
    from ``caller`` (the repository root unless given)."""

    method: str
    """The scripts folder (``petr``, ``coop``, ...)."""
    command: str
    args: tuple[str, ...] = ()
    knobs: Mapping[str, str] = field(default_factory=dict)
    caller: str = REPO

    @property
    def script(self) -> str:
        """The wrapper script a user runs for the same command."""
        return self.knobs.get("UNITS_SCRIPT") or f"scripts/{self.method}/{self.command}.sh"

    @property
    def argv(self) -> tuple[str, ...]:
        """The shell command of the same call, from the repository root (its knobs set in the environment)."""
        return ("bash", self.script, *self.args)

    def target(self) -> tuple[Method, Command]:
        """The catalog row of the scripts folder ``method`` and its family's command ``command``; KeyError when
        either is unknown."""
        row = by_scripts(self.method)
        return row, COMMANDS[row.commands][self.command]

    def known(self) -> bool:
        """Whether ``method`` has the command ``command``."""
        try:
            self.target()
        except KeyError:
            return False
        return True

    def steps(self) -> tuple[dict, ...]:
        """Each run the command makes, in order: its folder (``dir``) and train.py command (``argv``: from
        ``train.py`` on, behind torchrun's arguments when NPROC > 1), computed without running it and before the runs
        it reads exist; UnitError for arguments or knobs it refuses."""
        if not self.known():
            raise UnitError(f"{self.script}: no such unit command")
        row, command = self.target()
        unit = Unit(row, self.script, self.knobs, self.caller, planning=True)
        command(unit, list(self.args))
        return tuple(unit.steps)

    def runs(self) -> tuple[str, ...]:
        """The run folders the command writes, in order (:meth:`steps`; the runner plans its jobs with them)."""
        return tuple(step["dir"] for step in self.steps())

    def __call__(self, dry: bool = False, check: bool = True) -> int:
        """Run the command's train.py runs in this process (``dry``: print each run's folder and argument list
        instead; ``check`` False: without checking the prerequisites a run needs); the exit status: 0, 2 after one
        ``error:`` line, or train.py's (75 preempted)."""
        if not self.known():
            print(f"error: usage: python -m units [--print-argv] METHOD COMMAND ARGS ({usage_list()})", file=sys.stderr)
            return EXIT_USER_ERROR
        row, command = self.target()
        unit = Unit(row, self.script, self.knobs, self.caller, dry=dry, check=check)
        try:
            command(unit, list(self.args))
        except UnitError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USER_ERROR
        except StepFailed as e:
            return e.status
        return 0


@dataclass(frozen=True)
class TrainCall:
    """``python train.py ARGS`` as a call: ``train.cli(ARGS)`` in this process, from the repository root."""

    args: tuple[str, ...]

    @property
    def argv(self) -> tuple[str, ...]:
        return ("python", "train.py", *self.args)

    @property
    def knobs(self) -> Mapping[str, str]:
        """train.py reads no knobs: everything is in its arguments."""
        return {}

    def __call__(self) -> int:
        """train.py's exit status (75 preempted, its state saved), run as a unit's step runs it."""
        sys.argv = ["train.py", *self.args]  # argparse's program name, as on the command line
        return run_train(list(self.argv[1:]))
