"""Scoring images over any class-name list with a trainer's learned module, evaluation and training through it.

Every method's model is a class scorer: the learned part (a prompt learner's context, an adapter's weights) does not
depend on the classes, so a trained run scores classes it never saw: the novel classes of base-to-novel, another
dataset's classes, or every class of the task at once (PETR's routing on top of it, PETR+X).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from clip.model import CLIP
from engine import compute_accuracy
from engine.errors import InvalidInputError

from .backbone import Autocast

ClassScorer = Callable[[torch.Tensor], torch.Tensor]
"""Images [B, 3, H, W] → logits [B, C] over a fixed class-name list (scaled cosine similarities, float32)."""


class ClassScoringModel(Protocol):
    """A model that scores images over any class-name list: a ``ClassScoring`` trainer, its ``TunedCLIP``, or a
    finished run read by PETR+X (trainers/routing/tuned.py)."""

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        """images [B, 3, H, W] -> float32 logits [B, len(classnames)], classifying among ``classnames``.

        Called once per class list: the work that does not depend on the image (text features) is done here. CLIP
        forwards run under the model's autocast, its own arithmetic in float32.
        """
        ...


class TunedCLIP:
    """A learned module on its frozen CLIP, scoring any class list: the one scoring path of a ``ClassScoring``
    trainer (its ``scoring``) and of that method's finished run as PETR+X's seen branch (trainers/routing/tuned.py).

    A method subclasses it with ``class_scorer`` and ``from_checkpoint``; gradients flow to the learned module
    whenever they are enabled (a finished run's module is frozen by its loader).
    """

    def __init__(self, clip_model: CLIP, learned: nn.Module, autocast: Autocast):
        self.clip_model, self.learned, self.autocast = clip_model, learned, autocast

    @classmethod
    def frozen(cls, clip_model: CLIP, learned: nn.Module, autocast: Autocast, *more: Any) -> TunedCLIP:
        """A finished run's learned module, frozen and on the CLIP's device, scoring as its trainer did (``more``:
        what else the model's constructor takes, the class side's template say)."""
        device = clip_model.token_embedding.weight.device
        return cls(clip_model, learned.requires_grad_(False).to(device), autocast, *more)

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        """The function giving logits of images over ``classnames`` with the current weights (class side computed
        now)."""
        raise NotImplementedError(f"{type(self).__name__} must implement class_scorer(classnames)")

    @classmethod
    def from_checkpoint(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str) -> TunedCLIP:
        """A finished run's module read from its checkpoint file ``path`` (ours or upstream's) and frozen on
        ``clip_model``; what the tensors do not say comes from the run's record, else from ``cfg``'s
        ``TRAINER.<ns>``."""
        raise NotImplementedError(f"{cls.__name__} must implement from_checkpoint to be read as PETR+X's seen branch")


class PromptedCLIP(TunedCLIP):
    """A prompt learner on its frozen CLIP (``learned``, also ``prompt_learner``): a ``TunedCLIP`` whose class side
    is the class names' prompts (``prompt_tokens``, kept per class list by ``class_tokens``)."""

    def __init__(self, clip_model: CLIP, prompt_learner: nn.Module, autocast: Autocast):
        super().__init__(clip_model, prompt_learner, autocast)
        self._tokens: tuple[tuple[str, ...], torch.Tensor] | None = None

    @property
    def prompt_learner(self) -> nn.Module:
        return self.learned

    def prompt_tokens(self, classnames: Sequence[str]) -> torch.Tensor:
        """Token ids [C, L] of the class prompts of ``classnames`` (their context positions take the prompts): the
        learner's ``prompt_tokens`` by default."""
        return self.prompt_learner.prompt_tokens(classnames)

    def class_tokens(self, classnames: Sequence[str]) -> torch.Tensor:
        """``prompt_tokens(classnames)`` on the CLIP's device, kept for the last class list (asked every step)."""
        key = tuple(classnames)
        if self._tokens is None or self._tokens[0] != key:
            device = self.clip_model.token_embedding.weight.device
            self._tokens = (key, self.prompt_tokens(classnames).to(device))
        return self._tokens[1]


