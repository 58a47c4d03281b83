"""Upstream KgCoOp's own loss on one batch, on given CLIP weights and a given context: the upstream side of
``tests/bench/test_upstream_kgcoop.py``, which compares it with our ``trainers/kgcoop.py`` on the same inputs.

    python bench/upstream_kgcoop.py --upstream .upstream/KgCoOp --inputs batch.pt --json upstream.json

Standalone: it imports none of this repository's packages (upstream's ``clip``, ``trainers``, ``datasets`` and
``train`` share their names with ours; it borrows the standard-library helpers of its sibling
``bench/upstream_promptkd.py``). ``--upstream`` is a checkout of upstream's repository
(``bash bench/upstream_setup.sh kgcoop``); its ``KgCoOp`` and ``Dassl.ProGrad.pytorch`` folders go first on
``sys.path`` and upstream's own code runs: ``train.py``'s ``setup_cfg`` (Dassl's defaults, ``extend_cfg``, the
dataset's and KgCoOp's ViT-B/16 config files, then the options of ``scripts/base2new_train.sh`` with W 8), the
``KgCoOp`` trainer's ``__init__`` and ``build_model`` (CustomCLIP, its PromptLearner and the second CLIP that builds
the hand-crafted prompts' features), one forward of its CustomCLIP and one ``forward_backward``.

``--inputs`` is a ``torch.save`` file read without unpickling code: ``images`` [B, 3, H, W] (preprocessed),
``labels`` [B], ``classnames`` (list of str), ``ctx`` [n_ctx, width] (the context to set) and ``clip`` (the path of an
OpenAI-layout CLIP state dict). The JSON holds the trainable parameters by name, the logits, ``ce``, ``score``
(upstream's 1 − mean cosine to the hand-crafted features), ``loss`` (as ``forward_backward`` reports it), W, the
gradient of ``ctx`` and the learning rate of that step, and ``patches``: one line per change to upstream's behaviour.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from types import SimpleNamespace

if __package__:
    from .upstream_promptkd import UsageError, cpu_shim, load_inputs, run_and_write, scheduler_shim, upstream_head
else:  # run as `python bench/upstream_kgcoop.py`: the sibling module, not this repository's packages
    from upstream_promptkd import UsageError, cpu_shim, load_inputs, run_and_write, scheduler_shim, upstream_head

SETUP_COMMAND = "bash bench/upstream_setup.sh kgcoop"
CODE, DASSL = "KgCoOp", "Dassl.ProGrad.pytorch"
"""The checkout's folders holding upstream KgCoOp's code and its Dassl."""
UPSTREAM_MARKER = os.path.join(CODE, "trainers", "kgcoop.py")
CONFIG_FILE = os.path.join("configs", "trainers", "KgCoOp", "vit_b16_ep100_ctxv1.yaml")
SCRIPT_OPTS = ("TRAINER.COOP.N_CTX", "4", "TRAINER.COOP.CSC", "False", "TRAINER.COOP.W", "8.0",
               "TRAINER.COOP.CLASS_TOKEN_POSITION", "end", "DATASET.NUM_SHOTS", "16",
               "DATASET.SUBSAMPLE_CLASSES", "base")
"""The options upstream's ``scripts/base2new_train.sh`` passes (W: its README's 8.0)."""
INPUT_KEYS = ("images", "labels", "classnames", "ctx", "clip")
TARGET_PRECISIONS = ("fp16", "fp32")


def check_paths(upstream: str, inputs: str, dataset: str) -> None:
    """Refuse a folder that is not an upstream checkout, a dataset upstream has no config for, or missing inputs."""
    if not os.path.isfile(os.path.join(upstream, UPSTREAM_MARKER)):
        raise UsageError(f"--upstream {upstream}: no upstream KgCoOp checkout there ({UPSTREAM_MARKER} is missing); "
                         f"put one there with '{SETUP_COMMAND}'")
    config = dataset_config(upstream, dataset)
    if not os.path.isfile(config):
        raise UsageError(f"--dataset {dataset}: upstream has no {os.path.relpath(config, upstream)}; give the name of "
                         "one of its configs/datasets files (eurosat, dtd, ...)")
    if not os.path.isfile(inputs):
        raise UsageError(f"--inputs {inputs}: no such file; write it with torch.save({{{', '.join(INPUT_KEYS)}}})")


def dataset_config(upstream: str, dataset: str) -> str:
    return os.path.join(upstream, CODE, "configs", "datasets", f"{dataset}.yaml")


def read_inputs(torch, path: str) -> dict:
    """The inputs file's entries (tensors, strings; nothing pickled runs), each named in its error."""
    inputs = load_inputs(torch, path, INPUT_KEYS)
    images, labels, ctx = inputs["images"], inputs["labels"], inputs["ctx"]
    if not (torch.is_tensor(images) and images.dim() == 4 and images.shape[1] == 3):
        raise UsageError(f"--inputs {path}: images must be a tensor [B, 3, H, W]")
    if not (torch.is_tensor(labels) and labels.shape == images.shape[:1]):
        raise UsageError(f"--inputs {path}: labels must be a tensor [B] for the {len(images)} images")
    if not (torch.is_tensor(ctx) and ctx.dim() == 2):
        raise UsageError(f"--inputs {path}: ctx must be a generic context [n_ctx, width] (upstream's CSC False)")
    if not os.path.isfile(inputs["clip"]):
        raise UsageError(f"--inputs {path}: its clip {inputs['clip']} is no file; give a CLIP state dict's path")
    return inputs


