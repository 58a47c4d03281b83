"""docs/troubleshooting.md's exit-status table is what the commands do: each row is checked, by a run here (a bad
argument, or a success that costs little) or by the test named for it, and every run here ends with a status its
command's rows state.

Commands whose imports take seconds in a new process (torch) run as their ``main(argv)`` in this one; the others run
as a user types them, from the repository root in a sandbox (tests/helpers_docs.py). Two rows are other programs'
rules: make's status when a recipe fails, and Python's for an uncaught exception.
"""
from __future__ import annotations

import importlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tests.helpers_docs import markdown_table, node_exists, read_doc, run_as_written, sandbox_env

DOC = "docs/troubleshooting.md"


@dataclass(frozen=True)
class Shell:
    """A command line run as typed (``{tmp}``: a fresh temporary folder); its output holds a line starting with
    ``says``."""

    command: str
    says: str = ""


@dataclass(frozen=True)
class InProcess:
    """``module.main(argv)`` in this process (``{tmp}`` as above); its output holds a line starting with ``says``."""

    module: str
    argv: tuple[str, ...]
    says: str = ""


@dataclass(frozen=True)
class Named:
    """The test (``file::function``) that runs the command to this status."""

    node: str


@dataclass(frozen=True)
class Rule:
    """Another program's rule, not this project's code."""

    owner: str


TRAIN, UNITS = "`python train.py`", "`bash scripts/<method>/<command>.sh`, `python -m units`"
RUNNER, PARSE = "`python -m runner`", "`python parse_test_res.py`"
CHECK, FETCH, CLIP = "`python -m datasets.check`", "`python -m datasets.fetch`", "`python -m clip.download`"
TEACHERS, RUNS = "`python -m tools.fetch_teachers`", "`python -m engine.runs`"
TOOLS = "`python -m tools.router_ablation`, `python -m tools.lambda_sweep`, `python -m tools.plot_routing_scores`"
DEMO, SHIPPED = "`bash scripts/demo.sh`, `python -m demo.pipeline`", "`python -m demo.shipped`"
WRAPPERS, MAKE = "`python -m units.wrappers` (`make scripts`)", "`make demo`, `make test`, ..."

CHECKS: dict[tuple[str, str], tuple[Shell | InProcess | Named | Rule, ...]] = {
    (TRAIN, "0"): (Named("tests/test_interrupt_resume.py::test_killed_runs_resume_to_the_same_weights_and_results"),),
    (TRAIN, "2"): (Shell("python train.py --load-epoch 0", "usage: train.py"),
                   InProcess("train", ("--root", "{tmp}", "--trainer", "NoSuch", "--output-dir", "{tmp}/out"),
                             "error: Unknown trainer (TRAINER.NAME / --trainer) 'NoSuch'")),
    (TRAIN, "75"): (Named("tests/test_preemption.py::test_preempted_runs_resume_to_the_same_weights_and_results"),),
    (TRAIN, "130"): (Named("tests/test_interrupt_resume.py::test_killed_runs_resume_to_the_same_weights_and_results"),),
    (TRAIN, "1"): (Rule("Python: the status of an uncaught exception"),),
    (UNITS, "0"): (Shell("python -m units --print-argv petr base2new_train eurosat 1", "Training PETR on eurosat"),),
    (UNITS, "2"): (Shell("bash scripts/coop/base2new_train.sh eurosat 1", "error: DATA is not set"),
                   Shell("python -m units nosuch base2new_train", "error: usage: python -m units")),
    (UNITS, "75"): (Named("tests/test_preemption.py::test_a_unit_script_passes_the_preempted_status_on"),),
    (UNITS, "130"): (Named(
        "tests/test_interrupt_resume.py::test_reproduce_script_interrupted_between_runs_finishes_the_same"),),
    (RUNNER, "0"): (Named(
        "tests/test_runner_local.py::test_a_sweep_whose_jobs_were_refused_publishes_no_stale_table"),),
    (RUNNER, "1"): (Named(
        "tests/test_runner_local.py::test_a_sweep_whose_jobs_were_refused_publishes_no_stale_table"),),
    (RUNNER, "2"): (Shell("python -m runner base2new --datasets eurosat --data {tmp}/none --dry-run",
                          "error: EuroSAT: {tmp}/none/eurosat: dataset folder missing"),
                    Shell("python -m runner base2new --datasets nosuch --data {tmp}", "error: "),
                    Named("tests/test_runner_bad_input.py::test_bad_arguments_stop_before_anything_starts")),
    (RUNNER, "130, 143, 129"): (Named("tests/test_runner_schedule.py::test_a_signal_to_the_runner_stops_its_jobs"),),
    (PARSE, "0"): (Shell("python parse_test_res.py paper", "== base2novel"),),
    (PARSE, "2"): (Shell("python parse_test_res.py b2n {tmp}/none", "parse_test_res.py: error: directory not found"),),
    (CHECK, "0"): (Named("tests/test_datasets_check.py::test_command_line_exit_status"),),
    (CHECK, "1"): (Shell("python -m datasets.check --root {tmp}/none eurosat", "EuroSAT: {tmp}/none/eurosat: "),),
    (CHECK, "2"): (Shell("python -m datasets.check --root {tmp} nosuch", "error: unknown dataset 'nosuch'"),),
    (FETCH, "0"): (Named("tests/test_fetch_datasets.py::test_fetch_three_layouts_then_the_readers_read_them"),),
    (FETCH, "2"): (Shell("python -m datasets.fetch --root {tmp}/data eurosat --dry-run", "error: cannot list "),
                   Shell("python -m datasets.fetch --root {tmp}/data imagenet", "ImageNet is not in the")),
    (CLIP, "0"): (Named("tests/test_fetch_clip.py::test_download_then_already_there"),),
    (CLIP, "2"): (InProcess("clip.download", ("ViT-B/16", "--dir", "{tmp}", "--dry-run"), "missing: ViT-B/16: "),
                  InProcess("clip.download", ("NoSuch",), "error: unknown CLIP model(s) NoSuch")),
    (TEACHERS, "0"): (Named("tests/test_fetch_teachers.py::test_fetch_verify_and_place"),),
    (TEACHERS, "2"): (InProcess("tools.fetch_teachers", ("--teacher-dir", "{tmp}", "EuroSAT"), "error: cannot list "),
                      InProcess("tools.fetch_teachers", ("--dir", "{tmp}", "NoSuch"), "error: unknown teacher(s)")),
    (RUNS, "0"): (Shell("python -m engine.runs state {tmp}", "new"),),
    (RUNS, "2"): (Shell("python -m engine.runs saved-model {tmp}", "error: no checkpoint in {tmp}"),),
    (TOOLS, "0"): (Named("tests/test_tools_analysis.py::test_lambda_sweep_matches_numpy"),),
    (TOOLS, "2"): (InProcess("tools.lambda_sweep", ("{tmp}/none",), "lambda_sweep.py: error: "),),
    (DEMO, "0"): (Named("tests/test_demo_pipeline.py::test_quick_demo_shows_the_effects"),),
    (DEMO, "1"): (Named(
        "tests/test_demo_pipeline.py::test_demo_skips_finished_runs_and_a_failure_stops_only_its_dependents"),),
    (DEMO, "2"): (InProcess("demo.pipeline", ("--jobs",), "usage: "),),
    (DEMO, "130, 143, 129"): (Named(
        "tests/test_demo_pipeline.py::test_a_signal_stops_the_demo_with_the_runners_line"),),
    (SHIPPED, "0"): (Named("tests/test_demo_shipped.py::test_clip_files_expand_once_into_files_clip_load_reads"),),
    (SHIPPED, "2"): (InProcess("demo.shipped", ("expand", "--weights", "{tmp}/none", "--cache", "{tmp}"), "error: "),),
    (WRAPPERS, "0"): (Shell("python -m units.wrappers --check"),),
    (WRAPPERS, "1"): (Named(
        "tests/test_wrappers.py::test_check_names_each_wrapper_not_as_rendered_and_writing_repairs_them"),),
    (MAKE, "0"): (Rule("make: the status of a target whose commands succeeded"),),
    (MAKE, "2"): (Rule("make: the status when a command of a target fails"),),
}
"""How each (command, status) row of the table is checked: every row has an entry, every entry a row."""


