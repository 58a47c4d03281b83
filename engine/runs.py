"""Run folders: where a run lives (the layout) and what state it is in. The one owner of these rules for train.py,
the scripts (``python -m engine.runs state DIR``), the results library and schedulers; what a run is (its identity)
is in ``engine/run_identity.py``, who holds it (its lock) in ``engine/run_lock.py``.

Standard library only, so asking about a run is quick: no torch is imported here.

Layout: ``<output root>/base2new/<train_base|test_base|test_new>/<dataset>/shots_<K>/<TRAINER>/<config>/seed<S>``,
and ``<output root>/<xd|dg>/<train|test>/<dataset>/shots_<K>/<TRAINER>/<config>/seed<S>`` for the cross-dataset and
domain-generalisation protocols (:func:`run_dir`). A run folder holds ``log.txt``, ``run.json`` (its identity),
``run.lock`` (while a process works there), ``resume.pth.tar`` (while interrupted), ``<model>/`` checkpoint
folders and, once finished, ``results.json``. An upstream Dassl folder run again in place also holds a
``log.txt-<timestamp>`` per rerun; :func:`run_log` is the one chooser of the log a reader reads.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, UserError
from .inputs import open_input, read_input_text
from .json_text import parse_json
from .run_lock import LOCK_FILE as LOCK_FILE  # a run-folder name, exported here with the others
from .run_lock import describe_holder, lock_holder

RESULTS_FILE = "results.json"
"""A finished run's results (written by its final evaluation)."""
LOG_FILE = "log.txt"
"""The engine log of a run; every attempt is appended (upstream Dassl starts a new file instead: :data:`RERUN_LOG`)."""
RERUN_LOG = re.compile(re.escape(LOG_FILE) + r"-\d{4}(?:-\d{2}){5}")
"""The log Dassl's ``setup_logger`` writes when ``log.txt`` exists: ``log.txt-%Y-%m-%d-%H-%M-%S`` (the rerun's start),
so ``log.txt`` is the first attempt's."""
RESUME_FILE = "resume.pth.tar"
"""The latest resumable training state of a run (removed when it finishes)."""
IDENTITY_FILE = "run.json"
"""What a run is (``engine.run_identity``), written before it trains or evaluates; the protocol runner adds its job
records under :data:`RUNNER_KEY` (one record per run folder)."""
RUNNER_KEY = "runner"
"""The key of ``run.json`` holding the protocol runner's ``{job name: record}``; not part of the run's identity."""
POINTER_FILE = "checkpoint"
"""File in a model folder naming the last checkpoint saved there (Dassl's layout)."""
BEST_MODEL_FILE = "model-best.pth.tar"
"""The checkpoint kept by ``TEST.FINAL_MODEL best_val`` in each model folder."""
TEACHER_RECORD = "teacher.json"
"""The record beside a published teacher's checkpoint folder (``engine/published.py``); no run writes it."""
RUN_FILES = (RESULTS_FILE, IDENTITY_FILE, LOCK_FILE, RESUME_FILE)
"""The files only a run folder holds, beside its logs: what tells a run's folder from any other."""

STATES = ("new", "failed", "resumable", "running", "finished", "finished-upstream")
"""What :func:`run_state` answers."""
PROTOCOL_ROLES = {"base2new": ("train_base", "test_base", "test_new"), "xd": ("train", "test"), "dg": ("train", "test")}
"""The role folders of each protocol tree."""
BASE2NEW_CLASSES = {"train_base": "base", "test_base": "base", "test_new": "novel"}
"""Base-to-novel role folder → the classes its test covers."""
FINISH_SIGNALS = ("Finish training", "Finished training")
"""Every end-of-training line of Dassl and its forks, the final test and an ``Elapsed:`` line after it: ``Finish
training`` is ours and the Dassl of CoOp and PromptKD, ``Finished training`` Dassl.ProGrad's (KgCoOp, ProGrad) and
that of PromptSRC and MaPLe."""
RESULT_SIGNAL = "=> result"
"""Dassl's evaluator header, before the accuracy block of every evaluation."""
TRAINING_LINE = "epoch ["
"""How Dassl's per-batch training lines start (an evaluation-only log has none)."""
CONFIG_BANNER = "** Config **"
"""The line above the merged config Dassl's train.py (and ours) prints at the top of a log."""
_CONFIG_LINE = re.compile(r"( *)([A-Za-z0-9_]+):(?: (.*))?")


