"""The frozen teacher of PromptKD and PETR: a CLIP with PromptSRC prompts (or plain CLIP), text features made once.

Teacher files are PromptSRC checkpoints of this project (``<run>/VLPromptLearner/model.pth.tar-<E>``, Dassl
layout, tensors and plain values only), files written by ``tools/import_promptkd_teacher.py`` in the same layout, or
upstream PromptKD's released files (read with the restricted unpickler, keys mapped by ``upstream_teacher``).
Only the prompts are read from them: the frozen CLIP comes from ``TEACHER_NAME`` (``clip.load_model``).
``deep_prompt_run`` reads these files (and IVLP's) as PETR+X's seen branch (trainers/tuned.py), on the run's CLIP.
"""
from __future__ import annotations

import glob
import math
import os
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tabulate import tabulate
from torch import nn

import clip
from clip.classifier import class_prompts, prompted_text_features, zeroshot_text_features
from clip.model import CLIP, require_vit
from engine.checkpoint import POINTER_FILE, checkpoint_epoch, load_checkpoint, pointed_checkpoint
from engine.digests import file_digest
from engine.errors import InvalidInputError
from engine.published import read_record

from .backbone import Autocast
from .promptsrc import MODEL_NAME, VLPromptCLIP, VLPromptLearner, is_upstream_layout
from .templates import single_template
from .tuned_run import TunedRun, deep_prompt_words
from .upstream_teacher import upstream_teacher_prompts

HOW_TO_GET = ("train one with `bash scripts/teacher/base2new_train.sh <dataset> <seed>` or point TEACHER_CKPT at "
              "PromptKD's released teacher (teacher_model/<Dataset>/VLPromptLearner/model-best.pth.tar)")


