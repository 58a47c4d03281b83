"""What a run is: its identity, recorded in ``<run>/run.json`` before it trains or evaluates, and the claim of a run
folder by a run (lock, then compare with what the folder holds). Standard library only.

The identity is the merged config minus the keys that cannot change the result (:data:`IGNORED_KEYS`), the mode
(train or eval-only), for an evaluation the model folder and load epoch, the inputs ledger (``engine.inputs``: role,
path and SHA-256 of every file the run read, whichever key, folder or record led to it, and what a weight name
resolves to) and a digest of the data (:func:`data_digest`: the splits' lists and their images' bytes). A rerun into
a folder holding a finished or interrupted run of another identity, or one whose recorded inputs now hold other
bytes, stops before it trains (:class:`RunMismatchError`, naming the differing keys and files) unless asked to move
that run aside; nothing is deleted. A folder that holds no run (a dataset, a model folder, a teacher) or a run of
another trainer is no folder for this run.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .digests import file_digests, files_digest
from .errors import ConfigError, UserError
from .inputs import Ledger, Resolver, input_changes, read_input_text
from .json_text import parse_json
from .run_lock import RunLock
from .runs import (
    IDENTITY_FILE,
    RESULTS_FILE,
    RUNNER_KEY,
    foreign_folder,
    logged_config,
    read_run_json,
    run_log,
    unlocked_state,
)

IGNORED_KEYS = frozenset({"OUTPUT_DIR", "RESUME", "DATASET.ROOT", "VERBOSE", "TRAIN.PRINT_FREQ",
                          "TRAIN.CHECKPOINT_FREQ", "TRAIN.STEP_RESUME_MINUTES", "DATALOADER.NUM_WORKERS"})
"""Config keys that cannot change a run's result: where it writes and reads from, how often it prints, how often it
keeps a numbered checkpoint or a step-level resume state (the epoch state is written anyway), and how many loader
workers read the data (the batches do not depend on them: engine/data_stream.py). Left out of the identity."""


class RunMismatchError(UserError):
    """The run folder holds a finished or interrupted run that is not this one."""


def flat_config(cfg: Mapping) -> dict[str, Any]:
    """A (yacs) config tree as ``{"A.B.C": value}``, tuples as lists (the JSON form)."""
    flat: dict[str, Any] = {}

    def walk(node: Mapping, prefix: str) -> None:
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):
                walk(value, name + ".")
            else:
                flat[name] = json.loads(json.dumps(value))

    walk(cfg, "")
    return flat


def run_identity(cfg: Mapping, eval_only: bool = False, model_dir: str = "",
                 load_epoch: int | str | None = None) -> dict:
    """What a run is before it reads anything: trainer, seed, mode, the merged config minus :data:`IGNORED_KEYS` and,
    for an evaluation of a trained model, the model folder and load epoch. The files it then reads are added as its
    inputs ledger (``engine.inputs``), its data as a digest (:func:`data_digest`), when it records itself."""
    config = {k: v for k, v in flat_config(cfg).items() if k not in IGNORED_KEYS}
    identity: dict[str, Any] = {"trainer": config.get("TRAINER.NAME", ""), "seed": config.get("SEED"),
                                "mode": "eval-only" if eval_only else "train", "config": config}
    if eval_only and model_dir:
        identity["model"] = {"dir": os.path.abspath(model_dir), "load_epoch": load_epoch}
    return identity


BYTES = " bytes"
"""The data digest's key of a split's image bytes is the split's name with this suffix (``train_x bytes``)."""


