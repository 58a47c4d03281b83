"""Upstream CLIP-Adapter's own trainer on one batch, on given CLIP weights and given adapter weights: the upstream
side of ``tests/bench/test_upstream_clip_adapter.py``, which compares it with our ``trainers/clip_adapter.py``.

    python bench/upstream_clip_adapter.py --upstream .upstream/CLIP-Adapter --coop .upstream/KgCoOp \\
        --inputs batch.pt --json upstream.json

Standalone: it imports none of this repository's packages (upstream's ``clip`` shares its name with ours; it borrows
the standard-library helpers of its sibling ``bench/upstream_promptkd.py``). ``--upstream`` is a checkout of
upstream's repository (``bash bench/upstream_setup.sh clip_adapter``), whose one file ``clip_adapter.py`` is meant to
be dropped into CoOp's code base: ``--coop`` is a checkout that holds CoOp's ``clip`` package and a Dassl (upstream
KgCoOp's, ``bash bench/upstream_setup.sh kgcoop``). Upstream's code runs: its ``CLIP_Adapter`` trainer's ``__init__``
and ``build_model`` (``load_clip_to_cpu``, ``CustomCLIP``, the adapter, Dassl's SGD with CoOp's schedule), one
forward of its CustomCLIP and one ``forward_backward``.

``--inputs`` is a ``torch.save`` file read without unpickling code: ``images`` [B, 3, H, W] (preprocessed),
``labels`` [B], ``classnames`` (list of str), ``down`` [D/4, D] and ``up`` [D, D/4] (the adapter's weights to set)
and ``clip`` (the path of an OpenAI-layout CLIP state dict). The JSON holds the trainable parameters by name, the
logits, ``loss`` (as ``forward_backward`` reports it), the gradients of both weights, the learning rate of that step
and ``patches``: one line per change to upstream's behaviour.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from types import SimpleNamespace

if __package__:
    from .upstream_promptkd import UsageError, load_inputs, run_and_write, scheduler_shim, upstream_head
else:  # run as `python bench/upstream_clip_adapter.py`: the sibling module, not this repository's packages
    from upstream_promptkd import UsageError, load_inputs, run_and_write, scheduler_shim, upstream_head

SETUP_COMMAND = "bash bench/upstream_setup.sh clip_adapter"
COOP_SETUP_COMMAND = "bash bench/upstream_setup.sh kgcoop"
UPSTREAM_MARKER = "clip_adapter.py"
COOP_CODE, COOP_DASSL = "KgCoOp", "Dassl.ProGrad.pytorch"
"""The folders of the ``--coop`` checkout holding CoOp's code base (its ``clip`` package) and a Dassl."""
COOP_MARKER = os.path.join(COOP_CODE, "clip", "clip.py")
INPUT_KEYS = ("images", "labels", "classnames", "down", "up", "clip")
RECIPE = {"OPTIM.NAME": "sgd", "OPTIM.LR": 0.002, "OPTIM.MAX_EPOCH": 200, "OPTIM.LR_SCHEDULER": "cosine",
          "OPTIM.WARMUP_EPOCH": 1, "OPTIM.WARMUP_TYPE": "constant", "OPTIM.WARMUP_CONS_LR": 1e-5,
          "DATALOADER.TRAIN_X.BATCH_SIZE": 32}
"""CoOp's ViT-B/16 recipe (its configs/trainers/CoOp/vit_b16.yaml), which upstream's README says to run it with."""


def check_paths(upstream: str, coop: str, inputs: str) -> None:
    """Refuse folders that are not the two checkouts, or missing inputs."""
    if not os.path.isfile(os.path.join(upstream, UPSTREAM_MARKER)):
        raise UsageError(f"--upstream {upstream}: no upstream CLIP-Adapter checkout there ({UPSTREAM_MARKER} is "
                         f"missing); put one there with '{SETUP_COMMAND}'")
    if not os.path.isfile(os.path.join(coop, COOP_MARKER)):
        raise UsageError(f"--coop {coop}: no CoOp code base there ({COOP_MARKER} is missing); put upstream KgCoOp's "
                         f"there with '{COOP_SETUP_COMMAND}'")
    if not os.path.isfile(inputs):
        raise UsageError(f"--inputs {inputs}: no such file; write it with torch.save({{{', '.join(INPUT_KEYS)}}})")