class Teacher(nn.Module):
    """Frozen teacher (always in eval mode): ``text_features`` [C, D] of ``classnames`` (normalised, computed once),
    ``encode_image`` (normalised, with the learned visual prompts), ``forward`` → logits, ``logit_scale`` (exp'd).

    Without ``prompts`` it is plain CLIP classifying with one hand-crafted ``template``.
    """

    def __init__(self, clip_model: CLIP, classnames: Sequence[str], prompts: VLPromptLearner | None = None,
                 template: str = "a photo of a {}.", source: str = ""):
        super().__init__()
        if not classnames:
            raise ValueError("the teacher needs at least one class name")
        self.clip_model = clip_model
        self.prompts = prompts
        self.template = template
        self.source = source
        self.requires_grad_(False)
        self.logit_scale = float(clip_model.logit_scale.exp())
        self.embed_dim = clip_model.embed_dim
        self.classnames = list(classnames)
        self.register_buffer("text_features", self.text_features_for(classnames), persistent=False)
        self.eval()

    def train(self, mode: bool = True) -> Teacher:
        """The teacher stays in eval mode whatever the caller asks."""
        return super().train(False)

    @torch.no_grad()
    def text_features_for(self, classnames: Sequence[str]) -> torch.Tensor:
        """L2-normalised float32 text features [len(classnames), D] (e.g. for a cross-dataset target's classes)."""
        if self.prompts is None:
            return zeroshot_text_features(self.clip_model, classnames, [self.template])
        return prompted_text_features(self.clip_model, self.prompts.text_prompts(), classnames,
                                      prefix=self.prompts.prompt_prefix)

    @torch.no_grad()
    def encode_image(self, images: torch.Tensor) -> torch.Tensor:
        """L2-normalised float32 image features [B, D] under the teacher's visual prompts."""
        prompts = None if self.prompts is None else self.prompts.vision_prompts()
        return F.normalize(self.clip_model.encode_image(images, prompts).float(), dim=-1)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Teacher logits [B, C] = logit_scale · image features @ text_features.T."""
        return self.logit_scale * self.encode_image(images) @ self.text_features.t()


def _upstream_teacher_file(directory: str) -> str:
    """In upstream's tree (``<Dataset>/VLPromptLearner*/``, no pointer file): ``model-best.pth.tar``, else the last
    ``model.pth.tar-<E>``; "" when there is none."""
    for folder in sorted(glob.glob(os.path.join(directory, f"{MODEL_NAME}*"))):
        best = os.path.join(folder, "model-best.pth.tar")
        if os.path.isfile(best):
            return best
        epochs = sorted(glob.glob(os.path.join(folder, "model.pth.tar-*")), key=lambda p: checkpoint_epoch(p) or -1)
        if epochs:
            return epochs[-1]
    return ""


def resolve_teacher_file(ckpt: str) -> str:
    """The checkpoint file of TEACHER_CKPT: a file, a run directory, its ``VLPromptLearner`` folder, or a dataset
    folder of upstream PromptKD's ``teacher_model/`` tree.

    For a directory, the file named in ``VLPromptLearner/checkpoint`` (the last one saved) is used; without that
    pointer, upstream's ``model-best.pth.tar`` (else the last ``model.pth.tar-<E>``).
    """
    if os.path.isfile(ckpt):
        return ckpt
    if not os.path.isdir(ckpt):
        raise FileNotFoundError(f"teacher checkpoint not found: {ckpt}; {HOW_TO_GET}")
    for folder in (os.path.join(ckpt, MODEL_NAME), ckpt):
        path = pointed_checkpoint(folder, role="teacher")
        if path is not None:
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{os.path.join(folder, POINTER_FILE)} names {os.path.basename(path)!r}, "
                                        f"which does not exist; {HOW_TO_GET}")
            return path
    upstream = _upstream_teacher_file(ckpt)
    if upstream:
        return upstream
    raise FileNotFoundError(f"teacher directory {ckpt} has no {MODEL_NAME}/checkpoint file (is it a finished PromptSRC "
                            f"run?); {HOW_TO_GET}")


def read_teacher_prompts(path: str, role: str = "teacher") -> VLPromptLearner:
    """The frozen prompts (and training metadata) of a teacher file: ours, or upstream PromptKD/PromptSRC's (read
    without running its pickled objects and mapped onto our prompt keys); read through the inputs ledger as
    ``role``."""
    checkpoint = load_checkpoint(path, role=role)
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise InvalidInputError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dict; {HOW_TO_GET}")
    if is_upstream_layout(state):
        prompts, _, rows, ignored = upstream_teacher_prompts(checkpoint, path)
        print(f"Upstream teacher {path}: {len(rows)} prompt tensors mapped onto ours; ignored "
              + ", ".join(f"{count} {why}" for why, count in sorted(ignored.items())))
        return prompts
    prompts = VLPromptLearner.from_state_dict(state, path)
    prompts.requires_grad_(False)
    return prompts


def check_teacher_fits(prompts: VLPromptLearner, clip_model: CLIP, name: str, path: str,
                       setting: str = "TEACHER_NAME", what: str = "teacher") -> None:
    """Raise a clear error when the prompts were learned on a CLIP of another size than ``name`` (``setting``);
    ``what`` names the checkpoint's role in the messages."""
    sizes, trained_on = prompts.describe(), prompts.meta.get("backbone", "")
    hint = f" (it was trained on {trained_on})" if trained_on else ""
    for tower, width, layers, depth in (
            ("vision", clip_model.vision_width, clip_model.vision_layers, sizes["depth_vision"]),
            ("text", clip_model.text_width, clip_model.text_layers, sizes["depth_text"])):
        if sizes[f"{tower}_width"] != width:
            raise InvalidInputError(f"{what} checkpoint {path} was trained on a CLIP with {tower} width "
                             f"{sizes[f'{tower}_width']}, but {setting}={name} has {width}; set {setting} to the "
                             f"{what}'s backbone{hint}")
        if depth > layers:
            raise InvalidInputError(f"{what} checkpoint {path} has {depth} {tower} prompt layers, but {setting}={name} "
                             f"has only {layers} {tower} blocks; set {setting} to the {what}'s backbone{hint}")
    if trained_on and trained_on != name:
        print(f"Note: {what} {path} was trained with backbone {trained_on!r}; {setting} is {name!r} "
              "(same widths, so it loads; make sure they are the same CLIP)")


def check_teacher_record(path: str, name: str) -> None:
    """Refuse the teacher file ``path`` when what its folder records (``engine.published``: a published teacher's
    ``teacher.json``, or its run's ``run.json``) names another CLIP than ``TEACHER_NAME`` ``name`` by content."""
    folder = os.path.dirname(os.path.dirname(path))
    record = read_record(folder)
    recorded = record.get("backbone_sha256")
    if not recorded:
        return
    actual = file_digest(clip.weights_path(name))
    if actual != recorded:
        raise InvalidInputError(f"teacher {folder} was trained on the CLIP {record.get('backbone') or '?'} (sha256 "
                                f"{recorded[:12]}), but TEACHER_NAME={name} is another CLIP (sha256 {actual[:12]}): "
                                f"set TEACHER_NAME to the teacher's CLIP, or train a teacher on {name}")


