# Shared helpers for scripts/<method>/*.sh; sourced (not run) from the repository root.
#
# Environment read here (all optional except DATA); relative paths in DATA, OUTPUT_ROOT, TEACHER_DIR and
# TEACHER_CKPT are taken from the directory the script was called from:
#   DATA          datasets folder (CoOp layout, see DATASETS.md)            [required]
#   PYTHON        interpreter (default: the active virtual environment's python, else the project's .venv made by
#                 `make demo` / `make test`, else python3)
#   OUTPUT_ROOT   root of the output trees (default: output)
#   KD_WEIGHT     distillation weight α for every dataset (default: PromptKD's per-dataset table, kd_weight below)
#   TEACHER_CKPT  teacher checkpoint file or PromptSRC run folder; "none" = plain CLIP teacher (not the paper's setup)
#   TEACHER_DIR   folder of teachers <TEACHER_DIR>/<DATASET.NAME> (<source DATASET.NAME>-xd, e.g. ImageNet-xd, for
#                 cross/dg), as written by scripts/teacher/*.sh and tools/import_promptkd_teacher.py (default:
#                 teachers); used when TEACHER_CKPT is unset
#   SOURCE        source dataset of the cross-dataset / DG scripts (default: imagenet; demonet in the demo world)
#   SHOTS         training images per class of the cross-dataset / DG students (default: 0 = every train image)
#   BACKBONE      student CLIP (MODEL.BACKBONE.NAME: a model name or weight file), e.g. a tiny CLIP in tests
#   TEACHER_NAME  teacher CLIP (TRAINER.<NS>.TEACHER_NAME)
#   EXTRA_OPTS    extra "KEY VALUE ..." config overrides appended last, e.g. "OPTIM.MAX_EPOCH 1 INPUT.SIZE (32,32)"
#   LOAD_EPOCH    epoch a test script loads (default: model-best.pth.tar when the run saved one, else the last epoch)
#   NPROC         processes (GPUs) per run: N > 1 launches train.py with `python -m torch.distributed.run
#                 --standalone --nproc-per-node N` (data parallel; the config's training batch is the global one)
#   MOVE_ASIDE    1: when a run's folder holds a finished or interrupted run of another config, move that run to
#                 .<folder>.old-<N> beside it and start this one (train.py --move-aside); otherwise the script stops