def import_upstream(upstream: str) -> SimpleNamespace:
    """Upstream's modules the run uses, imported from the checkout (its code and its Dassl first on ``sys.path``)."""
    sys.path[:0] = [os.path.join(upstream, CODE), os.path.join(upstream, DASSL)]
    names = {"train": "train", "kgcoop": "trainers.kgcoop", "clip": "clip.clip"}
    return SimpleNamespace(**{key: importlib.import_module(name) for key, name in names.items()})


def build_cfg(up: SimpleNamespace, upstream: str, dataset: str, size: Sequence[int]):
    """Upstream train.py's ``setup_cfg`` for its base-to-novel KgCoOp run, on the CPU in fp32 at the images' size."""
    args = SimpleNamespace(root="", output_dir="", resume="", seed=1, source_domains=None, target_domains=None,
                           transforms=None, trainer="KgCoOp", backbone="", head="",
                           dataset_config_file=dataset_config(upstream, dataset),
                           config_file=os.path.join(upstream, CODE, CONFIG_FILE),
                           opts=[*SCRIPT_OPTS, "INPUT.SIZE", f"({size[0]}, {size[1]})", "TRAINER.COOP.PREC", "fp32",
                                 "USE_CUDA", "False"])
    return up.train.setup_cfg(args)


def patch_upstream(up: SimpleNamespace, clip_path: str, targets_prec: str) -> list[str]:
    """Point upstream's CLIP loading at ``clip_path`` (and cast what it loads to fp32 for ``targets_prec`` fp32);
    the lines saying so."""
    up.clip._download = lambda url, root=None: clip_path
    lines = [f"clip._download returns the given weights file {os.path.basename(clip_path)} for every URL (upstream's "
             "load_clip_to_cpu reads it: torch.jit.load refuses a plain state dict, torch.load reads it, "
             "clip.build_model builds it)"]
    if targets_prec == "fp32":
        load = up.kgcoop.load_clip_to_cpu
        up.kgcoop.load_clip_to_cpu = lambda cfg: load(cfg).float()
        lines.append("load_clip_to_cpu's CLIP is cast to fp32: the second CLIP, whose text features are the "
                     "hand-crafted targets, runs in fp32 like the first (upstream keeps it fp16 under every PREC)")
    return lines


def build_trainer(up: SimpleNamespace, cfg, classnames: list[str]):
    """Upstream's KgCoOp trainer, built by its own ``__init__`` with the data manager replaced by the class names."""
    def build_data_loader(self) -> None:
        self.dm = SimpleNamespace(dataset=SimpleNamespace(classnames=list(classnames)))
        self.lab2cname = dict(enumerate(classnames))
        self.num_classes = len(classnames)

    trainer_class = type("KgCoOpOnGivenClasses", (up.kgcoop.KgCoOp,), {"build_data_loader": build_data_loader})
    return trainer_class(cfg)


