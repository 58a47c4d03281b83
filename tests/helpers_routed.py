"""Test helpers for the routed trainers (PETR+CoOp, PETR+X): tiny-run settings, routed evaluations recomputed from
open_clip forwards written in the test, and a runner that replays what a scripts/*/*.sh script asks train.py to do."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import clip
import parse_test_res
from tests.helpers_clip import reference_encode_text
from tests.helpers_datasets import load_images
from tests.helpers_run import TINY_RUN, ScriptRunner, train_argv
from tools import lambda_sweep, plot_routing_scores, router_ablation
from trainers.prompting.templates import ENSEMBLE_TEMPLATES
from trainers.routing.routers import MahalanobisRouter

B2N = "output/base2new/{role}/eurosat/shots_0/PETRX/vit_b16_{x}/seed1"
"""PETR+X's base-to-novel run folders of scripts/petr_x/base2new.sh under a test's root (SHOTS 0)."""
BASE, NEW = [0, 1, 2], [3, 4]  # EuroSAT tiny tree: 5 classes, base = first ceil(5/2)
TINY = [*TINY_RUN, "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "2",
        "DATASET.NUM_SHOTS", "0", "OPTIM.LR", "0.5", "TRAIN.PRINT_FREQ", "1"]


def run_argv(root, out, trainer: str, backbone: str, subsample: str, *opts: str, flags: tuple = (),
             config: str = "vit_b16_ctxv1") -> list[str]:
    """train.py arguments of a tiny EuroSAT run of ``trainer`` (CoOp or PETRCoOp, ctxv1 settings)."""
    return train_argv(trainer, config, root, out, *TINY, "DATASET.SUBSAMPLE_CLASSES", subsample, *opts, flags=flags,
                      backbone=backbone, tiny=False)


@torch.no_grad()
def ensemble_reference(model, classnames: list[str], images: torch.Tensor) -> torch.Tensor:
    """θ_u from open_clip: the EuroSAT template ensemble (per-template normalised, averaged, renormalised)."""
    per_template = [F.normalize(model.encode_text(clip.tokenize([t.format(n) for n in classnames])), dim=-1)
                    for t in ENSEMBLE_TEMPLATES["EuroSAT"]]
    ensemble = F.normalize(torch.stack(per_template).mean(0), dim=-1)
    return model.logit_scale.exp() * F.normalize(model.encode_image(images), dim=-1) @ ensemble.t()


def coop_branch(ctx: torch.Tensor, position: str = "end") -> Callable:
    """θ_s of a CoOp context from open_clip: the prompt written by hand, "ctx <name>." with the class token at the
    ``position`` "end", "ctx[:n/2] <name> ctx[n/2:]." ("middle") or "<name> ctx." ("front")."""
    n_ctx, half = ctx.shape[0], ctx.shape[0] // 2

    @torch.no_grad()
    def logits(model, classnames: list[str], images: torch.Tensor) -> torch.Tensor:
        rows = []
        for name in classnames:  # one class at a time: the spans after SOS differ in length
            tokens = clip.tokenize([f"{' '.join(['X'] * n_ctx)} {name}."])
            words = model.token_embedding(tokens)[0, 1 + n_ctx:int(tokens.argmax()) - 1]  # the name, before "."
            span = {"end": [ctx], "middle": [ctx[:half], words, ctx[half:]], "front": [words, ctx]}[position]
            rows.append(reference_encode_text(model, tokens, [torch.cat(span)]))
        coop = F.normalize(torch.cat(rows), dim=-1)
        return model.logit_scale.exp() * F.normalize(model.encode_image(images), dim=-1) @ coop.t()

    return logits


def reference_routing(tree, model, seen_branch: Callable, subset: list[int]) -> dict:
    """Routed evaluation done directly: θ_s = ``seen_branch(model, classnames, images)``, θ_u the ensemble, router
    fitted on the base train images, decisions, accuracies."""
    names = tree.classnames

    def branches(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return seen_branch(model, names, images), ensemble_reference(model, names, images)

    fit_s, fit_u = branches(load_images(tree, "train", BASE)[0])
    router = MahalanobisRouter(lam=1.4, percentile=99.0).fit(torch.cat([fit_s, fit_u], 1))
    images, labels = load_images(tree, "test", subset)
    q_s, q_u = branches(images)
    route = router.route_to_seen(torch.cat([q_s, q_u], 1))
    is_seen = torch.isin(labels, torch.tensor(BASE))
    cols = torch.tensor(subset)

    def acc(logits: torch.Tensor) -> float:
        return 100.0 * (cols[logits[:, cols].argmax(1)] == labels).double().mean().item()

    return {"accuracy": acc(torch.where(route[:, None], q_s, q_u)), "acc_seen_branch": acc(q_s),
            "acc_unseen_branch": acc(q_u), "acc_oracle": acc(torch.where(is_seen[:, None], q_s, q_u)),
            "route_acc": 100.0 * (route == is_seen).double().mean().item(), "threshold": router.threshold,
            "q_s": q_s, "q_u": q_u}


def check_against_reference(out, expected: dict) -> dict:
    result = json.loads((out / "results.json").read_text())
    for key in ("accuracy", "acc_seen_branch", "acc_unseen_branch", "acc_oracle", "route_acc"):
        assert result[key] == pytest.approx(expected[key], abs=1e-6), key
    assert result["threshold"] == pytest.approx(expected["threshold"], rel=1e-4)
    dump = torch.load(out / result["logits_dump"], weights_only=True)
    torch.testing.assert_close(dump["q_s"], expected["q_s"], atol=2e-3, rtol=1e-4)
    torch.testing.assert_close(dump["q_u"], expected["q_u"], atol=2e-3, rtol=1e-4)
    return result


def script_runner(tmp_path, tree, backbone: str) -> ScriptRunner:
    """A runner of ``scripts/<method>/<script>`` on the tiny EuroSAT tree (SHOTS 0, the tiny settings, ``backbone``)."""
    return ScriptRunner(tmp_path, {"DATA": tree.root, "OUTPUT_ROOT": str(tmp_path / "output"), "SHOTS": "0",
                                   "BACKBONE": backbone, "EXTRA_OPTS": " ".join(TINY).replace("(32, 32)", "(32,32)")})


def petr_x_dirs(root, x: str) -> tuple:
    """The base (router fit) and novel folders of PETR+X on prompt learner ``x``."""
    return root / B2N.format(role="train_base", x=x), root / B2N.format(role="test_new", x=x)


def check_petr_x_run(base, new, tree, model, seen_branch, trainer: str, checkpoint: str) -> dict:
    """Both evaluations equal the reference; the run trained nothing and names what it routed on."""
    result = check_against_reference(base, reference_routing(tree, model, seen_branch, BASE))
    new_result = check_against_reference(new, reference_routing(tree, model, seen_branch, NEW))
    with open(checkpoint, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    for r in (result, new_result):
        assert r["trainer"] == "PETRX" and r["plugin"] is True and r["tuned_trainer"] == trainer
        assert r["tuned_checkpoint"] == checkpoint and r["tuned_checkpoint_sha256"] == digest
        assert r["router"] == "mahalanobis" and r["num_classes"] == 5 and r["num_templates"] == 3
    assert new_result["threshold"] == pytest.approx(result["threshold"])  # the base run's router, not refitted
    assert json.loads((base / "router.json").read_text())["tuned_checkpoint_sha256"] == digest
    assert not os.path.exists(new / "router.pth.tar")
    for folder in (base, new):
        assert "epoch [" not in (folder / "log.txt").read_text()
        # no model folders: nothing copied (a tensorboard/ log folder appears where tensorboard is installed)
        assert not [d for d in os.listdir(folder) if os.path.isdir(folder / d) and d != "tensorboard"]
    return result


def upstream_promptsrc_state(text: list[torch.Tensor], vision: list[torch.Tensor], width: int) -> dict:
    """Our prompts in upstream PromptSRC's CustomCLIP key layout (fp16), with frozen weights and class-token buffers."""
    state = {"prompt_learner.ctx": text[0].half(), "image_encoder.VPT": vision[0].half(),
             "prompt_learner.token_prefix": torch.zeros(3, 1, width).half(),
             "prompt_learner.token_suffix": torch.zeros(3, 72, width).half(),
             "image_encoder.conv1.weight": torch.zeros(4, 3, 2, 2).half(), "logit_scale": torch.tensor(4.6)}
    for i in range(1, len(text)):
        state[f"text_encoder.transformer.resblocks.{i}.VPT_shallow"] = text[i].half()
        state[f"image_encoder.transformer.resblocks.{i}.VPT_shallow"] = vision[i].half()
    return state


