"""Convert a PromptKD/PromptSRC teacher checkpoint into this project's teacher file, without running pickled code.

PromptKD's released teachers (``teacher_model/<Dataset>/VLPromptLearner/model-best.pth.tar``; ImageNet-xd:
``VLPromptLearner_large/model.pth.tar-20``) are torch zip archives whose pickle also references non-tensor globals
(the Dassl scheduler object, the optimiser). ``torch.load(weights_only=True)`` rejects them, and allow-listing those
classes with ``torch.serialization.safe_globals`` would still run their ``__setstate__`` code. So by default the file
is read with a restricted unpickler (``torch.load`` with a custom ``pickle_module``): torch's own storage loading
and tensor-rebuild functions (plus OrderedDict, torch.Size, torch.device and dtypes) are the only globals resolved;
every other global becomes an inert placeholder that records its name and data and runs nothing.
``--trust`` switches to a plain ``torch.load(weights_only=False)`` for a file you trust.

Keys: ``prompt_learner.ctx`` → text prompt layer 0; ``text_encoder.transformer.resblocks.{i}.VPT_shallow`` → text
layer i; ``image_encoder.VPT`` → vision layer 0; ``image_encoder.transformer.resblocks.{i}.VPT_shallow`` → vision
layer i (fp16 → fp32). Frozen CLIP weights, ``ZS_image_encoder`` and the class-token buffers are ignored: the CLIP
comes from ``--clip``. Output: ``<output-dir>/VLPromptLearner/model.pth.tar-<epoch>`` + ``checkpoint`` (Dassl
layout, atomic), which ``build_teacher`` / ``TEACHER_CKPT=<output-dir>`` read.

Example: python tools/import_promptkd_teacher.py teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar
         --clip ViT-L/14   (writes teachers/EuroSAT/)
"""
from __future__ import annotations

import argparse
import importlib
import os
import pickle
import re
import types
from collections import Counter
from typing import Any

import torch
from tabulate import tabulate

if not __package__:  # run as `python tools/import_promptkd_teacher.py`
    from _repo_root import add_to_path

    add_to_path()

import clip
from clip.clip import _is_torchscript
from engine.checkpoint import load_checkpoint, save_checkpoint
from trainers.promptsrc import MODEL_NAME, TEXT_KEY, VISION_KEY, VLPromptLearner
from trainers.teacher import check_teacher_fits

# Globals the restricted unpickler resolves for real: torch's tensor rebuilding and the containers it uses.
_TENSOR_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._utils", "_rebuild_tensor_v3"),
    ("torch._utils", "_rebuild_parameter"),
    ("collections", "OrderedDict"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch", "UntypedStorage"),
}
# PromptKD's teacher_model/README.md spells two folder names differently from DATASET.NAME.
_FOLDER_TO_DATASET = {"ImageNet-xd": "ImageNet", "FGVCaircraft": "FGVCAircraft", "StandfordCars": "StanfordCars"}
_PROMPT_PATTERNS = (
    (re.compile(r"prompt_learner\.ctx"), TEXT_KEY, 0),
    (re.compile(r"text_encoder\.transformer\.resblocks\.(\d+)\.VPT_shallow"), TEXT_KEY, None),
    (re.compile(r"image_encoder\.VPT"), VISION_KEY, 0),
    (re.compile(r"image_encoder\.transformer\.resblocks\.(\d+)\.VPT_shallow"), VISION_KEY, None),
)
REQUIRED = ("prompt_learner.ctx", "image_encoder.VPT")


