"""End to end through train.py with a linear probe: outputs, eval-only, exact resume, NaN stop, XU loop, names."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
import torch
from PIL import Image

import train
from engine import (
    DATASET_REGISTRY,
    TRAINER_REGISTRY,
    UNLABELED,
    Datum,
    TrainerXU,
    build_dataset,
    build_trainer,
    get_cfg_default,
)
from tests.helpers_engine import TINY_CLASSES, EngineLinearProbe, EngineTinyDataset, tiny_argv, write_image_tree
from trainers.config import extend_cfg

IMAGENET_MEAN, IMAGENET_STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("engine_trainer")
    write_image_tree(str(root))
    return str(root)


@pytest.fixture(scope="module")
def full_run(tiny_root, tmp_path_factory) -> str:
    """An uninterrupted 3-epoch seeded run; returns its output directory."""
    out = str(tmp_path_factory.mktemp("runs") / "full")
    train.main(tiny_argv(tiny_root, out, epochs=3))
    return out


def _weights(out: str, epoch: int) -> dict:
    return torch.load(os.path.join(out, "linear_probe", f"model.pth.tar-{epoch}"), weights_only=True)["state_dict"]


def _final_accuracy_from_log(path: str) -> float:
    """Upstream parse_test_res.py rule: last `* accuracy` match after the line `Finish training`."""
    lines = open(path).read().splitlines()
    after = lines[lines.index("Finish training") + 1:]
    matches = [re.search(r"\* accuracy: ([\.\deE+-]+)%", line) for line in after]
    return float([m.group(1) for m in matches if m][-1])


def test_end_to_end_outputs_and_independent_accuracy(full_run, tiny_root):
    assert os.path.isfile(os.path.join(full_run, "log.txt"))
    assert open(os.path.join(full_run, "linear_probe", "checkpoint")).read().strip() == "model.pth.tar-3"
    log = open(os.path.join(full_run, "log.txt")).read()
    assert re.search(r"epoch \[3/3\] batch \[2/3\] time [\d.]+ \([\d.]+\) data [\d.]+ \([\d.]+\) "
                     r"loss [\d.]+ \([\d.]+\) acc [\d.]+ \([\d.]+\) lr [\d.]+e-\d+ eta \d:\d\d:\d\d", log)
    assert re.search(r"Elapsed: \d+:\d\d:\d\d", log)
    # Accuracy recomputed with NumPy from the saved weights and the raw PNGs (8x8: resize/crop are identities).
    sd = _weights(full_run, 3)
    w, b = sd["weight"].double().numpy(), sd["bias"].double().numpy()
    correct = total = 0
    for label, name in enumerate(TINY_CLASSES):
        for i in range(5, 8):
            px = np.asarray(Image.open(os.path.join(tiny_root, "engine_tiny", name, f"{i}.png")), dtype=np.float64)
            x = ((px / 255.0 - IMAGENET_MEAN) / IMAGENET_STD).transpose(2, 0, 1).reshape(-1)
            correct += int(np.argmax(w @ x + b) == label)
            total += 1
    expected = 100.0 * correct / total
    results = json.load(open(os.path.join(full_run, "results.json")))
    assert results["accuracy"] == pytest.approx(expected) and results["error"] == pytest.approx(100 - expected)
    assert _final_accuracy_from_log(os.path.join(full_run, "log.txt")) == pytest.approx(expected, abs=0.005)
    assert (results["dataset"], results["trainer"], results["seed"], results["split"]) == (
        "EngineTinyDataset", "EngineLinearProbe", 1, "test")
    assert results["subsample_classes"] == "all" and "macro_f1" in results


def test_eval_only_reloads_the_model(full_run, tiny_root, tmp_path):
    out = str(tmp_path / "eval")
    trainer = train.main(tiny_argv(tiny_root, out, extra_args=["--eval-only", "--model-dir", full_run,
                                                               "--load-epoch", "3"]))
    assert torch.equal(trainer.model.weight.detach(), _weights(full_run, 3)["weight"])
    ref = json.load(open(os.path.join(full_run, "results.json")))["accuracy"]
    assert json.load(open(os.path.join(out, "results.json")))["accuracy"] == ref
    log = open(os.path.join(out, "log.txt")).read()
    assert "=> result" in log and f"* accuracy: {ref:.2f}%" in log
    with pytest.raises(FileNotFoundError, match="model-best.pth.tar.*--load-epoch"):
        train.main(tiny_argv(tiny_root, str(tmp_path / "eval2"), extra_args=["--eval-only", "--model-dir", full_run]))


def test_load_epoch_last_reads_the_checkpoint_pointer(full_run, tiny_root, tmp_path):
    last = train.main(tiny_argv(tiny_root, str(tmp_path / "last"),
                                extra_args=["--eval-only", "--model-dir", full_run, "--load-epoch", "last"]))
    assert torch.equal(last.model.weight.detach(), _weights(full_run, 3)["weight"])  # the pointer names epoch 3
    with pytest.raises(SystemExit):
        train.build_parser().parse_args(["--load-epoch", "latest"])
    with pytest.raises(FileNotFoundError, match="checkpoint.*train the model first"):
        last.load_model(str(tmp_path / "last"), epoch="last")  # an evaluation folder holds no saved model


def test_interrupted_run_resumes_to_identical_weights(full_run, tiny_root, tmp_path, monkeypatch):
    out = str(tmp_path / "crashed")
    argv = tiny_argv(tiny_root, out, epochs=3, opts=["TRAIN.CHECKPOINT_FREQ", "1"])
    monkeypatch.setattr(EngineLinearProbe, "crash_at_epoch", 1)
    with pytest.raises(RuntimeError, match="simulated crash at the start of epoch 2"):
        train.main(argv)
    assert sorted(os.listdir(os.path.join(out, "linear_probe"))) == ["checkpoint", "model.pth.tar-1"]
    monkeypatch.setattr(EngineLinearProbe, "crash_at_epoch", None)
    train.main(argv)  # same command again: auto-resume from OUTPUT_DIR
    resumed, reference = _weights(out, 3), _weights(full_run, 3)
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)
    assert [f for f in os.listdir(out) if f.startswith("log.txt")] == ["log.txt"]  # both attempts in one log
    first, second = open(os.path.join(out, "log.txt")).read().split("new attempt (earlier ones above)")
    assert "simulated crash at the start of epoch 2" in first and "Previous epoch: 1" in second
    # --resume DIR points a fresh output folder at the crashed run's checkpoints (finished: epoch 3)
    trainer = train.main(tiny_argv(tiny_root, str(tmp_path / "other"), opts=[], extra_args=["--resume", out]))
    assert trainer.start_epoch == 3
    with pytest.raises(FileNotFoundError, match="has no checkpoint"):
        train.main(tiny_argv(tiny_root, str(tmp_path / "other2"), extra_args=["--resume", str(tmp_path / "none")]))


def test_crash_resumes_from_the_per_epoch_state_without_checkpoint_freq(full_run, tiny_root, tmp_path,
                                                                        monkeypatch):
    """TRAIN.CHECKPOINT_FREQ 0 (the shipped configs): resume.pth.tar alone carries the run over a crash."""
    out = str(tmp_path / "crashed")
    argv = tiny_argv(tiny_root, out, epochs=3)
    monkeypatch.setattr(EngineLinearProbe, "crash_at_epoch", 2)
    with pytest.raises(RuntimeError, match="simulated crash at the start of epoch 3"):
        train.main(argv)
    assert os.path.isfile(os.path.join(out, "resume.pth.tar")) and not os.path.exists(os.path.join(out, "linear_probe"))
    assert torch.load(os.path.join(out, "resume.pth.tar"), weights_only=True)["epoch"] == 2
    monkeypatch.setattr(EngineLinearProbe, "crash_at_epoch", None)
    train.main(argv)
    resumed, reference = _weights(out, 3), _weights(full_run, 3)
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)
    assert json.load(open(os.path.join(out, "results.json")))["accuracy"] == \
        json.load(open(os.path.join(full_run, "results.json")))["accuracy"]
    assert not os.path.exists(os.path.join(out, "resume.pth.tar"))  # finished: only the Dassl checkpoints stay
    assert "Previous epoch: 2" in open(os.path.join(out, "log.txt")).read()


def test_non_finite_loss_names_the_step(tiny_root, tmp_path, monkeypatch):
    monkeypatch.setattr(EngineLinearProbe, "nan_at_batch", 1)
    with pytest.raises(FloatingPointError, match=r"epoch 1/2, batch 2/3 \(step 1\)"):
        train.main(tiny_argv(tiny_root, str(tmp_path / "nan"), epochs=2))


def test_unknown_trainer_and_dataset_suggest_names(tiny_root):
    cfg = extend_cfg(get_cfg_default())
    cfg.TRAINER.NAME = "EngineLinearProb"
    with pytest.raises(ValueError, match="Did you mean 'EngineLinearProbe'"):
        build_trainer(cfg)
    cfg.DATASET.NAME = "EngineTinyDatset"
    with pytest.raises(ValueError, match="Did you mean 'EngineTinyDataset'"):
        build_dataset(cfg)


class EngineTinyDatasetXU(EngineTinyDataset):
    """Tiny dataset plus an unlabelled split (the val and test images with labels withheld)."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._train_u = [Datum(d.impath, label=UNLABELED, classname="") for d in self.val + self.test]


