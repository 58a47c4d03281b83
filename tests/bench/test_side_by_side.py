"""bench/side_by_side.py and what it needs of bench/benchmark_train.py: the class-count tree, the trainers' arguments
on the shared inputs, the ratio table from a contract-shaped upstream JSON, the CLI's one-line errors. The upstream
child is never run here (CI has no upstream checkout): the end-to-end test runs a stand-in child of its own."""
from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys

import pytest
import torch

from bench import side_by_side
from bench.benchmark_train import StepSetting, build_trainer, fixed_step, trainer_argv, tree_classes, write_jpeg_tree
from bench.models import SPECS
from bench.side_by_side import images_per_class, ratio_rows, split_sizes
from bench.side_by_side_inputs import write_inputs
from datasets.splits import split_class_folders
from tests.helpers_run import HANG_GUARD_S, REPO
from tests.helpers_upstream import upstream_unavailable

SPEC = SPECS["tiny_upstream"]
CPU = torch.device("cpu")


def test_tree_has_the_asked_class_folders(tmp_path):
    assert tree_classes(3) == ["AnnualCrop", "Forest", "HerbaceousVegetation"]
    assert tree_classes(12)[9:] == ["SeaLake", "Class0010", "Class0011"]
    write_jpeg_tree(str(tmp_path), 4, size=32, classes=12)
    root = tmp_path / "eurosat" / "2750"
    assert sorted(os.listdir(root)) == sorted(["AnnualCrop", "Forest", "HerbaceousVegetation", "Highway", "Industrial",
                                               "Pasture", "PermanentCrop", "Residential", "River", "SeaLake",
                                               "Class0010", "Class0011"])
    assert sorted(os.listdir(root / "Class0011")) == [f"Class0011_{i}.jpg" for i in (1, 2, 3, 4)]


def test_split_sizes_follow_the_eurosat_reader(tmp_path):
    """Our count of a folder's train/val/test images against the reader's split of folders of 4..24 files."""
    for n in range(4, 25):
        folder = tmp_path / f"c{n:02d}"
        folder.mkdir()
        for i in range(n):
            (folder / f"{i}.jpg").touch()
    train, val, test = split_class_folders(str(tmp_path), random.Random(0), "x")
    for label, n in enumerate(range(4, 25)):
        counts = tuple(sum(item.label == label for item in part) for part in (train, val, test))
        assert split_sizes(n) == counts, n


def test_images_per_class_by_hand():
    # 132 images: 66 train, round(26.4) = 26 val, 40 test -> 10 x 40 = 400; 131 gives 66 / 26 / 39
    assert images_per_class(10, 400, 64) == 132
    assert images_per_class(1000, 500, 64) == 4  # 2 / 1 / 1; 500 base classes x 2 train >= 64
    # 2 classes: one base class must fill a batch of 8 train images: round(15 / 2) = 8 (round half to even)
    assert images_per_class(2, 1, 8) == 15


def test_trainer_argv_takes_the_shared_inputs(tmp_path):
    files = {"student": "/in/clip/ViT-B-16.pt", "teacher": "/in/clip/ViT-L-14.pt", "teacher_ckpt": "/in/t.pth.tar"}
    argv = trainer_argv("PETR", SPEC, files, "/data", "/out", CPU, "bf16", "K", "V", subsample="all")
    assert argv == [
        "--data", "/data", "--seed", "1", "--trainer", "PETR", "--no-train",
        "--dataset-config-file", f"{REPO}/configs/datasets/eurosat.yaml",
        "--config-file", f"{REPO}/configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml", "--output-dir", "/out",
        "INPUT.SIZE", "(32, 32)", "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "all",
        "MODEL.BACKBONE.NAME", "/in/clip/ViT-B-16.pt", "TRAINER.PETR.TEACHER_NAME", "/in/clip/ViT-L-14.pt",
        "TRAINER.PETR.TEACHER_CKPT", "/in/t.pth.tar", "TRAINER.PETR.N_CTX_VISION", "4",
        "TRAINER.PETR.PROMPT_DEPTH_VISION", "3", "TRAINER.PETR.PREC", "bf16", "USE_CUDA", "False", "K", "V"]
    without = trainer_argv("PromptKD", SPEC, {"student": "s", "teacher": "t"}, "/d", "/o", CPU, "fp32")
    assert "TRAINER.PROMPTKD.TEACHER_CKPT" not in without
    assert without[without.index("DATASET.SUBSAMPLE_CLASSES") + 1] == "base"


