"""demo.report and demo.figure: statistics over seeds, the effect verdicts and the report's tables (from hand-made
run folders) checked against hand-computed numbers; the report file and its PNG figure."""
from __future__ import annotations

import json
import statistics
import struct

import numpy as np
import pytest

from analysis.report import write_report
from demo import report
from demo.figure import report_figure


def res(base: float, novel: float, **extra_base) -> dict:
    return {"base": {"accuracy": base, **extra_base}, "novel": {"accuracy": novel}}


def seed_rows(zs=(50.0, 40.0), coop=(60.0, 35.0), kd=(61.0, 45.0), petr=(62.0, 44.0), route=(95.0, 90.0),
              branches=((63.0, 20.0), (30.0, 44.0)), petr_coop=(59.0, 38.0)) -> report.SeedRows:
    petr_res = res(*petr, acc_seen_branch=branches[0][0], acc_unseen_branch=branches[1][0], route_acc_seen=route[0])
    petr_res["novel"].update(acc_seen_branch=branches[0][1], acc_unseen_branch=branches[1][1],
                             route_acc_unseen=route[1])
    return {"ZeroshotCLIP": res(*zs), "CoOp": res(*coop), "PromptKD": res(*kd), "PETR": petr_res,
            "PETRCoOp": res(*petr_coop)}


def test_mean_std_uses_the_sample_std():
    assert report.mean_std([1.0, 2.0, 6.0]) == f"3.00 ± {np.std([1, 2, 6], ddof=1):.2f}"
    assert report.mean_std([1.0, 2.0, 6.0]) == "3.00 ± 2.65"
    assert report.mean_std([4.0]) == "4.00"


def test_effects_need_the_mean_and_a_majority_of_seeds():
    # CoOp's novel loss: holds in seeds 1 and 2, not in 3; the mean (36.67 < 40) holds -> holds
    # PETR >= PromptKD: holds only in seed 3 -> not
    per_seed = {1: seed_rows(coop=(60.0, 35.0)), 2: seed_rows(coop=(60.0, 35.0)),
                3: seed_rows(coop=(60.0, 40.0), kd=(50.0, 40.0))}
    verdicts = {claim: (holds, per, numbers) for claim, holds, per, numbers
                in report.effect_verdicts(per_seed, chance_novel=100 / 24)}
    coop = verdicts["a base-tuned prompt (CoOp) loses on novel"]
    assert coop[0] and coop[1] == [True, True, False] and coop[2] == "CoOp 36.67 vs zero-shot 40.00"
    headline = verdicts["PETR's HM at least PromptKD's (the headline)"]
    assert not headline[0] and headline[1] == [False, False, True]
    # holds in 2 of 3 seeds but not in the mean -> does not hold
    odd = {1: seed_rows(route=(95.0, 90.0)), 2: seed_rows(route=(95.0, 85.0)), 3: seed_rows(route=(95.0, 10.0))}
    verdicts = {c: h for c, h, _, _ in report.effect_verdicts(odd, 100 / 24)}
    assert not verdicts["PETR routes most base and novel images right"]


def test_transfer_table_average_is_over_targets_per_seed():
    values = {"PETR": {"src": [90.0, 92.0], "t1": [50.0, 60.0], "t2": [70.0, 80.0]}}
    table = report.transfer_table("xd", "src", ["t1", "t2"], values)
    row = table.splitlines()[2]
    # per-seed target averages 60 and 70 -> 65 ± 7.07; the source is not averaged in
    assert row.split("  ")[0] == "PETR"
    assert "91.00 ± 1.41" in row and "55.00 ± 7.07" in row and row.rstrip().endswith("65.00 ± 7.07")


@pytest.mark.parametrize("n_seeds,agree,expected", [(3, 2, True), (3, 1, False), (2, 1, False), (1, 1, True)])
def test_majority_rule(n_seeds, agree, expected):
    per_seed = {s: seed_rows(coop=(60.0, 39.0) if s <= agree else (60.0, 41.0)) for s in range(1, n_seeds + 1)}
    # the mean is below zero-shot's 40 whenever most seeds are (39 vs 41), so the seed count decides
    verdicts = {c: h for c, h, _, _ in report.effect_verdicts(per_seed, 100 / 24)}
    assert verdicts["a base-tuned prompt (CoOp) loses on novel"] == expected


