"""bench/benchmark_cocoop.py on tiny shapes: every variant computes the same CoCoOp logits, their FLOPs relate as the
per-image text work says, and the printed table has every row."""
from __future__ import annotations

import pytest
import torch

from bench import benchmark_cocoop
from bench.benchmark_cocoop import CostModels
from bench.models import TINY_STUDENT, count_flops
from trainers.coop import coop_text_features

CLASSES, BATCH = 5, 3


@pytest.fixture(scope="module")
def models():
    return CostModels(TINY_STUDENT, CLASSES, torch.device("cpu"))


@torch.inference_mode()
def test_variants_compute_the_same_logits(models):
    images = models.images(BATCH)
    logits = {k: fn(images) for k, fn in models.logits_fns(None).items()}
    for key in ("per_image", "per_image_77"):
        torch.testing.assert_close(logits[key], logits["batched"], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(logits["batched"], logits["coop"], atol=1e-3)  # the meta-net's shift is there


@torch.inference_mode()
def test_flops_follow_the_text_work_per_image(models):
    images = models.images(BATCH)
    text = coop_text_features(models.clip_model, models.coop)
    fns = models.logits_fns(text)
    coop, batched, per_image = (count_flops(fns[k], images) for k in ("coop", "batched", "per_image"))
    one_text_pass = count_flops(coop_text_features, models.clip_model, models.coop)  # C prompts of the same length
    meta_net = BATCH * 2 * sum(layer.in_features * layer.out_features
                               for layer in (models.cocoop.meta_net.linear1, models.cocoop.meta_net.linear2))
    assert per_image == coop + BATCH * one_text_pass + meta_net
    width = models.clip_model.embed_dim  # batched, the cosines are an elementwise product and sum (not counted)
    assert batched == per_image - 2 * BATCH * CLASSES * width
    assert count_flops(fns["per_image_77"], images) > 3 * per_image  # 77 positions instead of about 10


def test_the_table_has_every_variant(capsys):
    benchmark_cocoop.main(["--model", "tiny", "--iters", "1", "--warmup", "0", "--classes", "3", "--batch", "2"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("tiny (tests); CPU") and "C = 3, batch 2" in lines[0]
    for label in benchmark_cocoop.VARIANTS.values():
        row = [line for line in lines if line.startswith(label)]
        assert len(row) == 1 and len(row[0][len(label):].split()) == 7
    coop_row = next(line for line in lines if line.startswith(benchmark_cocoop.VARIANTS["coop"]))
    assert coop_row.split()[-2:] == ["1.00", "1.00"]