def read_inputs(torch, path: str) -> dict:
    """The inputs file's entries (tensors, strings; nothing pickled runs), each named in its error."""
    inputs = load_inputs(torch, path, INPUT_KEYS)
    images, labels, down, up = inputs["images"], inputs["labels"], inputs["down"], inputs["up"]
    if not (torch.is_tensor(images) and images.dim() == 4 and images.shape[1] == 3):
        raise UsageError(f"--inputs {path}: images must be a tensor [B, 3, H, W]")
    if not (torch.is_tensor(labels) and labels.shape == images.shape[:1]):
        raise UsageError(f"--inputs {path}: labels must be a tensor [B] for the {len(images)} images")
    if not (torch.is_tensor(down) and torch.is_tensor(up) and down.dim() == 2 and up.shape == down.shape[::-1]):
        raise UsageError(f"--inputs {path}: down [D/4, D] and up [D, D/4] must be the adapter's two weights")
    if not os.path.isfile(inputs["clip"]):
        raise UsageError(f"--inputs {path}: its clip {inputs['clip']} is no file; give a CLIP state dict's path")
    return inputs


def import_upstream(upstream: str, coop: str) -> SimpleNamespace:
    """Upstream's ``clip_adapter.py`` (as a module of its own) and the code base it imports, CoOp's ``clip`` and
    Dassl, from the ``--coop`` checkout (first on ``sys.path``)."""
    sys.path[:0] = [os.path.join(coop, COOP_CODE), os.path.join(coop, COOP_DASSL)]
    spec = importlib.util.spec_from_file_location("upstream_clip_adapter", os.path.join(upstream, UPSTREAM_MARKER))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return SimpleNamespace(adapter=module, clip=importlib.import_module("clip.clip"),
                           config=importlib.import_module("dassl.config"))


def device_shim(torch) -> str:
    """Make ``Tensor.to("cuda")`` stay on the CPU, for upstream's hard-coded move of the prompts' tokens."""
    to = torch.Tensor.to

    def cpu_to(self, *args, **kwargs):
        return to(self, *("cpu" if isinstance(a, str) and a == "cuda" else a for a in args), **kwargs)

    torch.Tensor.to = cpu_to
    return "CPU run: Tensor.to('cuda') moves to the CPU (upstream's TextEncoder sends the prompts' tokens to 'cuda')"


def build_cfg(up: SimpleNamespace, size: Sequence[int], dataset: str):
    """Dassl's defaults with CoOp's ViT-B/16 recipe, the dataset's name (its prompt), the images' size, the CPU."""
    cfg = up.config.get_cfg_default()
    cfg.merge_from_list([item for key, value in RECIPE.items() for item in (key, value)])
    cfg.merge_from_list(["DATASET.NAME", dataset, "MODEL.BACKBONE.NAME", "ViT-B/16", "INPUT.SIZE",
                         (size[0], size[1]), "USE_CUDA", False])
    return cfg


def build_trainer(up: SimpleNamespace, cfg, classnames: list[str], width: int):
    """Upstream's CLIP_Adapter trainer, built by its own ``__init__`` with the data manager replaced by the class
    names, its adapter sized to the CLIP's feature width (upstream hard-codes RN50's 1024)."""
    def build_data_loader(self) -> None:
        self.dm = SimpleNamespace(dataset=SimpleNamespace(classnames=list(classnames)))
        self.lab2cname = dict(enumerate(classnames))
        self.num_classes = len(classnames)

    init = up.adapter.CustomCLIP.__init__

    def sized_init(self, cfg, classnames, clip_model) -> None:
        init(self, cfg, classnames, clip_model)
        self.adapter = up.adapter.Adapter(width, 4).to(clip_model.dtype)

    up.adapter.CustomCLIP.__init__ = sized_init
    trainer_class = type("ClipAdapterOnGivenClasses", (up.adapter.CLIP_Adapter,),
                         {"build_data_loader": build_data_loader})
    return trainer_class(cfg)