if [ -z "${PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ]; then
        PYTHON=python
    elif [ -x "$PWD/.venv/bin/python" ]; then
        PYTHON="$PWD/.venv/bin/python"
    else
        PYTHON=python3
    fi
fi
# The scripts run `cd "$(dirname "$0")/../.."` right before sourcing this file, so OLDPWD is the directory they
# were called from (a shell that sources this file itself keeps its own directory).
if [ -f "$0" ] && [ -n "${OLDPWD:-}" ]; then
    CALLER_DIR=$OLDPWD
else
    CALLER_DIR=$PWD
fi

# caller_path PATH: PATH taken from the caller's directory when relative ("" and absolute paths unchanged).
caller_path() {
    case "$1" in
        "" | /*) echo "$1" ;;
        *) echo "$CALLER_DIR/$1" ;;
    esac
}

DATA=$(caller_path "${DATA:-}")
OUTPUT_ROOT=$(caller_path "${OUTPUT_ROOT:-}")
OUTPUT_ROOT=${OUTPUT_ROOT:-output}
TEACHER_DIR=$(caller_path "${TEACHER_DIR:-}")
if [ "${TEACHER_CKPT:-}" != none ]; then
    TEACHER_CKPT=$(caller_path "${TEACHER_CKPT:-}")
fi

# train.py's exit status after a preemption signal (SIGTERM, SIGUSR1 or SIGHUP): it finished its step and saved a
# resume state; rerunning the same command continues the run.
EXIT_PREEMPTED=75
# Such a signal is often sent to every process of the job (SLURM, a closed terminal). A no-op trap keeps this shell
# alive: bash runs it once its foreground child (train.py, saving its state) has ended, and the script then exits
# with the child's status (75) instead of dying first with 143.
trap ':' TERM USR1 HUP

BASE2NEW_DATASETS=(imagenet caltech101 oxford_pets stanford_cars oxford_flowers food101 fgvc_aircraft sun397 dtd
                   eurosat ucf101)
XD_TARGETS=(caltech101 oxford_pets stanford_cars oxford_flowers food101 fgvc_aircraft sun397 dtd eurosat ucf101)

die() {
    echo "error: $*" >&2
    exit 1
}

# dataset_name SHORT: DATASET.NAME of a dataset short name, read from configs/datasets/<SHORT>.yaml (so every dataset
# with a config works, the demo's included).
dataset_name() {
    local yaml="configs/datasets/$1.yaml" name=""
    if [[ "$1" =~ ^[A-Za-z0-9_]+$ ]] && [ -f "$yaml" ]; then
        name=$(sed -n 's/^ *NAME: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$yaml" | head -n 1)
    fi
    if [ -z "$name" ]; then
        local stems=(configs/datasets/*.yaml)
        stems=("${stems[@]#configs/datasets/}")
        die "unknown dataset '$1'; use one of: ${stems[*]%.yaml}"
    fi
    echo "$name"
}

# dg_targets SOURCE: the domain-generalisation targets (short names) of a source dataset.
dg_targets() {
    case "$1" in
        imagenet) echo imagenetv2 imagenet_sketch imagenet_a imagenet_r ;;
        demonet) echo demonetv2 demonet_sketch demonet_a demonet_r ;;
        *) die "no domain-generalisation targets for source '$1'; use SOURCE=imagenet or SOURCE=demonet" ;;
    esac
}

# xd_source: sets SOURCE (default imagenet) and SOURCE_NAME (its DATASET.NAME) for the cross-dataset / DG scripts.
xd_source() {
    SOURCE=${SOURCE:-imagenet}
    SOURCE_NAME=$(dataset_name "$SOURCE")
}

# require_dg_target SCRIPT TARGET: ends with a usage line naming $SOURCE's DG targets unless TARGET is one of them.
require_dg_target() {
    local targets
    targets=$(dg_targets "${SOURCE:-imagenet}")
    [[ " $targets " == *" $2 "* ]] ||
        die "usage: SOURCE=${SOURCE:-imagenet} bash $1 <${targets// /|}> <seed> ('${2}' is not a DG target of it)"
}

# dataset_yaml SHORT: the dataset config file.
dataset_yaml() {
    dataset_name "$1" >/dev/null
    echo "configs/datasets/$1.yaml"
}

# kd_weight SHORT: α as in PromptKD's scripts (200 for fgvc_aircraft, oxford_flowers, dtd; 1000 otherwise),
# unless KD_WEIGHT is set. Floats, because yacs rejects an int for a float key.
kd_weight() {
    if [ -n "${KD_WEIGHT:-}" ]; then
        echo "$KD_WEIGHT"
        return
    fi
    case "$1" in
        fgvc_aircraft | oxford_flowers | dtd) echo 200.0 ;;
        *) echo 1000.0 ;;
    esac
}

# require_data: DATA must name an existing folder.
require_data() {
    [ -n "$DATA" ] || die "DATA is not set: set DATA=/path/to/datasets (see DATASETS.md)"
    [ -d "$DATA" ] || die "DATA=$DATA is not a folder (see DATASETS.md for the dataset layout)"
}

# teacher_ckpt FOLDER: the TRAINER.<NS>.TEACHER_CKPT value; FOLDER is the teacher's folder name under TEACHER_DIR
# (the dataset's DATASET.NAME for base-to-novel, <source DATASET.NAME>-xd, e.g. ImageNet-xd, for cross/dg).
# Prints "" for TEACHER_CKPT=none.
teacher_ckpt() {
    case "${TEACHER_CKPT:-}" in
        none)
            echo "note: TEACHER_CKPT=none: distilling from a plain CLIP teacher (not the paper's setting)" >&2
            echo ""
            ;;
        "")
            local dir="${TEACHER_DIR:-teachers}/$1"
            [ -e "$dir" ] || die "no teacher at $dir: set TEACHER_DIR (folder of per-dataset teachers), \
TEACHER_CKPT=/path/to/checkpoint-or-PromptSRC-run, or TEACHER_CKPT=none; train one with \
scripts/teacher/base2new_train.sh or import PromptKD's with tools/import_promptkd_teacher.py"
            echo "$dir"
            ;;
        *)
            [ -e "$TEACHER_CKPT" ] || die "TEACHER_CKPT=$TEACHER_CKPT does not exist"
            echo "$TEACHER_CKPT"
            ;;
    esac
}

# run_dir PROTOCOL/ROLE DATASET SHOTS TRAINER CFG SEED: the output folder of one run (engine/runs.py, the layout of
# docs/ARCHITECTURE.md), e.g. run_dir base2new/train_base eurosat 16 CoOp vit_b16_ctxv1 1.
run_dir() {
    "$PYTHON" -m engine.runs dir "$OUTPUT_ROOT" "${1%%/*}" "${1#*/}" "$2" "$3" "$4" "$5" "$6"
}

