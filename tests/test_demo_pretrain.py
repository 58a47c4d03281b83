"""Tiny-CLIP pretraining of the demo: the loss, the trimmed text forward, and a short run whose file load_model reads
with the same features as open_clip's forward on the same weights."""
from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
import open_clip
import pytest
import torch

import clip
from demo import pretrain
from demo.evaluate import subset_accuracy

TINY_SPEC = pretrain.TinyClipSpec(embed_dim=32, image_size=32, patch_size=16, vision_width=64, vision_layers=2,
                                  text_width=64, text_layers=2)


@pytest.fixture
def tiny_size(monkeypatch):
    monkeypatch.setitem(pretrain.SPECS, "tiny", TINY_SPEC)
    return "tiny"


def test_same_class_infonce_matches_a_numpy_reference():
    gen = torch.Generator().manual_seed(0)
    img, txt = torch.randn(6, 5, generator=gen), torch.randn(4, 5, generator=gen)
    img_labels, txt_labels = torch.tensor([0, 1, 0, 2, 1, 0]), torch.tensor([0, 1, 2, 3])
    loss = pretrain.same_class_infonce(img, img_labels, txt, txt_labels, torch.tensor(3.0)).item()

    a = img.numpy() / np.linalg.norm(img.numpy(), axis=1, keepdims=True)
    b = txt.numpy() / np.linalg.norm(txt.numpy(), axis=1, keepdims=True)
    logits = 3.0 * a @ b.T

    def soft_ce(rows, pos):
        logp = rows - np.log(np.exp(rows).sum(axis=1, keepdims=True))
        return np.mean([-(logp[i][pos[i]]).mean() for i in range(len(rows))])

    pos = img_labels.numpy()[:, None] == txt_labels.numpy()[None, :]
    i2t = soft_ce(logits, pos)
    kept = [j for j in range(4) if pos[:, j].any()]  # caption 3 has no image in the batch
    t2i = soft_ce(logits.T[kept], pos.T[kept])
    assert loss == pytest.approx(0.5 * (i2t + t2i), rel=1e-5)


def test_trimmed_text_forward_equals_open_clip():
    torch.manual_seed(0)
    model = pretrain.build_open_clip(TINY_SPEC).eval()
    tokens = open_clip.get_tokenizer("ViT-B-16")(["a red circle", "the shape is a star and its colour is blue."])
    with torch.no_grad():
        torch.testing.assert_close(pretrain.encode_text_trimmed(model, tokens), model.encode_text(tokens),
                                   rtol=1e-5, atol=1e-6)


def test_subset_accuracy_restricts_the_argmax():
    scores = torch.tensor([[0.9, 0.5, 0.1], [0.9, 0.1, 0.5], [0.1, 0.2, 0.3]])
    labels = np.array([1, 2, 0])
    assert subset_accuracy(scores, labels, [1, 2]) == pytest.approx(100.0)  # class 0 excluded from the argmax
    assert subset_accuracy(scores, labels, [0, 1, 2]) == pytest.approx(0.0)


def test_short_pretraining_writes_a_file_clip_load_reads(tmp_path, tiny_size, capsys):
    params = replace(pretrain.PretrainParams(size=tiny_size), steps=3, batch_size=16, seed=2)
    path = pretrain.pretrained_path(params, str(tmp_path / "tiny.pt"), verbose=False)
    state_dict = torch.load(path, weights_only=True)
    fresh = pretrain.build_open_clip(TINY_SPEC)
    assert set(state_dict) == set(fresh.state_dict())

    reference = pretrain.build_open_clip(TINY_SPEC).eval()
    reference.load_state_dict(state_dict)
    ours = clip.load_model(path)
    assert ours.context_length == 77 and ours.embed_dim == 32
    images = torch.randn(4, 3, 32, 32)
    tokens = clip.tokenize(["a photo of a red circle.", "itap of a blue star."])
    with torch.no_grad():
        torch.testing.assert_close(ours.encode_image(images), reference.encode_image(images), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(ours.encode_text(tokens), reference.encode_text(tokens), rtol=1e-5, atol=1e-5)

    # only the embedding rows of tokens that occur in the captions were trained
    torch.manual_seed(params.seed)
    init = pretrain.build_open_clip(TINY_SPEC).state_dict()["token_embedding.weight"]
    changed = (state_dict["token_embedding.weight"] != init).any(dim=1)
    assert 20 < int(changed.sum()) < 200 and bool(changed[49407])

    mtime = os.stat(path).st_mtime_ns
    assert pretrain.pretrained_path(params, path) == path
    assert "already pretrained" in capsys.readouterr().out and os.stat(path).st_mtime_ns == mtime
    assert not pretrain.is_cached(path, replace(params, steps=4))
