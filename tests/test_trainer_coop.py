"""CoOp: prompt assembly against hand-built sequences and open_clip, training/reload through train.py, an upstream
run evaluated with the class-token position it records."""
from __future__ import annotations

import json
import re

import pytest
import torch
import torch.nn.functional as F

import clip
import train
from engine import load_checkpoint
from tests.helpers_clip import reference_encode_text, rel_err
from tests.helpers_datasets import load_images, write_tree
from tests.helpers_engine import write_image_tree
from tests.helpers_routed import coop_branch
from tests.helpers_run import train_argv
from tests.helpers_upstream import upstream_coop_run
from trainers.coop import CoOpPromptLearner, coop_text_features

CLASSNAMES = ["cat", "sea_lake", "herbaceous vegetation land"]  # 1, 2 and 4 BPE tokens


def tiny_run_opts(epochs: int = 2) -> list[str]:
    """KEY VALUE pairs of a tiny CoOp run beside TINY_RUN: small batches, ``epochs`` epochs, a log line per 2 steps."""
    return ["DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", str(epochs),
            "TRAIN.PRINT_FREQ", "2"]


def coop_argv(root, out, clip_file: str, *opts: str, flags: tuple = (), config: str = "vit_b16_ctxv1") -> list[str]:
    """train.py arguments of a tiny two-epoch CoOp run on the EuroSAT tree with the CLIP ``clip_file``."""
    return train_argv("CoOp", config, root, out, *tiny_run_opts(), *opts, flags=flags, backbone=clip_file)


