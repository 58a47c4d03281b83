"""Our KgCoOp (trainers/kgcoop.py) against upstream KgCoOp's own code (bench/upstream_kgcoop.py, run as a child
process) on the same CLIP weights, context and batch: the trainable parameters, the logits, the cross-entropy, the
knowledge-guided term, the loss with W 8, the context's gradient and the learning rate of the step.

The child's command-line errors and the setup script's run everywhere. The comparisons need a checkout of upstream's
repository (``bash bench/upstream_setup.sh kgcoop`` puts one at .upstream/KgCoOp; the environment variable
UPSTREAM_KGCOOP names another) and skip with the reason without one."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
import torch

from bench import upstream_kgcoop as up
from bench.models import VIT_B16
from clip.model import CLIP
from tests.helpers_baselines import BASE, built_trainer, train_batch, trainable, vit_b16_shell
from tests.helpers_datasets import load_images
from tests.helpers_run import HANG_GUARD_S, REPO
from tests.helpers_upstream import upstream_unavailable
from trainers.kgcoop import KgCoOpPromptLearner

SCRIPT = os.path.join(REPO, "bench", "upstream_kgcoop.py")
SETUP = os.path.join(REPO, "bench", "upstream_setup.sh")
UPSTREAM = os.environ.get("UPSTREAM_KGCOOP") or os.path.join(REPO, ".upstream", "KgCoOp")
CONFIG = "vit_b16_ep100_ctxv1"


def _child(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def _stub_checkout(tmp_path) -> str:
    """A folder the command line takes for a checkout (its marker and EuroSAT's config), for the errors found before
    upstream's code is imported."""
    folder = tmp_path / "upstream"
    for rel in (up.UPSTREAM_MARKER, os.path.join(up.CODE, "configs", "datasets", "eurosat.yaml")):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text("")
    return str(folder)


def test_the_child_imports_only_the_standard_library_torch_and_its_sibling():
    # upstream's clip/trainers/datasets/train share our packages' names: the child must not import ours
    with open(SCRIPT, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert names - {"torch", "upstream_promptkd"} <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_missing_checkout_is_one_line_naming_the_setup_command(tmp_path):
    out = tmp_path / "out.json"
    done = _child("--upstream", str(tmp_path / "nowhere"), "--inputs", str(tmp_path / "in.pt"), "--json", str(out))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: --upstream {tmp_path / 'nowhere'}: no upstream KgCoOp checkout there (KgCoOp/trainers/kgcoop.py is "
        "missing); put one there with 'bash bench/upstream_setup.sh kgcoop'"]
    assert not out.exists()


def test_a_dataset_upstream_has_no_config_for_is_one_line(tmp_path):
    done = _child("--upstream", _stub_checkout(tmp_path), "--inputs", str(tmp_path / "in.pt"), "--json",
                  str(tmp_path / "out.json"), "--dataset", "mnist")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: --dataset mnist: upstream has no KgCoOp/configs/datasets/mnist.yaml; "
                                        "give the name of one of its configs/datasets files (eurosat, dtd, ...)"]


def test_inputs_without_an_entry_are_one_line_naming_it(tmp_path):
    inputs = tmp_path / "in.pt"
    torch.save({"images": torch.zeros(2, 3, 32, 32), "labels": torch.zeros(2, dtype=torch.long),
                "classnames": ["a", "b"], "clip": str(inputs)}, inputs)
    done = _child("--upstream", _stub_checkout(tmp_path), "--inputs", str(inputs), "--json", str(tmp_path / "o.json"))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: --inputs {inputs}: no ctx; it needs images, labels, classnames, ctx, "
                                        "clip"]
    assert not (tmp_path / "o.json").exists()