# ----- layout -----------------------------------------------------------------------------------------------------
def run_dir(output_root: str, protocol: str, role: str, dataset: str, shots: int | str, trainer: str, config: str,
            seed: int | str) -> str:
    """The folder of one run: ``<output_root>/<protocol>/<role>/<dataset>/shots_<K>/<trainer>/<config>/seed<S>``."""
    if protocol not in PROTOCOL_ROLES:
        raise ConfigError(f"unknown protocol {protocol!r}; use one of {', '.join(PROTOCOL_ROLES)}")
    if role not in PROTOCOL_ROLES[protocol]:
        raise ConfigError(f"unknown role {role!r} of protocol {protocol}; use one of "
                          f"{', '.join(PROTOCOL_ROLES[protocol])}")
    return os.path.join(output_root, protocol, role, dataset, f"shots_{shots}", trainer, config, f"seed{seed}")


@dataclass(frozen=True)
class RunPath:
    """A run folder in the base-to-novel layout ``<role>/<dataset>/<shots>/<trainer>/<config>/<seed>``."""

    role: str  # train_base / test_base / test_new
    dataset: str
    shots: str
    trainer: str
    config: str
    seed: str
    path: str


def parse_run_path(path: str) -> RunPath | None:
    """Parse a run folder path in the base-to-novel layout (CoOp's, PromptKD's and ours); None when it does not
    follow it."""
    parts = Path(os.path.abspath(path)).parts
    if len(parts) >= 6 and parts[-6] in BASE2NEW_CLASSES:
        return RunPath(*parts[-6:], path=path)
    return None


def seed_of(name: str) -> int | None:
    """Seed number of a ``seed1`` / ``seed_1`` folder name (None for other names)."""
    m = re.fullmatch(r"seed_?(\d+)", name)
    return int(m.group(1)) if m else None


def seed_key(name: str) -> str:
    """The seed as a key that pairs ``seed1`` with ``seed_1``; other names stay as they are."""
    seed = seed_of(name)
    return str(seed) if seed is not None else name


def is_run_dir(path: str) -> bool:
    """A run folder holds results.json or a log (``log.txt``, or Dassl's ``log.txt-<timestamp>``)."""
    return os.path.isfile(os.path.join(path, RESULTS_FILE)) or bool(log_files(path))


def pointed_checkpoint(folder: str, role: str = "checkpoint") -> str | None:
    """Path of the checkpoint named in ``<folder>/checkpoint`` (the last one saved there); None without that file.

    The one reader of the pointer file: the engine (resume, ``--load-epoch last``), PETRCoOp's plug-in, the teacher,
    the scripts and the runner ask it which checkpoint a model folder holds. Inside a run, the pointer is recorded in
    its inputs ledger as ``role``.
    """
    pointer = os.path.join(folder, POINTER_FILE)
    if not os.path.isfile(pointer):
        return None
    with open_input(pointer, role, text=True, errors="replace") as f:
        return os.path.join(folder, f.readline().strip())


def model_folders(path: str) -> list[str]:
    """The model folders of a run (sub-folders holding a ``checkpoint`` pointer file), sorted."""
    if not os.path.isdir(path):
        return []
    return sorted(os.path.join(path, d) for d in os.listdir(path)
                  if os.path.isfile(os.path.join(path, d, POINTER_FILE)))


def evaluated_files(model_dir: str, load_epoch: int | str | None) -> list[str]:
    """The files an evaluation of ``model_dir`` reads: each model folder's checkpoint for ``load_epoch`` (None:
    model-best.pth.tar, N: model.pth.tar-N, "last": the one its pointer names) and the run's own ``*.pth.tar``
    files (a router)."""
    files = []
    for folder in model_folders(model_dir):
        if load_epoch == "last":
            path = pointed_checkpoint(folder)
        else:
            path = os.path.join(folder, BEST_MODEL_FILE if load_epoch is None else f"model.pth.tar-{load_epoch}")
        if path and os.path.isfile(path):
            files.append(path)
    if os.path.isdir(model_dir):
        files += sorted(os.path.join(model_dir, f) for f in os.listdir(model_dir)
                        if f.endswith(".pth.tar") and f != RESUME_FILE)
    return files


def saved_model(path: str) -> str | None:
    """Which checkpoint an evaluation of the run in ``path`` loads: ``"best"`` when it kept a model-best.pth.tar
    (TEST.FINAL_MODEL best_val), else ``"last"`` (the last one saved); None when it saved none."""
    folders = model_folders(path)
    if any(os.path.isfile(os.path.join(f, BEST_MODEL_FILE)) for f in folders):
        return "best"
    return "last" if folders else None