def test_each_petr_x_gets_its_effect_and_routing_row():
    def rows(plugin: tuple[float, float], learner: tuple[float, float]) -> report.SeedRows:
        routed = res(*plugin, route_acc_seen=90.0, acc_seen_branch=70.0)
        routed["novel"].update(route_acc_unseen=80.0, acc_seen_branch=10.0, acc_unseen_branch=45.0)
        routed["base"]["acc_unseen_branch"] = 40.0
        return {**seed_rows(), "MaPLe": res(*learner), "PETR+MaPLe": routed}

    per_seed = {1: rows((60.0, 40.0), (62.0, 30.0)), 2: rows((58.0, 42.0), (50.0, 50.0))}
    verdicts = {claim: (holds, per, numbers) for claim, holds, per, numbers
                in report.effect_verdicts(per_seed, chance_novel=100 / 24)}
    assert "PETR+CoCoOp's HM above CoCoOp's" not in verdicts  # only the methods the rows hold
    holds, per, numbers = verdicts["PETR+MaPLe's HM above MaPLe's"]
    # HM per seed: PETR+MaPLe 48.00 / 48.72 vs MaPLe 40.43 / 50.00; the seed mean compares 59/41 with 56/40
    assert per == [True, False] and not holds
    assert numbers == f"PETR+MaPLe {2 * 59 * 41 / 100:.2f} vs MaPLe {2 * 56 * 40 / 96:.2f}"


def _run(root, role: str, shots: int, trainer: str, config: str, seed: int, accuracy: float, **extra) -> None:
    folder = root / "base2new" / role / "demo_shapes_hard" / f"shots_{shots}" / trainer / config / f"seed{seed}"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"trainer": trainer, "seed": seed, "accuracy": accuracy, **extra}))


def _b2n_tree(root) -> None:
    """Zero-shot once, CoOp and PETR for seeds 1 and 2 (CoOp's seed 3 has no novel half), PETR+CoCoOp once."""
    _run(root, "train_base", 0, "ZeroshotCLIP", "demo", 1, 50.0)
    _run(root, "test_new", 0, "ZeroshotCLIP", "demo", 1, 40.0)
    for seed, base, novel in ((1, 60.0, 30.0), (2, 70.0, 36.0)):
        _run(root, "train_base", 16, "CoOp", "demo", seed, base)
        _run(root, "test_new", 16, "CoOp", "demo", seed, novel)
    _run(root, "train_base", 16, "CoOp", "demo", 3, 99.0)
    for seed, base, novel, seen, unseen in ((1, 62.0, 44.0, 95.0, 80.0), (2, 66.0, 40.0, 90.0, 70.0)):
        _run(root, "train_base", 0, "PETR", "demo", seed, base, route_acc_seen=seen)
        _run(root, "test_new", 0, "PETR", "demo", seed, novel, route_acc_unseen=unseen)
    _run(root, "train_base", 16, "PETRX", "demo_cocoop", 1, 55.0, tuned_trainer="CoCoOp", route_acc_seen=90.0)
    _run(root, "test_new", 16, "PETRX", "demo_cocoop", 1, 45.0, tuned_trainer="CoCoOp", route_acc_unseen=85.0)


