"""Checks of the runner's arguments that argparse cannot make, done before any job starts: the ``--extra-opts``
keys against the config schema (in a child process, since the schema's modules import torch), a writable
``--output``, and the folders and logs the runner writes (no link, FIFO or other file where one is expected). Each
failure is a ValueError with a one-line message (``error:`` on the command line)."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence

from engine.run_files import file_kind
from runner.jobs import Job, log_name
from units.facts import REPO

CHECK_OPTS = """
import sys
import train
from engine.errors import UserError

opts = sys.argv[1].split()
for trainer, config in zip(sys.argv[2::2], sys.argv[3::2]):
    try:
        train.setup_cfg(train.build_parser().parse_args(["--trainer", trainer, "--config-file", config, *opts]))
    except UserError as e:
        print(f"{trainer}: {e}".replace("command-line opts: ", ""))
        sys.exit(2)
"""
"""Builds each trainer config with the opts as train.py does (``train.setup_cfg``); prints the first error."""


def check_pairs(opts: str) -> None:
    """``--extra-opts`` must be KEY VALUE pairs."""
    words = opts.split()
    if len(words) % 2:
        raise ValueError(f"--extra-opts '{opts}': an odd number of words ({len(words)}); it takes KEY VALUE pairs "
                         "(e.g. 'OPTIM.MAX_EPOCH 2'): add the missing value or remove the stray word")


def check_opts_keys(opts: str, jobs: Sequence[Job]) -> None:
    """Every key of ``opts`` is a config key of each trainer the jobs run, with a value its config accepts (train.py's
    config merge, run once in a child process)."""
    configs = dict.fromkeys((j.trainer, os.path.join("configs", "trainers", j.trainer, f"{j.config}.yaml"))
                            for j in jobs if j.trainer and j.config)
    if not opts.split() or not configs:
        return
    done = subprocess.run([sys.executable, "-c", CHECK_OPTS, opts, *(a for pair in configs for a in pair)], cwd=REPO,
                          capture_output=True, text=True)
    if done.returncode != 0:
        lines = (done.stdout or done.stderr).strip().splitlines()
        raise ValueError(f"--extra-opts: {lines[-1] if lines else f'the config check failed (exit {done.returncode})'}")


def check_writable(output: str) -> None:
    """``output`` (made if missing) lies under a folder this process may write."""
    existing = os.path.abspath(output)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise ValueError(f"--output {output}: {existing} is a file, not a folder; choose another --output")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"--output {output}: {existing} is not writable; choose another --output (or make it "
                         "writable)")


def check_folders(root: str, folders: Iterable[str]) -> None:
    """Each of ``folders`` and the folders between ``root`` (the ``--output`` or ``--log-dir`` given) and it that
    exist are folders, not symbolic links or other files: the runner makes the missing ones and writes its logs and
    tables in them, never through a link (which would write outside the output)."""
    for folder in folders:
        current = root
        for part in os.path.relpath(folder, root).split(os.sep):
            current = os.path.join(current, part)
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                break
            if not stat.S_ISDIR(mode):
                raise ValueError(f"{current} is {file_kind(mode)}, not a folder: the runner writes its logs and tables "
                                 f"under {root} and follows no link there; remove it, or choose another --output or "
                                 "--log-dir")


def check_logs(log_dir: str, jobs: Sequence[Job]) -> None:
    """Each job's log in ``log_dir`` that exists is a regular file: the runner appends to it, never through a link
    (which would write outside the output) nor into a FIFO (which would block the job)."""
    for job in jobs:
        path = os.path.join(log_dir, log_name(job))
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path} is {file_kind(mode)}, not a regular file: the runner appends the output of job "
                             f"'{job.name}' to this log and follows no link (a FIFO would block it); remove it "
                             f"(rm {path}) and rerun")