# ----- log lines ----------------------------------------------------------------------------------------------
def metric_pattern(keyword: str) -> re.Pattern:
    """A Dassl evaluator line ``* <keyword>: X%`` (group 1: X)."""
    return re.compile(rf"\* {re.escape(keyword)}: ([\.\deE+-]+)%")


def logged_value(text: str, keyword: str = "accuracy", signal: str | tuple[str, ...] = FINISH_SIGNALS) -> float | None:
    """The last ``* <keyword>: X%`` line after a ``signal`` line (one of them) of a Dassl log (upstream
    parse_test_res's rule)."""
    signals = (signal,) if isinstance(signal, str) else signal
    pattern = metric_pattern(keyword)
    found, value = False, None
    for line in text.splitlines():
        if line.strip() in signals:
            found = True
        elif found and (m := pattern.search(line)):
            value = float(m.group(1))
    return value


def logged_config(text: str) -> dict[str, str]:
    """The config dump of a Dassl log (the first block after the ``** Config **`` banner, yacs's ``KEY: value`` tree)
    as ``{"A.B.C": value text}``; empty when the log has none. What an upstream run records of its config."""
    lines = text.splitlines()
    if CONFIG_BANNER not in lines:
        return {}
    flat: dict[str, str] = {}
    parents: list[tuple[int, str]] = []
    for line in lines[lines.index(CONFIG_BANNER) + 1:]:
        if line.startswith("*") and not flat:
            continue
        match = _CONFIG_LINE.fullmatch(line)
        if match is None:
            break
        indent, key, value = len(match.group(1)), match.group(2), match.group(3)
        while parents and parents[-1][0] >= indent:
            parents.pop()
        if parents:
            flat.pop(parents[-1][1], None)  # a node with children holds no value of its own
        name = f"{parents[-1][1]}.{key}" if parents else key
        flat[name] = (value or "").strip()
        if value is None:
            parents.append((indent, name))
    return flat


def upstream_finished(log_text: str) -> bool:
    """True for the log of a finished upstream (Dassl and its forks: CoOp, PromptKD, KgCoOp, PromptSRC, MaPLe) run:
    the accuracy block after its end-of-training line (:data:`FINISH_SIGNALS`), or after ``=> result`` in a log
    without training lines (``--eval-only``)."""
    if logged_value(log_text) is not None:
        return True
    trained = any(line.startswith(TRAINING_LINE) for line in log_text.splitlines())
    return not trained and logged_value(log_text, signal=RESULT_SIGNAL) is not None


def _read_text(path: str) -> str:
    return read_input_text(path, "run-record", errors="replace")


def log_files(path: str) -> list[str]:
    """The logs of the run folder ``path``, oldest first: ``log.txt`` (the first attempt), then each Dassl rerun's
    ``log.txt-<timestamp>`` in the order of its timestamp."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return []
    ordered = [LOG_FILE] * (LOG_FILE in names) + sorted(n for n in names if RERUN_LOG.fullmatch(n))
    return [os.path.join(path, n) for n in ordered if os.path.isfile(os.path.join(path, n))]


def run_log(path: str) -> str | None:
    """The log file of the run folder ``path``: the newest that holds the final accuracy block
    (:func:`upstream_finished`), else the newest; None without a log. A Dassl folder run again in place keeps the
    first attempt's ``log.txt`` and writes the rerun's beside it, so every reader of a run's log asks here (the
    state of a folder, PETR+X's record of its tuned run, the results library)."""
    logs = log_files(path)
    return next((log for log in reversed(logs) if upstream_finished(_read_text(log))), logs[-1] if logs else None)


def foreign_folder(path: str) -> str:
    """Why ``path`` cannot be a run's output folder, "" when it can (it is new, empty or holds a run: its
    :data:`RUN_FILES` or a log): it lies inside another run's folder, is a model folder of a run or a published
    teacher, or holds files no run wrote (a dataset, the file system's root). Hidden entries are not counted."""
    path = os.path.abspath(path)
    folder = os.path.dirname(path)
    while True:
        held = next((name for name in RUN_FILES if os.path.isfile(os.path.join(folder, name))), None)
        if held:
            return f"lies inside the run folder {folder} (it holds {held})"
        if folder == os.path.dirname(folder):
            break
        folder = os.path.dirname(folder)
    if not os.path.isdir(path):
        return ""
    names = sorted(name for name in os.listdir(path) if not name.startswith("."))
    if TEACHER_RECORD in names:
        return f"is a published teacher's folder (it holds {TEACHER_RECORD})"
    if POINTER_FILE in names:
        return f"is a model folder of a run (it holds the pointer file '{POINTER_FILE}')"
    if names and not set(names) & set(RUN_FILES) and not log_files(path):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        return f"holds {len(names)} files or folders of no run ({shown}) and no {LOG_FILE} or {IDENTITY_FILE} of one"
    return ""