def test_trainer_on_the_shared_inputs_and_a_class_count(tmp_path):
    """PromptKD built on a 12-class tree and write_inputs' files: the teacher has 12 classes and the checkpoint's
    prompts; fixed_step steps the first images of one loader batch."""
    files = write_inputs(str(tmp_path / "in"), SPEC)
    data = write_jpeg_tree(str(tmp_path / "data"), 4, size=32, classes=12)
    trainer = build_trainer(StepSetting("PromptKD", "fp32"), SPEC, files, data, str(tmp_path / "out"), CPU, 6,
                            subsample="all")
    # the reader sorts the folders and renames EuroSAT's (CoOp's names)
    assert trainer.teacher.classnames[:4] == ["Annual Crop Land", "Class0010", "Class0011", "Forest"]
    assert len(trainer.teacher.classnames) == 12
    assert tuple(trainer.text_features.shape) == (12, 768)
    saved = torch.load(files["teacher_ckpt"], weights_only=True)["state_dict"]
    assert torch.equal(trainer.teacher.prompts.vision_prompts()[0], saved["image_encoder.VPT"].float())
    assert len(trainer.test_loader.dataset) == 12  # one test image per class of 4
    step = fixed_step(trainer, 2)
    full = fixed_step(trainer)
    assert step.args[0]["img"].shape[0] == 2 and full.args[0]["img"].shape[0] == 6
    assert {len(value) for value in step.args[0].values()} == {2}  # images, labels, indices, paths alike


def upstream_json(**overrides) -> dict:
    """A contract-shaped upstream JSON with round numbers."""
    record = {"upstream": "abc", "torch": "2.11", "device": "NVIDIA H100", "prec": "fp16", "patches": ["p1"],
              "steps": [{"batch": 8, "classes": 10, "first_step_s": 0.5, "step_ms": 60.0, "peak_gib": 3.0,
                         "loss": 0.1},
                        {"batch": 64, "classes": 10, "first_step_s": 0.6, "step_ms": 240.0, "peak_gib": 9.0,
                         "loss": 0.2}],
              "eval": [{"classes": 10, "batch": 100, "images": 500, "images_per_s": 800.0, "peak_gib": 2.0}]}
    record.update(overrides)
    return record


def ours_json() -> dict:
    runs = [{"name": "PromptKD fp16", "trainer": "PromptKD", "settings": "fp16 (as upstream)"},
            {"name": "PETR best", "trainer": "PETR", "settings": "bf16 + cache"}]
    steps = [{"run": "PromptKD fp16", "batch": 8, "classes": 10, "step_ms": 30.0, "peak_gib": 1.5},
             {"run": "PromptKD fp16", "batch": 64, "classes": 10, "step_ms": 160.0, "peak_gib": 4.25},
             {"run": "PETR best", "batch": 8, "classes": 10, "step_ms": 40.0, "peak_gib": 2.0}]
    evals = [{"run": "PromptKD fp16", "classes": 10, "images_per_s": 1200.0},
             {"run": "PETR best", "classes": 10, "images_per_s": 600.0}]
    return {"runs": runs, "steps": steps, "eval": evals, "notes": ["PETR best, 10 classes: failed at batch 64"]}


