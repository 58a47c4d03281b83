"""PETR trainer: KD/CE wiring, batched two-branch forward, router fit and dumps, routed evaluation, exact reload,
bad input, and a tiny cross-dataset run. References: hand-written formulas, NumPy Mahalanobis routing."""
from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import clip
import train
from tests.helpers_datasets import write_tree
from tests.helpers_petr import TRAIN_PER_CLASS, numpy_mahalanobis_route, petr_argv, write_eurosat
from tests.helpers_run import train_argv
from trainers.routing.routers import MahalanobisRouter


@pytest.fixture(scope="module")
def petr_run(tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file):
    """A finished 2-epoch tiny base-to-novel PETR run (train_base) and its trainer."""
    tmp = tmp_path_factory.mktemp("petr")
    write_eurosat(tmp / "data")
    out = tmp / "train_base"
    trainer = train.main(petr_argv(tmp / "data", out, tiny_clip_file, tiny_teacher_clip_file,
                                   "DATASET.SUBSAMPLE_CLASSES", "base"))
    return tmp, out, trainer


def test_first_step_loss_is_kd_plus_base_ce(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    write_eurosat(tmp_path / "data")
    trainer = train.main(petr_argv(tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file,
                                   "TRAINER.PETR.CE_SCOPE", "base", "TRAINER.PETR.TEMPERATURE", "2.0",
                                   "TRAINER.PETR.CE_WEIGHT", "0.5", flags=("--no-train",)))
    assert not any(p.requires_grad for p in trainer.clip_model.parameters())
    for name, student in (("seen_student", trainer.seen_student), ("unseen_student", trainer.unseen_student)):
        optim_params = {id(p) for g in trainer.get_optimizer(name).param_groups for p in g["params"]}
        assert optim_params == {id(p) for p in student.parameters()}
    ds = trainer.dm.dataset
    assert {d.label for d in ds.train_x} == {0, 1, 2} and {d.label for d in ds.train_u} == {-1}

    batch_x, batch_u = next(iter(trainer.train_loader_x)), next(iter(trainer.train_loader_u))
    trainer.set_model_mode("train")
    tau, scale = 2.0, trainer.clip_model.logit_scale.exp()

    def student_logits(student, images):
        features = trainer.clip_model.encode_image(images, prompts=student.prompt())
        return scale * F.normalize(student.projector(features), dim=-1) @ trainer.teacher.text_features.t()

    def kd(s, t):
        p_t = torch.softmax(t / tau, dim=1)
        return 1000.0 * (p_t * (p_t.log() - torch.log_softmax(s / tau, dim=1))).sum() * tau**2 / s.numel()

    with torch.no_grad():
        s_x, s_u = student_logits(trainer.seen_student, batch_x["img"]), student_logits(trainer.unseen_student,
                                                                                          batch_u["img"])
        kd_seen, kd_unseen = kd(s_x, trainer.teacher(batch_x["img"])), kd(s_u, trainer.teacher(batch_u["img"]))
        ce = F.cross_entropy(s_x[:, :3], batch_x["label"])  # base classes are 0, 1, 2 (the first half)
    trainer.batch_idx, trainer.num_batches = 0, len(trainer.train_loader_x)
    summary = trainer.forward_backward(batch_x, batch_u)
    assert summary["kd_seen"] == pytest.approx(kd_seen.item(), rel=1e-5)
    assert summary["kd_unseen"] == pytest.approx(kd_unseen.item(), rel=1e-5)
    assert summary["ce"] == pytest.approx(ce.item(), rel=1e-5)
    assert summary["loss"] == pytest.approx((kd_seen + 0.5 * ce + kd_unseen).item(), rel=1e-5)


def test_batched_two_branch_forward_equals_two_forwards(petr_run):
    _, _, trainer = petr_run
    images = next(iter(trainer.test_loader))["img"]
    trainer.set_model_mode("eval")
    q_s, q_u = trainer.branch_logits(images)
    scale = trainer.clip_model.logit_scale.exp()
    with torch.no_grad():
        for student, batched in ((trainer.seen_student, q_s), (trainer.unseen_student, q_u)):
            alone = scale * student(trainer.clip_model, images) @ trainer.teacher.text_features.t()
            assert ((batched - alone).abs().max() / alone.abs().max()).item() <= 1e-5


def test_run_outputs_router_and_results_match_numpy(petr_run):
    _, out, _ = petr_run
    for name in ("seen_student/model.pth.tar-2", "unseen_student/model.pth.tar-2", "router.pth.tar", "router.json",
                 "router_fit_logits.pt", "train_u_logits.pt", "logits_test.pt", "results.json", "log.txt"):
        assert (out / name).is_file(), name
    fit = torch.load(out / "router_fit_logits.pt", weights_only=True)["q"].double().numpy()
    assert fit.shape == (3 * TRAIN_PER_CLASS, 10)  # base train images x [q_s, q_u] over 5 classes
    assert torch.load(out / "train_u_logits.pt", weights_only=True)["q"].shape == (2 * TRAIN_PER_CLASS, 10)

    # the trainer's router equals one fitted here on the dumped logits, and a NumPy reference
    saved = torch.load(out / "router.pth.tar", weights_only=True)["router"]
    router = MahalanobisRouter(lam=1.4, percentile=99.0).fit(torch.from_numpy(fit))
    torch.testing.assert_close(saved["mean"], router.mean)
    torch.testing.assert_close(saved["precision"], router.precision)
    dump = torch.load(out / "logits_test.pt", weights_only=True)
    q = torch.cat([dump["q_s"], dump["q_u"]], dim=1).double().numpy()
    route, threshold, mu, precision = numpy_mahalanobis_route(fit, q, 1.4, 99.0)
    np.testing.assert_allclose(saved["precision"].numpy(), precision, rtol=1e-6, atol=1e-8)
    router_json = json.loads((out / "router.json").read_text())
    assert router_json["lam"] == 1.4 and router_json["percentile"] == 99.0
    assert router_json["threshold"] == pytest.approx(threshold, rel=1e-9)
    assert set(router_json["fit_score_quantiles"]) >= {"p50", "p99", "max"}

    # results.json agrees with the dump: routed answer = argmax of the chosen branch over the base classes
    results = json.loads((out / "results.json").read_text())
    labels, is_seen = dump["labels"].numpy(), dump["is_seen"].numpy()
    eval_ids = dump["eval_labels"].numpy()
    assert list(eval_ids) == [0, 1, 2] and is_seen.all() and set(labels) <= {0, 1, 2}
    q_s, q_u = dump["q_s"].numpy(), dump["q_u"].numpy()

    def acc(logits):
        return 100.0 * np.mean(eval_ids[logits[:, eval_ids].argmax(axis=1)] == labels)

    assert results["accuracy"] == pytest.approx(acc(np.where(route[:, None], q_s, q_u)), abs=1e-9)
    assert results["route_acc_seen"] == pytest.approx(100.0 * np.mean(route[is_seen]), abs=1e-9)
    assert results["route_acc_unseen"] is None and results["n_unseen"] == 0
    assert results["share_seen"] == pytest.approx(100.0 * route.mean(), abs=1e-9)
    assert results["acc_seen_branch"] == pytest.approx(acc(q_s), abs=1e-9)
    assert results["acc_unseen_branch"] == pytest.approx(acc(q_u), abs=1e-9)
    assert results["acc_oracle"] == pytest.approx(acc(q_s), abs=1e-9)  # every base test sample is seen
    assert results["threshold"] == pytest.approx(threshold, rel=1e-9)
    assert results["router"] == "mahalanobis" and results["protocol"] == "base2novel"
    log = (out / "log.txt").read_text()
    assert "=> routing (test)" in log and f"* accuracy: {results['accuracy']:.2f}%" in log


def test_eval_only_reproduces_and_evaluates_novel(petr_run, tiny_clip_file, tiny_teacher_clip_file):
    tmp, out, _ = petr_run
    flags = ("--eval-only", "--model-dir", str(out), "--load-epoch", "2")
    train.main(petr_argv(tmp / "data", tmp / "again", tiny_clip_file, tiny_teacher_clip_file,
                         "DATASET.SUBSAMPLE_CLASSES", "base", flags=flags))
    first = json.loads((out / "results.json").read_text())
    again = json.loads((tmp / "again" / "results.json").read_text())
    for key in ("accuracy", "macro_f1", "route_acc_seen", "share_seen", "acc_seen_branch", "acc_unseen_branch",
                "threshold"):
        assert again[key] == first[key], key

    train.main(petr_argv(tmp / "data", tmp / "test_new", tiny_clip_file, tiny_teacher_clip_file,
                         "DATASET.SUBSAMPLE_CLASSES", "new", flags=flags))
    novel = json.loads((tmp / "test_new" / "results.json").read_text())
    dump = torch.load(tmp / "test_new" / "logits_test.pt", weights_only=True)
    assert dump["eval_labels"].tolist() == [3, 4] and not dump["is_seen"].any()
    assert set(dump["labels"].tolist()) == {3, 4}
    assert novel["route_acc_seen"] is None and novel["route_acc_unseen"] == novel["share_unseen"]
    assert novel["acc_oracle"] == novel["acc_unseen_branch"]


def test_eval_only_without_router_is_a_clear_error_unless_refit(petr_run, tiny_clip_file, tiny_teacher_clip_file):
    tmp, out, _ = petr_run
    bare = tmp / "no_router"
    for name in ("seen_student", "unseen_student"):
        shutil.copytree(out / name, bare / name)
    flags = ("--eval-only", "--model-dir", str(bare), "--load-epoch", "2")
    with pytest.raises(FileNotFoundError, match="REFIT_ROUTER"):
        train.main(petr_argv(tmp / "data", tmp / "err", tiny_clip_file, tiny_teacher_clip_file, flags=flags))
    train.main(petr_argv(tmp / "data", tmp / "refit", tiny_clip_file, tiny_teacher_clip_file,
                         "DATASET.SUBSAMPLE_CLASSES", "base", "TRAINER.PETR.REFIT_ROUTER", "True", flags=flags))
    refit = json.loads((tmp / "refit" / "results.json").read_text())
    first = json.loads((out / "results.json").read_text())
    assert refit["accuracy"] == first["accuracy"] and refit["threshold"] == pytest.approx(first["threshold"])


def test_empty_train_u_is_a_clear_error(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    tree = write_eurosat(tmp_path / "data")
    with open(tree.split_file) as f:
        split = json.load(f)
    split["train"] = [item for item in split["train"] if item[1] < 3]  # no novel-class train images
    with open(tree.split_file, "w") as f:
        json.dump(split, f)
    with pytest.raises(ValueError, match="train_u is empty"):
        train.main(petr_argv(tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file))


def test_cross_dataset_run(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    imagenet = write_tree("ImageNet", tmp_path / "data")
    write_eurosat(tmp_path / "data", train_per_class=3)
    out = tmp_path / "xd"
    trainer = train.main(petr_argv(tmp_path / "data", out, tiny_clip_file, tiny_teacher_clip_file,
                                   "TRAINER.MODAL", "cross", "TRAIN.COUNT_ITER", "train_u", "OPTIM.MAX_EPOCH", "1",
                                   "TRAINER.PETR.PROMPT_DEPTH_VISION", "3"))
    # the tiny ImageNet tree repeats its images across classes: a singular router covariance, handled by pinv and
    # logged once in words
    log = (out / "log.txt").read_text()
    assert log.count("Router note: the covariance of the") == 1 and "pseudo-inverse" in log
    ds = trainer.dm.dataset
    assert ds.splits.protocol == "cross" and ds.splits.eval_labels == [0, 1, 2, 3, 4]
    # θ_s learns the source (ImageNet) classes: its classifier is the teacher's text features of those names
    expected = trainer.teacher.text_features_for(imagenet.classnames)
    torch.testing.assert_close(trainer.source_text_features, expected)
    assert {d.label for d in ds.train_x} == set(range(len(imagenet.classnames)))
    fit = torch.load(out / "router_fit_logits.pt", weights_only=True)["q"]
    assert fit.shape == (len(ds.splits.router_x), 10)  # ImageNet train images scored over the 5 target classes
    dump = torch.load(out / "logits_test.pt", weights_only=True)
    assert not dump["is_seen"].any()  # every target sample belongs to the unseen branch
    results = json.loads((out / "results.json").read_text())
    assert results["protocol"] == "cross" and results["route_acc_unseen"] == results["share_unseen"]


@pytest.mark.parametrize("student", ["openai", "open_clip"])
def test_petr_distils_from_a_promptsrc_teacher_run(tmp_path, tiny_clip_file, tiny_teacher_clip_file,
                                                   tiny_openclip_name, student):
    """PETR end to end from a PromptSRC teacher on the OpenAI-format teacher CLIP; the student is an OpenAI-format
    CLIP or an open_clip one (GELU, another family than the teacher), whose name and weight digest the run records."""
    student_clip = tiny_clip_file if student == "openai" else tiny_openclip_name
    write_eurosat(tmp_path / "data", train_per_class=4)
    teacher_run = tmp_path / "teacher"
    train.main(train_argv("PromptSRC", None, tmp_path / "data", teacher_run, "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
                          "DATASET.NUM_SHOTS", "2", "DATASET.SUBSAMPLE_CLASSES", "base", "OPTIM.MAX_EPOCH", "1",
                          "TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT", "3", "TRAINER.PROMPTSRC.PROMPT_DEPTH_VISION", "3",
                          "TEST.NO_TEST", "True", backbone=tiny_teacher_clip_file))
    trainer = train.main(petr_argv(tmp_path / "data", tmp_path / "petr", student_clip, tiny_teacher_clip_file,
                                   "TRAINER.PETR.TEACHER_CKPT", str(teacher_run), "OPTIM.MAX_EPOCH", "1"))
    teacher = trainer.teacher
    assert teacher.prompts is not None and len(teacher.prompts.vision_prompts()) == 3
    # KD targets come from the prompted teacher: its logits differ from the plain CLIP teacher's
    images = next(iter(trainer.test_loader))["img"]
    prompted = teacher(images)
    plain_features = F.normalize(teacher.clip_model.encode_image(images).float(), dim=-1)
    assert not torch.allclose(prompted, teacher.logit_scale * plain_features @ teacher.text_features.t())
    assert trainer.text_features.shape == (5, teacher.embed_dim)  # base and novel classes
    assert json.loads((tmp_path / "petr" / "results.json").read_text())["router"] == "mahalanobis"
    identity = json.loads((tmp_path / "petr" / "run.json").read_text())
    assert identity["config"]["MODEL.BACKBONE.NAME"] == student_clip
    weights = clip.weights_path(student_clip)
    named = {"name": student_clip} if student == "open_clip" else {}  # a name resolved to a file is compared again
    assert identity["inputs"][weights] == {"role": "clip", "sha256": hashlib.sha256(open(weights, "rb").read())
                                           .hexdigest(), **named}
    assert trainer.clip_model.activation == ("gelu" if student == "open_clip" else "quick_gelu")