def data_digest(dataset: Any, root: str) -> dict[str, str]:
    """SHA-256 per split of what a run trains and tests on: each item's image path (relative to ``root``), label,
    domain and class name, in order, and the class names; and per split (``<split> bytes``) of its images' bytes
    (``engine.digests.file_digests``: each image hashed once per machine while it stays the same file)."""
    splits = getattr(dataset, "splits", None)
    named = {name: getattr(dataset, name, None) for name in ("train_x", "train_u", "val", "test")}
    named["router_x"] = getattr(splits, "router_x", None)
    known = file_digests(item.impath for items in named.values() for item in items or ())
    digests = {}
    for name, items in named.items():
        if items:
            h = hashlib.sha256()
            for item in items:
                h.update(f"{os.path.relpath(item.impath, root)}\t{item.label}\t{item.domain}\t{item.classname}\n"
                         .encode())
            digests[name] = h.hexdigest()
            digests[name + BYTES] = files_digest([item.impath for item in items], known)
    digests["classes"] = hashlib.sha256(json.dumps(sorted(dataset.lab2cname.items())).encode()).hexdigest()
    return digests


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def identity_differences(recorded: Mapping, current: Mapping, with_data: bool = True) -> list[str]:
    """``KEY old → new`` for every difference that can change the result. Keys only one side has (the code
    declared other keys when the run was made) are not compared."""
    diffs = []
    if recorded.get("mode") != current.get("mode"):
        diffs.append(f"mode {recorded.get('mode')} → {current.get('mode')}")
    old, new = recorded.get("config", {}), current.get("config", {})
    diffs += [f"{k} {_short(old[k])} → {_short(new[k])}" for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]
    old_model, new_model = recorded.get("model") or {}, current.get("model") or {}
    diffs += [f"model {k} {_short(old_model.get(k))} → {_short(new_model.get(k))}" for k in ("dir", "load_epoch")
              if old_model.get(k) != new_model.get(k)]
    if with_data and recorded.get("data") and current.get("data"):
        old_data, new_data = recorded["data"], current["data"]
        if not records_bytes(recorded):  # made before runs recorded their images' bytes: not compared
            new_data = {k: v for k, v in new_data.items() if not k.endswith(BYTES)}
        changed = sorted(k for k in old_data.keys() | new_data.keys() if old_data.get(k) != new_data.get(k))
        lists = [k for k in changed if not k.endswith(BYTES)]
        pixels = [k[:-len(BYTES)] for k in changed if k.endswith(BYTES) and k[:-len(BYTES)] not in lists]
        if lists:
            diffs.append(f"data ({', '.join(lists)}: other images, labels or classes)")
        if pixels:
            diffs.append(f"image bytes ({', '.join(pixels)}: the images these splits list hold other bytes now)")
    return diffs


def records_bytes(identity: Mapping) -> bool:
    """Whether a recorded identity holds its images' bytes (runs made before they were recorded hold only lists)."""
    return any(key.endswith(BYTES) for key in identity.get("data") or {})


def read_identity(path: str) -> dict | None:
    """The identity recorded in the run folder ``path`` (without the runner's job records); None when it has none (an
    upstream run, or a folder made before runs recorded one)."""
    try:
        identity = read_run_json(path)
    except ValueError as e:
        fpath = os.path.join(path, IDENTITY_FILE)
        raise RunMismatchError(f"{fpath} is not valid JSON ({e}): restore it, or move the run folder away") from None
    if not isinstance(identity, dict):
        return None
    if RUNNER_KEY not in identity:
        return identity
    identity = {k: v for k, v in identity.items() if k != RUNNER_KEY}
    return identity or None  # only the runner's record: no identity


def aside_path(path: str) -> str:
    """A free hidden sibling name for moving the run in ``path`` aside: ``.<name>.old-<N>`` (hidden, so result
    readers do not take it for another seed)."""
    parent, name = os.path.split(os.path.normpath(path))
    n = 1
    while os.path.exists(os.path.join(parent, f".{name}.old-{n}")):
        n += 1
    return os.path.join(parent, f".{name}.old-{n}")


