"""IVLP: independent deep vision and language prompts on a frozen CLIP, trained with cross-entropy alone.

Text layer 0 learns N_CTX_TEXT tokens after SOS (initialised from CTX_INIT's words), text layers 1..J_t-1 and vision
layers 0..J_v-1 learn their own prompts; nothing couples the two towers (unlike MaPLe) and there is no
regularisation (unlike PromptSRC, which is this prompting plus its self-regularisation: ``trainers/promptsrc.py``,
whose trainer extends ``VLPromptTrainer``). Upstream checkpoints (``VLPromptLearner/``, its whole CLIP wrapper state)
load into the prompt learner: the prompt keys are mapped (``trainers.prompting.deep_prompts.map_upstream_state``)
and the frozen CLIP weights left out.
"""
from __future__ import annotations

from tabulate import tabulate

from clip.classifier import class_prompts, fitting_class_prompts
from clip.model import CLIP, require_vit
from engine import TRAINER_REGISTRY, TrainerX, build_lr_scheduler, build_optimizer
from engine.compile import compile_clip
from engine.schema import KeyTable

from .prompting.backbone import Autocast, ClipWeightsCheck, load_backbone
from .prompting.deep_prompts import MODEL_NAME, VL_PROMPT_KEYS, VLPromptCLIP, VLPromptLearner
from .prompting.prompt_files import deep_prompt_run
from .prompting.scoring import ClassScoring


class VLPromptTrainer(ClassScoring, ClipWeightsCheck, TrainerX):
    """Deep vision+language prompts (model ``VLPromptLearner``) on a frozen ViT CLIP, trained with cross-entropy:
    IVLP's trainer, which PromptSRC extends. Options come from ``TRAINER.<NS>`` (N_CTX_TEXT / N_CTX_VISION, CTX_INIT,
    PROMPT_DEPTH_TEXT / PROMPT_DEPTH_VISION); ``LEARNER`` is the prompt-learner class."""

    DATA_ROLE = "standard"
    LEARNER = VLPromptLearner
    SCORING_MODEL = VLPromptCLIP
    RECORDED_KEYS = ("N_CTX_TEXT", "N_CTX_VISION", "CTX_INIT", "PROMPT_DEPTH_TEXT", "PROMPT_DEPTH_VISION")
    TUNED_MODEL = MODEL_NAME

    @classmethod
    def tuned_model(cls, clip_model: CLIP, cfg, path: str, autocast: Autocast) -> VLPromptCLIP:
        """A finished run's prompts as PETR+X's seen branch, read as a teacher file is (``deep_prompt_run``)."""
        return deep_prompt_run(clip_model, cfg, path, autocast, cls.NS)

    def build_model(self) -> None:
        cfg, opts = self.cfg, self.ns
        self.clip_model = load_backbone(cfg.MODEL.BACKBONE.NAME, self.device, self.prec)
        require_vit(self.clip_model, cfg.MODEL.BACKBONE.NAME, "MODEL.BACKBONE.NAME", type(self).__name__)
        compile_clip(self.clip_model, cfg.TRAIN.COMPILE)
        classnames = self.dm.dataset.classnames
        meta = {"backbone": cfg.MODEL.BACKBONE.NAME, "dataset": cfg.DATASET.NAME, "classnames": list(classnames)}
        self.prompt_learner = self.LEARNER.build(
            self.clip_model, opts.N_CTX_TEXT, opts.N_CTX_VISION, opts.PROMPT_DEPTH_TEXT, opts.PROMPT_DEPTH_VISION,
            opts.CTX_INIT, meta, f"TRAINER.{self.NS}").to(self.device)
        learner = self.prompt_learner
        fitting_class_prompts(classnames, learner.text_prompts.n_ctx, learner.prompt_prefix,
                              self.clip_model.context_length, f"TRAINER.{self.NS}.N_CTX_TEXT is {opts.N_CTX_TEXT}")
        print(f"{type(self).__name__}: class prompt "
              f"{class_prompts(['{}'], learner.text_prompts.n_ctx, learner.prompt_prefix)[0]!r}, its first "
              f"{learner.text_prompts.n_ctx} tokens learned")
        optim = build_optimizer(self.prompt_learner, cfg.OPTIM)
        sched = build_lr_scheduler(optim, cfg.OPTIM)
        self.register_model(MODEL_NAME, self.prompt_learner, optim, sched)
        rows = [[kind, p.n_ctx, p.width, p.depth, sum(t.numel() for t in p.parameters())]
                for kind, p in (("text", self.prompt_learner.text_prompts),
                                ("vision", self.prompt_learner.vision_prompts))]
        print(tabulate(rows, headers=["prompts", "n_ctx", "width", "depth", "trainable params"]))


@TRAINER_REGISTRY.register()
class IVLP(VLPromptTrainer):
    """IVLP: the ``VLPromptLearner`` prompts trained with cross-entropy on the labels (a ViT CLIP)."""

    NS = "IVLP"
    CONFIG_KEYS: KeyTable = dict(VL_PROMPT_KEYS)
