"""IVLP: independent deep vision and language prompts on a frozen CLIP, trained with cross-entropy alone.

Text layer 0 learns N_CTX_TEXT tokens after SOS (initialised from CTX_INIT's words), text layers 1..J_t-1 and vision
layers 0..J_v-1 learn their own prompts; nothing couples the two towers (unlike MaPLe) and there is no
regularisation (unlike PromptSRC, which is this prompting plus its self-regularisation: ``trainers/promptsrc.py``).
Upstream checkpoints (``VLPromptLearner/``, its whole CLIP wrapper state) load into the prompt learner: the prompt
keys are mapped (``trainers.promptsrc.map_upstream_state``) and the frozen CLIP weights left out.
"""
from __future__ import annotations

from engine import TRAINER_REGISTRY
from engine.schema import KeyTable

from .promptsrc import VL_PROMPT_KEYS, VLPromptTrainer


@TRAINER_REGISTRY.register()
class IVLP(VLPromptTrainer):
    """IVLP: the ``VLPromptLearner`` prompts trained with cross-entropy on the labels (a ViT CLIP)."""

    NS = "IVLP"
    CONFIG_KEYS: KeyTable = dict(VL_PROMPT_KEYS)