# ----- state --------------------------------------------------------------------------------------------------
def run_state(path: str) -> str:
    """The state of the run folder ``path``, one of :data:`STATES`:

    ``running`` (a live process holds its lock), ``finished`` (results.json), ``finished-upstream`` (an upstream
    Dassl / CoOp / PromptKD folder: no results.json or run.json, its log (:func:`run_log`) has the final accuracy
    block, see :func:`upstream_finished`), ``resumable`` (a resume state or a checkpoint, no results), ``failed``
    (only the log of an attempt that stopped before saving anything) or ``new``.
    """
    if lock_holder(path) is not None:
        return "running"
    return unlocked_state(path)


def read_run_json(path: str) -> object:
    """The parsed ``run.json`` of the run folder ``path``; None without one (ValueError when it is not JSON)."""
    fpath = os.path.join(path, IDENTITY_FILE)
    if not os.path.isfile(fpath):
        return None
    return parse_json(read_input_text(fpath, "run-record"))


def has_identity(path: str) -> bool:
    """Whether the run folder ``path`` has a ``run.json`` holding a run's identity, not only the runner's job records
    (an unreadable file counts: train.py then says what is wrong with it)."""
    try:
        recorded = read_run_json(path)
    except (OSError, ValueError):
        return True
    return recorded is not None and (not isinstance(recorded, dict) or set(recorded) != {RUNNER_KEY})


def unlocked_state(path: str) -> str:
    """:func:`run_state` without the lock probe (for the process holding the lock)."""
    def has(name: str) -> bool:
        return os.path.isfile(os.path.join(path, name))

    if has(RESULTS_FILE):
        return "finished"
    identity = has_identity(path)
    if not identity and (log := run_log(path)) is not None and upstream_finished(_read_text(log)):
        return "finished-upstream"
    if has(RESUME_FILE) or model_folders(path):
        return "resumable"
    if identity or log_files(path):
        return "failed"
    return "new"


# ----- command line -------------------------------------------------------------------------------------------
def _cmd_state(args: argparse.Namespace) -> None:
    print(run_state(args.dir))


def _cmd_dir(args: argparse.Namespace) -> None:
    print(run_dir(args.output_root, args.protocol, args.role, args.dataset, args.shots, args.trainer, args.config,
                  args.seed))


def _cmd_saved_model(args: argparse.Namespace) -> None:
    which = saved_model(args.dir)
    if which is None:
        raise UserError(f"no checkpoint in {args.dir} (no <model>/{POINTER_FILE} file): train the model first")
    print(which)


def _cmd_holder(args: argparse.Namespace) -> None:
    holder = lock_holder(args.dir)
    print(describe_holder(holder) if holder is not None else "")


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], None], str, Iterable[str]]] = {
    "state": (_cmd_state, f"print the run state ({', '.join(STATES)})", ("dir",)),
    "dir": (_cmd_dir, "print the folder of a run (the documented layout)",
            ("output_root", "protocol", "role", "dataset", "shots", "trainer", "config", "seed")),
    "saved-model": (_cmd_saved_model, "print which checkpoint an evaluation loads: best or last", ("dir",)),
    "holder": (_cmd_holder, "print the process holding the run folder's lock (empty when none)", ("dir",)),
}
PARAMS = {"dir": "a run folder", "output_root": "the output root (OUTPUT_ROOT, e.g. output)",
          "protocol": f"one of {', '.join(PROTOCOL_ROLES)}", "role": "train_base, test_new, ... (the protocol's)",
          "dataset": "the dataset's short name (eurosat)", "shots": "training images per class (0: all)",
          "trainer": "the trainer (PETRCoOp: the run folders' name)", "config": "the config name",
          "seed": "the seed"}
"""The help text of each parameter of the subcommands."""


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.runs COMMAND ...``; a user error prints one ``error:`` line and returns 2."""
    parser = argparse.ArgumentParser(prog="python -m engine.runs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (run, help_text, params) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=f"{help_text[:1].upper()}{help_text[1:]}.")
        for param in params:
            p.add_argument(param, help=PARAMS[param])
        p.set_defaults(run=run)
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except (UserError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