def run(args: argparse.Namespace) -> dict:
    """Build upstream's trainer on the inputs' CLIP and classes, set its context, run its forward and one step."""
    import torch
    import torch.nn.functional as F

    inputs = read_inputs(torch, args.inputs)
    size = tuple(inputs["images"].shape[2:])
    head = upstream_head(args.upstream)
    patches = [*scheduler_shim(torch), cpu_shim(torch, "the second CLIP and the hand-crafted prompts' tokens")]
    up = import_upstream(args.upstream)
    patches += patch_upstream(up, os.path.abspath(inputs["clip"]), args.targets_prec)
    patches += [
        f"options after the base-to-novel script's: INPUT.SIZE {size} (the given images' size; upstream's config "
        "says 224, and its PromptLearner asserts the CLIP's resolution), TRAINER.COOP.PREC fp32 (upstream's "
        "default fp16; this repository runs fp16 as fp32 on the CPU), USE_CUDA False",
        "build_data_loader reads no dataset: dm.dataset.classnames, lab2cname and num_classes are the given class "
        "names",
        "prompt_learner.ctx is set to the given context after build_model",
        "batch_idx 0 of num_batches 2 (forward_backward outside an epoch loop: mid-epoch, no scheduler step)"]
    cfg = build_cfg(up, args.upstream, args.dataset, size)
    trainer = build_trainer(up, cfg, inputs["classnames"])
    ctx = trainer.model.prompt_learner.ctx
    if ctx.shape != inputs["ctx"].shape:
        raise UsageError(f"--inputs {args.inputs}: ctx is {list(inputs['ctx'].shape)}, upstream builds "
                         f"{list(ctx.shape)} (N_CTX 4 from \"a photo of a\", the CLIP's text width)")
    with torch.no_grad():
        ctx.copy_(inputs["ctx"])
    images, labels = inputs["images"].float(), inputs["labels"].long()
    trainer.set_model_mode("train")
    with torch.no_grad():
        logits, score = trainer.model(images)
    trainer.batch_idx, trainer.num_batches = 0, 2
    lr = trainer.get_current_lr()
    summary = trainer.forward_backward({"img": images, "label": labels})
    return {"upstream": head, "torch": torch.__version__, "targets_prec": args.targets_prec, "patches": patches,
            "trainable": {name: p.numel() for name, p in trainer.model.named_parameters() if p.requires_grad},
            "w": trainer.w, "logits": logits.tolist(), "ce": F.cross_entropy(logits, labels).item(),
            "score": score.item(), "loss": summary["loss"], "lr": lr, "ctx_grad": ctx.grad.tolist()}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/upstream_kgcoop.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help=f"checkout of upstream KgCoOp's repository ({SETUP_COMMAND})")
    p.add_argument("--inputs", required=True, help="torch.save file: " + ", ".join(INPUT_KEYS))
    p.add_argument("--json", required=True, help="where the record goes")
    p.add_argument("--dataset", default="eurosat", help="upstream's configs/datasets/<name>.yaml (its DATASET.NAME "
                                                        "picks the hand-crafted prompt)")
    p.add_argument("--targets-prec", choices=TARGET_PRECISIONS, default="fp16",
                   help="precision of the second CLIP, whose text features are the hand-crafted targets (upstream: "
                        "fp16)")
    return p


def check_args(args: argparse.Namespace) -> None:
    """Refuse a missing checkout, dataset config or inputs file before anything is imported; make paths absolute."""
    args.upstream, args.inputs = os.path.abspath(args.upstream), os.path.abspath(args.inputs)
    check_paths(args.upstream, args.inputs, args.dataset)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit status (2: a user error, one line)."""
    return run_and_write(build_parser().parse_args(argv), check_args, run)


if __name__ == "__main__":
    sys.exit(main())
