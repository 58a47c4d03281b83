"""Distillation from the PromptSRC teacher (PromptKD's and PETR's): the teacher (``teacher``), the student's
projector (``student``), the shared training step (``distill``), its losses and the teacher cache."""
