"""The frozen teacher of PromptKD and PETR: a CLIP with PromptSRC prompts (or plain CLIP), text features made once.

Teacher files are PromptSRC checkpoints of this project (``<run>/VLPromptLearner/model.pth.tar-<E>``, Dassl
layout, tensors and plain values only), files written by ``tools/import_promptkd_teacher.py`` in the same layout, or
upstream PromptKD's released files (read with the restricted unpickler, keys mapped by
``trainers.prompting.upstream_prompts``; ``trainers.prompting.prompt_files`` reads them). Only the prompts are read
from them: the frozen CLIP comes from ``TEACHER_NAME`` (``clip.load_model``).
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
from clip.classifier import prompted_text_features, zeroshot_text_features
from clip.model import CLIP, require_vit
from engine.checkpoint import POINTER_FILE, checkpoint_epoch, pointed_checkpoint
from engine.digests import file_digest
from engine.errors import InvalidInputError
from engine.published import read_record

from ..prompting.deep_prompts import MODEL_NAME, VLPromptLearner
from ..prompting.prompt_files import check_prompts_fit, read_deep_prompts
from ..prompting.templates import single_template

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
        prompts = read_deep_prompts(path)
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
        check_prompts_fit(prompts, clip_model, name, path)
        check_teacher_classes(prompts.meta, classnames, dataset_name, path)
        teacher = Teacher(clip_model, classnames, prompts=prompts.to(device), source=path)
        sizes = prompts.describe()
        print(tabulate([[path, name, f"{sizes['depth_text']} x {sizes['n_ctx_text']}",
                         f"{sizes['depth_vision']} x {sizes['n_ctx_vision']}", len(classnames), teacher.embed_dim]],
                       headers=["teacher", "CLIP", "text prompts", "vision prompts", "classes", "embed dim"]))
    return teacher.to(device)
