"""The runner's table holds only the runs its sweep verified: a run an earlier command left (another seed, or one
its job was refused for) never lends its numbers, and without a verified run no table file is replaced."""
from __future__ import annotations

from runner.protocols import Planner, Sweep
from runner.tables import table_path, write_tables
from tests.helpers_results import write_results_json
from trainers.catalog import find_method

ACCURACY = {("train_base", 1): 80.0, ("test_new", 1): 60.0, ("train_base", 2): 40.0, ("test_new", 2): 20.0}
"""Base and novel accuracy of CoOp's runs on eurosat per seed (seed 2 plays the stale run)."""


def test_the_table_holds_only_verified_runs(tmp_path):
    sweep = Sweep(protocol="base2new", methods=(find_method("CoOp"),), datasets=("eurosat",), seeds=(1, 2),
                  data=str(tmp_path / "data"), output=str(tmp_path / "out"), teacher_dir=str(tmp_path / "teachers"))
    jobs = Planner(sweep).plan()
    for job in jobs:
        for run in job.runs:
            role = "train_base" if "/train_base/" in run else "test_new"
            write_results_json(run, ACCURACY[(role, job.seed)], dataset="eurosat", trainer="CoOp")
    old = tmp_path / "out" / "base2new" / "b2n_table.txt"
    old.write_text("the table of an earlier sweep\n")
    assert write_tables(sweep, []) == (1, "", "") and old.read_text() == "the table of an earlier sweep\n"
    verified = [run for job in jobs if job.seed == 1 for run in job.runs]
    status, text, report = write_tables(sweep, verified)
    assert status == 0 and table_path(sweep, "txt") == str(old)
    row = next(line.split() for line in text.splitlines() if line.startswith("eurosat"))
    hm = 2 * 80.0 * 60.0 / (80.0 + 60.0)  # seed 1 alone; with seed 2 the means would be 60 and 40
    assert row[2:6] == ["1/1", "80.00", "60.00", f"{hm:.2f}"], text
    assert old.read_text() == text and "table-view-" not in text
    csv = (tmp_path / "out" / "base2new" / "b2n_table.csv").read_text()
    assert "80.00" in csv and "40.00" not in csv
    folder = tmp_path / "out" / "base2new"  # the report beside the table, of the same verified runs
    assert report == f"Report written to {folder / 'report.md'} and {folder / 'report.png'}"
    assert "| eurosat   | CoOp     | 1       | 80.00  | 60.00   | 68.57 |" in (folder / "report.md").read_text()
