"""Checks of the runner's arguments that argparse cannot make, done before any job starts: the ``--extra-opts``
keys against the config schema (:func:`config_check`, in a process that may import torch: a local slot's warm worker,
else a child process), a writable ``--output-root``, and the folders and logs the runner writes (no link, FIFO or
other file where one is expected). Each failure is a ValueError with a one-line message (``error:`` on the command
line)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from engine.run_files import file_kind
from runner.jobs import Job, log_name
from runner.protocols import PASSED_KNOBS
from units.call import UnitCall
from units.facts import REPO


def config_check(asked: dict) -> dict[str, str]:
    """Given the sweep's own train.py command lines (``commands``) and the user's ``opts``: ``{"refused": KEY}`` for
    the first key of the opts that one of the commands sets otherwise than through its trainer config file
    (``train.command_keys``, torch-free), else ``{"error": LINE}`` for the first error of a config built with the opts
    as train.py builds and checks it (``train.setup_cfg``, then ``check_config`` with ``config_schema()``, which
    imports the trainers and torch), one command per trainer config (``checked``); ``{}`` when all is well."""
    import train

    parser = train.build_parser()
    own = set()
    for argv in asked["commands"]:
        args = parser.parse_args(argv)
        own.update(key for key, source in train.command_keys(args).items() if source != args.config_file)
    refused = [key for key in asked["opts"][0::2] if key in own]
    if refused:  # known before the schema's imports (torch), so a refusal costs no second's wait
        return {"refused": refused[0]}
    from engine.errors import UserError
    from engine.schema import check_config
    from trainers.config import config_schema

    for trainer, argv in asked["checked"]:
        try:
            check_config(train.setup_cfg(parser.parse_args([*argv, *asked["opts"]])), config_schema())
        except UserError as e:
            return {"error": f"{trainer}: {e}".replace("command-line opts: ", "")}
    return {}


CHILD_CHECK = ("import json, sys; from runner.arguments import config_check; "
               "print(json.dumps(config_check(json.load(sys.stdin))))")
"""The program of the child process that runs :func:`config_check` when no warm process is given (its question on
standard input, its answer on standard output, as JSON)."""
USER_KNOBS = ("EXTRA_OPTS", *PASSED_KNOBS)
"""The knobs a job takes from the user (``--extra-opts``, the environment) rather than from the sweep."""
RUNNER_OPTIONS = {"SEED": "give the seeds with --seeds",
                  "OUTPUT_DIR": "choose the output root with --output-root (each job writes its run folders under it)",
                  "DATASET.ROOT": "give the datasets folder with --data",
                  "DATASET.NAME": "name the datasets with --datasets (and the cross-dataset source with --source)",
                  "DATASET.NUM_SHOTS": "give PromptKD's and PETR's shots with --shots (the few-shot methods run "
                                       "their own)",
                  "DATASET.SUBSAMPLE_CLASSES": "choose the protocol (base2new: base classes, then new ones)",
                  "DATASET.SOURCE_DATASET": "name the cross-dataset source with --source",
                  "TRAINER.MODAL": "choose the protocol", "TRAINER.NAME": "name the methods with --methods"}
"""How to ask for what a key the runner sets per job would change (by key, else by its last part: TEACHER_CKPT,
KD_WEIGHT)."""
RUNNER_KNOBS = {"TEACHER_CKPT": "set TEACHER_CKPT=PATH (or none), or choose the teachers with --teacher-dir",
                "KD_WEIGHT": "set KD_WEIGHT=W"}


def check_pairs(opts: str) -> None:
    """``--extra-opts`` must be KEY VALUE pairs."""
    words = opts.split()
    if len(words) % 2:
        raise ValueError(f"--extra-opts '{opts}': an odd number of words ({len(words)}); it takes KEY VALUE pairs "
                         "(e.g. 'OPTIM.MAX_EPOCH 2'): add the missing value or remove the stray word")


def own_commands(job: Job) -> list[list[str]]:
    """The train.py arguments of each run of ``job`` as the sweep sets them: its unit command planned without the
    user's knobs (:data:`USER_KNOBS`); none for a job that is no unit command."""
    if not isinstance(job.call, UnitCall):
        return []
    call = replace(job.call, knobs={k: v for k, v in job.knobs.items() if k not in USER_KNOBS})
    return [step["argv"][step["argv"].index("train.py") + 1:] for step in call.steps()]