def table_rows() -> list[tuple[str, str, str]]:
    """(command, status, when) per row of the table; an empty command cell continues the row above's command."""
    rows, command = [], ""
    for cells in markdown_table(read_doc(DOC), "| command | status | when |"):
        command = cells[0] or command
        rows.append((command, cells[1], cells[2]))
    return rows


def test_every_row_is_checked_and_every_check_is_a_row():
    rows = {(command, status) for command, status, _ in table_rows()}
    assert sorted(rows - set(CHECKS)) == [], f"rows of {DOC}'s exit-status table without a check in {__file__}"
    assert sorted(set(CHECKS) - rows) == [], f"checks in {__file__} without a row in {DOC}'s exit-status table"


def test_the_tests_named_for_rows_exist():
    missing = [check.node for checks in CHECKS.values() for check in checks
               if isinstance(check, Named) and not node_exists(check.node)]
    assert missing == []


def ran(check: Shell | InProcess, tmp: str, capsys) -> tuple[int, str]:
    """(exit status, output) of a check run here."""
    if isinstance(check, Shell):
        done = run_as_written(check.command.format(tmp=tmp), sandbox_env(tmp))
        return done.returncode, done.stdout
    argv = [arg.format(tmp=tmp) for arg in check.argv]
    main = getattr(importlib.import_module(check.module), "cli" if check.module == "train" else "main")
    try:
        status = main(argv)
    except SystemExit as e:  # argparse
        status = e.code
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_each_command_ends_with_the_status_of_its_row(tmp_path, capsys):
    runs = [(key, check, str(tmp_path / str(i))) for i, (key, check) in enumerate(
        (key, check) for key, checks in CHECKS.items() for check in checks if isinstance(check, (Shell, InProcess)))]
    for _, _, tmp in runs:
        os.makedirs(tmp)
    shells = [i for i, (_, check, _) in enumerate(runs) if isinstance(check, Shell)]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = dict(zip(shells, pool.map(lambda i: ran(runs[i][1], runs[i][2], capsys), shells)))
    wrong = []
    for i, ((command, status), check, tmp) in enumerate(runs):
        got, output = results[i] if i in results else ran(check, tmp, capsys)
        says = check.says.format(tmp=tmp)
        if got != int(status) or not any(line.startswith(says) for line in output.splitlines() or [""]):
            wrong.append(f"{command}: {check}: exit status {got} (the table: {status}); output ends:\n"
                         f"{output[-1500:]}")
    assert wrong == [], "\n\n".join(wrong)
