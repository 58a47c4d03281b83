"""Upstream Dassl run folders and PromptKD teacher checkpoints, written in the tests. Checkpoints in Dassl's layout:
the model's state dict, ``epoch``, the optimiser's state dict, and a ``scheduler`` entry that pickles objects (as
Dassl's scheduler ``state_dict()`` does), one of them with a side effect when unpickled. Logs in Dassl's format: a
finished training run, a finished ``--eval-only`` run, and a training run killed after its first validation. Upstream
IVLP, MaPLe and CoOp runs (checkpoint and log) trained with settings other than this project's configs'. Whether a
checkout of upstream's code runs here (the tests that run it skip with the reason)."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import torch
from torch import nn

import train
from tests.helpers_run import HANG_GUARD_S
from trainers.prompting.deep_prompts import VLPromptLearner

DEPTH = 3
"""The prompt depth of the upstream runs written here (the tiny CLIPs have 9 blocks per tower)."""


class UpstreamScheduler:
    """A scheduler-like object whose unpickling would create the directory ``marker`` (the side effect to avoid)."""

    def __init__(self, marker: str, last_epoch: int):
        self.marker, self.last_epoch = marker, last_epoch

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def write_dassl_checkpoint(folder: str, state_dict: dict, epoch: int, optimizer: dict | None, marker: str,
                           model_file: str = "") -> str:
    """``<folder>/model.pth.tar-<epoch>`` (or ``model_file``) + the ``checkpoint`` pointer file, as Dassl saves them."""
    os.makedirs(folder, exist_ok=True)
    name = model_file or f"model.pth.tar-{epoch}"
    params = [torch.nn.Parameter(torch.zeros(1))]
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(torch.optim.SGD(params, lr=0.002), T_max=epoch)
    scheduler = {"last_epoch": epoch, "successor": cosine, "warmup_hook": UpstreamScheduler(marker, epoch)}
    torch.save({"state_dict": state_dict, "epoch": epoch, "optimizer": optimizer, "scheduler": scheduler,
                "val_result": None}, os.path.join(folder, name))
    with open(os.path.join(folder, "checkpoint"), "w") as f:
        f.write(f"{name}\n")
    return os.path.join(folder, name)


# The end of an upstream Dassl training run's log.txt (CoOp / PromptKD layout), written from Dassl's print statements.
UPSTREAM_TRAIN_LOG = """\
epoch [5/5] batch [20/20] time 0.101 (0.120) data 0.000 (0.010) loss 0.4121 (0.4500) acc 87.5 (86.2)
Checkpoint saved to output/base2new/train_base/eurosat/shots_16/CoOp/vit_b16_ctxv1/seed1/prompt_learner/model.pth.tar-5
Finish training
Deploy the last-epoch model
Evaluate on the *test* set
=> result
* total: 4,200
* correct: 3,843
* accuracy: 91.5%
* error: 8.5%
* macro_f1: 91.4%
Elapsed: 0:03:12
"""

FORK_FINISH_LINES = {"CoOp": "Finish training", "PromptKD": "Finish training", "KgCoOp": "Finished training",
                     "PromptSRC": "Finished training", "MaPLe": "Finished training"}
"""The end-of-training line of each upstream's Dassl: Dassl.pytorch's (CoOp, PromptKD) ``after_train``, and the one
Dassl.ProGrad (KgCoOp) and the Dassl of PromptSRC and MaPLe print instead."""


def fork_train_tail(fork: str, accuracy: float, total: int = 4200) -> str:
    """The end of a finished training run's log.txt of upstream ``fork``, as its trainer and evaluator print it: the
    last training line, the checkpoint, the end-of-training line, the final test's block (two decimals) and the elapsed
    time."""
    correct = round(total * accuracy / 100)
    return (f"epoch [100/100] batch [5/5] time 0.120 (0.130) data 0.000 (0.010) loss 0.3521 (0.3700) acc 90.6250 "
            f"(89.3750) lr 2.4674e-07 eta 0:00:00\n"
            f"Checkpoint saved to output/base2new/train_base/eurosat/shots_16_8.0/{fork}/seed1/prompt_learner/"
            f"model.pth.tar-100\n{FORK_FINISH_LINES[fork]}\nEvaluate on the *test* set\n=> result\n"
            f"* total: {total:,}\n* correct: {correct:,}\n* accuracy: {accuracy:.2f}%\n* error: {100 - accuracy:.2f}%\n"
            f"* macro_f1: {accuracy - 0.4:.2f}%\nElapsed: 0:06:41\n")


# An upstream Dassl ``--eval-only`` log (a CoOp test_new run), as Dassl's train.py and evaluator print it: no training
# lines, no "Finish training", the accuracy block after "=> result".
UPSTREAM_EVAL_LOG = """Setting fixed seed: 1
***************
** Arguments **
***************
config_file: configs/trainers/CoOp/vit_b16_ctxv1.yaml
dataset_config_file: configs/datasets/eurosat.yaml
eval_only: True
load_epoch: 200
model_dir: output/base2new/train_base/eurosat/shots_16/CoOp/vit_b16_ctxv1/seed1
no_train: False
opts: ['DATASET.NUM_SHOTS', '16', 'DATASET.SUBSAMPLE_CLASSES', 'new']
output_dir: output/base2new/test_new/eurosat/shots_16/CoOp/vit_b16_ctxv1/seed1
root: /data
seed: 1
source_domains: None
target_domains: None
trainer: CoOp
transforms: None
Loading trainer: CoOp
Loading dataset: EuroSAT
Reading split from /data/eurosat/split_zhou_EuroSAT.json
Loading preprocessed few-shot data from /data/eurosat/split_fewshot/shot_16-seed_1.pkl
SUBSAMPLE NEW CLASSES!
Building transform_train
+ random resized crop (size=(224, 224), scale=(0.08, 1.0))
+ random flip
+ to torch tensor of range [0, 1]
+ normalization (mean=[0.48145466, 0.4578275, 0.40821073], std=[0.26862954, 0.26130258, 0.27577711])
Building transform_test
+ resize the smaller edge to 224
+ 224x224 center crop
+ to torch tensor of range [0, 1]
+ normalization (mean=[0.48145466, 0.4578275, 0.40821073], std=[0.26862954, 0.26130258, 0.27577711])
---------  -------
Dataset    EuroSAT
# classes  5
# train_x  80
# val      20
# test     3,900
---------  -------
Loading CLIP (backbone: ViT-B/16)
Building custom CLIP
Initial context: "a photo of a"
Number of context words (tokens): 4
Turning off gradients in both the image and the text encoder
Loading evaluator: Classification
Loading weights to prompt_learner from \
"output/base2new/train_base/eurosat/shots_16/CoOp/vit_b16_ctxv1/seed1/prompt_learner/model.pth.tar-200" (epoch = 200)
Evaluate on the *test* set
=> result
* total: 3,900
* correct: 2,301
* accuracy: 59.0%
* error: 41.0%
* macro_f1: 57.3%
"""

# An upstream PromptKD training run (TEST.FINAL_MODEL best_val) killed in its third epoch: per-epoch validation
# blocks, no "Finish training".
UPSTREAM_KILLED_LOG = """\
epoch [1/20] batch [20/50] time 0.310 (0.330) data 0.001 (0.020) loss 1.2000 (1.4000) lr 5.0000e-03 \
eta 0:05:10
Evaluate on the *val* set
=> result
* total: 2,100
* correct: 1,680
* accuracy: 80.0%
* error: 20.0%
* macro_f1: 79.6%
Checkpoint saved to output/base2new/train_base/eurosat/shots_0/PromptKD/c/seed_1/VLPromptLearner/\
model-best.pth.tar
epoch [2/20] batch [20/50] time 0.305 (0.320) data 0.001 (0.020) loss 1.0000 (1.1000) lr 4.9000e-03 \
eta 0:05:00
"""


class MakesDirectoryWhenUnpickled:
    """A pickled global whose reduce would run ``os.mkdir(path)``: proof that code runs when it exists."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def fp16_prompts(clip_model, depth_text: int = 3, depth_vision: int = 4) -> VLPromptLearner:
    """Random prompts rounded to fp16 (PromptKD stores them in fp16, so the import must reproduce these exactly)."""
    torch.manual_seed(3)
    learner = VLPromptLearner.build(clip_model, 4, 4, depth_text, depth_vision)
    with torch.no_grad():
        for p in learner.parameters():
            p.copy_((p * 10).half().float())  # well away from zero so the prompts matter
    return learner.requires_grad_(False)


