"""open_clip's CLIPs as this package's prompt-aware CLIP: which architectures fit, their sizes, the download of a
pretrained tag through open_clip's own machinery, and the table of supported names (``clip/openclip_registry.py``).

An open_clip ViT whose towers have OpenAI's structure (pre-norm blocks, class-token pooling, a causal text tower
read at the EOT token, OpenAI's BPE tokenizer) holds OpenAI's parameter names; what differs is the activation
(QuickGELU or GELU), the head width, the MLP ratio and the image normalisation, all taken from open_clip's configs.
Anything else (SigLIP, CoCa, timm or ResNet image towers, Hugging Face text towers or tokenizers, layer scale, ...)
is refused with one line naming what does not fit.

``python -m clip.openclip`` lists the supported pretrained names; ``--write`` regenerates the registry module from
the installed open_clip (``tests/test_openclip.py`` checks that it is current).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import open_clip
from huggingface_hub import constants as hub_constants
from open_clip import pretrained as open_clip_pretrained
from open_clip.model import CLIPTextCfg, CLIPVisionCfg
from tabulate import tabulate

from engine.atomic import atomic_write_text
from engine.digests import sha256_of
from engine.errors import ConfigError, CorruptFileError, InputNotFoundError, InvalidInputError, first_line
from engine.inputs import read_input_json
from engine.offline import unreachable

from .model import CLIP, build_sized
from .weights import (
    CONFIG_FILE,
    OPENAI_MEAN,
    OPENAI_STD,
    OpenClipName,
    open_clip_by_hand,
)

REGISTRY_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "openclip_registry.py")
OPENAI_VOCAB = 49408
"""Vocabulary size of OpenAI's BPE tokenizer (``clip.tokenize``), the only tokenizer this package has."""
_FREE_VISION = {"layers", "width", "head_width", "mlp_ratio", "patch_size", "image_size", "patch_dropout",
                "output_tokens"}
"""Image-tower settings the prompt-aware ViT takes as they come (patch dropout acts in training only, and the frozen
CLIP never trains; output_tokens changes what open_clip returns, not the features)."""
_FREE_TEXT = {"context_length", "width", "heads", "layers", "mlp_ratio", "output_tokens", "eos_id"}
"""Text-tower settings taken as they come (eos_id is read only by the 'eos' pooling, which is refused)."""
_TOKENIZER = ("hf_tokenizer_name", "tokenizer_mode", "tokenizer_kwargs")
_TOP = {"embed_dim", "vision_cfg", "text_cfg", "quick_gelu", "init_logit_scale"}
_NON_PARAMETERS = ("input_resolution", "context_length", "vocab_size", "attn_mask")
"""Entries of some checkpoints that are no parameters (OpenAI's integers, an old saved causal mask)."""


def _defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)}


def _square(value, what: str) -> int | None:
    """An int or a pair of equal ints as one int; None for anything else (a non-square ``what``)."""
    if isinstance(value, int):
        return value
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        return int(value[0])
    return None


