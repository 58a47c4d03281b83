"""Deep-prompt checkpoints read back: a PromptSRC teacher's or a finished PromptSRC / IVLP run's prompts (ours, or
upstream's mapped by ``upstream_prompts``), checked to fit a CLIP, and such a run as PETR+X's seen branch
(``deep_prompt_run``, on the run's CLIP with the words its record names).
"""
from __future__ import annotations

from clip.classifier import class_prompts
from clip.model import CLIP
from engine.checkpoint import load_checkpoint
from engine.errors import InvalidInputError

from .backbone import Autocast
from .deep_prompts import VLPromptCLIP, VLPromptLearner, is_upstream_layout
from .tuned_run import TunedRun, deep_prompt_words
from .upstream_prompts import upstream_teacher_prompts


def read_deep_prompts(path: str, role: str = "teacher") -> VLPromptLearner:
    """The frozen prompts (and training metadata) of a deep-prompt checkpoint (a teacher file, a PromptSRC or IVLP
    run's): ours, or upstream PromptKD / PromptSRC / IVLP's (read without running its pickled objects and mapped onto
    our prompt keys); read through the inputs ledger as ``role``."""
    checkpoint = load_checkpoint(path, role=role)
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise InvalidInputError(f"{path} holds a {type(checkpoint).__name__}, not a checkpoint dict; give a PromptSRC "
                                "or IVLP checkpoint (ours or upstream's) or PromptKD's released teacher")
    if is_upstream_layout(state):
        prompts, _, rows, ignored = upstream_teacher_prompts(checkpoint, path)
        print(f"Upstream teacher {path}: {len(rows)} prompt tensors mapped onto ours; ignored "
              + ", ".join(f"{count} {why}" for why, count in sorted(ignored.items())))
        return prompts
    prompts = VLPromptLearner.from_state_dict(state, path)
    prompts.requires_grad_(False)
    return prompts


def check_prompts_fit(prompts: VLPromptLearner, clip_model: CLIP, name: str, path: str,
                       setting: str = "TEACHER_NAME", what: str = "teacher") -> None:
    """Raise a clear error when the prompts were learned on a CLIP of another size than ``name`` (``setting``);
    ``what`` names the checkpoint's role in the messages."""
    sizes, trained_on = prompts.describe(), prompts.meta.get("backbone", "")
    hint = f" (it was trained on {trained_on})" if trained_on else ""
    for tower, width, layers, depth in (
            ("vision", clip_model.vision_width, clip_model.vision_layers, sizes["depth_vision"]),
            ("text", clip_model.text_width, clip_model.text_layers, sizes["depth_text"])):
        if sizes[f"{tower}_width"] != width:
            raise InvalidInputError(f"{what} checkpoint {path} was trained on a CLIP with {tower} width "
                             f"{sizes[f'{tower}_width']}, but {setting}={name} has {width}; set {setting} to the "
                             f"{what}'s backbone{hint}")
        if depth > layers:
            raise InvalidInputError(f"{what} checkpoint {path} has {depth} {tower} prompt layers, but {setting}={name} "
                             f"has only {layers} {tower} blocks; set {setting} to the {what}'s backbone{hint}")
    if trained_on and trained_on != name:
        print(f"Note: {what} {path} was trained with backbone {trained_on!r}; {setting} is {name!r} "
              "(same widths, so it loads; make sure they are the same CLIP)")


def deep_prompt_run(clip_model: CLIP, cfg, path: str, autocast: Autocast, ns: str) -> VLPromptCLIP:
    """A finished PromptSRC or IVLP run (ours or upstream's, read as a teacher file is; its options in ``TRAINER.<ns>``)
    on the run's frozen CLIP, as PETR+X's seen branch; the prompts are checked against MODEL.BACKBONE.NAME and the
    class prompts hold the words the run's recorded config says (``<run>/<model folder>/<file>``: ``path``)."""
    prompts = read_deep_prompts(path, role="checkpoint")
    check_prompts_fit(prompts, clip_model, cfg.MODEL.BACKBONE.NAME, path, "MODEL.BACKBONE.NAME", "tuned model")
    run = TunedRun.of_checkpoint(path)
    prompts.prompt_prefix = deep_prompt_words(run, ns, prompts.describe(), path)
    n_ctx = prompts.text_prompts.n_ctx
    print(f"{path}: class prompt {class_prompts(['{}'], n_ctx, prompts.prompt_prefix)[0]!r}, its first {n_ctx} "
          f"tokens learned ({run.config_source or 'no recorded config'})")
    return VLPromptCLIP.frozen(clip_model, prompts, autocast)