class _SideEffect:
    """Unpickling it would create the folder ``marker``."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_inputs_are_read_without_running_pickled_code(tmp_path):
    inputs, marker = tmp_path / "in.pt", tmp_path / "ran"
    torch.save({"images": _SideEffect(str(marker))}, inputs)
    done = _child("--upstream", _stub_checkout(tmp_path), "--inputs", str(inputs), "--json", str(tmp_path / "o.json"))
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: --inputs {inputs}: not a torch.save file of tensors and strings (")
    assert not marker.exists()


def _setup(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SETUP, *args], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": sys.executable,
                               "UPSTREAM_DIR": str(tmp_path / "up")})


def test_setup_refuses_a_folder_that_is_no_kgcoop_checkout(tmp_path):
    # a PromptKD checkout's layout is not KgCoOp's: upstream KgCoOp's code sits in its repository's KgCoOp/ folder
    (tmp_path / "up" / "trainers").mkdir(parents=True)
    (tmp_path / "up" / "trainers" / "kgcoop.py").write_text("")
    done = _setup(tmp_path, "kgcoop")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {tmp_path / 'up'} exists but holds no upstream KgCoOp "
                                        "(KgCoOp/trainers/kgcoop.py is missing); remove it and rerun"]


def test_setup_names_the_upstreams_it_knows(tmp_path):
    done = _setup(tmp_path, "kgcoop_v2")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: unknown upstream 'kgcoop_v2'; choose promptkd (the default), kgcoop or "
                                        "clip_adapter"]
    assert not (tmp_path / "up").exists()


# --- upstream's own code (needs a checkout) ------------------------------------------------------------------------

UPSTREAM_UNAVAILABLE = upstream_unavailable("KgCoOp", UPSTREAM, up.UPSTREAM_MARKER,
                                            [os.path.join(UPSTREAM, up.CODE), os.path.join(UPSTREAM, up.DASSL)],
                                            up.SETUP_COMMAND)
needs_upstream = pytest.mark.skipif(bool(UPSTREAM_UNAVAILABLE), reason=UPSTREAM_UNAVAILABLE or "-")


def _upstream(inputs: str, folder, targets_prec: str) -> dict:
    """Upstream's record for the inputs file, its hand-crafted targets built in ``targets_prec``."""
    out = folder / f"upstream_{targets_prec}.json"
    done = _child("--upstream", UPSTREAM, "--inputs", inputs, "--json", str(out), "--targets-prec", targets_prec)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def _max_abs(a, b) -> float:
    return (torch.as_tensor(a, dtype=torch.float64) - torch.as_tensor(b, dtype=torch.float64)).abs().max().item()


@pytest.fixture(scope="module")
def ours(tmp_path_factory, tiny_clip_file) -> dict:
    """Our KgCoOp on the tiny CLIP and the tiny EuroSAT tree's base classes (context drawn far from its start): its
    logits, one training step's terms, the context's gradient and the step's learning rate, and the inputs file
    holding the same weights, context and batch for upstream."""
    folder = tmp_path_factory.mktemp("kgcoop_parity")
    clip_file = str(folder / "tiny-fp16.pt")  # fp16 like OpenAI's files: upstream's clip.build_model rounds to fp16
    torch.save({k: v.half() for k, v in torch.load(tiny_clip_file, weights_only=True).items()}, clip_file)
    tree, trainer = built_trainer(folder, "KgCoOp", CONFIG, clip_file)
    images, labels = load_images(tree, "train", BASE)
    ctx = trainer.prompt_learner.ctx.detach().clone()
    inputs = str(folder / "inputs.pt")
    torch.save({"images": images, "labels": labels, "classnames": list(trainer.dm.dataset.classnames), "ctx": ctx,
                "clip": clip_file}, inputs)
    with torch.no_grad():
        logits = trainer.model_inference(images)
    trainer.hand_crafted = trainer.hand_crafted_features()
    trainer.batch_idx, trainer.num_batches = 0, 2
    lr = trainer.get_current_lr()
    summary = trainer.forward_backward(train_batch(images, labels))
    return {"inputs": inputs, "folder": folder, "logits": logits, "ce": summary["ce"], "kg": summary["kg"],
            "loss": summary["loss"], "lr": lr, "ctx_grad": trainer.prompt_learner.ctx.grad.clone(),
            "trainable": {name: p.numel() for name, p in trainer.prompt_learner.named_parameters() if p.requires_grad},
            "clip_trainable": trainable(trainer.clip_model)}