def misfit(cfg: dict) -> str:
    """Why the open_clip model config ``cfg`` cannot be the prompt-aware CLIP ("" when it fits)."""
    extra = sorted(set(cfg) - _TOP)
    vision, text = cfg.get("vision_cfg", {}), cfg.get("text_cfg", {})
    if "multimodal_cfg" in extra:
        return "it is a CoCa model (a captioning decoder on top of CLIP)"
    if "init_logit_bias" in extra:
        return "it is a SigLIP model (sigmoid loss with a logit bias)"
    if vision.get("timm_model_name"):
        return f"its image tower is timm's {vision['timm_model_name']}, not OpenAI's ViT"
    if isinstance(vision.get("layers"), (list, tuple)):
        return "its image tower is a ResNet, which takes no deep visual prompts (OpenAI's load as RN50, ...)"
    if text.get("hf_model_name"):
        return f"its text tower is Hugging Face's {text['hf_model_name']}, not OpenAI's text transformer"
    tokenizer = [f"{key}={text[key]}" for key in _TOKENIZER if text.get(key)]
    if text.get("vocab_size", OPENAI_VOCAB) != OPENAI_VOCAB:
        tokenizer.append(f"vocab_size={text['vocab_size']}")
    if tokenizer:
        return f"its tokenizer is not OpenAI's BPE ({tokenizer[0]})"
    if extra:
        return f"its config sets {', '.join(extra)}, which OpenAI's CLIP layout has not"
    for tower, given, cls, free in (("image", vision, CLIPVisionCfg, _FREE_VISION),
                                    ("text", text, CLIPTextCfg, _FREE_TEXT)):
        defaults = _defaults(cls)
        for key, value in given.items():
            if key not in defaults:
                return f"its {tower} tower sets {key}, which this open_clip does not know"
            if key not in free and value != defaults[key]:
                return f"its {tower} tower sets {key}={value!r} (OpenAI's structure has {defaults[key]!r})"
    for key in ("image_size", "patch_size"):
        if _square(vision.get(key, 1), key) is None:
            return f"its image tower has a non-square {key} {vision[key]}"
    return ""


def model_dims(cfg: dict, mean=OPENAI_MEAN, std=OPENAI_STD) -> dict:
    """The ``clip.model.CLIP`` arguments of a fitting open_clip model config (see :func:`misfit`)."""
    vision = CLIPVisionCfg(**cfg["vision_cfg"])
    text = CLIPTextCfg(**cfg["text_cfg"])
    return dict(embed_dim=cfg["embed_dim"], image_resolution=_square(vision.image_size, "image_size"),
                vision_layers=vision.layers, vision_width=vision.width,
                vision_patch_size=_square(vision.patch_size, "patch_size"), context_length=text.context_length,
                vocab_size=text.vocab_size, transformer_width=text.width, transformer_heads=text.heads,
                transformer_layers=text.layers, vision_heads=vision.width // vision.head_width,
                vision_mlp_width=int(vision.width * vision.mlp_ratio),
                text_mlp_width=int(text.width * text.mlp_ratio),
                activation="quick_gelu" if cfg.get("quick_gelu") else "gelu",
                image_mean=tuple(mean), image_std=tuple(std))


def model_config(spec: OpenClipName) -> tuple[dict, tuple, tuple]:
    """(model config, mean, std) of an ``open_clip:`` name: open_clip's built-in config of its architecture with
    its tag's normalisation (a checkpoint file: open_clip's default, OpenAI's), or a local-dir folder's
    ``open_clip_config.json`` (read through the inputs ledger). A config that does not fit is one error naming it."""
    if spec.folder:
        path = os.path.join(spec.folder, CONFIG_FILE)
        record = read_input_json(path, "clip")
        cfg = record.get("model_cfg") if isinstance(record, dict) else None
        if not isinstance(cfg, dict) or not {"embed_dim", "vision_cfg", "text_cfg"} <= set(cfg):
            raise InvalidInputError(f"{path} holds no open_clip model config (a 'model_cfg' with embed_dim, "
                                    f"vision_cfg and text_cfg); write it as open_clip's local-dir layout does")
        preprocess = record.get("preprocess_cfg") or {}
        what, mean, std = path, preprocess.get("mean", OPENAI_MEAN), preprocess.get("std", OPENAI_STD)
    else:
        cfg = open_clip.get_model_config(spec.model)
        if cfg is None:
            raise ConfigError(f"{spec.name}: open_clip {open_clip.__version__} has no model {spec.model!r}; "
                              "`python -m clip.openclip` lists the supported ones")
        entry = spec.pretrained
        what = f"open_clip model {spec.model}"
        mean, std = (entry.mean, entry.std) if entry else (OPENAI_MEAN, OPENAI_STD)
    reason = misfit(cfg)
    if reason:
        raise InvalidInputError(f"{spec.name}: {what} does not fit the prompt-aware CLIP: {reason}; use an open_clip "
                                "ViT of OpenAI's structure (`python -m clip.openclip` lists them)")
    return cfg, tuple(mean), tuple(std)


