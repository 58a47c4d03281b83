"""What a run folder says: our ``results.json``, else Dassl / CoOp / PromptKD ``log.txt`` (upstream's rules)."""
from __future__ import annotations

import json
import os
from typing import Any

from analysis.errors import ResultsError
from analysis.layout import LOG_FILE, RESULT_FILE, find_runs
from engine.runs import FINISH_SIGNAL, RESULT_SIGNAL, logged_value, metric_pattern

VAL_HEADER = "Evaluate on the *val* set"


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


def selected_on(run_dir: str) -> str | None:
    """The split the run's results.json says its model was selected on: "val", "test" (TEST.FINAL_MODEL best_val
    without a val split), or None (the last epoch, an upstream run, or no results.json)."""
    json_path = os.path.join(run_dir, RESULT_FILE)
    if not os.path.isfile(json_path):
        return None
    try:
        with open(json_path) as f:
            record = json.load(f)
    except json.JSONDecodeError:
        return None  # read_run names the malformed file
    return record.get("selected_on") if isinstance(record, dict) else None


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