def test_ratio_rows_by_hand():
    rows = ratio_rows(upstream_json(), ours_json())
    assert rows == [
        [8, 10, "upstream PromptKD", "fp16 (upstream)", "60.0", "ref", "800.0", "ref", "3.00"],
        # 60 / 30; eval 1200 / 800
        [8, 10, "PromptKD fp16", "fp16 (as upstream)", "30.0", "2.00x", "1200.0", "1.50x", "1.50"],
        # two upstream steps per PETR step: 2 x 60 / 40; eval against half upstream's: 600 / 400
        [8, 10, "PETR best", "bf16 + cache", "40.0", "3.00x", "600.0", "1.50x", "2.00"],
        [64, 10, "upstream PromptKD", "fp16 (upstream)", "240.0", "ref", "800.0", "ref", "9.00"],
        [64, 10, "PromptKD fp16", "fp16 (as upstream)", "160.0", "1.50x", "1200.0", "1.50x", "4.25"],
        [64, 10, "PETR best", "bf16 + cache", "failed", "-", "600.0", "1.50x", "-"],
    ]


def test_table_names_the_card_torch_and_notes():
    result = {"device": "NVIDIA H200", "upstream": upstream_json(), "ours": ours_json()}
    text = side_by_side.format_table(result)
    lines = text.splitlines()
    assert lines[0] == (f"NVIDIA H200 | torch {torch.__version__} | upstream child: NVIDIA H100, torch 2.11, upstream "
                        "PromptKD abc")
    assert "Note: PETR best, 10 classes: failed at batch 64" in lines and "Upstream patch: p1" in lines
    assert sum(" PETR best " in line for line in lines) == 2
    # the table prints the rows' strings as they are (tabulate would print 60.0 as 60)
    assert lines[3].split() == ["8", "10", "upstream", "PromptKD", "fp16", "(upstream)", "60.0", "ref", "800.0",
                                "ref", "3.00"]


def one_error_line(capsys, argv: list[str], status: int = 2) -> str:
    """Run the CLI in this process: its exit status and its one ``error:`` line on stderr."""
    assert side_by_side.main(argv) == status
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def fake_upstream(tmp_path) -> str:
    """A folder that passes the checkout check (its trainers/promptkd.py exists; nothing of it runs)."""
    (tmp_path / "up" / "trainers").mkdir(parents=True)
    (tmp_path / "up" / "trainers" / "promptkd.py").touch()
    return str(tmp_path / "up")


STAND_IN = """\
import argparse, json, sys
p = argparse.ArgumentParser()
for key in ("--upstream", "--inputs", "--device", "--prec", "--json"):
    p.add_argument(key)
for key in ("--batches", "--classes", "--opts"):
    p.add_argument(key, nargs="+")
p.add_argument("--iters"); p.add_argument("--warmup"); p.add_argument("--eval-images")
a = p.parse_args()
json.dump({"device": "stand-in", "torch": "t", "prec": a.prec, "argv": sys.argv[1:],
           "steps": [{"batch": int(b), "classes": int(c), "step_ms": 10.0, "peak_gib": None}
                     for b in a.batches for c in a.classes],
           "eval": [{"classes": int(c), "images_per_s": 100.0} for c in a.classes][:%s]}, open(a.json, "w"))
sys.exit(%s)
"""


def stand_in(tmp_path, evals: str = "None", status: int = 0) -> str:
    """A stand-in upstream child that writes a contract-shaped JSON (its eval records cut at ``evals``)."""
    path = tmp_path / "child.py"
    path.write_text(STAND_IN % (evals, status))
    return str(path)