def build(spec: OpenClipName, config: tuple[dict, tuple, tuple], state_dict: dict) -> CLIP:
    """The frozen prompt-aware CLIP of ``spec`` (its :func:`model_config` ``config``) holding ``state_dict``
    (open_clip's layout, OpenAI's key names)."""
    cfg, mean, std = config
    if state_dict and all(key.startswith("module.") for key in state_dict):  # saved from a DistributedDataParallel
        state_dict = {key[len("module."):]: value for key, value in state_dict.items()}
    state_dict = {key: value for key, value in state_dict.items() if key not in _NON_PARAMETERS}
    if state_dict.get("logit_scale") is not None and state_dict["logit_scale"].numel() == 1:
        state_dict["logit_scale"] = state_dict["logit_scale"].reshape(())
    return build_sized(model_dims(cfg, mean, std), state_dict, f"{spec.model or 'the folder'}'s config")


def download(spec: OpenClipName, cache_dir: str | None = None) -> str:
    """The weight file of a pretrained tag, fetched by open_clip's ``download_pretrained`` (its hub client and
    cache; ``cache_dir`` None: the hub's default) and checked against the SHA-256 its hub blob is named by; one
    error line saying how to place it by hand (in ``cache_dir``) when it cannot be fetched. The hub is asked once
    first (``engine.offline.unreachable``), so a node without a route says so at once, not after the hub client's
    retries."""
    cfg = open_clip_pretrained.get_pretrained_cfg(spec.model, spec.tag)
    why = unreachable(spec.pretrained.url())
    if not why:
        try:
            path = open_clip_pretrained.download_pretrained(cfg, cache_dir=cache_dir)
        except (OSError, RuntimeError, ValueError) as e:
            why = "HF_HUB_OFFLINE is set" if hub_constants.is_offline_mode() else first_line(e)[:160]
        else:
            check_blob(path)
            return path
    raise InputNotFoundError(f"{spec.name}: open_clip weights not in the hub cache nor placed by hand, and they "
                             f"cannot be downloaded here ({why}); {open_clip_by_hand(spec, cache_dir)}")


def check_blob(path: str) -> bool:
    """Refuse a hub file whose bytes are not the SHA-256 its cache blob is named by (LFS files: the hub's checksum);
    False for a file that is no such blob (placed by hand: nothing to check it against)."""
    blob = os.path.basename(os.path.realpath(path))
    if len(blob) != 64 or any(c not in "0123456789abcdef" for c in blob):
        return False
    actual = sha256_of(path)
    if actual != blob:
        raise CorruptFileError(f"{path}: its SHA-256 is {actual}, but the hub lists {blob}: the download is corrupt; "
                               f"delete {os.path.realpath(path)} and fetch it again")
    return True


def registry() -> tuple[dict, dict, dict]:
    """From the installed open_clip: the fitting architectures (name -> (activation, image size)), the refused ones
    (name -> why) and the pretrained tags of the fitting ones whose activation is the architecture's
    ("model/tag" -> (hub repo, weight files in the order open_clip tries them, mean, std, resize mode))."""
    architectures, refused, tags = {}, {}, {}
    for name in open_clip.list_models():
        cfg = open_clip.get_model_config(name)
        reason = misfit(cfg)
        if reason:
            refused[name] = reason
            continue
        architectures[name] = ("quick_gelu" if cfg.get("quick_gelu") else "gelu",
                               _square(cfg["vision_cfg"].get("image_size", 224), "image_size"))
    for model, tag in open_clip_pretrained.list_pretrained():
        cfg = open_clip_pretrained.get_pretrained_cfg(model, tag)
        if model not in architectures or not cfg.get("hf_hub") or \
                bool(cfg.get("quick_gelu")) != (architectures[model][0] == "quick_gelu"):
            continue
        repo, filename = os.path.split(cfg["hf_hub"])  # "org/name/" names the hub's default file, as open_clip reads it
        filename = filename or open_clip.constants.HF_WEIGHTS_NAME
        files = (*open_clip_pretrained._get_safe_alternatives(filename), filename)
        tags[f"{model}/{tag}"] = (repo, files, tuple(cfg["mean"]), tuple(cfg["std"]), cfg.get("resize_mode", ""))
    return architectures, refused, tags


