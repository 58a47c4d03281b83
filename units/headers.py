"""The header comment of every unit command's wrapper script, per command family and command (units/wrappers.py).

Each header is a tuple of paragraphs, each wrapped to 120 columns behind ``# `` (a ``\\n`` starts a new line, kept
with its leading spaces). Fields are the wrapped method's catalog row (``trainers/catalog.py``): ``{name}``,
``{trainer}``, ``{ns}``, ``{folder}`` (its scripts folder), ``{config}``, ``{imagenet_config}``, ``{xd_config}``,
``{learner_xd_config}``, ``{shots}``, ``{learns}``, ``{learner_xd_note}`` (whether a prompt learner's cross-dataset
config is its base-to-novel one), and the lists the commands check: ``{dg_targets}``, ``{imagenet_dg}``,
``{x_learners}``.
"""
from __future__ import annotations

Header = tuple[str, ...]

LEARNER: dict[str, Header] = {
    "base2new_train": (
        "{name} base-to-novel: learn {learns} on the {shots}-shot base classes of DATASET (SEED), then test them.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_train.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (finished runs are "
        "skipped, interrupted ones resume). CFG defaults to {config}; other knobs: SHOTS, BACKBONE, EXTRA_OPTS "
        "(docs/usage.md).",
    ),
    "base2new_test": (
        "{name} base-to-novel: evaluate the model of base2new_train.sh (same DATASET, SEED, CFG) on the novel classes.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_test.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (skipped when "
        "finished). The loaded epoch is the training run's last saved one (or LOAD_EPOCH). CFG, SHOTS, BACKBONE, "
        "EXTRA_OPTS as in base2new_train.sh.",
    ),
    "xd_train": (
        "{name} cross-dataset / domain generalisation, step 1: learn {learns} on {shots}-shot SOURCE (default "
        "imagenet), all classes; xd_test.sh / dg_test.sh then evaluate the model on other datasets without training.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/{folder}/xd_train.sh 1",
        "Output: $OUTPUT_ROOT/xd/train/<source>/shots_{shots}/{trainer}/<cfg>/seed<S>. CFG defaults to "
        "{learner_xd_config} ({learner_xd_note}); SHOTS, BACKBONE, EXTRA_OPTS as in docs/usage.md.",
    ),
    "xd_test": (
        "{name} cross-dataset: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on every class of DATASET.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/{folder}/xd_test.sh caltech101 1",
        "Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (skipped when finished).",
    ),
    "dg_test": (
        "{name} domain generalisation: evaluate the SOURCE model of xd_train.sh (same SEED, CFG) on a DG target of "
        "SOURCE ({dg_targets}).",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/{folder}/dg_test.sh imagenet_a 1",
        "Output: $OUTPUT_ROOT/dg/test/<target>/shots_{shots}/{trainer}/<cfg>/seed<S> (skipped when finished).",
    ),
}
"""The learners trained on labelled shots (CoCoOp, MaPLe, IVLP, KgCoOp, CLIP-Adapter)."""

COOP: dict[str, Header] = {
    "base2new_train": (
        "{name} base-to-novel: learn the context on the {shots}-shot base classes of DATASET (SEED), then evaluate the "
        "base classes.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_train.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (finished runs are "
        "skipped, interrupted ones resume). CFG defaults to {config} ({imagenet_config} for imagenet), CoCoOp's CoOp "
        "baseline; other knobs: SHOTS, BACKBONE, EXTRA_OPTS (docs/usage.md).",
    ),
    "base2new_test": (
        "{name} base-to-novel: evaluate the context learned by base2new_train.sh (same DATASET, SEED) on the novel "
        "classes.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_test.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (skipped when "
        "finished). The loaded epoch is the training run's last saved one (its config's MAX_EPOCH: 200, or 50 for "
        "imagenet), or LOAD_EPOCH.",
        "CFG, SHOTS, BACKBONE, EXTRA_OPTS as in base2new_train.sh.",
    ),
    "main": (
        "{name} few-shot (all classes), CoOp's main.sh: train on SHOTS images per class for each seed in SEEDS "
        "(default 1 2 3).",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/main.sh <dataset> <cfg> <ctp> <nctx> <shots> <csc>",
        "  e.g. bash scripts/{folder}/main.sh caltech101 vit_b16 end 16 16 False   (imagenet: use the *_ep50 configs)",
        "Output: $OUTPUT_ROOT/<dataset>/{trainer}/<cfg>_<shots>shots/nctx<nctx>_csc<csc>_ctp<ctp>/seed<S> (finished "
        "runs are skipped, interrupted ones resume). A *_ctxv1 config sets the context from \"a photo of a\" (4 "
        "tokens, no CSC) and overrides nctx. BACKBONE, EXTRA_OPTS as in docs/usage.md.",
    ),
    "eval": (
        "{name} cross-dataset / domain generalisation: evaluate the 16-shot ImageNet contexts of main.sh (seeds in "
        "SEEDS, default 1 2 3) on DATASET, e.g. imagenetv2, imagenet_sketch, imagenet_a, imagenet_r or caltech101.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/eval.sh <dataset> <cfg>      (cfg: e.g. vit_b16_ep50)",
        "Model: $OUTPUT_ROOT/imagenet/{trainer}/<cfg>_16shots/nctx<NCTX>_csc<CSC>_ctp<CTP>/seed<S> (NCTX 16, CSC "
        "False, CTP end unless set; CSC contexts cannot change classes). Output: $OUTPUT_ROOT/evaluation/{trainer}/"
        "<cfg>_16shots/ nctx.._csc.._ctp../<dataset>/seed<S>. The loaded epoch is the model's last saved one (or "
        "LOAD_EPOCH).",
    ),
}
"""CoOp."""