def run(args: argparse.Namespace) -> dict:
    """Build upstream's trainer on the inputs' CLIP and classes, set its adapter, run its forward and one step."""
    import torch

    inputs = read_inputs(torch, args.inputs)
    size = tuple(inputs["images"].shape[2:])
    head = upstream_head(args.upstream)
    patches = [*scheduler_shim(torch), device_shim(torch)]
    up = import_upstream(args.upstream, args.coop)
    clip_path = os.path.abspath(inputs["clip"])
    up.clip._download = lambda url, root=None: clip_path
    width = inputs["down"].shape[1]
    patches += [
        f"clip._download returns the given weights file {os.path.basename(clip_path)} for every URL (upstream's "
        "load_clip_to_cpu reads it: torch.jit.load refuses a plain state dict, torch.load reads it, clip.build_model "
        "builds it, the trainer floats it)",
        f"CustomCLIP's Adapter(1024, 4) is replaced by upstream's Adapter({width}, 4) after its __init__: upstream "
        "hard-codes RN50's feature width",
        f"Dassl's defaults with CoOp's ViT-B/16 recipe ({', '.join(f'{k} {v}' for k, v in RECIPE.items())}), "
        f"DATASET.NAME {args.dataset}, INPUT.SIZE {size}, USE_CUDA False",
        "build_data_loader reads no dataset: dm.dataset.classnames, lab2cname and num_classes are the given class "
        "names",
        "the adapter's two weights are set to the given ones after build_model",
        "batch_idx 0 of num_batches 2 (forward_backward outside an epoch loop: mid-epoch, no scheduler step)"]
    cfg = build_cfg(up, size, args.dataset)
    trainer = build_trainer(up, cfg, inputs["classnames"], width)
    fc = trainer.model.adapter.fc
    with torch.no_grad():
        fc[0].weight.copy_(inputs["down"])
        fc[2].weight.copy_(inputs["up"])
    images, labels = inputs["images"].float(), inputs["labels"].long()
    trainer.set_model_mode("train")
    with torch.no_grad():
        logits = trainer.model(images)
    trainer.batch_idx, trainer.num_batches = 0, 2
    lr = trainer.get_current_lr()
    summary = trainer.forward_backward({"img": images, "label": labels})
    return {"upstream": head, "torch": torch.__version__, "patches": patches,
            "trainable": {name: p.numel() for name, p in trainer.model.named_parameters() if p.requires_grad},
            "logits": logits.tolist(), "loss": summary["loss"], "lr": lr,
            "down_grad": fc[0].weight.grad.tolist(), "up_grad": fc[2].weight.grad.tolist()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/upstream_clip_adapter.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help=f"upstream CLIP-Adapter's repository ({SETUP_COMMAND})")
    p.add_argument("--coop", required=True, help=f"CoOp's code base and a Dassl ({COOP_SETUP_COMMAND})")
    p.add_argument("--inputs", required=True, help="torch.save file: " + ", ".join(INPUT_KEYS))
    p.add_argument("--json", required=True, help="where the record goes")
    p.add_argument("--dataset", default="EuroSAT", help="DATASET.NAME (picks upstream's hand-crafted prompt)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Refuse missing checkouts or inputs before anything is imported; make paths absolute."""
    args.upstream, args.coop = os.path.abspath(args.upstream), os.path.abspath(args.coop)
    args.inputs = os.path.abspath(args.inputs)
    check_paths(args.upstream, args.coop, args.inputs)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit status (2: a user error, one line)."""
    return run_and_write(build_parser().parse_args(argv), check_args, run)


if __name__ == "__main__":
    sys.exit(main())