@needs_upstream
def test_one_batch_equals_upstreams_own_code(ours):
    """Upstream's hand-crafted targets in fp32, as ours on the CPU (the child's ``patches`` say what else it sets)."""
    theirs = _upstream(ours["inputs"], ours["folder"], "fp32")
    assert ours["trainable"] == {"ctx": 4 * 64} and ours["clip_trainable"] == 0
    assert theirs["trainable"] == {"prompt_learner.ctx": 4 * 64}
    assert theirs["w"] == 8.0
    assert torch.allclose(ours["logits"].double(), torch.tensor(theirs["logits"], dtype=torch.float64), rtol=1e-5,
                          atol=1e-5)
    assert ours["kg"] > 0.05  # the drawn context is far from the hand-crafted prompt: the term matters
    assert ours["ce"] == pytest.approx(theirs["ce"], rel=1e-5)
    assert ours["kg"] == pytest.approx(theirs["score"], rel=1e-5)
    assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-5)
    assert theirs["loss"] == pytest.approx(theirs["ce"] + 8.0 * theirs["score"], rel=1e-6)
    grad = torch.tensor(theirs["ctx_grad"], dtype=torch.float64)
    assert torch.allclose(ours["ctx_grad"].double(), grad, rtol=1e-5, atol=1e-5 * grad.abs().max().item())
    assert ours["lr"] == theirs["lr"] == 1e-5  # the first step: the constant warm-up epoch
    print(f"\nparity with upstream (fp32 targets): trainable {sum(ours['trainable'].values())} / "
          f"{sum(theirs['trainable'].values())}; max |diff| logits {_max_abs(ours['logits'], theirs['logits']):.2e}, "
          f"ce {abs(ours['ce'] - theirs['ce']):.2e}, kg {abs(ours['kg'] - theirs['score']):.2e}, loss "
          f"{abs(ours['loss'] - theirs['loss']):.2e}, ctx grad {_max_abs(ours['ctx_grad'], grad):.2e} (of at most "
          f"{grad.abs().max().item():.2e})")


@needs_upstream
def test_upstreams_fp16_targets_move_only_the_knowledge_guided_term(ours):
    """As upstream runs it, the second CLIP (the hand-crafted targets) stays fp16 while PREC fp32 floats the first:
    the logits and the cross-entropy are untouched, the term moves by the targets' fp16 rounding."""
    theirs = _upstream(ours["inputs"], ours["folder"], "fp16")
    assert torch.allclose(ours["logits"].double(), torch.tensor(theirs["logits"], dtype=torch.float64), rtol=1e-5,
                          atol=1e-5)
    assert ours["ce"] == pytest.approx(theirs["ce"], rel=1e-5)
    assert abs(ours["kg"] - theirs["score"]) < 1e-3
    print(f"\nupstream's fp16 targets: kg ours {ours['kg']:.6f}, upstream {theirs['score']:.6f}, |diff| "
          f"{abs(ours['kg'] - theirs['score']):.2e}; loss |diff| {abs(ours['loss'] - theirs['loss']):.2e}")


@pytest.mark.slow
@needs_upstream
def test_upstream_trains_the_same_2048_values_on_vit_b16(tmp_path):
    """Upstream built on weights of ViT-B/16's shapes (random values) trains ``ctx`` alone: 4 × 512, as ours."""
    with torch.device("meta"):
        shapes = CLIP(**VIT_B16).state_dict()
    torch.manual_seed(0)
    weights = tmp_path / "vit_b16.pt"
    torch.save({k: (torch.randn(v.shape) * 0.02).half() for k, v in shapes.items()}, weights)
    inputs = tmp_path / "inputs.pt"
    torch.save({"images": torch.randn(1, 3, 224, 224), "labels": torch.tensor([0]), "classnames": ["Forest", "River"],
                "ctx": torch.zeros(4, 512), "clip": str(weights)}, inputs)
    theirs = _upstream(str(inputs), tmp_path, "fp16")
    ours = trainable(KgCoOpPromptLearner(vit_b16_shell(), ["Forest", "River"], 4, "a photo of a", False))
    assert theirs["trainable"] == {"prompt_learner.ctx": 2048} and ours == 2048