def hand_built(tiny_clip, ctx: torch.Tensor, position: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected [C, 77, w] sequences, assembled token by token from "X X X X <name>." embeddings."""
    n_ctx = ctx.shape[-2]
    rows, all_tokens = [], []
    for i, name in enumerate(CLASSNAMES):
        name = name.replace("_", " ")
        tokens = clip.tokenize(f"{' '.join(['X'] * n_ctx)} {name}.")
        name_len = int(clip.tokenize(name).argmax()) - 1
        emb = tiny_clip.token_embedding(tokens)[0]
        c = ctx[i] if ctx.dim() == 3 else ctx
        sos, words, rest = emb[:1], emb[1 + n_ctx:1 + n_ctx + name_len], emb[1 + n_ctx + name_len:]
        order = {"end": [sos, c, words, rest],
                 "middle": [sos, c[:n_ctx // 2], words, c[n_ctx // 2:], rest],
                 "front": [sos, words, c, rest]}[position]
        rows.append(torch.cat(order))
        all_tokens.append(tokens[0])
    return torch.stack(rows), torch.stack(all_tokens)


def test_ctx_init_overrides_n_ctx_and_csc_shapes(tiny_clip, capsys):
    learner = CoOpPromptLearner(tiny_clip, CLASSNAMES, n_ctx=16, ctx_init="a photo of a", csc=True)
    assert learner.n_ctx == 4 and not learner.csc and learner.ctx.shape == (4, tiny_clip.text_width)
    assert "CSC is ignored" in capsys.readouterr().out
    init = tiny_clip.token_embedding(clip.tokenize("a photo of a"))[0, 1:5]
    torch.testing.assert_close(learner.ctx.detach(), init)
    assert learner.tokens[0].tolist()[:7] == clip.tokenize("a photo of a cat.")[0].tolist()[:7]
    csc = CoOpPromptLearner(tiny_clip, CLASSNAMES, n_ctx=6, csc=True)
    assert csc.ctx.shape == (3, 6, tiny_clip.text_width)
    generic = CoOpPromptLearner(tiny_clip, CLASSNAMES, n_ctx=6)
    assert generic.ctx.shape == (6, tiny_clip.text_width)
    assert list(generic.state_dict()) == ["ctx"]  # class-name buffers are rebuilt, never saved
    assert [p for p in tiny_clip.parameters() if p.requires_grad] == []
    with pytest.raises(ValueError, match="CLASS_TOKEN_POSITION"):
        CoOpPromptLearner(tiny_clip, CLASSNAMES, class_token_position="start")


@pytest.mark.parametrize("csc", [False, True])
@pytest.mark.parametrize("position", ["end", "middle", "front"])
def test_class_token_positions(tiny_clip, tiny_openclip_model, position, csc):
    torch.manual_seed(0)
    learner = CoOpPromptLearner(tiny_clip, CLASSNAMES, n_ctx=4, csc=csc, class_token_position=position)
    with torch.no_grad():
        learner.ctx.normal_(std=0.5)  # far from any token embedding, so a misplaced context shows
    embeddings, tokens = learner()
    expected, expected_tokens = hand_built(tiny_clip, learner.ctx.detach(), position)
    torch.testing.assert_close(embeddings.detach(), expected, atol=0, rtol=0)
    assert torch.equal(tokens, expected_tokens)

    # Features: open_clip's own blocks run over the hand-built sequences (positions 1.. overwritten).
    with torch.no_grad():
        reference = F.normalize(reference_encode_text(tiny_openclip_model, expected_tokens, [expected[:, 1:]]), dim=-1)
    features = coop_text_features(tiny_clip, learner)
    torch.testing.assert_close(features.detach(), reference, atol=2e-5, rtol=0)
    features.sum().backward()
    assert learner.ctx.grad is not None and learner.ctx.grad.abs().sum() > 0
    if position == "end":  # CoOp's end position is exactly CLIP's text prompt slot 1..n_ctx
        direct = tiny_clip.encode_text(expected_tokens, prompts=[learner.ctx.detach()])
        torch.testing.assert_close(features.detach(), F.normalize(direct, dim=-1), atol=2e-5, rtol=0)


def test_checkpoint_shape_mismatch_is_one_clear_error(tiny_clip):
    csc = CoOpPromptLearner(tiny_clip, CLASSNAMES, n_ctx=4, csc=True)
    fewer = CoOpPromptLearner(tiny_clip, CLASSNAMES[:2], n_ctx=4, csc=True)
    with pytest.raises(ValueError, match=r"CSC\) for 3 classes.*CSC False"):
        fewer.load_state_dict(csc.state_dict())
    generic = CoOpPromptLearner(tiny_clip, CLASSNAMES[:2], n_ctx=4)
    upstream_style = {"ctx": torch.ones(4, tiny_clip.text_width), "token_prefix": torch.zeros(2, 1, 64),
                      "token_suffix": torch.zeros(2, 72, 64)}
    generic.load_state_dict(upstream_style)  # upstream CoOp checkpoints also carry the token buffers
    assert torch.equal(generic.ctx.detach(), torch.ones(4, tiny_clip.text_width))
    with pytest.raises(ValueError, match="expected only 'ctx'"):
        generic.load_state_dict({"ctx": torch.ones(4, 64), "meta_net.weight": torch.ones(1)})


def test_coop_trains_reloads_and_evaluates_new_classes(tmp_path, tiny_clip_file):
    write_tree("EuroSAT", tmp_path / "data", mode="json")
    out = tmp_path / "train_base"
    trained = train.main(coop_argv(tmp_path / "data", out, tiny_clip_file, "DATASET.SUBSAMPLE_CLASSES", "base"))
    ctx = trained.prompt_learner.ctx.detach().clone()
    result = json.loads((out / "results.json").read_text())
    assert result["subsample_classes"] == "base" and result["n_ctx"] == 4 and result["config"] == "vit_b16_ctxv1"
    checkpoint = load_checkpoint(str(out / "prompt_learner" / "model.pth.tar-2"))
    assert list(checkpoint["state_dict"]) == ["ctx"] and torch.equal(checkpoint["state_dict"]["ctx"], ctx)

    reload_dir = tmp_path / "reload"
    reloaded = train.main(coop_argv(tmp_path / "data", reload_dir, tiny_clip_file, "DATASET.SUBSAMPLE_CLASSES", "base",
                                    flags=("--eval-only", "--model-dir", str(out), "--load-epoch", "2")))
    assert torch.equal(reloaded.prompt_learner.ctx.detach(), ctx)
    assert json.loads((reload_dir / "results.json").read_text())["accuracy"] == result["accuracy"]

    new_dir = tmp_path / "test_new"
    novel = train.main(coop_argv(tmp_path / "data", new_dir, tiny_clip_file, "DATASET.SUBSAMPLE_CLASSES", "new",
                                 flags=("--eval-only", "--model-dir", str(out), "--load-epoch", "2")))
    assert novel.prompt_learner.classnames == ["Highway or Road", "Industrial Buildings"]
    assert torch.equal(novel.prompt_learner.ctx.detach(), ctx)
    assert json.loads((new_dir / "results.json").read_text())["subsample_classes"] == "new"

    init = train.main(coop_argv(tmp_path / "data", tmp_path / "init", tiny_clip_file, "MODEL.INIT_WEIGHTS",
                                str(out / "prompt_learner" / "model.pth.tar-2"), "DATASET.SUBSAMPLE_CLASSES", "new",
                                flags=("--no-train",)))
    assert torch.equal(init.prompt_learner.ctx.detach(), ctx)


def test_an_upstream_run_evaluates_with_the_class_token_position_it_records(tmp_path, tiny_clip_file,
                                                                             tiny_openclip_model):
    """An upstream CoOp run of 4 tokens with the class token in the middle, evaluated with the ctxv1 config (its
    context from "a photo of a", the class token at the end): "ctx[:2] <class> ctx[2:]." as the run's log records,
    named in one line."""
    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    ctx, _ = upstream_coop_run(tmp_path / "upstream", tiny_clip_file, "middle")
    out = tmp_path / "test_new"
    evaluated = train.main(coop_argv(tmp_path / "data", out, tiny_clip_file, "DATASET.SUBSAMPLE_CLASSES", "new",
                                     flags=("--eval-only", "--model-dir", str(tmp_path / "upstream"), "--load-epoch",
                                            "5")))
    images, _ = load_images(tree, "test", [3, 4])
    with torch.no_grad():
        logits = evaluated.model_inference(images)
    assert rel_err(logits, coop_branch(ctx, "middle")(tiny_openclip_model, tree.classnames[3:], images)) < 1e-5
    assert ("TRAINER.COOP.CTX_INIT '' (this config: 'a photo of a'); TRAINER.COOP.CLASS_TOKEN_POSITION 'middle' (this "
            "config: 'end')") in (out / "log.txt").read_text()


def test_coop_loss_decreases_on_colour_classes(tmp_path, tiny_clip_file):
    write_image_tree(str(tmp_path), size=8)
    out = tmp_path / "colours"
    train.main(train_argv("CoOp", None, tmp_path, out, *tiny_run_opts(epochs=3), "DATASET.NAME", "EngineTinyDataset",
                          "INPUT.TRANSFORMS", "['normalize']", "TRAIN.PRINT_FREQ", "3", "TRAINER.COOP.N_CTX", "4",
                          "OPTIM.NAME", "sgd", "OPTIM.LR", "0.05", "OPTIM.LR_SCHEDULER", "cosine",
                          "OPTIM.WARMUP_EPOCH", "0", dataset=None, backbone=tiny_clip_file))
    log = (out / "log.txt").read_text()
    # 12 train images, batch 4: the line at batch 3/3 shows the epoch's mean loss in parentheses.
    means = [float(m) for m in re.findall(r"batch \[3/3\] .*? loss [\d.]+ \(([\d.]+)\)", log)]
    assert len(means) == 3
    assert means[-1] < means[0], means
