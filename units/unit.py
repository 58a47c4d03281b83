"""One unit command's surroundings: its knobs (the environment), its run folders and the train.py runs it makes.

A command calls :meth:`Unit.train` once per run: the line it prints, the run folder and the ``train.py`` arguments,
in the scripts' order (``--root``, ``--seed``, ``--trainer``, the two configs, ``--output-dir``, flags, the
command's ``KEY VALUE`` overrides, then BACKBONE / TEACHER_NAME / EXTRA_OPTS). With ``dry`` it prints each run's
folder and argument list instead of running it.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from engine.preemption import stopped_by, waiting_for_child
from engine.runs import POINTER_FILE, run_dir, run_state, saved_model
from trainers.catalog import Method
from units.facts import EXIT_PREEMPTED, REPO, UnitError, dataset_yaml

FINISHED_STATES = ("finished", "finished-upstream")
"""Run states of a completed run (ours, or an upstream run whose log holds the final accuracy)."""


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)
"""The signals that stop a run (Ctrl-C, a scheduler's end or preemption, a closed terminal)."""
TORCHRUN_SIGNALS = {"PET_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1"}
"""The signals torchrun passes on to its processes: its own list and SIGUSR1 (its ``--signals-to-handle``, read
from this variable, so a torch without the option runs the same command). They run in sessions of their own, so
outside a SLURM job step (which signals every process) only what torchrun passes on reaches them; without SIGUSR1 in
the list torchrun dies of it and leaves them behind."""


class StepFailed(Exception):
    """A train.py run of a unit command ended with a non-zero status (``status``)."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


@dataclass
class Unit:
    """A unit command of ``method`` called as ``script``, with the knobs of ``env`` (relative paths taken from
    ``caller``, the directory it was called from)."""

    method: Method
    script: str
    env: Mapping[str, str]
    caller: str
    dry: bool = False
    planning: bool = False
    """Only the runs' folders are wanted, before the runs they read exist: prerequisites are not checked, nothing is
    printed (implies ``dry``)."""
    check: bool = True
    """Check the prerequisites a run needs (DATA, the finished run it reads, a teacher) and stop as the command
    would; off when planning and for ``--print-argv``, which shows the runs without their inputs."""
    steps: list[dict] = field(default_factory=list)
    """With ``dry``: each run's folder and train.py arguments, in order."""
    trainer: str = field(init=False)

    def __post_init__(self) -> None:
        self.trainer = self.method.trainer
        self.dry = self.dry or self.planning
        self.check = self.check and not self.planning

    # ----- knobs -------------------------------------------------------------------------------------------------
    def knob(self, name: str, default: str = "") -> str:
        """The environment knob ``name``; ``default`` when unset or empty."""
        return self.env.get(name) or default

    def path(self, name: str) -> str:
        """The path knob ``name``, taken from the caller's directory when relative ("" and absolute unchanged)."""
        value = self.env.get(name, "")
        return value if not value or value.startswith("/") else f"{self.caller}/{value}"

    def key(self, name: str) -> str:
        """The config key ``name`` of the method's namespace (``TRAINER.<ns>.<name>``)."""
        return f"TRAINER.{self.method.ns}.{name}"

    def sibling(self, command: str) -> str:
        """The wrapper script of another command of the method's scripts folder (``scripts/<folder>/<command>.sh``)."""
        return f"scripts/{self.method.scripts}/{command}.sh"

    @property
    def data(self) -> str:
        return self.path("DATA")

    @property
    def output(self) -> str:
        return self.path("OUTPUT_ROOT") or "output"

    @property
    def source(self) -> str:
        return self.knob("SOURCE", "imagenet")

    def needs(self, present: bool, message: str) -> None:
        """UnitError(``message``) unless a prerequisite is ``present`` (or prerequisites are not checked)."""
        if not present and self.check:
            raise UnitError(message)

    def require_data(self) -> None:
        """DATA must name an existing folder (not checked when planning, where the runner's preflight checks it, nor
        for ``--print-argv``)."""
        if not self.check:
            return
        if not self.data:
            raise UnitError("DATA is not set: set DATA=/path/to/datasets (see DATASETS.md)")
        if not os.path.isdir(self.data):
            raise UnitError(f"DATA={self.data} is not a folder (see DATASETS.md for the dataset layout)")

    def require_config(self, config: str, why: str = "") -> None:
        """``configs/trainers/<trainer>/<config>.yaml`` must exist."""
        if not os.path.isfile(os.path.join(REPO, "configs", "trainers", self.trainer, f"{config}.yaml")):
            raise UnitError(f"no config configs/trainers/{self.trainer}/{config}.yaml{why}")

    def check_seed(self, seed: str, given: str = "") -> None:
        """UnitError unless ``seed`` (the ``<seed>`` argument, or one of ``given``: SEEDS) is a number train.py's
        --seed takes."""
        if not re.fullmatch(r"[0-9]{1,9}", seed):
            raise UnitError(f"{self.script}: seed must be a number (0, 1, 2, ...), not {seed!r}"
                            f"{f' (in {given}={self.knob(given)})' if given else ''}")

    def seeds(self) -> list[str]:
        """The seeds of SEEDS (default 1 2 3), each checked before any run (:meth:`check_seed`)."""
        seeds = self.knob("SEEDS", "1 2 3").split()
        for seed in seeds:
            self.check_seed(seed, "SEEDS")
        return seeds

    # ----- run folders ---------------------------------------------------------------------------------------
    def run_dir(self, tree: str, dataset: str, shots: str, config: str, seed: str, trainer: str = "") -> str:
        """The folder of one run; ``tree`` is ``PROTOCOL/ROLE`` (engine.runs.run_dir)."""
        self.check_seed(seed)
        protocol, role = tree.split("/")
        return run_dir(self.output, protocol, role, dataset, shots, trainer or self.trainer, config, seed)

    @staticmethod
    def finished(path: str) -> bool:
        """Whether the run in ``path`` completed (ours, or an upstream run's log)."""
        return run_state(path) in FINISHED_STATES

    def eval_args(self, model_dir: str) -> list[str]:
        """The flags that evaluate the model of ``model_dir``: the loaded epoch is LOAD_EPOCH, else the run's
        model-best.pth.tar when it kept one, else its last saved checkpoint."""
        if self.knob("LOAD_EPOCH"):
            load = ["--load-epoch", *self.knob("LOAD_EPOCH").split()]
        else:
            which = saved_model(model_dir)
            if which is None and not self.check:
                return ["--model-dir", model_dir, "--eval-only"]
            if which is None:
                raise UnitError(f"no checkpoint in {model_dir} (no <model>/{POINTER_FILE} file): train the model "
                                "first")
            load = ["--load-epoch", "last"] if which == "last" else []
        return ["--model-dir", model_dir, *load, "--eval-only"]

    def teacher_ckpt(self, folder: str, trained_by: str) -> str:
        """The TEACHER_CKPT override: TEACHER_CKPT (a file or PromptSRC run), else ``<TEACHER_DIR>/<folder>``; ""
        for TEACHER_CKPT=none (a plain CLIP teacher, with a note). ``trained_by``: the teacher command that publishes
        the folder's teacher, which a missing one names."""
        ckpt = self.env.get("TEACHER_CKPT", "")
        if ckpt == "none":
            if not self.planning:
                print("note: TEACHER_CKPT=none: distilling from a plain CLIP teacher (not the paper's setting)",
                      file=sys.stderr)
            return ""
        if not ckpt:
            path = f"{self.path('TEACHER_DIR') or 'teachers'}/{folder}"
            if not os.path.exists(path) and self.check:
                raise UnitError(f"no teacher at {path}: train it with `{trained_by}` (the same DATA, CFG, "
                                "TEACHER_NAME and TEACHER_DIR), fetch PromptKD's with python -m tools.fetch_teachers, "
                                "or set TEACHER_DIR (folder of per-dataset teachers), "
                                "TEACHER_CKPT=/path/to/checkpoint-or-PromptSRC-run or TEACHER_CKPT=none")
            return path
        path = self.path("TEACHER_CKPT")
        self.needs(os.path.exists(path), f"TEACHER_CKPT={path} does not exist")
        return path

    def common_opts(self) -> list[str]:
        """BACKBONE (a teacher's: TEACHER_NAME), TEACHER_NAME (a distilled student's) and EXTRA_OPTS overrides."""
        opts: list[str] = []
        if self.trainer == "PromptSRC":
            backbone, teacher = self.knob("TEACHER_NAME"), ""
        else:
            backbone, teacher = self.knob("BACKBONE"), self.knob("TEACHER_NAME") if self.method.distilled else ""
        if backbone:
            opts += ["MODEL.BACKBONE.NAME", backbone]
        if teacher:
            opts += [f"TRAINER.{self.method.ns}.TEACHER_NAME", teacher]
        return opts + self.knob("EXTRA_OPTS").split()

    # ----- runs ----------------------------------------------------------------------------------------------
    def argv(self, dataset: str, out: str, args: list[str], config: str, seed: str) -> list[str]:
        """The train.py command (from ``train.py`` on, behind torchrun's arguments when NPROC > 1; no --seed for an
        empty ``seed``: zero-shot CLIP)."""
        if seed != "":
            self.check_seed(seed)
        nproc = self.knob("NPROC", "1")
        if not re.fullmatch(r"[1-9][0-9]*", nproc):
            raise UnitError(f"NPROC={nproc}: give the number of processes (GPUs), e.g. NPROC=4")
        launch = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", nproc] if int(nproc) > 1 else []
        flags = ["--move-aside"] if self.env.get("MOVE_ASIDE") == "1" else []
        return [*launch, *train_argv(self.data, self.trainer, dataset, config, out, seed,
                                     [*flags, *args, *self.common_opts()])]

    def train(self, line: str, dataset: str, out: str, args: list[str], config: str, seed: str) -> None:
        """Print ``line`` (with `` -> out``), then run train.py on ``dataset`` into ``out`` (or, dry, print the
        folder and the command); StepFailed on a non-zero status."""
        argv = self.argv(dataset, out, args, config, seed)
        if self.planning:
            self.steps.append({"dir": out, "argv": argv})
            return
        print(f"{line} -> {out}", flush=True)
        if self.dry:
            self.steps.append({"dir": out, "argv": argv})
            print(json.dumps(self.steps[-1]), flush=True)
            return
        status = run_train(argv)
        if status:
            raise StepFailed(status)


def train_argv(data: str, trainer: str, dataset: str, config: str, out: str, seed: str | int,
               args: list[str]) -> list[str]:
    """``train.py`` and its arguments for one run of ``trainer`` with ``configs/trainers/<trainer>/<config>.yaml`` on
    ``dataset`` (a short name) into ``out`` (no ``--seed`` for an empty one), then ``args``: the one builder of a
    run's command line, for the unit commands and the demo's studies."""
    return ["train.py", "--data", data, *(["--seed", str(seed)] if seed != "" else []), "--trainer", trainer,
            "--dataset-config-file", dataset_yaml(dataset), "--config-file",
            f"configs/trainers/{trainer}/{config}.yaml", "--output-dir", out, *args]


def signals_to_child() -> AbstractContextManager[None]:
    """Inside: the stopping signals (SIGINT, SIGTERM, SIGUSR1, SIGHUP), which reach the child processes too, do
    nothing in this process, so it waits for torchrun's status instead of ending, or being requeued, first
    (``engine.preemption.stopped_by`` names the preemption signal that came); the previous handlers come back
    afterwards."""
    return waiting_for_child(STOP_SIGNALS)


def run_train(argv: list[str]) -> int:
    """Run ``argv`` (:meth:`Unit.argv`) from the repository root: train.py in this process, or torchrun as a child
    process for several processes; returns the exit status (75 after a preemption)."""
    if argv[0] != "train.py":
        with signals_to_child():
            env = {**os.environ, **TORCHRUN_SIGNALS}
            status = subprocess.run([sys.executable, *argv], cwd=REPO, env=env).returncode
        if status and stopped_by():  # torchrun passed the signal on, waited for its processes and exits 1 anyway
            print(f"torchrun stopped on {stopped_by()} (exit status {status}): its processes saved their state, or "
                  f"keep the last one; exit {EXIT_PREEMPTED} (preempted)", file=sys.stderr, flush=True)
            return EXIT_PREEMPTED
        return status
    import train  # torch is imported only here: planning a unit stays quick and torch-free

    return train.cli(argv[1:])