@dataclass
class RunClaim:
    """A run folder claimed for one run: locked, its earlier content checked against this run's identity.

    ``skip``: a line to print before ending with success (the same run already finished); ``notes``: lines for the
    log once it is open; ``check_data``: the folder holds a finished or interrupted run whose data digest must be
    compared (:meth:`verify_data`) before anything else happens.
    """

    folder: str
    state: str
    lock: RunLock
    identity: dict | None
    recorded: dict | None = None
    move_aside: bool = False
    skip: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def check_data(self) -> bool:
        return bool(self.identity is not None and self.recorded and self.recorded.get("data")
                    and self.state in ("finished", "resumable"))

    def verify_data(self, digest: dict[str, str]) -> None:
        """Compare this run's data digest with the recorded one (mismatch: move aside or raise)."""
        self.identity = {**self.identity, "data": digest}
        diffs = identity_differences(self.recorded, self.identity)
        if diffs:
            self._mismatch(diffs)
        elif not records_bytes(self.recorded):
            self.notes.append(f"note: {self.folder}/{IDENTITY_FILE} records no digest of its images' bytes (made by "
                              "an older version): the images were compared by their paths, labels and classes only")

    def _mismatch(self, diffs: list[str]) -> None:
        aside = aside_path(self.folder)
        what = {"finished": "a finished", "finished-upstream": "a finished", "failed": "a failed"}.get(
            self.state, "an interrupted")
        listed = "; ".join(diffs[:6]) + (f"; and {len(diffs) - 6} more" if len(diffs) > 6 else "")
        if not self.move_aside:
            raise RunMismatchError(
                f"{self.folder} holds {what} run that differs from this one: {listed}. Nothing was changed: give "
                f"this run another --output-dir (scripts: OUTPUT_ROOT), or add --move-aside (scripts: MOVE_ASIDE=1) "
                f"to move that run to {aside} and start this one")
        os.rename(self.folder, aside)
        self.lock.moved(aside)
        old_lock, self.lock = self.lock, RunLock(self.folder)
        try:
            self.lock.acquire(old_lock.command)
        finally:
            old_lock.release()
        self.state, self.recorded, self.skip = "new", None, ""
        self.notes = [f"Moved {what} run that differed from this one ({listed}) to {aside}"]

    def record(self, data: dict[str, str] | None, ledger: Ledger) -> None:
        """Write this run's identity with its data digest and the inputs and caches of ``ledger`` so far to
        ``run.json``, atomically (again whenever the run has read more: before its results are written)."""
        from .utils import write_json  # the engine's atomic writer (imports torch; a run has loaded it by now)

        identity = {**self.identity, "data": data} if data is not None else dict(self.identity)
        identity.update(inputs=dict(sorted(ledger.inputs.items())), caches=dict(sorted(ledger.caches.items())))
        write_json(identity, os.path.join(self.folder, IDENTITY_FILE))

    def release(self) -> None:
        self.lock.release()


def claim_run(folder: str, identity: dict | None, command: str, move_aside: bool = False,
              resume_from: str = "", roots: Mapping[str, str] | None = None, trainer: str = "",
              resolve: Resolver | None = None) -> RunClaim:
    """Lock ``folder`` and decide what a run of ``trainer`` with ``identity`` (None: a run that neither trains nor
    evaluates) does there: skip (the same run finished), resume, start, or stop with :class:`RunMismatchError`
    (another run's results or resume state are there, or any run of another trainer; with ``move_aside`` that run is
    moved to :func:`aside_path` instead). A folder that holds no run (``engine.runs.foreign_folder``) is refused
    before anything is written there. ``resume_from`` (``--resume``, another folder) must hold the same run.
    ``roots``: the run's roots as the inputs ledger names them (``{"DATASET.ROOT": ...}``), against which the
    recorded inputs are compared; ``resolve``: what a weight name the run found a file by resolves to now."""
    reason = foreign_folder(folder)
    if reason:
        raise ConfigError(f"OUTPUT_DIR {folder} {reason}; a run writes only in a folder of its own (new, empty or "
                          "holding that run): choose another --output-dir")
    lock = RunLock(folder).acquire(command)
    try:
        claim = RunClaim(folder, unlocked_state(folder), lock, identity, move_aside=move_aside)
        other = recorded_trainer(folder) if trainer and claim.state != "new" else ""
        if other and other != trainer:
            claim._mismatch([f"TRAINER.NAME {_short(other)} → {_short(trainer)}"])
        if identity is not None:
            _decide(claim, roots or {}, resolve)
            if resume_from and os.path.abspath(resume_from) != os.path.abspath(folder):
                _check_resume_source(resume_from, identity, roots or {}, resolve)
    except BaseException:
        lock.release()
        raise
    return claim


