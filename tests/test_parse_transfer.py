"""``parse_test_res.py xd`` / ``dg``: the cross-dataset and DG tables from output trees, against hand-computed
means."""
from __future__ import annotations

import json
import os

import parse_test_res


def write(root, rel: str, accuracy: float, **record) -> None:
    path = os.path.join(root, rel)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "results.json"), "w") as f:
        json.dump({"accuracy": accuracy, **record}, f)


def table(capsys, *argv: str) -> dict[str, list[str]]:
    assert parse_test_res.main(list(argv)) == 0
    rows = [line.split(",") for line in capsys.readouterr().out.strip().splitlines()]
    return {row[0]: row[1:] for row in rows}


def test_cross_dataset_table(tmp_path, capsys):
    root = str(tmp_path)
    for seed, (src, cool, soft) in {1: (60.0, 40.0, 50.0), 2: (62.0, 44.0, 51.0)}.items():
        write(root, f"xd/train/demonet/shots_0/PETR/demo/seed{seed}", src)
        write(root, f"xd/train/democool/shots_0/PETR/demo/seed{seed}", cool)
        write(root, f"xd/train/demosoft/shots_0/PETR/demo/seed{seed}", soft)
        write(root, f"xd/train/demonet/shots_0/PromptKD/demo/seed{seed}", src - 1)
        write(root, f"xd/train/democool/shots_0/PromptKD/demo/seed{seed}", cool + 2)
    write(root, "xd/test/democool/shots_0/PETR/demo/seed1", 99.0)  # xd/train wins for a target
    for ds, acc in (("demonet", 52.0), ("democool", 41.0), ("demosoft", 47.0)):
        write(root, f"ZeroshotCLIP/demo/{ds}", acc)
    rows = table(capsys, "xd", root, "--source", "demonet", "--targets", "democool", "demosoft", "--format", "csv")
    assert rows["method"] == ["seeds", "demonet (source)", "democool", "demosoft", "Average"]
    # PETR: source (60 + 62) / 2, targets 42 and 50.5, average (42 + 50.5) / 2
    assert rows["PETR"] == ["2", "61.00", "42.00", "50.50", "46.25"]
    assert rows["PromptKD"] == ["2", "60.00", "44.00", "-", "-"]  # no DemoSoft run: no average
    assert rows["ZeroshotCLIP"] == ["-", "52.00", "41.00", "47.00", "44.00"]
    default = table(capsys, "xd", root, "--source", "demonet", "--methods", "ZeroshotCLIP", "PETR", "--format", "csv")
    assert list(default) == ["method", "ZeroshotCLIP", "PETR"] and default["PETR"][-1] == "46.25"


def test_domain_generalisation_table(tmp_path, capsys):
    root = str(tmp_path)
    write(root, "xd/train/demonet/shots_0/PETR/demo/seed1", 60.0)
    write(root, "dg/train/demonet_a/shots_0/PETR/demo/seed1", 12.0)
    write(root, "dg/train/demonet_r/shots_0/PETR/demo/seed1", 50.0)
    write(root, "xd/train/demonet/shots_0/PromptKD/demo/seed1", 59.0)
    write(root, "xd/test/demonet_a/shots_0/PromptKD/demo/seed1", 13.0)  # the source student, evaluated
    write(root, "xd/test/demonet_r/shots_0/PromptKD/demo/seed1", 47.0)
    rows = table(capsys, "dg", root, "--source", "demonet", "--format", "csv")  # targets found in dg/
    assert rows["method"] == ["seeds", "demonet (source)", "demonet_a", "demonet_r", "Average"]
    assert rows["PETR"] == ["1", "60.00", "12.00", "50.00", "31.00"]
    assert rows["PromptKD"] == ["1", "59.00", "13.00", "47.00", "30.00"]