class CrossEntropyStep:
    """Mixin of the trainers that learn from labels alone: the training step is cross-entropy on ``model_inference``'s
    logits over the dataset's classes."""

    def forward_backward(self, batch: dict) -> dict:
        """One step of cross-entropy on the logits over the dataset's classes (the scheduler steps after the last
        batch of an epoch)."""
        images, labels, _ = self.parse_batch_train(batch)
        summary = self.run_step({"images": images, "labels": labels})
        if self.batch_idx + 1 == self.num_batches:
            self.update_lr()
        return summary

    def train_step(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Forward, backward and update on device tensors (what TRAIN.CUDA_GRAPH captures); the summary stays on the
        device until log time."""
        logits = self.model_inference(inputs["images"])
        loss = F.cross_entropy(logits, inputs["labels"])
        self.model_backward_and_update(loss)
        return {"loss": loss.detach(), "acc": compute_accuracy(logits.detach(), inputs["labels"])[0]}


def checkpoint_context(state: dict, path: str, method: str) -> torch.Tensor:
    """The context ``ctx`` [n_ctx, width] of a ``method`` checkpoint's state (``path`` named in the error)."""
    ctx = state.get("ctx")
    if not torch.is_tensor(ctx) or ctx.dim() != 2:
        raise InvalidInputError(f"{path} holds no {method} context 'ctx' (its keys: {sorted(state)[:6]}); give the "
                                f"folder of a {method} run")
    return ctx


class ClassScoring(CrossEntropyStep):
    """Mixin of the trainers whose model is a ``TunedCLIP``: ``class_scorer(classnames)`` is their one scoring path,
    that of their ``SCORING_MODEL`` class on the trainer's CLIP and learned module (``scoring``, made by
    ``scoring_model``).

    ``model_inference`` scores the dataset's classes (and so feeds the cross-entropy step); an evaluation builds the
    scorer once in ``before_test`` (the weights are fixed then, so the class-side work is done once) and drops it in
    ``after_test``.
    """

    SCORING_MODEL: type[TunedCLIP] = PromptedCLIP
    TUNED_MODEL = ""
    """The model folder of its runs that PETR+X reads a checkpoint from (``<run>/<TUNED_MODEL>/model.pth.tar-<E>``)."""
    TUNED_BORROWS: tuple[str, ...] = ()
    """The keys of its namespace that ``tuned_model`` takes from the config (the rest come from the checkpoint's
    tensors and the run's record)."""
    eval_scorer: ClassScorer | None = None
    _scoring: TunedCLIP | None = None

    @classmethod
    def tuned_model(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast) -> TunedCLIP:
        """A finished run's checkpoint ``path`` as PETR+X's seen branch: ``SCORING_MODEL.from_checkpoint``."""
        return cls.SCORING_MODEL.from_checkpoint(clip_model, cfg, path, autocast, cls.NS)

    def scoring_model(self) -> TunedCLIP:
        """Its model on this trainer's CLIP and learned module (after ``build_model``): ``SCORING_MODEL`` on its
        ``prompt_learner`` for a prompt learner; a method whose model takes more says so here."""
        return self.SCORING_MODEL(self.clip_model, self.prompt_learner, self.autocast)

    @property
    def scoring(self) -> TunedCLIP:
        """``scoring_model()``, made at first use."""
        if self._scoring is None:
            self._scoring = self.scoring_model()
        return self._scoring

    def class_scorer(self, classnames: Sequence[str]) -> ClassScorer:
        return self.scoring.class_scorer(classnames)

    def model_inference(self, images: torch.Tensor) -> torch.Tensor:
        scorer = self.eval_scorer if self.eval_scorer is not None else self.class_scorer(self.dm.dataset.classnames)
        return scorer(images)

    def before_test(self) -> None:
        super().before_test()
        self.eval_scorer = self.class_scorer(self.dm.dataset.classnames)

    def after_test(self) -> None:
        self.eval_scorer = None
        super().after_test()
