"""Caption templates: the varied ones the tiny CLIPs are pretrained on, and the held-out ones used to evaluate.

The evaluation templates (the demo's hand-crafted prompt ``"a photo of a {}."`` and CLIP's 7 selected ImageNet
templates, the ensemble ZeroshotCLIP2 uses) are never pretraining captions, so a learned prompt has room to beat
the hand-written one, as with web-scale CLIP. Their words do occur in other pretraining captions.
"""
from __future__ import annotations

from demo.shapes import CLASSNAMES
from trainers.prompting.templates import IMAGENET_TEMPLATES_SELECT

EVAL_TEMPLATE = "a photo of a {}."
"""The demo datasets' single hand-crafted template (CoOp's default; the init words of the prompt learners)."""
EVAL_ENSEMBLE: tuple[str, ...] = (*IMAGENET_TEMPLATES_SELECT, EVAL_TEMPLATE)
"""ZeroshotCLIP2's ensemble for a non-ImageNet dataset: CLIP's 7 selected templates plus the single template."""

PRETRAIN_TEMPLATES: tuple[str, ...] = (
    "{}",
    "a {}",
    "the {}.",
    "a {} shape.",
    "an image of a {}.",
    "a picture of the {}.",
    "a drawing of a {}.",
    "a rendering of one {}.",
    "a {} in a photo.",
    "photo: {}.",
    "a close-up of the {}.",
    "a small {}.",
    "a large {}.",
    "there is a {} here.",
    "this is a {}.",
    "a blurry image of a {}.",
    "a noisy picture of a {}.",
    "an icon of a {}.",
    "a pixelated {}.",
    "clip art of a {}.",
    "a {} on a background.",
    "a {} made of paper.",
    "a good image of the {}.",
    "a {} from a game.",
    "a computer generated picture of a single {} placed somewhere on a noisy background.",
    "a {shape} that is {colour}.",
    "a {colour} coloured {shape}.",
    "a {shape} painted {colour}.",
    "the shape is a {shape} and its colour is {colour}.",
)
"""Pretraining captions; ``{}`` takes the class name, ``{colour}``/``{shape}`` its two words."""


def caption(template: str, classname: str) -> str:
    """Fill a template with a class name ("red circle") or, for attribute templates, its colour and shape."""
    colour, shape = classname.split(" ", 1)
    if "{}" in template:
        return template.format(classname)
    return template.format(colour=colour, shape=shape)


def pretraining_captions() -> list[list[str]]:
    """``captions[k][t]``: template ``t`` filled with canonical class ``k``."""
    return [[caption(t, name) for t in PRETRAIN_TEMPLATES] for name in CLASSNAMES]