def promptkd_checkpoint(learner: VLPromptLearner, clip_model, marker: str) -> dict:
    """A checkpoint in PromptKD's key layout, with a real torch scheduler object and a code-running global."""
    text, vision = learner.text_prompts(), learner.vision_prompts()
    state = {"prompt_learner.ctx": text[0].half(), "image_encoder.VPT": vision[0].half(),
             "prompt_learner.token_prefix": torch.zeros(3, 1, clip_model.text_width).half(),
             "prompt_learner.token_suffix": torch.zeros(3, 72, clip_model.text_width).half(),
             "logit_scale": clip_model.logit_scale.detach().clone()}
    state.update({f"text_encoder.transformer.resblocks.{i}.VPT_shallow": p.half() for i, p in enumerate(text) if i})
    state.update({f"image_encoder.transformer.resblocks.{i}.VPT_shallow": p.half()
                  for i, p in enumerate(vision) if i})
    for key, value in clip_model.visual.state_dict().items():
        state[f"image_encoder.{key}"] = value.half()
        state[f"prompt_learner.ZS_image_encoder.{key}"] = value.half()
    state["text_encoder.text_projection"] = clip_model.text_projection.detach().half()
    state["text_encoder.positional_embedding"] = clip_model.positional_embedding.detach().half()
    param = nn.Parameter(text[0].clone())
    optimizer = torch.optim.SGD([param], lr=0.005, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=20)
    return {"state_dict": state, "epoch": 20, "optimizer": optimizer.state_dict(),
            "scheduler": {**scheduler.__dict__, "successor": scheduler, "hook": MakesDirectoryWhenUnpickled(marker)},
            "val_result": 91.5}


