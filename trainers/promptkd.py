"""PromptKD's student: deep visual prompts + projector on a frozen CLIP, distilled label-free from a teacher.

Every train image of the task (all classes, labels unused) is distilled with ``KD_WEIGHT · kd_loss(s, t, τ)``
against the teacher's logits on the same augmented batch. The teacher's text features are computed once at build
time (upstream recomputes them every batch). Evaluation restricts the all-class logits to the evaluated classes
(``DATASET.SUBSAMPLE_CLASSES``). The default configs deploy the last epoch; ``TEST.FINAL_MODEL best_val`` selects
on the real val split of the evaluated classes (upstream selects on the base *test* set).
"""
from __future__ import annotations

import torch

from engine import TRAINER_REGISTRY, TrainerX
from engine.schema import NON_NEGATIVE, Int, KeyTable

from .distillation.distill import TEACHER_KEYS, DistillMixin
from .prompting.deep_prompts import VL_PROMPT_KEYS
from .routing.evaluation import restrict_to_labels

INERT_KEYS = {
    "PROJECT_LAYER": "upstream never reads it; the projector is two 1x1 convs, as upstream's",
    "CE_WEIGHT": "upstream never reads it; PromptKD distils label-free (PETR has its own CE_WEIGHT)",
    "N_CTX_TEXT": "the teacher's text prompts (count and values) come from TEACHER_CKPT",
    "CTX_INIT": "the teacher's text prompts (count and values) come from TEACHER_CKPT",
    "PROMPT_DEPTH_TEXT": "the student has no text prompts (upstream builds them and never uses them)",
}
"""Keys of TRAINER.PROMPTKD that upstream's yamls set and that have no effect here, with the reason."""


def inert_keys_note(cfg) -> str:
    """One log line listing the ``INERT_KEYS`` with their values: accepted for upstream's yamls, without effect."""
    parts = [f"{key}={cfg.TRAINER.PROMPTKD[key]!r} ({why})" for key, why in INERT_KEYS.items()]
    return "Note: TRAINER.PROMPTKD keys accepted for upstream configs but without effect here: " + "; ".join(parts)


@TRAINER_REGISTRY.register()
class PromptKD(DistillMixin, TrainerX):
    """PromptKD student trainer; checkpoints hold the student (prompts + projector) as ``VLPromptLearner``."""

    DATA_ROLE = "distill_all"
    NS = "PROMPTKD"
    CONFIG_KEYS: KeyTable = {
        **VL_PROMPT_KEYS,
        **TEACHER_KEYS,
        # Declared and set by upstream's yamls but never read by upstream's trainer (see INERT_KEYS).
        "PROJECT_LAYER": (2, Int()),
        "CE_WEIGHT": (0.0, NON_NEGATIVE),
    }

    def build_model(self) -> None:
        print(inert_keys_note(self.cfg))
        ds = self.dm.dataset
        self.build_distill_parts(ds.classnames)
        self.student = self.make_student("VLPromptLearner")
        self.eval_labels = torch.as_tensor(ds.splits.eval_labels, dtype=torch.long)

    def forward_backward(self, batch: dict) -> dict:
        images, _, _ = self.parse_batch_train(batch)  # labels are not used: the distillation is label-free
        inputs = {"images": images}
        if self.teacher_cache:
            inputs["teacher"], = self.cached_teacher_features({"train_x": batch})
        summary = self.run_step(inputs)
        if (self.batch_idx + 1) == self.num_batches:
            self.update_lr()
        return summary

    def train_step(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Forward, backward and update of the student on device tensors (what TRAIN.CUDA_GRAPH captures)."""
        images = inputs["images"]
        with self.autocast():
            if "teacher" in inputs:
                teacher = inputs["teacher"]
            else:
                teacher, = self.online_teacher_features([images])
            student_features = self.student(self.clip_model, images)
        loss = self.kd_term(self.student_logits(student_features), self.teacher_logits(teacher))
        self.model_backward_and_update(loss)
        return {"loss": loss.detach()}  # read at log time (no device sync per step)

    def model_inference(self, images: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            features = self.student(self.clip_model, images)
        return restrict_to_labels(self.student_logits(features), self.eval_labels)
