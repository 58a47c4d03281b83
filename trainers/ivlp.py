"""IVLP: independent deep vision and language prompts on a frozen CLIP, trained with cross-entropy alone.

Text layer 0 learns N_CTX_TEXT tokens after SOS (initialised from CTX_INIT's words), text layers 1..J_t-1 and vision
layers 0..J_v-1 learn their own prompts; nothing couples the two towers (unlike MaPLe) and there is no
regularisation (unlike PromptSRC, which is this prompting plus its self-regularisation: ``trainers/promptsrc.py``).
Upstream checkpoints (``VLPromptLearner/``, its whole CLIP wrapper state) load into the prompt learner: the prompt
keys are mapped as for PromptKD's teachers (``trainers/upstream_teacher.py``) and the frozen CLIP weights left out.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from engine import TRAINER_REGISTRY
from engine.schema import KeyTable

from .learner_state import learner_state
from .promptsrc import VL_PROMPT_KEYS, VLPromptLearner, VLPromptTrainer
from .upstream_teacher import is_upstream_layout, map_promptkd_state


class IVLPPromptLearner(VLPromptLearner):
    """``VLPromptLearner`` that also loads upstream IVLP / PromptSRC checkpoints (their key layout)."""

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True, assign: bool = False):
        if is_upstream_layout(state_dict):
            mapped, _, ignored = map_promptkd_state(dict(state_dict), "IVLP checkpoint")
            print("IVLP prompt learner: upstream checkpoint, left out " + ", ".join(
                f"{n} {reason}" for reason, n in sorted(ignored.items())))
            state_dict = {**mapped, "_extra_state": self.get_extra_state()}
        state_dict = learner_state(self, state_dict, "IVLP prompt learner", "use the TRAINER.IVLP N_CTX_* / "
                                   "PROMPT_DEPTH_* and the CLIP (MODEL.BACKBONE.NAME) the checkpoint was trained with",
                                   strict=strict)
        return super().load_state_dict(state_dict, strict=strict, assign=assign)


@TRAINER_REGISTRY.register()
class IVLP(VLPromptTrainer):
    """IVLP: the ``VLPromptLearner`` prompts trained with cross-entropy on the labels (a ViT CLIP)."""

    NS = "IVLP"
    CONFIG_KEYS: KeyTable = dict(VL_PROMPT_KEYS)
    LEARNER = IVLPPromptLearner
