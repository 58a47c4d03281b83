"""Prompt-aware OpenAI CLIP; usable as ``import clip`` or, CoOp style, ``from clip import clip``."""
from . import clip
from .clip import available_models, load, load_model, preprocess_for, tokenize, weights_path
from .model import CLIP, build_model
from .prompts import DeepPrompts, stack_prompt_sets

__all__ = ["CLIP", "DeepPrompts", "available_models", "build_model", "clip", "load", "load_model", "preprocess_for",
           "stack_prompt_sets", "tokenize", "weights_path"]