class EngineXURecorder(TrainerXU):
    """Records the batches ``run_epoch`` hands to ``forward_backward``."""

    def build_model(self) -> None:
        self.model = torch.nn.Identity()
        self.register_model("identity", self.model)
        self.calls = []

    def forward_backward(self, batch_x, batch_u) -> dict:
        x, y, u = self.parse_batch_train(batch_x, batch_u)
        self.calls.append((x.shape[0], u.shape[0], batch_u["label"].tolist()))
        return {"n": float(len(self.calls))}


DATASET_REGISTRY.register(EngineTinyDatasetXU, force=True)
TRAINER_REGISTRY.register(EngineXURecorder, force=True)


@pytest.mark.parametrize("count_iter,expected", [("train_x", 3), ("train_u", 6), ("smaller_one", 3)])
def test_trainer_xu_count_iter(tiny_root, tmp_path, count_iter, expected):
    cfg = extend_cfg(get_cfg_default())
    opts = ["DATASET.ROOT", tiny_root, "DATASET.NAME", "EngineTinyDatasetXU", "TRAINER.NAME", "EngineXURecorder",
            "OUTPUT_DIR", str(tmp_path), "USE_CUDA", "False", "INPUT.SIZE", "(8, 8)", "DATALOADER.NUM_WORKERS", "0",
            "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TRAIN_U.SAME_AS_X", "False",
            "DATALOADER.TRAIN_U.BATCH_SIZE", "2", "TRAIN.COUNT_ITER", count_iter, "VERBOSE", "False"]
    cfg.merge_from_list(opts)
    trainer = build_trainer(cfg)
    assert len(trainer.train_loader_x) == 3 and len(trainer.train_loader_u) == 6  # 12 labelled, 12 unlabelled
    trainer.run_epoch()
    assert len(trainer.calls) == expected
    assert all(nx == 4 and nu == 2 and set(lu) == {UNLABELED} for nx, nu, lu in trainer.calls)