class Opaque:
    """Stand-in for a pickled object of an untrusted class: keeps the pickled data, runs none of the class's code."""

    origin = ""

    def __new__(cls, *args: Any, **kwargs: Any) -> Opaque:
        obj = object.__new__(cls)
        obj.args, obj.state, obj.items = args, None, []
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items.append((key, value))

    def append(self, value: Any) -> None:
        self.items.append(value)

    def extend(self, values: Any) -> None:
        self.items.extend(values)

    def __repr__(self) -> str:
        return f"<opaque {self.origin}>"


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler resolving only ``_TENSOR_GLOBALS`` and torch dtypes; any other global becomes an ``Opaque`` type."""

    _placeholders: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _TENSOR_GLOBALS:
            return getattr(importlib.import_module(module), name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        key = (module, name)
        if key not in self._placeholders:
            self._placeholders[key] = type(f"Opaque[{module}.{name}]", (Opaque,), {"origin": f"{module}.{name}"})
        return self._placeholders[key]


def _restricted_pickle_module() -> types.ModuleType:
    module = types.ModuleType("restricted_pickle")
    module.Unpickler = RestrictedUnpickler
    module.load = lambda f, **kwargs: RestrictedUnpickler(f, **kwargs).load()
    return module


def read_upstream_checkpoint(path: str, trust: bool = False) -> Any:
    """Load an upstream checkpoint on CPU: restricted (no pickled code runs) by default, plain torch.load if trusted."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    if _is_torchscript(path):
        raise ValueError(f"{path} is a TorchScript archive (e.g. CLIP weights), not a PromptKD teacher checkpoint")
    if trust:
        return load_checkpoint(path, trust_pickle=True)
    return torch.load(path, map_location="cpu", pickle_module=_restricted_pickle_module(), weights_only=False)


def _ignore_reason(key: str) -> str:
    if re.search(r"token_(prefix|suffix)\d*$", key):
        return "class-token buffer (rebuilt from class names)"
    if key.startswith("prompt_learner.ZS_image_encoder."):
        return "frozen zero-shot image tower (ZS_image_encoder)"
    if key.startswith(("image_encoder.", "text_encoder.")) or key == "logit_scale":
        return "frozen CLIP weight (taken from --clip)"
    return "not a prompt of the teacher"


def map_promptkd_state(state: dict, where: str) -> tuple[dict[str, torch.Tensor], list[list], Counter]:
    """Our prompt keys (fp32) from a PromptKD/PromptSRC state dict, the mapped rows and the ignored-key counts."""
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise ValueError(f"{where} lacks required key(s) {missing}: not a PromptSRC/PromptKD teacher checkpoint "
                         f"(its keys start with {sorted({k.split('.')[0] for k in state})[:6]})")
    mapped, rows, ignored = {}, [], Counter()
    for key, value in state.items():
        for pattern, prefix, fixed in _PROMPT_PATTERNS:
            match = pattern.fullmatch(key)
            if match:
                if not torch.is_tensor(value):
                    raise ValueError(f"{where}: {key} is {value!r}, not a tensor; the file may need --trust")
                target = f"{prefix}{fixed if fixed is not None else int(match.group(1))}"
                mapped[target] = value.detach().float().clone()
                rows.append([key, target, "x".join(map(str, value.shape)), str(value.dtype).replace("torch.", "")])
                break
        else:
            ignored[_ignore_reason(key)] += 1
    for prefix in (TEXT_KEY, VISION_KEY):
        layers = sorted(int(k[len(prefix):]) for k in mapped if k.startswith(prefix))
        if layers != list(range(len(layers))):
            raise ValueError(f"{where}: {prefix.split('_')[0]} prompt layers {layers} are not 0..{len(layers) - 1} "
                             "(a VPT_shallow layer is missing)")
    rows.sort(key=lambda r: (r[1].split(".")[0], int(r[1].rsplit(".", 1)[1])))
    return mapped, rows, ignored


def _check_frozen_shapes(state: dict, clip_model, name: str, where: str) -> None:
    """The checkpoint's own frozen CLIP weights (when present) must have the shapes of ``--clip``'s."""
    ours = clip_model.state_dict()
    for theirs, key in (("image_encoder.conv1.weight", "visual.conv1.weight"),
                        ("image_encoder.positional_embedding", "visual.positional_embedding"),
                        ("text_encoder.text_projection", "text_projection")):
        value = state.get(theirs)
        if torch.is_tensor(value) and tuple(value.shape) != tuple(ours[key].shape):
            raise ValueError(f"{where} was trained on a different CLIP: {theirs} has shape {tuple(value.shape)} but "
                             f"--clip {name} has {tuple(ours[key].shape)}; pass the teacher's backbone as --clip")


