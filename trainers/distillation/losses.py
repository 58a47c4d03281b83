"""Training losses shared by the trainers: PromptKD's knowledge-distillation loss."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """PromptKD's KD loss: ``KL(softmax(t/τ) ‖ softmax(s/τ))`` summed over all elements, × τ², / ``s.numel()``.

    The teacher is detached (no gradient flows into it). Dividing by ``numel`` rather than the batch size is
    PromptKD's choice; it makes the loss the batch-mean KL divided by the number of classes.
    """
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"kd_loss: student logits {tuple(student_logits.shape)} and teacher logits "
            f"{tuple(teacher_logits.shape)} must have the same shape (same batch and class list)"
        )
    if not temperature > 0:
        raise ValueError(f"kd_loss: temperature must be > 0, got {temperature}")
    log_p_student = F.log_softmax(student_logits / temperature, dim=-1)
    p_teacher = F.softmax(teacher_logits.detach().to(student_logits.dtype) / temperature, dim=-1)
    kl_sum = F.kl_div(log_p_student, p_teacher, reduction="sum")
    return kl_sum * (temperature**2) / student_logits.numel()