# run_finished DIR: true when the run in DIR completed (ours, or an upstream run's log), as `python -m engine.runs
# state DIR` says. Whether a finished run is the same run as the one a script would start (same config, data and
# checkpoints) is decided by train.py itself: on the same run it prints "Run finished, skipping: DIR" and exits 0.
run_finished() {
    case "$("$PYTHON" -m engine.runs state "$1")" in
        finished | finished-upstream) return 0 ;;
        *) return 1 ;;
    esac
}

# load_epoch_args MODEL_DIR: "--load-epoch last" (train.py loads each model's last saved checkpoint), nothing when
# the run kept a model-best.pth.tar (TEST.FINAL_MODEL best_val), or LOAD_EPOCH when set.
load_epoch_args() {
    if [ -n "${LOAD_EPOCH:-}" ]; then
        echo "--load-epoch $LOAD_EPOCH"
        return
    fi
    local saved
    saved=$("$PYTHON" -m engine.runs saved-model "$1") || exit 1
    if [ "$saved" = last ]; then
        echo "--load-epoch last"
    fi
}

# common_opts NS: fills the array COMMON_OPTS with the environment overrides (BACKBONE, TEACHER_NAME, EXTRA_OPTS).
common_opts() {
    COMMON_OPTS=()
    if [ -n "${BACKBONE:-}" ]; then
        COMMON_OPTS+=(MODEL.BACKBONE.NAME "$BACKBONE")
    fi
    if [ -n "${TEACHER_NAME:-}" ]; then
        COMMON_OPTS+=("TRAINER.$1.TEACHER_NAME" "$TEACHER_NAME")
    fi
    local extra=()
    read -r -a extra <<<"${EXTRA_OPTS:-}"
    COMMON_OPTS+=("${extra[@]}")
}

# require_python: PYTHON must have torch; otherwise one line saying how to get an environment.
require_python() {
    "$PYTHON" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)" 2>/dev/null ||
        die "PYTHON=$PYTHON has no torch: run 'make install' (creates .venv, which the scripts then use), activate \
a virtual environment with requirements.txt installed, or set PYTHON=/path/to/python"
}

# eval_args MODEL_DIR: fills the array EVAL_ARGS with the train.py flags that evaluate the saved model
# (--model-dir, the epoch of load_epoch_args, --eval-only).
eval_args() {
    local load
    load=$(load_epoch_args "$1")
    local epoch=()
    read -r -a epoch <<<"$load"
    EVAL_ARGS=(--model-dir "$1" "${epoch[@]}" --eval-only)
}

# train_py DATASET DIR [ARG ...]: runs train.py for $TRAINER with configs/trainers/$TRAINER/$CFG.yaml on DATASET,
# writing to DIR, with --seed $SEED unless SEED is empty; ARGs (flags, then KEY VALUE overrides) precede COMMON_OPTS.
# With NPROC > 1 it runs under torchrun (NPROC processes on this machine); MOVE_ASIDE=1 adds --move-aside. train.py
# skips a finished run of the same config ("Run finished, skipping: DIR", status 0), resumes an interrupted one, and
# stops with status 2 when DIR holds another config's run or is in use by a live run.
train_py() {
    local dataset=$1 dir=$2
    shift 2
    require_python
    local seed=()
    if [ -n "$SEED" ]; then
        seed=(--seed "$SEED")
    fi
    local launch=(train.py) move=()
    if [ "${MOVE_ASIDE:-}" = 1 ]; then
        move=(--move-aside)
    fi
    [[ "${NPROC:-1}" =~ ^[1-9][0-9]*$ ]] || die "NPROC=$NPROC: give the number of processes (GPUs), e.g. NPROC=4"
    if [ "${NPROC:-1}" -gt 1 ]; then
        launch=(-m torch.distributed.run --standalone --nproc-per-node "$NPROC" train.py)
    fi
    "$PYTHON" "${launch[@]}" --root "$DATA" "${seed[@]}" --trainer "$TRAINER" \
        --dataset-config-file "$(dataset_yaml "$dataset")" --config-file "configs/trainers/$TRAINER/$CFG.yaml" \
        --output-dir "$dir" "${move[@]}" "$@" "${COMMON_OPTS[@]}"
}
