"""What a run folder says: our ``results.json``, else the log of a Dassl / CoOp / PromptKD run (upstream's rules);
which classes its accuracy covers; and whether what it records is the run of the folder it lies in.

A run records its dataset, seed, trainer and evaluated classes: ours in results.json (``dataset``, ``seed``,
``trainer``, ``subsample_classes``) and in the config of its run.json, an upstream one in the config dump at the top
of its log (``DATASET.NAME``, ``SEED``, ``TRAINER.NAME``, ``DATASET.SUBSAMPLE_CLASSES``); the first of results.json,
run.json and the log that records a value answers. A run that records another value than its folder's is left out of
every table with one ``warning:`` line naming the file, the recorded value and the folder's. A metric is a percentage:
a value that is not a number from 0 to 100 (NaN, infinity, -5, 150) is left out with one ``warning:`` line.
"""
from __future__ import annotations

import functools
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from analysis.errors import ResultsError
from analysis.layout import LOG_FILE, RESULT_FILE, ROLE_DIRS, find_runs, parse_run_path, seed_of
from engine.json_text import load_json
from engine.runs import (
    FINISH_SIGNALS,
    IDENTITY_FILE,
    RESULT_SIGNAL,
    has_identity,
    logged_config,
    logged_value,
    metric_pattern,
    read_run_json,
    run_log,
)
from trainers.catalog import method_name

VAL_HEADER = "Evaluate on the *val* set"
DATASET_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "datasets")
"""The dataset configs; a dataset's folder in the run layout is its config's name (``units.facts.dataset_name``
names both)."""
CLASSES = {"base": "base", "new": "novel", "all": "all"}
"""``DATASET.SUBSAMPLE_CLASSES`` (results.json ``subsample_classes``) → the classes a run's test covers."""
RECORDED_KEYS = {"dataset": ("dataset", "DATASET.NAME"), "seed": ("seed", "SEED"),
                 "trainer": ("trainer", "TRAINER.NAME"), "classes": ("subsample_classes", "DATASET.SUBSAMPLE_CLASSES")}
"""What a run records about itself: its key in results.json and in the config dump of an upstream log."""


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().rstrip("%"))
        except ValueError:
            return None
    return None


def value_from_results_json(obj: Any, keyword: str) -> float | None:
    """``keyword`` from a results.json dict (top level, or under ``metrics`` / ``results``), in percent."""
    if not isinstance(obj, dict):
        return None
    for scope in (obj, obj.get("metrics"), obj.get("results")):
        if isinstance(scope, dict) and keyword in scope:
            return _number(scope[keyword])
    return None


def value_from_log(text: str, keyword: str = "accuracy", test_log: bool = False) -> float | None:
    """Last ``* keyword: X%`` after the end signal (``Finish training`` / ``Finished training``, or ``=> result``
    with ``test_log``)."""
    return logged_value(text, keyword, RESULT_SIGNAL if test_log else FINISH_SIGNALS)


def val_values_from_log(text: str, keyword: str = "accuracy") -> list[float]:
    """``keyword`` of every ``Evaluate on the *val* set`` block before ``Finish training`` (PromptKD's base)."""
    pattern = metric_pattern(keyword)
    values, in_val = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in FINISH_SIGNALS:
            break
        if stripped.startswith("Evaluate on the"):
            in_val = stripped == VAL_HEADER
        elif in_val and (m := pattern.search(line)):
            values.append(float(m.group(1)))
            in_val = False
    return values


def read_text(path: str) -> str:
    """A log file's text (undecodable bytes replaced, as logs may hold any file name)."""
    with open(path, errors="replace") as f:
        return f.read()


def _read_results(run_dir: str) -> dict | None:
    """The run's results.json; None without one. A file that is no JSON object is one error naming it."""
    json_path = os.path.join(run_dir, RESULT_FILE)
    if not os.path.isfile(json_path):
        return None
    try:
        with open(json_path, encoding="utf-8") as f:
            record = load_json(f)
    except ValueError as e:
        raise ResultsError(f"malformed {json_path}: {e} (delete it or re-run the evaluation)") from None
    if not isinstance(record, dict):
        raise ResultsError(f"malformed {json_path}: a JSON {type(record).__name__}, not an object (delete it or re-run "
                           "the evaluation)")
    return record


def routed_method(trainer: str, routed_on: set[str]) -> str:
    """The method name of a trainer's runs (``trainers.catalog.method_name``): a PETR+X method's from the one
    trainer its runs routed on; the trainer's name when they routed on several."""
    return method_name(trainer, next(iter(routed_on)) if len(routed_on) == 1 else "")


def classes_words(classes: str) -> str:
    """``the base classes``, ``the novel classes``, ``all classes`` (or the unknown value as it is)."""
    return "all classes" if classes == "all" else f"the {classes} classes"


def _identity_config(run_dir: str) -> dict:
    """The config the run's run.json records ({} without one, or when it is unreadable: the run is then read from
    its other records)."""
    try:
        identity = read_run_json(run_dir)
    except (OSError, ValueError):
        return {}
    config = identity.get("config") if isinstance(identity, dict) else None
    return config if isinstance(config, dict) else {}