PROMPTKD: dict[str, Header] = {
    "base2new_train": (
        "{name} base-to-novel: distil the student on every train image of DATASET (all classes, labels unused; SHOTS "
        "per class when set) from the teacher, then evaluate on the base classes.",
        "Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] \\\n"
        "       bash scripts/{folder}/base2new_train.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_<SHOTS>/{trainer}/<cfg>/seed<S> (SHOTS default "
        "{shots}; skipped when finished; resumes).",
        "Other environment knobs: docs/usage.md (KD_WEIGHT, BACKBONE, TEACHER_NAME, EXTRA_OPTS, CFG).",
    ),
    "base2new_test": (
        "{name} base-to-novel: evaluate the student of base2new_train.sh (same DATASET, SEED, SHOTS) on the novel "
        "classes.",
        "Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/{folder}/base2new_test.sh "
        "eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_<SHOTS>/{trainer}/<cfg>/seed<S> (skipped when "
        "finished).",
    ),
    "xd_train": (
        "{name} cross-dataset (upstream protocol, transductive): distil the student on DATASET's train split (all "
        "classes, unlabelled) from the SOURCE-trained teacher and evaluate on DATASET's test set. `xd_train.sh "
        "<SOURCE>` (e.g. `xd_train.sh imagenet`) gives the source-distilled student that xd_test.sh evaluates on other "
        "datasets.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \\\n"
        "           bash scripts/{folder}/xd_train.sh eurosat 1",
        "  SOURCE  dataset the teacher was trained on (<TEACHER_DIR>/<source DATASET.NAME>-xd; default imagenet)",
        "  SHOTS   train images per class (default 0: every train image)",
        "α = 1000 unless KD_WEIGHT is set (upstream xd_train.sh).",
        "Output: $OUTPUT_ROOT/xd/train/<dataset>/shots_<SHOTS>/{trainer}/<cfg>/seed<S>.",
    ),
    "xd_test": (
        "{name} cross-dataset / domain generalisation without re-distilling: evaluate the SOURCE-distilled student "
        "(scripts/{folder}/xd_train.sh <SOURCE> SEED) on DATASET, with the teacher's text features for DATASET's "
        "classes. DATASET may be a cross-dataset target or a DG target of SOURCE ({dg_targets}), which is evaluated "
        "with TRAINER.MODAL dg.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \\\n"
        "           bash scripts/{folder}/xd_test.sh eurosat 1",
        "Output: $OUTPUT_ROOT/xd/test/<dataset>/shots_<SHOTS>/{trainer}/<cfg>/seed<S> (skipped when finished).",
    ),
}
"""PromptKD."""

