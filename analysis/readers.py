"""What a run folder says: our ``results.json``, else Dassl / CoOp / PromptKD ``log.txt`` (upstream's rules)."""
from __future__ import annotations

import functools
import json
import os
import re
import sys
from typing import Any

import yaml

from analysis.errors import ResultsError
from analysis.layout import LOG_FILE, RESULT_FILE, find_runs
from engine.runs import FINISH_SIGNAL, RESULT_SIGNAL, logged_value, metric_pattern

VAL_HEADER = "Evaluate on the *val* set"
DATASET_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs", "datasets")
"""The dataset configs; a dataset's folder in the run layout is its config's name (``units.facts.dataset_name``
names both)."""


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
    """Last ``* keyword: X%`` after the end signal (``Finish training``, or ``=> result`` with ``test_log``)."""
    return logged_value(text, keyword, RESULT_SIGNAL if test_log else FINISH_SIGNAL)


def val_values_from_log(text: str, keyword: str = "accuracy") -> list[float]:
    """``keyword`` of every ``Evaluate on the *val* set`` block before ``Finish training`` (PromptKD's base)."""
    pattern = metric_pattern(keyword)
    values, in_val = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == FINISH_SIGNAL:
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


def _results_record(run_dir: str) -> dict:
    """The run's results.json as a dict; empty when it has none or it does not parse (read_run names that file)."""
    json_path = os.path.join(run_dir, RESULT_FILE)
    if not os.path.isfile(json_path):
        return {}
    try:
        with open(json_path) as f:
            record = json.load(f)
    except json.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}


def selected_on(run_dir: str) -> str | None:
    """The split the run's results.json says its model was selected on: "val", "test" (TEST.FINAL_MODEL best_val
    without a val split), or None (the last epoch, an upstream run, or no results.json)."""
    return _results_record(run_dir).get("selected_on")


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


def foreign_result(run_dir: str, folder: str) -> bool:
    """True, with one warning line on stderr, when the run's results.json records another dataset than ``folder``,
    the dataset folder its path lies in (its DATASET.NAME, or the folder's own name): another dataset's result,
    left out of the tables."""
    recorded = _results_record(run_dir).get("dataset")
    if not isinstance(recorded, str) or not recorded:
        return False
    expected = {_name_key(folder), _name_key(dataset_names().get(folder, folder))}
    if _name_key(recorded) in expected:
        return False
    print(f"warning: {os.path.join(run_dir, RESULT_FILE)} records dataset {recorded!r} but lies in the folder of "
          f"{folder}: another dataset's result, left out of the tables (move the run to its dataset's folder)",
          file=sys.stderr)
    return True


def read_run(run_dir: str, keyword: str = "accuracy", test_log: bool = False) -> float | None:
    """The run's ``keyword`` value: results.json first, else log.txt; None if neither has it."""
    json_path = os.path.join(run_dir, RESULT_FILE)
    if os.path.isfile(json_path):
        try:
            with open(json_path) as f:
                value = value_from_results_json(json.load(f), keyword)
        except json.JSONDecodeError as e:
            raise ResultsError(f"malformed {json_path}: {e} (delete it or re-run the evaluation)") from None
        if value is not None:
            return value
    log_path = os.path.join(run_dir, LOG_FILE)
    if os.path.isfile(log_path):
        return value_from_log(read_text(log_path), keyword, test_log)
    return None


def summarize_dir(directory: str, keyword: str = "accuracy", test_log: bool = False) -> list[tuple[str, float | None]]:
    """``(run name, value)`` for every run folder of ``directory``."""
    runs = find_runs(directory)
    if not runs:
        raise ResultsError(f"no run folders with {RESULT_FILE} or {LOG_FILE} in {directory}")
    return [(os.path.basename(os.path.normpath(r)), read_run(r, keyword, test_log)) for r in runs]