def test_cli_errors_are_one_line(tmp_path, capsys):
    missing = str(tmp_path / "none")
    proc = subprocess.run([sys.executable, "-m", "bench.side_by_side", "--device", "cpu", "--upstream", missing],
                          cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 2 and proc.stderr == (
        f"error: --upstream {missing}: no upstream PromptKD checkout there (trainers/promptkd.py missing); run bash "
        "bench/upstream_setup.sh to put it there, or pass --upstream DIR\n")
    up = fake_upstream(tmp_path)
    assert "--batches" in one_error_line(capsys, ["--device", "cpu", "--upstream", up, "--batches", "8", "1"])
    assert "--warmup" in one_error_line(capsys, ["--device", "cpu", "--upstream", up, "--warmup", "-1"])
    line = one_error_line(capsys, ["--device", "cpu", "--upstream", up, "--child", str(tmp_path / "c.py")])
    assert str(tmp_path / "c.py") in line
    (tmp_path / "file").touch()
    line = one_error_line(capsys, ["--device", "cpu", "--upstream", up, "--json", str(tmp_path / "file/x.json")])
    assert "--json" in line
    if not torch.cuda.is_available():
        assert "CUDA is not available" in one_error_line(capsys, ["--device", "cuda", "--upstream", up])


def test_cli_child_failures_are_one_line(tmp_path, capsys):
    common = ["--device", "cpu", "--model", "tiny_upstream", "--upstream", fake_upstream(tmp_path), "--batches", "2",
              "--classes", "4", "--json", str(tmp_path / "out.json")]
    line = one_error_line(capsys, [*common, "--child", stand_in(tmp_path, status=3)], status=1)
    assert "status 3" in line
    line = one_error_line(capsys, [*common, "--child", stand_in(tmp_path, evals="0")], status=1)
    assert line.endswith("the upstream child's JSON has no record for eval classes 4")
    (tmp_path / "silent.py").write_text("")
    line = one_error_line(capsys, [*common, "--child", str(tmp_path / "silent.py")], status=1)
    assert "the upstream child left no readable JSON" in line
    assert not (tmp_path / "out.json").exists()


def test_end_to_end_with_a_stand_in_child(tmp_path, capsys):
    """The whole CPU dry run on tiny shapes: the child's arguments, our records of every run, the table."""
    out = tmp_path / "o" / "sbs.json"
    assert side_by_side.main(["--device", "cpu", "--model", "tiny_upstream", "--upstream", fake_upstream(tmp_path),
                              "--child", stand_in(tmp_path), "--batches", "2", "--classes", "4", "--iters", "1",
                              "--warmup", "0", "--eval-images", "6", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    argv = result["upstream"]["argv"]
    assert argv[argv.index("--prec") + 1] == "fp16" and argv[argv.index("--eval-images") + 1] == "6"
    assert argv[argv.index("--opts") + 1:] == [
        "INPUT.SIZE", "(32, 32)", "TRAINER.PROMPTKD.N_CTX_VISION", "4", "TRAINER.PROMPTKD.N_CTX_TEXT", "4",
        "TRAINER.PROMPTKD.PROMPT_DEPTH_VISION", "3", "TRAINER.PROMPTKD.PROMPT_DEPTH_TEXT", "3"]
    ours = result["ours"]
    assert ours["notes"] == []
    assert sorted(r["run"] for r in ours["steps"]) == ["PETR best", "PETR fp16", "PromptKD best", "PromptKD fp16"]
    # 4 classes, 6 eval images, batch 2: 4 images a class give 1 test image; 5 give 2 train, round(1.0) = 1 val, 2
    # test -> 8 test images; PETR's 2 base classes hold 4 train images >= 2
    assert {r["images"] for r in ours["eval"]} == {8}
    assert [row["run"] for row in result["table"]] == ["upstream PromptKD", "PromptKD fp16", "PromptKD best",
                                                       "PETR fp16", "PETR best"]
    petr = result["table"][3]
    step_ms = next(r["step_ms"] for r in ours["steps"] if r["run"] == "PETR fp16")
    assert petr["step speed-up"] == f"{2 * 10.0 / step_ms:.2f}x"
    assert result["table_text"] in capsys.readouterr().out


@pytest.mark.slow  # the whole dry run in a child: 15 s; the stand-in child test keeps the script in the fast tier
def test_the_script_runs_the_dry_run_into_out_dir(tmp_path):
    """bench/side_by_side.sh passes its knobs and extra options on and writes $OUT_DIR/side_by_side.json."""
    env = {**os.environ, "PYTHON": sys.executable, "DEVICE": "cpu", "MODEL": "tiny_upstream", "BATCHES": "2",
           "CLASSES": "4", "ITERS": "1", "WARMUP": "0", "EVAL_IMAGES": "6", "OUT_DIR": str(tmp_path / "bench"),
           "UPSTREAM_DIR": fake_upstream(tmp_path)}
    proc = subprocess.run(["bash", "bench/side_by_side.sh", "--child", stand_in(tmp_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"torch {torch.__version__} | ")
    result = json.loads((tmp_path / "bench" / "side_by_side.json").read_text())
    argv = result["upstream"]["argv"]
    assert argv[argv.index("--batches"):argv.index("--iters")] == ["--batches", "2", "--classes", "4"]
    assert result["model"] == "tiny_upstream" and result["device"].startswith("CPU")


def upstream_child_unavailable() -> str:
    """Why the real upstream child cannot run here ("" when it can): CI has neither upstream's checkout nor Dassl."""
    if not os.path.isfile(side_by_side.CHILD):
        return f"no upstream child at {side_by_side.CHILD}"
    upstream = os.path.join(REPO, ".upstream", "PromptKD")
    return upstream_unavailable("PromptKD", upstream, os.path.join("trainers", "promptkd.py"),
                                [upstream, os.path.join(upstream, "Dassl.pytorch")],
                                "bash bench/upstream_setup.sh")


UPSTREAM_UNAVAILABLE = upstream_child_unavailable()


@pytest.mark.slow
@pytest.mark.skipif(bool(UPSTREAM_UNAVAILABLE), reason=UPSTREAM_UNAVAILABLE or "-")
def test_the_real_pair_on_tiny_shapes(tmp_path, capsys):
    """Upstream's own code (fp16, the CPU) and ours on the same tiny inputs: every record, the ratios from them."""
    out = tmp_path / "sbs.json"
    assert side_by_side.main(["--device", "cpu", "--model", "tiny_upstream", "--batches", "2", "--classes", "4",
                              "--iters", "1", "--warmup", "0", "--eval-images", "4", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    upstream = result["upstream"]
    assert upstream["prec"] == "fp16" and upstream["torch"] == torch.__version__
    [up_step], [up_eval] = upstream["steps"], upstream["eval"]
    assert (up_step["batch"], up_step["classes"], up_eval["classes"]) == (2, 4, 4)
    assert result["ours"]["notes"] == [] and len(result["ours"]["steps"]) == 4
    petr = next(r for r in result["ours"]["steps"] if r["run"] == "PETR best")
    assert result["table"][4]["step speed-up"] == f"{2 * up_step['step_ms'] / petr['step_ms']:.2f}x"
    assert result["table_text"] in capsys.readouterr().out


def test_our_runs_leave_no_trainer_behind(tmp_path):
    """Each run's trainer is freed before the next is built (PETR's only by the cycle collector: its router refers
    back to it), so no peak counts an earlier run's models."""
    from trainers.petr import PETR
    from trainers.promptkd import PromptKD

    files = write_inputs(str(tmp_path / "in"), SPEC)
    trees = {4: write_jpeg_tree(str(tmp_path / "data"), 5, size=32, classes=4)}
    gc.disable()
    try:
        ours = side_by_side.measure_ours(SPEC, CPU, files, trees, [2], 1, 0, str(tmp_path))
        alive = sum(type(obj) in (PETR, PromptKD) for obj in gc.get_objects())
    finally:
        gc.enable()
    assert len(ours["steps"]) == 4 and ours["notes"] == [] and alive == 0