PETR: dict[str, Header] = {
    "base2new_train": (
        "{name} base-to-novel: train θ_s (labelled base classes) and θ_u (unlabelled novel classes) on DATASET's "
        "train images (SHOTS per class when set) with SEED, fit the router, and evaluate on the base classes.",
        "Usage: DATA=/path/to/datasets [TEACHER_DIR=teachers | TEACHER_CKPT=...] bash "
        "scripts/{folder}/base2new_train.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_<SHOTS>/{trainer}/<cfg>/seed<S> (SHOTS default "
        "{shots}; finished runs are skipped, interrupted ones resume). Other environment knobs: docs/usage.md "
        "(KD_WEIGHT, BACKBONE, TEACHER_NAME, EXTRA_OPTS, CFG).",
    ),
    "base2new_test": (
        "{name} base-to-novel: evaluate the model trained by base2new_train.sh (same DATASET, SEED, SHOTS) on the "
        "novel classes, with the router saved in its run folder.",
        "Usage: DATA=/path/to/datasets [TEACHER_DIR=... | TEACHER_CKPT=...] bash scripts/{folder}/base2new_test.sh "
        "eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_<SHOTS>/{trainer}/<cfg>/seed<S> (skipped when "
        "finished).",
    ),
    "xd_train": (
        "{name} cross-dataset: θ_s learns labelled train images of the SOURCE dataset (its classes), θ_u the "
        "unlabelled train split of TARGET, the router is fitted on SOURCE train images scored over TARGET's classes; "
        "evaluated on TARGET's test set.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \\\n"
        "           bash scripts/{folder}/xd_train.sh eurosat 1",
        "  SOURCE  source dataset short name (default imagenet; the demo world's is demonet)",
        "  SHOTS   train images per class of source and target (default 0: every train image)",
        "The teacher is the SOURCE-trained one (<TEACHER_DIR>/<source DATASET.NAME>-xd, e.g. ImageNet-xd, as written "
        "by scripts/teacher/xd_train.sh); α = 1000 unless KD_WEIGHT is set (PromptKD xd).",
        "Output: $OUTPUT_ROOT/xd/train/<target>/shots_<SHOTS>/{trainer}/<cfg>/seed<S>.",
    ),
    "xd_test": (
        "{name} cross-dataset: re-evaluate the model of xd_train.sh (same TARGET, SEED, SOURCE, SHOTS) on TARGET's "
        "test set with its saved router, e.g. with another router: EXTRA_OPTS=\"TRAINER.{ns}.ROUTER energy\".",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \\\n"
        "           bash scripts/{folder}/xd_test.sh eurosat 1",
        "Output: $OUTPUT_ROOT/xd/test/<target>/shots_<SHOTS>/{trainer}/<cfg>/seed<S>.",
    ),
    "dg_train": (
        "{name} domain generalisation: θ_s learns labelled train images of the SOURCE dataset, θ_u the unlabelled "
        "images of TARGET (a DG target of SOURCE, {dg_targets}; their test images — transductive, as PromptKD), "
        "router from SOURCE train images scored over TARGET's classes; evaluated on TARGET.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=teachers | TEACHER_CKPT=...] \\\n"
        "           bash scripts/{folder}/dg_train.sh imagenet_a 1",
        "Output: $OUTPUT_ROOT/dg/train/<target>/shots_<SHOTS>/{trainer}/<cfg>/seed<S>.",
    ),
    "dg_test": (
        "{name} domain generalisation: re-evaluate the model of dg_train.sh (same TARGET, SEED, SOURCE, SHOTS) with "
        "its saved router.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] [SHOTS=0] [TEACHER_DIR=... | TEACHER_CKPT=...] \\\n"
        "           bash scripts/{folder}/dg_test.sh imagenet_a 1",
        "Output: $OUTPUT_ROOT/dg/test/<target>/shots_<SHOTS>/{trainer}/<cfg>/seed<S>.",
    ),
    "reproduce_base2new": (
        "Reproduce {name}'s base-to-novel table: for the 11 datasets x seeds 1-3, train (+ base test) and test on the "
        "novel classes; finished runs are skipped and interrupted ones resume from their checkpoints; then print the "
        "Base / Novel / HM table (parse_test_res.py b2n) beside the paper's numbers.",
        "Usage: DATA=/path/to/datasets TEACHER_DIR=teachers bash scripts/{folder}/reproduce_base2new.sh",
        "       DATASETS=\"eurosat dtd\" SEEDS=\"1\" ... to run a subset. A failed run is reported and the loop goes "
        "on; a\n       preempted one (status 75) ends the script with that status.",
    ),
}
"""PETR."""

