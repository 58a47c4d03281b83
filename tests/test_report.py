"""The sweep report (analysis/report.py, ``python -m runner report``): the tables' numbers against values computed
here by hand from the results the tree holds, the routing rates of a routed method, and the figure written."""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys

import pytest

from analysis.report import b2n_report, mean_std, protocol_report, transfer_report
from tests.helpers_results import make_b2n_tree, make_dumps, run_dir, write_results_json
from tests.helpers_run import HANG_GUARD_S, REPO

B2N = {"PETR": {"eurosat": ([90.0, 92.0, 91.0], [70.0, 74.0, 72.0]), "dtd": ([80.0, 82.0, 78.0], [60.0, 58.0, 62.0])},
       "CoOp": {"eurosat": ([88.0, 89.0, 90.0], [50.0, 52.0, 54.0]), "dtd": ([79.0, 80.0, 81.0], [40.0, 44.0, 42.0])}}


@pytest.fixture
def tree(tmp_path):
    """Two datasets, PETR and CoOp over seeds 1-3; PETR's runs record routing rates and dump their logits."""
    root = tmp_path / "out" / "base2new"
    for trainer, results in B2N.items():
        make_b2n_tree(str(root), trainer, "cfg", results)
    for ds in B2N["PETR"]:
        for seed in (1, 2, 3):
            base = run_dir(str(root), "train_base", ds, "PETR", "cfg", seed)
            new = run_dir(str(root), "test_new", ds, "PETR", "cfg", seed)
            write_results_json(base, B2N["PETR"][ds][0][seed - 1], dataset=ds, trainer="PETR",
                               subsample_classes="base", route_acc_seen=95.0 + seed)
            write_results_json(new, B2N["PETR"][ds][1][seed - 1], dataset=ds, trainer="PETR",
                               subsample_classes="new", route_acc_unseen=80.0 + seed)
            if ds == "dtd" and seed == 1:
                make_dumps(base, new)
    return tmp_path / "out"


def by_hand(base: list[float], novel: list[float]) -> tuple[str, str, str]:
    """Mean ± sample std of base, novel and the per-seed HM, written independently of the report's code."""
    hms = [2 * b * n / (b + n) for b, n in zip(base, novel)]
    return tuple(f"{statistics.mean(v):.2f} ± {statistics.stdev(v):.2f}" for v in (base, novel, hms))


def rows(markdown: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines()
            if line.startswith("|") and not set(line) <= set("|-: ")][1:]


def test_b2n_tables_by_hand(tree):
    report = b2n_report(str(tree / "base2new"))
    table = {(r[0], r[1]): r[2:] for r in rows(report.sections[0][1])}
    for trainer, results in B2N.items():
        for ds, (base, novel) in results.items():
            assert table[(ds, trainer)] == ["3", *by_hand(base, novel)]
        bases = [statistics.mean(results[ds][0]) for ds in results]
        novels = [statistics.mean(results[ds][1]) for ds in results]
        b, n = statistics.mean(bases), statistics.mean(novels)
        assert table[("average", trainer)] == ["2", f"{b:.2f}", f"{n:.2f}", f"{2 * b * n / (b + n):.2f}"]
    routing = {(r[0], r[1]): r[2:] for r in rows(report.sections[1][1])}
    assert routing == {(ds, "PETR"): ["97.00 ± 1.00", "82.00 ± 1.00"] for ds in ("eurosat", "dtd")}  # CoOp: none
    assert list(report.panels) == ["average over the datasets", "dtd", "eurosat"]
    assert report.panels["dtd"]["CoOp"][:2] == (80.0, 42.0)
    base, novel, threshold, title = report.scores
    assert len(base) == len(novel) == 60 and threshold > 0
    assert title == "PETR's Mahalanobis scores\ndtd seed 1 test split"


def test_mean_std_of_one_value_and_none():
    assert (mean_std([71.5]), mean_std([]), mean_std([1.0, 2.0, 6.0])) == ("71.50", "-", "3.00 ± 2.65")


def test_transfer_report_by_hand(tmp_path):
    out = tmp_path / "out"
    for ds, accs in (("imagenet", [70.0, 72.0]), ("caltech101", [93.0, 95.0]), ("dtd", [45.0, 47.0])):
        for seed, acc in enumerate(accs, 1):
            write_results_json(str(out / "xd" / "train" / ds / "shots_0" / "PETR" / "cfg" / f"seed{seed}"), acc,
                               dataset=ds, trainer="PETR", subsample_classes="all")
    report = transfer_report(str(out), "xd", "imagenet", ["caltech101", "dtd"])
    (row,) = rows(report.sections[0][1])
    assert row == ["PETR", "71.00 ± 1.41", "94.00 ± 1.41", "46.00 ± 1.41", "70.00"]
    assert report.metrics == ("imagenet (source)", "caltech101", "dtd", "Average")


def test_report_files_and_the_runner_command(tree):
    written = protocol_report(str(tree), "base2new", str(tree / "base2new"))
    assert [os.path.basename(p) for p in written] == ["report.md", "report.png"]
    with open(written[1], "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    os.remove(written[0])
    done = subprocess.run([sys.executable, "-m", "runner", "report", str(tree)], cwd=REPO, capture_output=True,
                          text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    assert re.search(r"Report written to .*base2new/report\.md", done.stdout)
    markdown = open(written[0]).read()
    assert "| eurosat   | PETR     | 3       | 91.00 ± 1.00" in markdown and "(report.png)" in markdown
    missing = subprocess.run([sys.executable, "-m", "runner", "report", str(tree / "nothing")], cwd=REPO,
                             capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")
