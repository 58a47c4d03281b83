"""Prompt-aware OpenAI CLIP; usable as ``import clip`` or, CoOp style, ``from clip import clip``.

The public names are exported lazily (PEP 562), so ``clip.weights`` (where weights are found) loads without torch.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "clip": ("available_models", "load", "load_model", "preprocess_for", "tokenize", "weights_path"),
    "model": ("CLIP", "build_model"),
    "prompts": ("DeepPrompts", "stack_prompt_sets"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_MODULE_OF, "clip"])


def __getattr__(name: str):
    """Import the submodule that defines ``name`` (or the submodule ``clip``) on first access and cache it here."""
    if name == "clip":
        value = importlib.import_module(f"{__name__}.clip")
    elif name in _MODULE_OF:
        value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    else:
        raise AttributeError(f"module 'clip' has no attribute {name!r}")
    globals()[name] = value
    return value