class EngineHookRecorder(EngineLinearProbe):
    """Records the engine's public hooks in the order they run, with the ``validating`` state at each."""

    def build_model(self) -> None:
        super().build_model()
        self.calls = []

    def load_model(self, directory: str, epoch=None) -> None:
        self.calls.append("load_model")
        super().load_model(directory, epoch)

    def deploy(self) -> None:
        self.calls.append("deploy")
        super().deploy()

    def before_test(self) -> None:
        self.calls.append(("before_test", self.validating))

    def after_test(self) -> None:
        self.calls.append(("after_test", self.validating))


TRAINER_REGISTRY.register(EngineHookRecorder, force=True)


@pytest.mark.parametrize("final_model,no_test", [("best_val", False), ("last_step", False), ("best_val", True)])
def test_public_hooks_run_in_order(tiny_root, tmp_path, final_model, no_test):
    argv = tiny_argv(tiny_root, str(tmp_path), epochs=2, opts=["TEST.FINAL_MODEL", final_model,
                                                               "TEST.NO_TEST", str(no_test)])
    argv[argv.index("EngineLinearProbe")] = "EngineHookRecorder"
    trainer = train.main(argv)
    validation = [("before_test", True), ("after_test", True)] * 2 if final_model == "best_val" and not no_test else []
    final = [] if no_test else [("before_test", False), ("after_test", False)]
    reload = ["load_model"] if final_model == "best_val" and not no_test else []
    assert trainer.calls == [*validation, "deploy", *reload, *final]
    assert trainer.validating is False
    assert os.path.isfile(os.path.join(tmp_path, "results.json")) != no_test


class EngineTinyNoVal(EngineTinyDataset):
    """The tiny tree without a val split."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._val = None


class EngineTinyValIsTest(EngineTinyDataset):
    """The tiny tree validating on its test list, as CoOp's ImageNet does (val is test)."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self._val = self._test


for _cls in (EngineTinyNoVal, EngineTinyValIsTest):
    DATASET_REGISTRY.register(_cls, force=True)


@pytest.mark.parametrize("dataset,final_model,expected", [
    ("EngineTinyDataset", "best_val", "val"), ("EngineTinyNoVal", "best_val", "test"),
    ("EngineTinyValIsTest", "best_val", "test"), ("EngineTinyNoVal", "last_step", None)])
def test_results_say_which_split_selected_the_model(tiny_root, tmp_path, dataset, final_model, expected):
    """best_val selects on the val split, or (no val split, as Dassl) on the test split: the log says so, and
    results.json and model-best.pth.tar record it, also for an eval-only run of the saved model."""
    out = str(tmp_path / "run")
    train.main(tiny_argv(tiny_root, out, epochs=2, opts=["DATASET.NAME", dataset, "TEST.FINAL_MODEL", final_model]))
    assert json.load(open(os.path.join(out, "results.json")))["selected_on"] == expected
    note = (f"Note: TEST.FINAL_MODEL best_val, but {dataset} has no val split: the model is selected on the test "
            "split, as Dassl does")
    assert (note in open(os.path.join(out, "log.txt")).read()) == (expected == "test")
    if final_model == "best_val":
        best = torch.load(os.path.join(out, "linear_probe", "model-best.pth.tar"), weights_only=True)
        assert best["selected_on"] == expected
        evaluated = str(tmp_path / "eval")
        train.main(tiny_argv(tiny_root, evaluated, extra_args=["--eval-only", "--model-dir", out],
                             opts=["DATASET.NAME", dataset]))
        assert json.load(open(os.path.join(evaluated, "results.json")))["selected_on"] == expected