def read_accuracy(folder) -> float:
    return json.loads((folder / "results.json").read_text())["accuracy"]


def check_analyses(root, tmp_path, capsys, xs: dict[str, str], plain: tuple[tuple[str, str], ...] = ()) -> None:
    """The router ablation, the λ sweep, the routing plots and ``parse_test_res.py b2n`` on the base-to-novel tree
    under ``root/output``: PETR+X on each prompt learner of ``xs`` (its scripts name -> its label in the table) gives
    its runs' accuracies back (the routed answer refitted from the dumps; the tools label it by folder,
    ``PETRX/vit_b16_<x>``), a λ sweep recomputed here with NumPy and one plot; each ``plain`` (table label, run folder
    of its train_base run relative to ``root``) has its Base, Novel and HM in the table and no dumps."""
    output = str(root / "output" / "base2new")
    accuracy = {f"PETRX/vit_b16_{x}": [read_accuracy(folder) for folder in petr_x_dirs(root, x)] for x in xs}
    table = {xs[x]: accuracy[f"PETRX/vit_b16_{x}"] for x in xs}
    for label, base in plain:
        novel = str(base).replace("/train_base/", "/test_new/")
        table[label] = [read_accuracy(root / base), read_accuracy(root / novel)]

    out_json = str(tmp_path / "ablation.json")
    assert router_ablation.main([output, "--routers", "mahalanobis", "--json", out_json]) == 0
    with open(out_json) as f:
        ablation = json.load(f)
    assert sorted(ablation) == sorted(f"PETRX/vit_b16_{x}" for x in xs)  # the plain runs hold no dumps
    for method in ablation:
        row = ablation[method]["eurosat"]["mahalanobis"]
        assert (row["base"], row["novel"]) == (pytest.approx(accuracy[method][0]), pytest.approx(accuracy[method][1]))

    sweep_json = str(tmp_path / "sweep.json")
    assert lambda_sweep.main([output, "--lambdas", "1.4", "--json", sweep_json]) == 0
    with open(sweep_json) as f:
        sweep = json.load(f)
    for x in xs:
        base, _ = petr_x_dirs(root, x)
        fit = torch.load(base / "router_fit_logits.pt", weights_only=True)["q"].double().numpy()
        train_u = torch.load(base / "train_u_logits.pt", weights_only=True)["q"].double().numpy()
        mu = fit.mean(axis=0)
        precision = np.linalg.pinv((fit - mu).T @ (fit - mu) / len(fit), rcond=1e-10, hermitian=True)
        d_fit, d_u = (np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", z - mu, precision, z - mu), 0))
                      for z in (fit, train_u))
        threshold = 1.4 * np.percentile(d_fit, 99)
        expected = [100 * (d_fit <= threshold).mean(), 100 * (d_u > threshold).mean()]
        np.testing.assert_allclose(sweep[f"PETRX/vit_b16_{x}"]["eurosat"]["1.4"], expected)

    figures = str(tmp_path / "figs")
    assert plot_routing_scores.main([output, "--out", figures]) == 0
    assert sorted(f for f in os.listdir(figures) if f.startswith("eurosat")) == sorted(
        f"eurosat_PETRX-vit_b16_{x}_seed1_mahalanobis.png" for x in xs)

    capsys.readouterr()
    assert parse_test_res.main(["b2n", output, "--format", "csv"]) == 0
    rows = {row["method"]: row for row in csv.DictReader(io.StringIO(capsys.readouterr().out))
            if row.get("dataset") == "eurosat"}
    assert set(table) <= set(rows), sorted(rows)
    for method, (base_acc, novel_acc) in table.items():
        row = rows[method]
        assert float(row["Base"]) == pytest.approx(base_acc, abs=0.01)
        assert float(row["Novel"]) == pytest.approx(novel_acc, abs=0.01)
        assert float(row["HM"]) == pytest.approx(2 * base_acc * novel_acc / (base_acc + novel_acc), abs=0.01)