def write_dassl_log(folder: str, cfg, tail: str = UPSTREAM_TRAIN_LOG, name: str = "log.txt") -> str:
    """``<folder>/<name>`` (default log.txt; Dassl names a rerun's ``log.txt-<timestamp>``) as Dassl's train.py starts
    it (the arguments, then the merged config ``cfg`` printed by yacs under the ``** Config **`` banner), followed by
    ``tail`` (default: a finished training run's end)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(f"***************\n** Arguments **\n***************\ntrainer: {cfg.TRAINER.NAME}\n"
                f"************\n** Config **\n************\n{cfg}\nCollecting env info ...\n{tail}")
    return path


def cfg_of(trainer: str, *opts: str, config: str = ""):
    """A merged config as train.py makes it (``configs/trainers/<trainer>/<config>.yaml`` when given)."""
    files = ["--config-file", f"configs/trainers/{trainer}/{config}.yaml"] if config else []
    return train.setup_cfg(train.build_parser().parse_args(["--trainer", trainer, *files, *opts]))


def upstream_ivlp_run(folder, clip_file: str, n_ctx_logged: int | None = 2) -> tuple[list, list, str]:
    """An upstream IVLP run with upstream's default prompts (2 text and 2 vision tokens, CTX_INIT "a photo of a"),
    depth 3: its checkpoint in upstream's key layout and, unless ``n_ctx_logged`` is None, a log.txt whose config
    dump records N_CTX_TEXT ``n_ctx_logged``. Returns the text and vision prompts (fp16-rounded) and the file."""
    torch.manual_seed(3)
    text = [(torch.randn(2, 64) * 0.3).half() for _ in range(DEPTH)]
    vision = [(torch.randn(2, 64) * 0.3).half() for _ in range(DEPTH)]
    state = {"prompt_learner.ctx": text[0], "image_encoder.VPT": vision[0],
             "prompt_learner.token_prefix": torch.zeros(3, 1, 64).half(),
             "prompt_learner.token_suffix": torch.zeros(3, 74, 64).half(), "logit_scale": torch.tensor(4.6)}
    for i in range(1, DEPTH):
        state[f"text_encoder.transformer.resblocks.{i}.VPT_shallow"] = text[i]
        state[f"image_encoder.transformer.resblocks.{i}.VPT_shallow"] = vision[i]
    path = write_dassl_checkpoint(str(folder / "VLPromptLearner"), state, 5, None, str(folder.parent / "ran"))
    if n_ctx_logged is not None:
        write_dassl_log(str(folder), cfg_of(
            "IVLP", "DATASET.NAME", "EuroSAT", "MODEL.BACKBONE.NAME", clip_file, "TRAINER.IVLP.N_CTX_TEXT",
            str(n_ctx_logged), "TRAINER.IVLP.N_CTX_VISION", "2", "TRAINER.IVLP.PROMPT_DEPTH_TEXT", str(DEPTH),
            "TRAINER.IVLP.PROMPT_DEPTH_VISION", str(DEPTH), "TRAINER.IVLP.CTX_INIT", "a photo of a"))
    return [t.float() for t in text], [v.float() for v in vision], path


def upstream_maple_run(folder, clip_file: str, ctx_init: str) -> tuple[list, list, str]:
    """An upstream MaPLe run of 2 context tokens from the words ``ctx_init``, depth :data:`DEPTH` on the tiny student
    CLIP: its checkpoint (upstream's whole wrapper: ``prompt_learner.`` entries, class-token buffers, a frozen weight)
    and its log.txt recording TRAINER.MAPLE.CTX_INIT ``ctx_init``. Returns the text prompts and the projections
    [(W, b)] (fp16-rounded) and the file."""
    torch.manual_seed(4)
    text = [(torch.randn(2, 64) * 0.3).half() for _ in range(DEPTH)]
    maps = [((torch.randn(64, 64) * 0.1).half(), (torch.randn(64) * 0.1).half()) for _ in range(DEPTH)]
    state = {"prompt_learner.ctx": text[0], "prompt_learner.proj.weight": maps[0][0],
             "prompt_learner.proj.bias": maps[0][1], "prompt_learner.token_prefix": torch.zeros(3, 1, 64).half(),
             "prompt_learner.token_suffix": torch.zeros(3, 74, 64).half(), "logit_scale": torch.tensor(4.6)}
    for i in range(1, DEPTH):
        state[f"prompt_learner.compound_prompts_text.{i - 1}"] = text[i]
        state[f"prompt_learner.compound_prompt_projections.{i - 1}.weight"] = maps[i][0]
        state[f"prompt_learner.compound_prompt_projections.{i - 1}.bias"] = maps[i][1]
    path = write_dassl_checkpoint(str(folder / "MultiModalPromptLearner"), state, 5, None, str(folder.parent / "ran"))
    write_dassl_log(str(folder), cfg_of("MaPLe", "DATASET.NAME", "EuroSAT", "MODEL.BACKBONE.NAME", clip_file,
                                        "TRAINER.MAPLE.CTX_INIT", ctx_init, "TRAINER.MAPLE.PROMPT_DEPTH", str(DEPTH)))
    return [t.float() for t in text], [(w.float(), b.float()) for w, b in maps], path


def upstream_coop_run(folder, clip_file: str, position: str) -> tuple[torch.Tensor, str]:
    """An upstream CoOp run of a 4-token context (no CTX_INIT) with the class token at ``position``, on the tiny
    student CLIP: its checkpoint (with class-token buffers) and its log.txt recording CLASS_TOKEN_POSITION
    ``position``. Returns the context and the file."""
    torch.manual_seed(6)
    ctx = torch.randn(4, 64) * 0.5
    state = {"ctx": ctx, "token_prefix": torch.zeros(3, 1, 64), "token_suffix": torch.zeros(3, 72, 64)}
    path = write_dassl_checkpoint(str(folder / "prompt_learner"), state, 5, None, str(folder.parent / "ran"))
    write_dassl_log(str(folder), cfg_of("CoOp", "DATASET.NAME", "EuroSAT", "MODEL.BACKBONE.NAME", clip_file,
                                        "TRAINER.COOP.N_CTX", "4", "TRAINER.COOP.CLASS_TOKEN_POSITION", position))
    return ctx, path


def upstream_unavailable(name: str, checkout: str, marker: str, paths: Sequence[str], setup: str) -> str:
    """Why upstream ``name``'s own code cannot run here ("" when it can): no checkout at ``checkout`` (its ``marker``
    file is missing; the command ``setup`` puts one there), or its Dassl does not import with ``paths`` first on
    ``sys.path`` (CI has neither)."""
    if not os.path.isfile(os.path.join(checkout, marker)):
        return f"no upstream {name} checkout at {checkout} ({setup} puts one there)"
    probe = subprocess.run([sys.executable, "-c", "import sys; sys.path[:0] = sys.argv[1:]; import dassl.engine",
                            *paths], capture_output=True, text=True, timeout=HANG_GUARD_S)
    lines = probe.stderr.strip().splitlines()
    return f"upstream's Dassl does not import here: {lines[-1]} ({setup} installs what it needs)" if probe.returncode \
        else ""