def default_output_dir(src: str) -> str:
    """``teachers/<Dataset folder>`` for ``.../<Dataset folder>/VLPromptLearner*/<file>``."""
    return os.path.join("teachers", os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(src)))))


def import_teacher(src: str, clip_name: str, output_dir: str, dataset: str = "", trust: bool = False) -> str:
    """Convert ``src`` and write ``<output_dir>/VLPromptLearner/model.pth.tar-<epoch>``; returns that path."""
    checkpoint = read_upstream_checkpoint(src, trust)
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{src} holds a {type(checkpoint).__name__}, not a checkpoint dict")
    state = checkpoint["state_dict"] if isinstance(checkpoint.get("state_dict"), dict) else checkpoint
    state = {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}
    mapped, rows, ignored = map_promptkd_state(state, src)
    epoch = checkpoint.get("epoch") if isinstance(checkpoint.get("epoch"), int) else 0
    folder = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(src))))
    dataset = dataset or _FOLDER_TO_DATASET.get(folder, folder)
    n_classes = sum(v.shape[0] for k, v in state.items()
                    if re.fullmatch(r"prompt_learner\.token_prefix\d*", k) and torch.is_tensor(v))
    meta = {"backbone": clip_name, "dataset": dataset, "source": os.path.abspath(src), "source_epoch": epoch}
    if n_classes:
        meta["num_classes"] = int(n_classes)

    print(tabulate(rows, headers=["PromptKD key", "our key", "shape", "dtype (→ float32)"]))
    print(tabulate(sorted(ignored.items()), headers=["ignored keys", "count"]))
    prompts = VLPromptLearner.from_state_dict({**mapped, "_extra_state": meta}, src)
    print(f"Loading CLIP {clip_name} to check the teacher's size")
    clip_model = clip.load(clip_name, "cpu")
    _check_frozen_shapes(state, clip_model, clip_name, src)
    check_teacher_fits(prompts, clip_model, clip_name, src, setting="--clip")
    sizes = prompts.describe()
    print(f"Teacher: text prompts {sizes['depth_text']} layers x {sizes['n_ctx_text']} tokens (width "
          f"{sizes['text_width']}), vision prompts {sizes['depth_vision']} x {sizes['n_ctx_vision']} (width "
          f"{sizes['vision_width']}); dataset {dataset or '?'}, {n_classes or '?'} training classes, epoch {epoch}")
    out = save_checkpoint({"state_dict": prompts.state_dict(), "epoch": epoch, "optimizer": None, "scheduler": None},
                          os.path.join(output_dir, MODEL_NAME))
    print(f"Use it with TRAINER.<PROMPTKD|PETR>.TEACHER_CKPT {output_dir} (TEACHER_NAME {clip_name})")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", help="PromptKD teacher file, e.g. teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar")
    p.add_argument("--clip", default="ViT-L/14", help="CLIP the teacher was trained on (name or weight file)")
    p.add_argument("--output-dir", default="", help="output run directory (default: teachers/<Dataset folder>)")
    p.add_argument("--dataset", default="", help="DATASET.NAME the teacher was trained on (default: from the path)")
    p.add_argument("--trust", action="store_true",
                   help="unpickle the file with plain torch.load (runs pickled code: only for files you trust)")
    return p


def main(argv: list[str] | None = None) -> str:
    """Command-line entry; returns the written file. Errors become one ``error: ...`` line (SystemExit)."""
    args = build_parser().parse_args(argv)
    try:
        return import_teacher(args.src, args.clip, args.output_dir or default_output_dir(args.src), args.dataset,
                              args.trust)
    except (FileNotFoundError, ValueError, RuntimeError, pickle.UnpicklingError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
