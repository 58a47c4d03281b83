"""Convert a PromptKD/PromptSRC teacher checkpoint into this project's teacher file, without running pickled code.

PromptKD's released teachers (``teacher_model/<Dataset>/VLPromptLearner/model-best.pth.tar``; ImageNet-xd:
``VLPromptLearner_large/model.pth.tar-20``) are torch zip archives whose pickle also references non-tensor globals
(the Dassl scheduler object). By default the file is read with ``engine.restricted_pickle`` (no pickled code runs);
``--trust`` switches to a plain ``torch.load(weights_only=False)`` for a file you trust. The key mapping is
``trainers/prompting/upstream_prompts.py``'s; students also read upstream teacher files directly (TEACHER_CKPT /
TEACHER_DIR), so importing is optional: it writes a small prompts-only file. Output:
``<output-dir>/VLPromptLearner/model.pth.tar-<epoch>`` + ``checkpoint`` (Dassl layout, atomic), which
``build_teacher`` / ``TEACHER_CKPT=<output-dir>`` read.

Example: python tools/import_promptkd_teacher.py teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar
         --clip ViT-L/14   (writes teachers/EuroSAT/)
"""
from __future__ import annotations

import argparse
import os
import pickle

from tabulate import tabulate

if not __package__:  # run as `python tools/import_promptkd_teacher.py`
    from _repo_root import add_to_path

    add_to_path()

import clip
from clip.clip import _is_torchscript
from engine.checkpoint import load_checkpoint, save_checkpoint
from engine.restricted_pickle import restricted_load
from trainers.prompting.deep_prompts import MODEL_NAME
from trainers.prompting.prompt_files import check_prompts_fit
from trainers.prompting.upstream_prompts import check_frozen_shapes, upstream_teacher_prompts


def read_upstream_checkpoint(path: str, trust: bool = False) -> object:
    """Load an upstream checkpoint on CPU: restricted (no pickled code runs) by default, plain torch.load if trusted."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"checkpoint not found: {path}")
    with open(path, "rb") as f:
        torchscript = _is_torchscript(f)
    if torchscript:
        raise ValueError(f"{path} is a TorchScript archive (e.g. CLIP weights), not a PromptKD teacher checkpoint")
    if trust:
        return load_checkpoint(path, trust_pickle=True)
    return restricted_load(path)


def default_output_dir(src: str) -> str:
    """``teachers/<Dataset folder>`` for ``.../<Dataset folder>/VLPromptLearner*/<file>``."""
    return os.path.join("teachers", os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(src)))))


def import_teacher(src: str, clip_name: str, output_dir: str, dataset: str = "", trust: bool = False) -> str:
    """Convert ``src`` and write ``<output_dir>/VLPromptLearner/model.pth.tar-<epoch>``; returns that path."""
    checkpoint = read_upstream_checkpoint(src, trust)
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{src} holds a {type(checkpoint).__name__}, not a checkpoint dict")
    prompts, state, rows, ignored = upstream_teacher_prompts(checkpoint, src, clip_name, dataset)
    meta = prompts.meta
    dataset, n_classes, epoch = meta["dataset"], meta.get("num_classes"), meta["source_epoch"]

    print(tabulate(rows, headers=["PromptKD key", "our key", "shape", "dtype (→ float32)"]))
    print(tabulate(sorted(ignored.items()), headers=["ignored keys", "count"]))
    print(f"Loading CLIP {clip_name} to check the teacher's size")
    clip_model = clip.load_model(clip_name, "cpu")
    check_frozen_shapes(state, clip_model, clip_name, src, "--clip")
    check_prompts_fit(prompts, clip_model, clip_name, src, setting="--clip")
    sizes = prompts.describe()
    print(f"Teacher: text prompts {sizes['depth_text']} layers x {sizes['n_ctx_text']} tokens (width "
          f"{sizes['text_width']}), vision prompts {sizes['depth_vision']} x {sizes['n_ctx_vision']} (width "
          f"{sizes['vision_width']}); dataset {dataset or '?'}, {n_classes or '?'} training classes, epoch {epoch}")
    out = save_checkpoint({"state_dict": prompts.state_dict(), "epoch": epoch, "optimizer": None, "scheduler": None},
                          os.path.join(output_dir, MODEL_NAME))
    print(f"Use it with TRAINER.<PROMPTKD|PETR>.TEACHER_CKPT {output_dir} (TEACHER_NAME {clip_name})")
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", help="PromptKD teacher file, e.g. teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar")
    p.add_argument("--clip", default="ViT-L/14", help="CLIP the teacher was trained on (name or weight file)")
    p.add_argument("--output-dir", default="", help="output run directory (default: teachers/<Dataset folder>)")
    p.add_argument("--dataset", default="", help="DATASET.NAME the teacher was trained on (default: from the path)")
    p.add_argument("--trust", action="store_true",
                   help="unpickle the file with plain torch.load (runs pickled code: only for files you trust)")
    return p


def main(argv: list[str] | None = None) -> str:
    """Command-line entry; returns the written file. Errors become one ``error: ...`` line (SystemExit)."""
    args = build_parser().parse_args(argv)
    try:
        return import_teacher(args.src, args.clip, args.output_dir or default_output_dir(args.src), args.dataset,
                              args.trust)
    except (FileNotFoundError, ValueError, RuntimeError, pickle.UnpicklingError) as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