TEACHER: dict[str, Header] = {
    "base2new_train": (
        "Teacher ({trainer} on ViT-L/14, PromptKD's recipe): train deep vision+language prompts on the {shots}-shot "
        "base classes of DATASET, evaluate on the base classes, write teacher_text_features.pt (all classes) and "
        "publish the teacher to ${{TEACHER_DIR:-teachers}}/<DATASET.NAME> for the PromptKD/PETR scripts.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_train.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (finished runs are "
        "skipped, interrupted ones resume). Knobs: CFG (default {config}), SHOTS, TEACHER_NAME (the teacher's CLIP, a "
        "model name or weight file), TEACHER_DIR, EXTRA_OPTS (docs/usage.md).",
    ),
    "base2new_test": (
        "Teacher ({trainer}) on the novel classes: evaluate the base-trained teacher of base2new_train.sh on the novel "
        "classes of DATASET (the teacher's own base-to-novel numbers).",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_test.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S>. Knobs: CFG, SHOTS, "
        "TEACHER_NAME, LOAD_EPOCH, EXTRA_OPTS (docs/usage.md).",
    ),
    "xd_train": (
        "Cross-dataset / DG teacher ({trainer} on ViT-L/14, cross-dataset settings: deep prompts 3/3, GPA 6/10): "
        "train on {shots}-shot SOURCE (default imagenet), all classes, and publish it to "
        "${{TEACHER_DIR:-teachers}}/<source DATASET.NAME>-xd (ImageNet-xd; DemoNet-xd for SOURCE=demonet) for the "
        "xd/dg student scripts.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/{folder}/xd_train.sh 1",
        "Output: $OUTPUT_ROOT/xd/train/<source>/shots_{shots}/{trainer}/<cfg>/seed<S>. Knobs: CFG (default "
        "{xd_config}), SOURCE, SHOTS (default {shots}), TEACHER_NAME, TEACHER_DIR, EXTRA_OPTS (docs/usage.md).",
    ),
}
"""The PromptSRC teacher."""

