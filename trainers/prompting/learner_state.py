"""A prompt learner's checkpoint entries, from this project's checkpoints or upstream's (CoCoOp, MaPLe).

Upstream also saves the class-token embeddings (``token_prefix`` / ``token_suffix``, rebuilt here from the class
names of the run) and, when it registers the whole CLIP wrapper, the frozen CLIP weights under their own prefixes;
only the learned entries are kept. Shapes are checked against the learner, so a checkpoint trained with other
settings is refused with one line naming the key.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from engine.errors import InvalidInputError

CLASS_TOKEN_BUFFERS = ("token_prefix", "token_suffix")


def learner_state(module: nn.Module, state: Mapping[str, Any], name: str, hint: str, upstream_prefix: str = "",
                  strict: bool = True) -> dict[str, Any]:
    """The entries of ``state`` for ``module`` (keys as in ``module.state_dict()``; with ``strict`` all of them and
    no others); ``name`` names the learner in messages and ``hint`` says which settings must match the checkpoint's.

    A state whose keys start with ``upstream_prefix`` (e.g. MaPLe's ``prompt_learner.``) is upstream's wrapper
    state: those keys lose the prefix and every other entry (frozen CLIP weights) is left out.
    """
    picked = dict(state)
    frozen = 0
    if upstream_prefix and any(k.startswith(upstream_prefix) for k in state):
        picked = {k[len(upstream_prefix):]: v for k, v in state.items() if k.startswith(upstream_prefix)}
        frozen = len(state) - len(picked)
    buffers = [k for k in CLASS_TOKEN_BUFFERS if picked.pop(k, None) is not None]
    if buffers or frozen:
        print(f"{name}: left out {len(buffers)} class-token buffer(s) (rebuilt from this run's class names) and "
              f"{frozen} frozen CLIP weight(s) of the checkpoint")
    own = module.state_dict()
    missing, unexpected = sorted(set(own) - set(picked)), sorted(set(picked) - set(own))
    if strict and (missing or unexpected):
        raise InvalidInputError(f"{name} checkpoint does not fit: missing keys {missing[:6]}, unexpected keys "
                                f"{unexpected[:6]}; {hint}")
    for key, value in picked.items():
        if key in own and torch.is_tensor(value) and tuple(value.shape) != tuple(own[key].shape):
            raise InvalidInputError(f"{name} checkpoint '{key}' has shape {tuple(value.shape)}, this run builds "
                                    f"{tuple(own[key].shape)}; {hint}")
    return picked