def refusal(key: str) -> str:
    """The error for ``--extra-opts`` setting ``key``, which the runner sets for each job."""
    how = RUNNER_OPTIONS.get(key) or RUNNER_KNOBS.get(key.rsplit(".", 1)[-1],
                                                      "change it in the unit command that sets it (units/commands.py)")
    return f"--extra-opts: {key} is set by the runner for each job: leave it out and {how}"


def check_opts_keys(opts: str, jobs: Sequence[Job], call: Callable[..., Any] | None = None) -> None:
    """No key of ``opts`` is one the runner sets for each job (its run folder, seed, dataset, shots, classes,
    trainer, teacher: the keys its jobs' own command lines set, :func:`own_commands`), and each is a config key of
    each trainer the jobs run with a value its rule accepts (train.py's config merge and schema check,
    :func:`config_check`, which imports torch: run by ``call``, a warm process of the executor's, else once in a child
    process)."""
    words = opts.split()
    if not words:
        return
    commands: dict[tuple[str, ...], str] = {}  # the sweep's own train.py arguments -> their trainer
    for job in jobs:
        for argv in own_commands(job):
            commands.setdefault(tuple(argv), job.trainer)
    checked: dict[str, list] = {}  # trainer config file -> [trainer, one command of it], built with the opts
    for argv, trainer in commands.items():
        checked.setdefault(argv[argv.index("--config-file") + 1], [trainer, list(argv)])
    if not commands:
        return
    asked = {"opts": words, "commands": list(commands), "checked": list(checked.values())}
    if call is not None:
        answer = call(config_check, asked)
    else:
        done = subprocess.run([sys.executable, "-c", CHILD_CHECK], input=json.dumps(asked), cwd=REPO,
                              capture_output=True, text=True)
        if done.returncode != 0:
            lines = (done.stderr or done.stdout).strip().splitlines()
            raise ValueError("--extra-opts: the config check failed "
                             f"({lines[-1] if lines else f'exit {done.returncode}'})")
        answer = json.loads(done.stdout)
    if "refused" in answer:
        raise ValueError(refusal(answer["refused"]))
    if "error" in answer:
        raise ValueError(f"--extra-opts: {answer['error']}")


def check_writable(output: str) -> None:
    """``output`` (made if missing) lies under a folder this process may write."""
    existing = os.path.abspath(output)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"--output-root {output}: {existing} is a file, not a folder; choose another --output-root")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--output-root {output}: {existing} is not writable; choose another --output-root (or make "
                         "it writable)")


def mode_at(path: str) -> int | None:
    """The ``st_mode`` of ``path``, a symbolic link not followed; None when nothing is there."""
    try:
        return os.lstat(path).st_mode
    except FileNotFoundError:
        return None


def check_folders(root: str, folders: Iterable[str]) -> None:
    """Each of ``folders`` and the folders between ``root`` (the ``--output-root`` or ``--log-dir`` given) and it that
    exist are folders, not symbolic links or other files: the runner makes the missing ones and writes its logs and
    tables in them, never through a link (which would write outside the output)."""
    for folder in folders:
        current = root
        for part in os.path.relpath(folder, root).split(os.sep):
            current = os.path.join(current, part)
            mode = mode_at(current)
            if mode is None:
                break
            if not stat.S_ISDIR(mode):
                raise ValueError(f"{current} is {file_kind(mode)}, not a folder: the runner writes its logs and tables "
                                 f"under {root} and follows no link there; remove it, or choose another "
                                 "--output-root or --log-dir")


def check_logs(log_dir: str, jobs: Sequence[Job]) -> None:
    """Each job's log in ``log_dir`` that exists is a regular file: the runner appends to it, never through a link
    (which would write outside the output) nor into a FIFO (which would block the job)."""
    for job in jobs:
        path = os.path.join(log_dir, log_name(job))
        mode = mode_at(path)
        if mode is not None and not stat.S_ISREG(mode):
            raise ValueError(f"{path} is {file_kind(mode)}, not a regular file: the runner appends the output of job "
                             f"'{job.name}' to this log and follows no link (a FIFO would block it); remove it "
                             f"(rm {path}) and rerun")