PETR_COOP: dict[str, Header] = {
    "base2new_train": (
        "{name} base-to-novel: learn the CoOp context θ_s on the {shots}-shot base classes of DATASET (SEED), fit the "
        "router on those images and evaluate on the base classes (θ_u = the dataset's hand-crafted prompt ensemble).",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_train.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (finished runs are "
        "skipped, interrupted ones resume). CFG defaults to {config} ({imagenet_config} for imagenet, as CoOp); other "
        "knobs: SHOTS, BACKBONE, EXTRA_OPTS (docs/usage.md). For an existing CoOp run use scripts/{folder}/plugin.sh "
        "instead.",
    ),
    "base2new_test": (
        "{name} base-to-novel: evaluate the run of base2new_train.sh (same DATASET, SEED) on the novel classes, with "
        "the CoOp context and the router saved in its run folder.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new_test.sh eurosat 1",
        "Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S> (skipped when "
        "finished).",
        "CFG=<cfg>_plugin evaluates a plug-in run of plugin.sh instead (plugin.sh does this itself).",
    ),
    "plugin": (
        "{name} as a training-free plug-in: take the CoOp context of an existing base-to-novel CoOp run (no "
        "retraining), fit the router on the {shots}-shot base train images and evaluate base and novel classes.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/plugin.sh eurosat 1 [COOP_RUN_DIR]",
        "COOP_RUN_DIR defaults to scripts/coop/base2new_train.sh's folder,",
        "$OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/CoOp/<cfg>/seed<S>; COOP_LOAD_EPOCH picks its epoch "
        "(default: the last saved). Outputs: base2new/{{train_base,test_new}}/<dataset>/shots_{shots}/{trainer}/"
        "<cfg>_plugin/seed<S> (skipped when finished). CFG (default {config}, {imagenet_config} for imagenet) must "
        "match the CoOp run's prompt settings; SHOTS, BACKBONE and EXTRA_OPTS as in docs/usage.md.",
    ),
}
"""PETR+CoOp."""

PETR_X: dict[str, Header] = {
    "base2new": (
        "PETR+X base-to-novel: PETR's training-free routing on a finished base-to-novel run of a tuned method X. "
        "θ_s = X's prediction over all classes, θ_u = the dataset's hand-crafted prompt ensemble; the router is fitted "
        "on X's SHOTS-shot base train images (same SEED), then the base classes and the novel classes are evaluated. "
        "Nothing is trained.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/base2new.sh <x> <dataset> <seed> [X_RUN_DIR]",
        "x: {x_learners}. X_RUN_DIR: the folder of X's run, ours or upstream's (Dassl checkpoints in X's model "
        "folder); default: the folder of X's base-to-novel script, "
        "$OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/<X>/<X_CFG>/seed<S>, else the one upstream run in "
        "shots_{shots}_*/ beside it (upstream KgCoOp's script writes shots_16_<W>), X_CFG by default: {x_configs}. "
        "TUNED_LOAD_EPOCH picks X's epoch (default: the last saved).",
        "Outputs: $OUTPUT_ROOT/base2new/{{train_base,test_new}}/<dataset>/shots_{shots}/{trainer}/<CFG>_<x>/seed<S> "
        "(train.py skips a finished run of the same config). CFG (default {config}: one config for every X), SHOTS, "
        "BACKBONE and EXTRA_OPTS as in docs/usage.md.",
    ),
    "xd": (
        "PETR+X cross-dataset: PETR's training-free routing on a finished run of a tuned method X trained on the "
        "source (ImageNet, SHOTS shots, all classes), evaluated on TARGET. θ_s = X's prediction over the target's "
        "classes, θ_u = the target's hand-crafted prompt ensemble; the router is fitted on X's training images (the "
        "source's SHOTS-shot train images of SEED) scored over the target's classes. Nothing is trained.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/{folder}/xd.sh <x> <target> <seed> X_RUN_DIR",
        "x: {x_learners}.",
        "X_RUN_DIR: the folder of X's source run, ours or upstream's (e.g. CoOp's main.sh or upstream's "
        "output/imagenet/<X>/<cfg>_16shots/.../seed<S>); TUNED_LOAD_EPOCH picks its epoch (default: the last saved).",
        "Output: $OUTPUT_ROOT/xd/train/<target>/shots_<SHOTS>/{trainer}/<CFG>_<x>/seed<S> (skipped when finished); "
        "SHOTS defaults to {shots}. CFG, BACKBONE and EXTRA_OPTS as in docs/usage.md; dg.sh runs the same for the DG "
        "targets.",
    ),
    "dg": (
        "PETR+X domain generalisation: scripts/{folder}/xd.sh with TRAINER.MODAL dg on a DG target of SOURCE.",
        "Usage: DATA=/path/to/datasets [SOURCE=imagenet] bash scripts/{folder}/dg.sh <x> <target> <seed> X_RUN_DIR",
        "x: {x_learners}; target (of imagenet): {imagenet_dg}.",
        "Output: $OUTPUT_ROOT/dg/train/<target>/shots_<SHOTS>/{trainer}/<CFG>_<x>/seed<S>.",
    ),
}
"""PETR+X (one scripts folder for every method X it routes on)."""

ZSCLIP: dict[str, Header] = {
    "base2new_test": (
        "Zero-shot CLIP base-to-novel: evaluate the base and the novel classes of DATASET (no training).",
        "Usage: DATA=/path/to/datasets [CFG=vit_b16_ensemble] bash scripts/{folder}/base2new_test.sh <dataset> [seed]",
        "Outputs (the trees parse_test_res pairs for every method; zero-shot is deterministic, so seed defaults to 1):",
        "  base:  $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S>",
        "  novel: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_{shots}/{trainer}/<cfg>/seed<S>",
        "CFG: {config} (single template, default; CoCoOp's \"CLIP\" row) or vit_b16_ensemble (CLIP's per-dataset "
        "ensemble, PETR+CoOp's unseen branch). Finished runs are skipped. BACKBONE, EXTRA_OPTS: docs/usage.md.",
    ),
    "zeroshot": (
        "Zero-shot CLIP on all classes of DATASET (no training), CoOp's zeroshot.sh.",
        "Usage: DATA=/path/to/datasets bash scripts/{folder}/zeroshot.sh <dataset> [cfg]",
        "  cfg (configs/trainers/{trainer}/): {config} (single template, default), vit_b16_ensemble (CLIP's "
        "per-dataset prompt ensemble), vit_b16_select (CoOp's ZeroshotCLIP2 set), vit_b32, vit_b32_ensemble.",
        "Output: $OUTPUT_ROOT/{trainer}/<cfg>/<dataset> (skipped when finished). BACKBONE, EXTRA_OPTS: docs/usage.md.",
    ),
}
"""Zero-shot CLIP."""

HEADERS: dict[str, dict[str, Header]] = {
    "learner": LEARNER, "coop": COOP, "promptkd": PROMPTKD, "petr": PETR, "teacher": TEACHER, "petr_coop": PETR_COOP,
    "petr_x": PETR_X, "zsclip": ZSCLIP}
"""Each command family's headers (the keys of ``units.commands.COMMANDS``), one per command."""