def _source(value, names: dict) -> str:
    """Python source of a registry value: strings and numbers as literals, tuples in parentheses, and the values
    ``names`` holds (the OpenAI constants, the hub's usual file pair) by their names."""
    for name, named in names.items():
        if value == named:
            return name
    if isinstance(value, tuple):
        return "(" + ", ".join(_source(v, names) for v in value) + ("," if len(value) == 1 else "") + ")"
    return json.dumps(value)


def render() -> str:
    """The source of ``clip/openclip_registry.py`` for the installed open_clip."""
    architectures, refused, tags = registry()
    constants = {"OPENAI_MEAN": tuple(open_clip.constants.OPENAI_DATASET_MEAN),
                 "OPENAI_STD": tuple(open_clip.constants.OPENAI_DATASET_STD),
                 "HUB_FILES": (open_clip.constants.HF_SAFE_WEIGHTS_NAME, open_clip.constants.HF_WEIGHTS_NAME)}
    lines = [f'"""open_clip {open_clip.__version__}\'s CLIPs as data for ``clip/weights.py`` (standard library only).',
             "", "Generated by ``python -m clip.openclip --write`` from open_clip's registry; tests/test_openclip.py",
             'checks that it is current.', '"""', f"OPEN_CLIP_VERSION = {json.dumps(open_clip.__version__)}"]
    lines += [f"{name} = {_source(value, {})}" for name, value in constants.items()]
    for name, table, doc in (
            ("ARCHITECTURES", architectures, "Architectures that build as the prompt-aware CLIP: name -> (activation, "
                                             "image size)."),
            ("REFUSED", refused, "Architectures that do not: name -> why."),
            ("PRETRAINED", tags, "Pretrained tags of the supported architectures: model/tag -> (hub repository, "
                                 "weight files in\nthe order open_clip tries them, mean, std, resize mode of "
                                 "open_clip's evaluation transform).")):
        lines += ["", f"{name} = {{"]
        for key, value in table.items():
            entry = f"    {json.dumps(key)}: {_source(value, constants)},"
            lines += [entry] if len(entry) <= 120 else [f"    {json.dumps(key)}:", f"        {entry.split(': ', 1)[1]}"]
        lines += ["}", f'"""{doc}"""']
    return "\n".join(lines) + "\n"


def describe() -> str:
    """A table of the supported pretrained names: activation, image size, widths, normalisation."""
    rows = []
    for key, (repo, _, mean, _, resize) in registry()[2].items():
        model = key.split("/")[0]
        dims = model_dims(open_clip.get_model_config(model))
        rows.append([f"open_clip:{key}", dims["activation"], dims["image_resolution"],
                     f"{dims['vision_width']} x {dims['vision_layers']}",
                     f"{dims['transformer_width']} x {dims['transformer_layers']}", dims["embed_dim"],
                     "OpenAI" if tuple(mean) == OPENAI_MEAN else f"{mean}", resize, repo])
    return tabulate(rows, headers=["name", "activation", "image", "vision width x layers", "text width x layers",
                                   "embed", "mean", "resize", "hub repository"])


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: list the supported names, or regenerate the registry module."""
    parser = argparse.ArgumentParser(prog="python -m clip.openclip", description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"regenerate {os.path.relpath(REGISTRY_FILE)}")
    args = parser.parse_args(argv)
    if args.write:
        atomic_write_text(render(), REGISTRY_FILE)
        print(f"wrote {REGISTRY_FILE}")
        return 0
    print(describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