def _cells(markdown: str) -> list[list[str]]:
    """The body rows of a markdown table, cells stripped."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")][2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_report_tables_from_the_runs_results(tmp_path):
    """The markdown base-to-novel and routing tables of hand-made run folders, against values computed here
    (statistics.stdev is the sample std; HM per seed, then averaged)."""
    _b2n_tree(tmp_path)
    runs = report.collect_b2n(str(tmp_path))
    order = ("ZeroshotCLIP", "CoOp", "PETR", "PETR+CoCoOp")
    rows = _cells(report.b2n_table(runs, order, "github"))
    hm_coop = [2 * 60 * 30 / 90, 2 * 70 * 36 / 106]
    hm_petr = [2 * 62 * 44 / 106, 2 * 66 * 40 / 106]
    assert rows == [
        ["ZeroshotCLIP", "1", "50.00", "40.00", f"{2 * 50 * 40 / 90:.2f}"],
        ["CoOp", "2", f"65.00 ± {statistics.stdev([60, 70]):.2f}", f"33.00 ± {statistics.stdev([30, 36]):.2f}",
         f"{sum(hm_coop) / 2:.2f} ± {statistics.stdev(hm_coop):.2f}"],
        ["PETR", "2", f"64.00 ± {statistics.stdev([62, 66]):.2f}", f"42.00 ± {statistics.stdev([44, 40]):.2f}",
         f"{sum(hm_petr) / 2:.2f} ± {statistics.stdev(hm_petr):.2f}"],
        ["PETR+CoCoOp", "1", "55.00", "45.00", f"{2 * 55 * 45 / 100:.2f}"]]
    # one seed per method (make demo): two decimals kept, not re-read as numbers
    single = {m: {1: runs[m][1]} for m in ("ZeroshotCLIP", "PETR")}
    assert _cells(report.b2n_table(single, order, "github"))[0] == ["ZeroshotCLIP", "1", "50.00", "40.00", "44.44"]
    assert _cells(report.routing_table(single, "github")) == [["PETR", "95.00", "80.00"]]
    assert _cells(report.routing_table(runs, "github")) == [
        ["PETR", f"92.50 ± {statistics.stdev([95, 90]):.2f}", f"75.00 ± {statistics.stdev([80, 70]):.2f}"],
        ["PETR+CoCoOp", "90.00", "85.00"]]
    # zero-shot ran once: every seed of the effects reads its one run
    per_seed = report.per_seed_rows(runs)
    assert list(per_seed) == [1, 2] and per_seed[2]["ZeroshotCLIP"]["base"]["accuracy"] == 50.0
    assert per_seed[2]["CoOp"]["novel"]["accuracy"] == 36.0


def test_transfer_values_per_dataset_and_seed(tmp_path):
    for dataset, accuracies in (("demonet", (70.0, 72.0)), ("democool", (40.0, 46.0))):
        for seed, accuracy in enumerate(accuracies, start=1):
            folder = tmp_path / "xd" / "train" / dataset / "shots_0" / "PETR" / "demo" / f"seed{seed}"
            folder.mkdir(parents=True)
            (folder / "results.json").write_text(json.dumps({"accuracy": accuracy}))
        zero_shot = tmp_path / "ZeroshotCLIP" / "demo" / dataset
        zero_shot.mkdir(parents=True)
        (zero_shot / "results.json").write_text(json.dumps({"accuracy": accuracies[0] - 10}))
    teacher = tmp_path / "xd" / "train" / "demonet" / "shots_16" / "PromptSRC" / "demo" / "seed1"
    teacher.mkdir(parents=True)
    (teacher / "results.json").write_text(json.dumps({"accuracy": 80.0}))
    values = report.transfer_values(str(tmp_path), "xd", "demonet", ["democool"], ["ZeroshotCLIP", "PETR"])
    assert values == {"ZeroshotCLIP": {"demonet": [60.0], "democool": [30.0]},
                      "PETR": {"demonet": [70.0, 72.0], "democool": [40.0, 46.0]}}
    assert list(values) == ["ZeroshotCLIP", "PETR"]  # the order asked for; the teacher's run is not a method here
    rows = _cells(report.transfer_table("xd", "demonet", ["democool"], values, "github"))
    assert rows[1] == ["PETR", f"71.00 ± {statistics.stdev([70, 72]):.2f}", f"43.00 ± {statistics.stdev([40, 46]):.2f}",
                       f"43.00 ± {statistics.stdev([40, 46]):.2f}"]


def test_report_file_and_figure(tmp_path):
    """report.md holds each section's table after its heading and links the figure; the figure is a PNG (its
    signature and IHDR size read here) of the size the module promises."""
    _b2n_tree(tmp_path)
    runs = report.collect_b2n(str(tmp_path))
    png = tmp_path / "report.png"
    rng = np.random.default_rng(0)
    report_figure(report.seed_means(runs, ("ZeroshotCLIP", "CoOp")), (rng.gamma(2, 1, 50), rng.gamma(9, 1, 50), 6.0),
                  "accuracies", "scores", str(png))
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (1500, 560)
    table = report.b2n_table(runs, (), "github")
    write_report(str(tmp_path / "report.md"), "Demo", [("Base-to-novel", table)], str(png))
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# Demo\n\n## Base-to-novel\n\n| method")
    assert table in text and text.rstrip().endswith("](report.png)")
