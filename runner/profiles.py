"""Run profiles of a sweep: ``paper`` (the shipped configs as they are) and ``fast`` (throughput settings).

``paper`` runs every config as shipped: fp16 CLIP weights and the online teacher, as upstream CoOp and PromptKD
train and report. ``fast`` adds config overrides (``EXTRA_OPTS``) that change speed, not the recipe, each where the
method's catalog row takes it (``Method.fast``, :data:`FAST_SETTINGS`):

* ``bf16``: ``PREC bf16`` where the card has bf16 tensor cores (compute capability 8.0 or newer), in the methods
  shipped in fp16 that gain from it (the students, CoOp); elsewhere (older cards, CPU) the shipped precision stays;
* ``compile``: ``TRAIN.COMPILE compile`` (the distilled students' frozen CLIPs);
* ``teacher_cache``: ``TEACHER_CACHE views`` for the distilled students, in one cache folder per sweep that every
  seed shares (the views are drawn from the image's position, not the run's seed, so sharing changes no number);
  their decoded views (``TEACHER_CACHE_IMAGES True``) are left to the user: ImageNet's 1.28 M training images take
  771 GB of them at 4 views (docs/throughput.md);
* and everywhere ``INPUT.DECODER tensor`` (images decoded and augmented as uint8 tensors: the same crops and flips,
  resampled by torch, engine/decoding.py) and ``DATALOADER.PERSISTENT_WORKERS True``.

The PromptSRC teacher takes none of the first three: it keeps its shipped fp16 eager step, which on the H100 table
of docs/throughput.md is slower in bf16 and in bf16 with compilation. A profile also names its own output and teacher
folders, so runs of the two profiles never share a run folder.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from trainers.catalog import Method

FAST_SETTINGS = ("bf16", "compile", "teacher_cache")
"""What a catalog row's ``fast`` may name (see the module's docstring)."""
BF16_CAPABILITY = (8, 0)
"""Compute capability from which a CUDA card has bf16 tensor cores (Ampere)."""


@dataclass(frozen=True)
class Profile:
    """A named set of config overrides and the folders its runs go to."""

    name: str
    output: str
    """Default output root (OUTPUT_ROOT)."""
    teachers: str
    """Default teacher folder (TEACHER_DIR)."""
    fast: bool = False

    def opts(self, method: Method, output_root: str) -> list[str]:
        """``KEY VALUE`` overrides of this profile for ``method``'s runs (bf16: see :func:`bf16_opts`)."""
        if not self.fast:
            return []
        opts = ["DATALOADER.PERSISTENT_WORKERS", "True", "INPUT.DECODER", "tensor"]
        if "compile" in method.fast:
            opts += ["TRAIN.COMPILE", "compile"]
        if "teacher_cache" in method.fast:
            opts += [f"TRAINER.{method.ns}.TEACHER_CACHE", "views", f"TRAINER.{method.ns}.TEACHER_CACHE_DIR",
                     os.path.join(os.path.abspath(output_root), "teacher_cache")]
        return opts

    def bf16_ns(self, method: Method) -> str:
        """The namespace whose PREC becomes bf16 on a bf16 card, or "" when this profile keeps the precision."""
        return method.ns if self.fast and "bf16" in method.fast else ""


PAPER = Profile("paper", output="output", teachers="teachers")
FAST = Profile("fast", output="output-fast", teachers="teachers-fast", fast=True)
PROFILES = {p.name: p for p in (PAPER, FAST)}


def ask_torch(expression: str) -> str:
    """What ``print(expression)`` prints in a child Python that imported torch ("" when it fails): how the runner,
    which never imports torch, learns about this machine's cards."""
    done = subprocess.run([sys.executable, "-c", f"import torch; print({expression})"], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


@cache
def card_has_bf16() -> bool:
    """Whether the first visible CUDA card has bf16 tensor cores, False without a visible card."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return False
    capable = f"torch.cuda.is_available() and torch.cuda.get_device_capability(0) >= {BF16_CAPABILITY}"
    return ask_torch(f"int({capable})") == "1"


def bf16_opts(ns: str, has_bf16: bool) -> list[str]:
    """``TRAINER.<ns>.PREC bf16`` when ``ns`` is set and the card has bf16, else nothing."""
    return [f"TRAINER.{ns}.PREC", "bf16"] if ns and has_bf16 else []


def launch_env(env: Mapping[str, str], bf16_ns: str, has_bf16: bool | None = None) -> dict[str, str]:
    """``env`` with the bf16 override put first in EXTRA_OPTS (the user's overrides after it still win) when this
    machine's card has bf16 (asked once when ``has_bf16`` is None); called on the machine that runs the job."""
    if not bf16_ns:
        return dict(env)
    opts = bf16_opts(bf16_ns, card_has_bf16() if has_bf16 is None else has_bf16)
    return {**env, "EXTRA_OPTS": " ".join(filter(None, [*opts, env.get("EXTRA_OPTS", "")]))}