def check_teacher_classes(meta: dict, classnames: Sequence[str], dataset_name: str, path: str) -> None:
    """On the teacher's own dataset, its training classes must be all classes or the base half of ``classnames``."""
    source, trained = meta.get("dataset", ""), meta.get("classnames")
    n_trained = len(trained) if trained else meta.get("num_classes")
    if not dataset_name or not source or n_trained is None:
        return
    if source != dataset_name:
        print(f"Note: teacher {path} was trained on {source}; its text features are computed for the "
              f"{len(classnames)} classes of {dataset_name} (cross-dataset)")
        return
    n, base = len(classnames), math.ceil(len(classnames) / 2)
    if n_trained not in (n, base):
        raise InvalidInputError(f"teacher checkpoint {path} was trained on {n_trained} classes of {source}, but the "
                                f"dataset here has {n} classes ({base} base): its class list differs from the "
                                "teacher's; train or import a teacher for this dataset version")
    if trained and list(classnames[:n_trained]) != list(trained):
        diff = next(i for i, (a, b) in enumerate(zip(classnames, trained)) if a != b)
        raise InvalidInputError(f"teacher checkpoint {path} was trained on classes that differ from {dataset_name}'s "
                                f"here (class {diff}: teacher {trained[diff]!r}, dataset {classnames[diff]!r}); train "
                                "or import a teacher for this dataset version")


def build_teacher(name: str, ckpt: str, classnames: Sequence[str], device: torch.device | str,
                  dataset_name: str = "", dtype: torch.dtype | None = None) -> Teacher:
    """Teacher on CLIP ``name`` with the prompts of ``ckpt`` (file, run dir or imported file); ``ckpt == ""`` gives
    plain CLIP with the dataset's hand-crafted template. ``dtype`` (e.g. torch.float16 for PREC fp16) is the CLIP
    weights' dtype (``clip.load_model``).
    """
    prompts, path = None, ""
    if ckpt:
        path = resolve_teacher_file(ckpt)
        prompts = read_teacher_prompts(path)
    print(f"Loading teacher CLIP (TEACHER_NAME: {name})")
    clip_model = clip.load_model(name, device, dtype)
    if prompts is not None:
        require_vit(clip_model, name, "TEACHER_NAME", "a prompted teacher")
    if prompts is None:
        template = single_template(dataset_name)
        print(f"Note: no teacher checkpoint (TEACHER_CKPT is empty): the teacher is plain CLIP {name} with the "
              f"template {template!r}; train or import a PromptSRC teacher for PromptKD's numbers ({HOW_TO_GET})")
        teacher = Teacher(clip_model, classnames, template=template)
    else:
        check_teacher_record(path, name)
        check_teacher_fits(prompts, clip_model, name, path)
        check_teacher_classes(prompts.meta, classnames, dataset_name, path)
        teacher = Teacher(clip_model, classnames, prompts=prompts.to(device), source=path)
        sizes = prompts.describe()
        print(tabulate([[path, name, f"{sizes['depth_text']} x {sizes['n_ctx_text']}",
                         f"{sizes['depth_vision']} x {sizes['n_ctx_vision']}", len(classnames), teacher.embed_dim]],
                       headers=["teacher", "CLIP", "text prompts", "vision prompts", "classes", "embed dim"]))
    return teacher.to(device)


def deep_prompt_run(clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str) -> VLPromptCLIP:
    """A finished PromptSRC or IVLP run (ours or upstream's, read as a teacher file is; its options in ``TRAINER.<ns>``)
    on the run's frozen CLIP, as PETR+X's seen branch; the prompts are checked against MODEL.BACKBONE.NAME and the
    class prompts hold the words the run's recorded config says (``<run>/<model folder>/<file>``: ``path``)."""
    prompts = read_teacher_prompts(path, role="checkpoint")
    check_teacher_fits(prompts, clip_model, cfg.MODEL.BACKBONE.NAME, path, "MODEL.BACKBONE.NAME", "tuned model")
    run = TunedRun.of_checkpoint(path)
    prompts.prompt_prefix = deep_prompt_words(run, ns, prompts.describe(), path)
    n_ctx = prompts.text_prompts.n_ctx
    print(f"{path}: class prompt {class_prompts(['{}'], n_ctx, prompts.prompt_prefix)[0]!r}, its first {n_ctx} "
          f"tokens learned ({run.config_source or 'no recorded config'})")
    return VLPromptCLIP.frozen(clip_model, prompts, autocast)
