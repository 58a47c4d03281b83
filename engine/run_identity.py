"""What a run is: its identity, recorded in ``<run>/run.json`` before it trains or evaluates, and the claim of a run
folder by a run (lock, then compare with what the folder holds). Standard library only.

The identity is the merged config minus the keys that cannot change the result (:data:`IGNORED_KEYS`), the mode
(train or eval-only), for an evaluation the model folder, load epoch and a digest of each file it loads, and a digest
of the data (:func:`data_digest`). A rerun into a folder holding a finished or interrupted run of another identity
stops before it trains (:class:`RunMismatchError`, naming the differing keys) unless asked to move that run aside;
nothing is deleted.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .digests import file_digest
from .errors import UserError
from .run_lock import RunLock
from .runs import (
    BEST_MODEL_FILE,
    IDENTITY_FILE,
    RESUME_FILE,
    RUNNER_KEY,
    model_folders,
    pointed_checkpoint,
    read_run_json,
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


def is_weight_key(key: str) -> bool:
    """Config keys naming a weight file the run loads: the CLIP backbone and a distilling trainer's teacher CLIP
    (``*.TEACHER_NAME``) and teacher checkpoint (``*.TEACHER_CKPT``)."""
    return key == "MODEL.BACKBONE.NAME" or key.endswith((".TEACHER_NAME", ".TEACHER_CKPT"))


def weight_digests(config: Mapping[str, Any]) -> dict[str, str]:
    """SHA-256 of each weight file the flat ``config`` names by path (:func:`is_weight_key`); model names such as
    ``ViT-B/16`` are left to their config value (a download is checked against its published SHA-256)."""
    return {key: file_digest(value) for key, value in sorted(config.items())
            if is_weight_key(key) and isinstance(value, str) and value and os.path.isfile(value)}


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


def run_identity(cfg: Mapping, eval_only: bool = False, model_dir: str = "",
                 load_epoch: int | str | None = None) -> dict:
    """What a run is, without its data: trainer, seed, mode, the merged config minus :data:`IGNORED_KEYS`, the content
    of the weight files it names (:func:`weight_digests`) and, for an evaluation of a trained model, the model folder,
    load epoch and a digest of each file it loads."""
    config = {k: v for k, v in flat_config(cfg).items() if k not in IGNORED_KEYS}
    identity: dict[str, Any] = {"trainer": config.get("TRAINER.NAME", ""), "seed": config.get("SEED"),
                                "mode": "eval-only" if eval_only else "train", "config": config,
                                "weights": weight_digests(config)}
    if eval_only and model_dir:
        identity["model"] = {
            "dir": os.path.abspath(model_dir), "load_epoch": load_epoch,
            "files": {os.path.relpath(p, model_dir): file_digest(p) for p in evaluated_files(model_dir, load_epoch)},
        }
    return identity


def data_digest(dataset: Any, root: str) -> dict[str, str]:
    """SHA-256 per split of what a run trains and tests on: each item's image path (relative to ``root``), label,
    domain and class name, in order, and the class names; image bytes are not read."""
    splits = getattr(dataset, "splits", None)
    named = {name: getattr(dataset, name, None) for name in ("train_x", "train_u", "val", "test")}
    named["router_x"] = getattr(splits, "router_x", None)
    digests = {}
    for name, items in named.items():
        if items:
            h = hashlib.sha256()
            for item in items:
                h.update(f"{os.path.relpath(item.impath, root)}\t{item.label}\t{item.domain}\t{item.classname}\n"
                         .encode())
            digests[name] = h.hexdigest()
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
    old_weights, new_weights = recorded.get("weights") or {}, current.get("weights") or {}
    diffs += [f"{k} file content sha256 {old_weights[k][:12]} → {new_weights[k][:12]} (same path, other bytes)"
              for k in sorted(old_weights.keys() & new_weights.keys())
              if old_weights[k] != new_weights[k] and old.get(k) == new.get(k)]
    old_files = (recorded.get("model") or {}).get("files", {})
    new_files = (current.get("model") or {}).get("files", {})
    if old_files != new_files:
        changed = sorted(k for k in old_files.keys() | new_files.keys() if old_files.get(k) != new_files.get(k))
        diffs.append(f"loaded checkpoints ({', '.join(changed)})")
    if with_data and recorded.get("data") and current.get("data"):
        old_data, new_data = recorded["data"], current["data"]
        changed = sorted(k for k in old_data.keys() | new_data.keys() if old_data.get(k) != new_data.get(k))
        if changed:
            diffs.append(f"data ({', '.join(changed)}: other images, labels or classes)")
    return diffs


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

    def _mismatch(self, diffs: list[str]) -> None:
        aside = aside_path(self.folder)
        what = "a finished" if self.state == "finished" else "an interrupted"
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

    def record(self, data: dict[str, str] | None) -> None:
        """Write this run's identity (with its data digest) to ``run.json``, atomically."""
        from .utils import write_json  # the engine's atomic writer (imports torch; a run has loaded it by now)

        identity = {**self.identity, "data": data} if data is not None else self.identity
        write_json(identity, os.path.join(self.folder, IDENTITY_FILE))

    def release(self) -> None:
        self.lock.release()


def claim_run(folder: str, identity: dict | None, command: str, move_aside: bool = False,
              resume_from: str = "") -> RunClaim:
    """Lock ``folder`` and decide what a run with ``identity`` (None: a run that neither trains nor evaluates) does
    there: skip (the same run finished), resume, start, or stop with :class:`RunMismatchError` (another run's
    results or resume state are there; with ``move_aside`` that run is moved to :func:`aside_path` instead).
    ``resume_from`` (``--resume``, another folder) must hold the same run."""
    lock = RunLock(folder).acquire(command)
    try:
        claim = RunClaim(folder, unlocked_state(folder), lock, identity, move_aside=move_aside)
        if identity is not None:
            _decide(claim)
            if resume_from and os.path.abspath(resume_from) != os.path.abspath(folder):
                _check_resume_source(resume_from, identity)
    except BaseException:
        lock.release()
        raise
    return claim


def _decide(claim: RunClaim) -> None:
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


def _check_resume_source(resume_from: str, identity: dict) -> None:
    recorded = read_identity(resume_from)
    diffs = identity_differences(recorded, identity, with_data=False) if recorded else []
    if diffs:
        raise RunMismatchError(f"RESUME {resume_from} holds a run with another config: {'; '.join(diffs[:6])}; "
                               "resume from a run of this config, or drop --resume")