@dataclass(frozen=True)
class RunRecord:
    """One run folder, read once: ``results`` (its results.json; None without one), ``identity`` (the config its
    run.json records; {} without one) and ``log`` (the log ``engine.runs.run_log`` picks, "" without one) with its
    ``text``."""

    path: str
    results: dict | None
    log: str
    text: str
    identity: dict = field(default_factory=dict)
    warned: set = field(default_factory=set, compare=False, repr=False)
    """The (file, metric) pairs whose impossible value was warned about (each once)."""

    @classmethod
    def read(cls, path: str) -> RunRecord:
        log = run_log(path) or ""
        return cls(path, _read_results(path), log, read_text(log) if log else "", _identity_config(path))

    @functools.cached_property
    def config(self) -> dict[str, str]:
        """The config dump of the log (``engine.runs.logged_config``), what an upstream run records."""
        return logged_config(self.text)

    @property
    def source(self) -> str:
        """The file the run's records are read from: results.json (ours), else its log."""
        return os.path.join(self.path, RESULT_FILE) if self.results is not None else self.log

    def value(self, keyword: str = "accuracy", test_log: bool = False) -> float | None:
        """``keyword``: results.json first, else the log (after ``Finish training``, or ``=> result`` with
        ``test_log``); None if neither has it, or when it is no percentage (:meth:`percentage`)."""
        value = value_from_results_json(self.results, keyword)
        if value is not None:
            return self.percentage(value, keyword, os.path.join(self.path, RESULT_FILE))
        return self.percentage(value_from_log(self.text, keyword, test_log), keyword, self.log)

    def val_values(self, keyword: str = "accuracy") -> list[float]:
        """``keyword`` of every validation block of the log (:func:`val_values_from_log`) that is a percentage."""
        values = (self.percentage(v, keyword, self.log) for v in val_values_from_log(self.text, keyword))
        return [v for v in values if v is not None]

    def percentage(self, value: float | None, keyword: str, where: str) -> float | None:
        """``value`` when it is a percentage, a finite number from 0 to 100; else None, with one ``warning:`` line
        (once per file and metric) naming the file: a value no evaluation gives is left out of the tables."""
        if value is None or (math.isfinite(value) and 0 <= value <= 100):
            return value
        if (where, keyword) not in self.warned:
            self.warned.add((where, keyword))
            print(f"warning: {where} records {keyword} {value:g}, which is no percentage (0 to 100): left out (restore "
                  "the file or run the evaluation again)", file=sys.stderr)
        return None

    @property
    def routed_on(self) -> str:
        """The trainer whose run a PETR+X run routed on, as its results.json records it ("" for other runs)."""
        return (self.results or {}).get("tuned_trainer", "")

    @property
    def selected_on(self) -> str | None:
        """The split results.json says the model was selected on: "val", "test" (TEST.FINAL_MODEL best_val without
        a val split), or None (the last epoch, an upstream run, or no results.json)."""
        return (self.results or {}).get("selected_on")

    @property
    def upstream_promptkd(self) -> bool:
        """An upstream PromptKD base-to-novel run (its log's config: TRAINER.NAME PromptKD, TRAINER.MODAL
        base2novel; no results.json or identity of ours): PromptKD's reader makes its val split the base classes'
        test images and its test split the novel classes', whatever DATASET.SUBSAMPLE_CLASSES says, so its final
        accuracy covers the novel classes although its folder is ``train_base``."""
        return (self.results is None and self.config.get("TRAINER.NAME") == "PromptKD"
                and self.config.get("TRAINER.MODAL") == "base2novel" and not has_identity(self.path))

    def recorded(self, what: str) -> tuple[str, Any, str]:
        """``(key, value, file)`` of ``what`` (a :data:`RECORDED_KEYS` entry) as the run records it: results.json,
        else the config of its run.json, else the config dump of its log (each as the file says it); value None (and
        file :attr:`source`) when none records it."""
        json_key, config_key = RECORDED_KEYS[what]
        identity = os.path.join(self.path, IDENTITY_FILE)
        scopes = [(json_key, self.results or {}, self.source), (config_key, self.identity, identity),
                  (config_key, self.config, self.log)]
        for key, scope, where in scopes:
            if scope.get(key) not in (None, ""):
                return key, scope[key], where
        return (json_key if self.results is not None else config_key), None, self.source

    @property
    def classes(self) -> str | None:
        """The classes the final accuracy covers: base, novel or all (an unknown recorded value as it is); None when
        the run records none."""
        if self.upstream_promptkd:
            return "novel"
        value = self.recorded("classes")[1]
        return None if value is None else CLASSES.get(str(value), str(value))

    def _classes_misfit(self, expected: str) -> tuple[str, str] | None:
        if self.upstream_promptkd:  # base on val, novel on test: it fits a base-to-novel folder of either
            return None if expected in ("base", "novel") else (self.source, (
                f"TRAINER.NAME 'PromptKD' with TRAINER.MODAL 'base2novel' (upstream PromptKD: the base classes on val, "
                f"the novel classes on test) but lies in a folder of {classes_words(expected)}"))
        key, value, where = self.recorded("classes")
        if value is None or self.classes == expected:
            return None
        return where, (f"{key} {value!r} ({classes_words(self.classes)}) but lies in a folder of "
                       f"{classes_words(expected)}")

    def misfit(self, dataset: str | None = None, seed: int | None = None, trainer: str | None = None,
               classes: str | None = None) -> bool:
        """True, with one warning line on stderr per file that says so, when the run records another dataset (a
        dataset folder name of the layout, matched to its DATASET.NAME), seed, trainer or classes than the folder it
        lies in; what the run does not record, or the folder does not say (None), is not compared."""
        found: dict[str, list[str]] = {}
        key, value, where = self.recorded("dataset")
        if dataset is not None and value is not None and not same_dataset(str(value), dataset):
            found.setdefault(where, []).append(f"{key} {value!r} but lies in the folder of {dataset}")
        key, value, where = self.recorded("seed")
        if seed is not None and value is not None and _integer(value) != seed:
            found.setdefault(where, []).append(
                f"{key} {value} but lies in the folder {os.path.basename(os.path.normpath(self.path))}")
        key, value, where = self.recorded("trainer")
        if trainer is not None and value is not None and str(value) != trainer:
            found.setdefault(where, []).append(f"{key} {value!r} but lies in the folder of {trainer}")
        if classes is not None and (why := self._classes_misfit(classes)):
            found.setdefault(why[0], []).append(why[1])
        for where, reasons in found.items():
            print(f"warning: {where} records {'; '.join(reasons)}: not this folder's run, left out (move it to the "
                  "folder of the run it records)", file=sys.stderr)
        return bool(found)

    def misfits_its_folder(self) -> bool:
        """:meth:`misfit` against what the folder's path says: the seed of a ``seed<S>`` / ``seed_<S>`` folder, and
        in the base-to-novel layout its dataset, trainer and the classes of its role."""
        rp = parse_run_path(self.path)
        seed = seed_of(os.path.basename(os.path.normpath(self.path)))
        if rp is None:
            return self.misfit(seed=seed)
        return self.misfit(rp.dataset, seed, rp.trainer, ROLE_DIRS[rp.role])