def recorded_trainer(folder: str) -> str:
    """The trainer the run in ``folder`` records ("" for none): its ``run.json``, else its ``results.json``, else the
    config dump of its log (an upstream run)."""
    identity = read_identity(folder)
    if identity:
        return str(identity.get("trainer") or (identity.get("config") or {}).get("TRAINER.NAME") or "")
    results = os.path.join(folder, RESULTS_FILE)
    if os.path.isfile(results):
        try:
            recorded = parse_json(read_input_text(results, "run-record"))
        except ValueError:
            recorded = None
        if isinstance(recorded, dict) and recorded.get("trainer"):
            return str(recorded["trainer"])
    log = run_log(folder)
    return logged_config(read_input_text(log, "run-record", errors="replace")).get("TRAINER.NAME", "") if log else ""


def _decide(claim: RunClaim, roots: Mapping[str, str], resolve: Resolver | None) -> None:
    folder, state = claim.folder, claim.state
    claim.recorded = read_identity(folder)
    if state == "finished-upstream":
        claim.skip = f"Run finished (upstream log.txt, no results.json), skipping: {folder}"
        return
    if claim.recorded is None:
        if state == "finished":
            claim.skip = f"Run finished, skipping: {folder}"
            claim.notes.append(f"note: {folder} has no {IDENTITY_FILE} (made before runs recorded their identity): "
                               "its config was not compared")
        elif state == "resumable":
            claim.notes.append(f"Resuming the interrupted run in {folder} (no {IDENTITY_FILE}: an upstream run or one "
                               "made before runs recorded their identity, so its config was not compared)")
        elif state == "failed":
            claim.notes.append(_failed_note(folder))
        return
    diffs = identity_differences(claim.recorded, claim.identity, with_data=False)
    if state in ("finished", "resumable"):
        changes, gone = input_changes(claim.recorded.get("inputs"), roots, resolve)
        diffs += changes
        claim.notes += [f"note: {what}, which {folder} read, is gone; the run was compared on its other inputs"
                        for what in gone]
        if "inputs" not in claim.recorded:
            claim.notes.append(f"note: {folder}/{IDENTITY_FILE} records no inputs ledger (made by an older version): "
                               "the files it read were not compared")
    if state in ("finished", "resumable") and diffs:
        claim._mismatch(diffs)
        return
    if state == "finished":
        claim.skip = f"Run finished, skipping: {folder}"
    elif state == "resumable":
        claim.notes.append(f"Resuming the interrupted run in {folder}")
    elif state == "failed":
        changed = f"; its config differed ({'; '.join(diffs)})" if diffs else ""
        claim.notes.append(_failed_note(folder) + changed)


def _failed_note(folder: str) -> str:
    return (f"note: {folder} holds only the log of an attempt that stopped before saving a checkpoint or results "
            "(failed or interrupted): not finished, not resumable; running it again from the start")


def _check_resume_source(resume_from: str, identity: dict, roots: Mapping[str, str],
                         resolve: Resolver | None) -> None:
    recorded = read_identity(resume_from)
    diffs = identity_differences(recorded, identity, with_data=False) + \
        input_changes(recorded.get("inputs"), roots, resolve)[0] if recorded else []
    if diffs:
        raise RunMismatchError(f"RESUME {resume_from} holds a run with another config: {'; '.join(diffs[:6])}; "
                               "resume from a run of this config, or drop --resume")
