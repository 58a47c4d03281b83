"""Our CLIP-Adapter (trainers/clip_adapter.py) against upstream CLIP-Adapter's own trainer
(bench/upstream_clip_adapter.py, run as a child process) on the same CLIP weights, adapter weights and batch: the
trainable parameters, the logits, the loss, both weights' gradients and the learning rate of the step.

The child's command-line errors run everywhere. The comparison needs a checkout of upstream's repository
(``bash bench/upstream_setup.sh clip_adapter`` puts one at .upstream/CLIP-Adapter; UPSTREAM_CLIP_ADAPTER names
another) and of the CoOp code base it is dropped into (upstream KgCoOp's, .upstream/KgCoOp; UPSTREAM_KGCOOP), and
skips with the reason without them."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from bench import upstream_clip_adapter as up
from tests.helpers_baselines import BASE, argv, train_batch, trainable
from tests.helpers_datasets import load_images, write_tree
from tests.helpers_run import HANG_GUARD_S, REPO
from tests.helpers_upstream import upstream_unavailable

SCRIPT = os.path.join(REPO, "bench", "upstream_clip_adapter.py")
UPSTREAM = os.environ.get("UPSTREAM_CLIP_ADAPTER") or os.path.join(REPO, ".upstream", "CLIP-Adapter")
COOP = os.environ.get("UPSTREAM_KGCOOP") or os.path.join(REPO, ".upstream", "KgCoOp")


def _child(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def test_missing_checkouts_are_one_line_naming_the_setup_command(tmp_path):
    out = tmp_path / "out.json"
    done = _child("--upstream", str(tmp_path / "nowhere"), "--coop", str(tmp_path), "--inputs",
                  str(tmp_path / "in.pt"), "--json", str(out))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: --upstream {tmp_path / 'nowhere'}: no upstream CLIP-Adapter checkout there (clip_adapter.py is "
        "missing); put one there with 'bash bench/upstream_setup.sh clip_adapter'"]
    (tmp_path / "clip_adapter.py").write_text("")
    done = _child("--upstream", str(tmp_path), "--coop", str(tmp_path / "none"), "--inputs", str(tmp_path / "in.pt"),
                  "--json", str(out))
    assert done.stderr.splitlines() == [
        f"error: --coop {tmp_path / 'none'}: no CoOp code base there (KgCoOp/clip/clip.py is missing); put upstream "
        "KgCoOp's there with 'bash bench/upstream_setup.sh kgcoop'"]
    assert not out.exists()


UPSTREAM_UNAVAILABLE = upstream_unavailable("CLIP-Adapter", UPSTREAM, up.UPSTREAM_MARKER,
                                            [os.path.join(COOP, up.COOP_CODE), os.path.join(COOP, up.COOP_DASSL)],
                                            up.SETUP_COMMAND) or upstream_unavailable(
    "KgCoOp (CLIP-Adapter's CoOp code base)", COOP, up.COOP_MARKER,
    [os.path.join(COOP, up.COOP_CODE), os.path.join(COOP, up.COOP_DASSL)], up.COOP_SETUP_COMMAND)


def _max_abs(a, b) -> float:
    return (torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max().item()


@pytest.mark.skipif(bool(UPSTREAM_UNAVAILABLE), reason=UPSTREAM_UNAVAILABLE or "-")
def test_one_batch_equals_upstreams_own_trainer(tmp_path, tiny_clip_file):
    """Our trainer on the tiny EuroSAT tree's base classes (adapter drawn far from zero) and upstream's on the same
    weights and batch: the same logits, loss, gradients and first learning rate (the constant warm-up's)."""
    import train

    tree = write_tree("EuroSAT", tmp_path / "data", mode="json")
    clip_file = str(tmp_path / "tiny-fp16.pt")  # fp16 like OpenAI's files: upstream's clip.build_model rounds to fp16
    torch.save({k: v.half() for k, v in torch.load(tiny_clip_file, weights_only=True).items()}, clip_file)
    ours = train.main(argv(tmp_path / "data", tmp_path / "run", "CLIPAdapter", "vit_b16", clip_file, "base",
                           "OPTIM.MAX_EPOCH", "200", flags=("--no-train",)))
    torch.manual_seed(0)
    with torch.no_grad():
        for p in ours.adapter.parameters():
            p.normal_(std=0.3)
    fc = ours.adapter.fc
    images, labels = load_images(tree, "train", BASE)
    inputs = str(tmp_path / "inputs.pt")
    torch.save({"images": images, "labels": labels, "classnames": list(ours.dm.dataset.classnames),
                "down": fc[0].weight.detach().clone(), "up": fc[2].weight.detach().clone(), "clip": clip_file},
               inputs)
    with torch.no_grad():
        logits = ours.model_inference(images)
    ours.batch_idx, ours.num_batches = 0, 2
    lr = ours.get_current_lr()
    summary = ours.forward_backward(train_batch(images, labels))
    out = tmp_path / "upstream.json"
    done = _child("--upstream", UPSTREAM, "--coop", COOP, "--inputs", inputs, "--json", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = json.loads(out.read_text())
    assert theirs["trainable"] == {"adapter.fc.0.weight": 8 * 32, "adapter.fc.2.weight": 32 * 8}
    assert trainable(ours.adapter) == 512 and trainable(ours.clip_model) == 0
    grads = {"down": (fc[0].weight.grad, theirs["down_grad"]), "up": (fc[2].weight.grad, theirs["up_grad"])}
    assert torch.allclose(logits.double(), torch.tensor(theirs["logits"], dtype=torch.float64), rtol=1e-5, atol=1e-5)
    assert summary["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
    for ours_grad, their_grad in grads.values():
        their_grad = torch.tensor(their_grad, dtype=torch.float64)
        assert their_grad.abs().max() > 0
        assert torch.allclose(ours_grad.double(), their_grad, rtol=1e-5, atol=1e-5 * their_grad.abs().max().item())
    assert lr == theirs["lr"] == 1e-5
    print(f"\nparity with upstream CLIP-Adapter: max |diff| logits {_max_abs(logits, theirs['logits']):.2e}, loss "
          f"{abs(summary['loss'] - theirs['loss']):.2e}, "
          + ", ".join(f"{name} grad {_max_abs(a, b):.2e} (of at most {torch.tensor(b).abs().max().item():.2e})"
                      for name, (a, b) in grads.items()))