def test_a_result_of_another_dataset_is_left_out_with_a_warning(tmp_path, capsys):
    root = str(tmp_path)
    write(root, "xd/train/demonet/shots_0/PETR/demo/seed1", 60.0, dataset="DemoNet")
    write(root, "xd/train/democool/shots_0/PETR/demo/seed1", 40.0, dataset="DemoCool")
    write(root, "xd/train/democool/shots_0/PETR/demo/seed2", 90.0, dataset="DemoSoft")
    rows = table(capsys, "xd", root, "--source", "demonet", "--targets", "democool", "--format", "csv")
    assert rows["PETR"] == ["1", "60.00", "40.00", "40.00"]
    assert parse_test_res.main(["xd", root, "--source", "demonet", "--targets", "democool"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"warning: {root}/xd/train/democool/shots_0/PETR/demo/seed2/results.json records dataset 'DemoSoft' but "
        "lies in the folder of democool: not this folder's run, left out (move it to the folder of the run it "
        "records)"]


def test_runs_of_another_seed_trainer_or_classes_and_empty_seed_folders_are_left_out(tmp_path, capsys):
    """A cell reads only its folder's runs: one line each for a run recording another seed, trainer or classes than
    all (a base-to-novel result copied in), and for a seed folder without a run's files."""
    root = str(tmp_path)
    write(root, "xd/train/demonet/shots_0/PETR/demo/seed1", 60.0, seed=1, trainer="PETR", subsample_classes="all")
    target = f"{root}/xd/train/democool/shots_0/PETR/demo"
    write(root, "xd/train/democool/shots_0/PETR/demo/seed1", 40.0, seed=1, trainer="PETR", subsample_classes="all")
    write(root, "xd/train/democool/shots_0/PETR/demo/seed2", 90.0, seed=5)
    write(root, "xd/train/democool/shots_0/PETR/demo/seed3", 91.0, trainer="PromptKD")
    write(root, "xd/train/democool/shots_0/PETR/demo/seed4", 92.0, subsample_classes="base")
    os.makedirs(f"{target}/seed5")
    assert parse_test_res.main(["xd", root, "--source", "demonet", "--targets", "democool", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert [line.split(",") for line in out.splitlines()][1] == ["PETR", "1", "60.00", "40.00", "40.00"]
    left_out = ": not this folder's run, left out (move it to the folder of the run it records)"
    assert [line for line in err.splitlines() if line.startswith("warning:")] == [
        f"warning: {target}/seed2/results.json records seed 5 but lies in the folder seed2{left_out}",
        f"warning: {target}/seed3/results.json records trainer 'PromptKD' but lies in the folder of PETR{left_out}",
        f"warning: {target}/seed4/results.json records subsample_classes 'base' (the base classes) but lies in a "
        f"folder of all classes{left_out}",
        f"warning: {target}/seed5 holds no results.json and no log.txt: left out (its run has not started, or its "
        "files were moved)"]


def test_transfer_errors_are_one_line(tmp_path, capsys):
    assert parse_test_res.main(["xd", str(tmp_path), "--source", "demonet"]) == 2
    assert capsys.readouterr().err.strip() == (f"parse_test_res.py: error: no xd targets under {tmp_path}; name them "
                                               "with --targets")
    assert parse_test_res.main(["dg", str(tmp_path / "none"), "--targets", "demonet_a"]) == 2
    assert "directory not found" in capsys.readouterr().err


def test_petr_x_rows_are_named_by_the_learner_they_routed_on(tmp_path, capsys):
    root = str(tmp_path)
    for x, src, cool in (("kgcoop", 60.0, 40.0), ("maple", 58.0, 44.0)):
        tuned = {"kgcoop": "KgCoOp", "maple": "MaPLe"}[x]
        write(root, f"xd/train/demonet/shots_16/PETRX/vit_b16_{x}/seed1", src, tuned_trainer=tuned)
        write(root, f"xd/train/democool/shots_16/PETRX/vit_b16_{x}/seed1", cool, tuned_trainer=tuned)
    rows = table(capsys, "xd", root, "--source", "demonet", "--methods", "PETRX", "--format", "csv")
    assert rows["PETR+KgCoOp"] == ["1", "60.00", "40.00", "40.00"] and rows["PETR+MaPLe"][1:3] == ["58.00", "44.00"]
    by_name = table(capsys, "xd", root, "--source", "demonet", "--methods", "PETR+MaPLe", "--format", "csv")
    assert list(by_name) == ["method", "PETR+MaPLe"]  # the method the table prints, not its trainer's other rows
    assert parse_test_res.main(["xd", root, "--source", "demonet", "--methods", "PETR+CoCoOp", "PETR+MaPLe"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (f"warning: --methods PETR+CoCoOp names no run under {root} "
                                                       "(methods there: PETR+KgCoOp, PETR+MaPLe)")