def _integer(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def left_out_empty(folder: str) -> None:
    """One warning line: ``folder`` (a run's folder) holds no results.json and no log, so it is left out."""
    print(f"warning: {folder} holds no {RESULT_FILE} and no {LOG_FILE}: left out (its run has not started, or its "
          "files were moved)", file=sys.stderr)


@functools.cache
def dataset_names() -> dict[str, str]:
    """DATASET.NAME of each dataset folder name of the run layout (``configs/datasets/<folder>.yaml``)."""
    names = {}
    if os.path.isdir(DATASET_CONFIGS):
        for file in sorted(os.listdir(DATASET_CONFIGS)):
            if file.endswith(".yaml"):
                with open(os.path.join(DATASET_CONFIGS, file)) as f:
                    config = yaml.safe_load(f) or {}
                name = (config.get("DATASET") or {}).get("NAME")
                if name:
                    names[file[:-len(".yaml")]] = str(name)
    return names


def _name_key(name: str) -> str:
    """A dataset name without case and punctuation ("OxfordPets" and "oxford_pets" are one)."""
    return re.sub(r"[^0-9a-z]", "", name.lower())


def same_dataset(recorded: str, folder: str) -> bool:
    """Whether the recorded dataset name is the dataset of ``folder`` (its DATASET.NAME, or the folder's own name)."""
    return _name_key(recorded) in {_name_key(folder), _name_key(dataset_names().get(folder, folder))}


def dir_runs(directory: str) -> list[tuple[str, RunRecord]]:
    """``(run name, record)`` of every run folder of ``directory`` that fits its folder; a sub-folder without
    results or log and a run that records another folder's run are left out, one warning line each."""
    runs, empty = find_runs(directory)
    if not runs:
        raise ResultsError(f"no run folders with {RESULT_FILE} or {LOG_FILE} in {directory}")
    for folder in empty:
        left_out_empty(folder)
    records = [(os.path.basename(os.path.normpath(r)), RunRecord.read(r)) for r in runs]
    kept = [(name, record) for name, record in records if not record.misfits_its_folder()]
    if not kept:
        raise ResultsError(f"every run folder of {directory} was left out (see the warnings above)")
    return kept


def common_classes(classes: Sequence[str | None]) -> str | None:
    """The classes every run covers (base, novel, all), ``mixed`` when they differ, None when none records them."""
    kinds = set(classes)
    return "mixed" if len(kinds) > 1 else next(iter(kinds), None)


def classes_phrase(kind: str | None) -> str:
    """:func:`common_classes` in words: ``the base classes``, ``mixed classes``, ``classes not recorded``."""
    return "classes not recorded" if kind is None else "mixed classes" if kind == "mixed" else classes_words(kind)
