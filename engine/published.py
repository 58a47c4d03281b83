"""What a published teacher records about the run it came from (``<TEACHER_DIR>/<folder>/teacher.json``), so a
student or a plan never takes a teacher of another backbone, config or dataset as its own. Standard library only.

The record is made from the teacher run's ``run.json`` (its identity and inputs ledger): trainer, dataset, classes,
seed, config name, backbone name and the SHA-256 of the CLIP file it read, and the checkpoint published with it.
A teacher run's own folder answers the same questions from its ``run.json``.
"""
from __future__ import annotations

import os
from typing import Any

from .errors import InvalidInputError
from .inputs import read_input_json
from .runs import IDENTITY_FILE, TEACHER_RECORD, read_run_json

FIELDS = ("trainer", "dataset", "subsample", "config", "backbone")
"""What a record says of the run that a plan compares with the teacher it would train (the seed is recorded, not
compared: the students of every seed share their dataset's teacher)."""
CONFIG_KEYS = {"trainer": "TRAINER.NAME", "dataset": "DATASET.NAME", "subsample": "DATASET.SUBSAMPLE_CLASSES",
               "seed": "SEED", "config": "CONFIG_NAME", "backbone": "MODEL.BACKBONE.NAME"}
"""The config key each field comes from."""


def record_of_run(run: str) -> dict[str, Any]:
    """The teacher record of the finished run in ``run`` (from its ``run.json``; {} when it records no identity)."""
    identity = read_run_json(run)
    if not isinstance(identity, dict) or not isinstance(identity.get("config"), dict):
        return {}
    inputs = identity.get("inputs") or {}
    clips = sorted({entry["sha256"] for entry in inputs.values()
                    if isinstance(entry, dict) and entry.get("role") == "clip" and entry.get("sha256")})
    return {**expected_record(identity["config"]), "backbone_sha256": clips[0] if len(clips) == 1 else "",
            "run": os.path.abspath(run)}


def expected_record(config: dict[str, Any]) -> dict[str, Any]:
    """The record fields of a run whose flat ``config`` is given (a recorded identity's, or what a planned run's
    command line sets: ``units.planned``)."""
    return {field: config.get(key, "all" if field == "subsample" else "") for field, key in CONFIG_KEYS.items()}


def read_record(folder: str) -> dict[str, Any]:
    """The record of the teacher in ``folder``: its ``teacher.json`` (a published teacher), else the record of the
    teacher run it is (its ``run.json``); {} when it has neither (upstream's released teachers, older publications).
    Read through the inputs ledger (role ``teacher``)."""
    path = os.path.join(folder, TEACHER_RECORD)
    if os.path.isfile(path):
        record = read_input_json(path, "teacher")
        if not isinstance(record, dict):
            raise InvalidInputError(f"{path} holds no teacher record (a JSON object); publish the teacher again")
        return record
    if os.path.isfile(os.path.join(folder, IDENTITY_FILE)):
        return record_of_run(folder)
    return {}


def record_differences(record: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """``FIELD recorded → expected`` for each of :data:`FIELDS` both name and that differ."""
    return [f"{key} {record[key]} (expected {expected[key]})" for key in FIELDS
            if record.get(key) not in (None, "") and expected.get(key) not in (None, "")
            and str(record[key]) != str(expected[key])]
