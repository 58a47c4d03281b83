#!/usr/bin/env bash
# Puts an upstream repository under .upstream/ (git-ignored), where the tools that run upstream's own code find it, and
# installs what that code imports that its requirements.txt lacks:
#   promptkd (the default): PromptKD at .upstream/PromptKD, the upstream side of the side-by-side benchmark
#     (bench/upstream_promptkd.py); tensorboard (Dassl's trainer imports torch.utils.tensorboard), pandas and wilds
#     1.2.2 (Dassl's domain-generalisation datasets, imported with the rest). wilds goes in without its dependencies:
#     importing it needs none of them, and its optional `outdated` would ask the package index for a newer wilds at
#     every import.
#   kgcoop: KgCoOp's repository at .upstream/KgCoOp (its KgCoOp/ code beside its Dassl.ProGrad.pytorch/), which
#     bench/upstream_kgcoop.py runs for tests/bench/test_upstream_kgcoop.py; tensorboard.
#   clip_adapter: CLIP-Adapter's repository at .upstream/CLIP-Adapter (one file, clip_adapter.py, meant for CoOp's
#     code base: bench/upstream_clip_adapter.py runs it on the kgcoop checkout's clip and Dassl, so set that up too)
#     for tests/bench/test_upstream_clip_adapter.py; tensorboard.
# Idempotent: an existing checkout is kept (its HEAD printed), installed packages are not reinstalled.
# Usage: bash bench/upstream_setup.sh [promptkd|kgcoop|clip_adapter]   (UPSTREAM_DIR, UPSTREAM_URL and PYTHON override
# the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python || command -v python3 || true)}

fail() { echo "error: $*" >&2; exit 2; }

case "${1:-promptkd}" in
    promptkd) NAME=PromptKD URL=https://github.com/zhengli97/PromptKD CODE="" DASSL=Dassl.pytorch MODULE=promptkd
              PACKAGES="tensorboard pandas" WILDS=1 ;;
    kgcoop) NAME=KgCoOp URL=https://github.com/htyao89/KgCoOp CODE=KgCoOp/ DASSL=Dassl.ProGrad.pytorch MODULE=kgcoop
            PACKAGES=tensorboard WILDS="" ;;
    clip_adapter) NAME=CLIP-Adapter URL=https://github.com/gaopengcuhk/CLIP-Adapter CODE="" DASSL="" MODULE=""
                  PACKAGES=tensorboard WILDS="" ;;
    *) fail "unknown upstream '$1'; choose promptkd (the default), kgcoop or clip_adapter" ;;
esac
DIR=${UPSTREAM_DIR:-.upstream/$NAME}
URL=${UPSTREAM_URL:-$URL}
MARKER=${MODULE:+${CODE}trainers/$MODULE.py}
MARKER=${MARKER:-clip_adapter.py}

if [ ! -f "$DIR/$MARKER" ]; then
    if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
        fail "$DIR exists but holds no upstream $NAME ($MARKER is missing); remove it and rerun"
    fi
    command -v git >/dev/null || fail "git is not installed; install it, or put a copy of $URL at $DIR by hand"
    parent=$(dirname "$DIR")
    created_parent=""
    if [ ! -d "$parent" ]; then
        mkdir -p "$parent"
        created_parent=$parent
    fi
    tmp=$(mktemp -d "$parent/.clone.XXXXXX")
    if ! GIT_TERMINAL_PROMPT=0 git clone --quiet "$URL" "$tmp/$NAME" 2>/dev/null; then
        rm -rf "$tmp"
        [ -z "$created_parent" ] || rmdir "$created_parent"
        fail "cannot clone $URL into $DIR (no network?); rerun with network, or put a copy there by hand"
    fi
    [ ! -d "$DIR" ] || rmdir "$DIR"
    mv "$tmp/$NAME" "$DIR"
    rmdir "$tmp"
fi
if [ "$(git -C "$DIR" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$DIR" && pwd -P)" ]; then
    echo "upstream $NAME at $DIR: $(git -C "$DIR" rev-parse HEAD)"
else
    echo "upstream $NAME at $DIR: no git checkout (commit unknown)"
fi

[ -n "$PYTHON" ] || fail "no python found; set PYTHON to the interpreter that runs upstream's code"
has() { "$PYTHON" -c "import $1" 2>/dev/null; }
missing=()
for package in $PACKAGES; do
    has "$package" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
    "$PYTHON" -m pip install --quiet "${missing[@]}" ||
        fail "pip could not install ${missing[*]} (no network?); install them into $PYTHON's environment by hand"
fi
if [ -n "$WILDS" ] && ! has wilds; then
    "$PYTHON" -m pip install --quiet --no-deps "wilds==1.2.2" ||
        fail "pip could not install wilds==1.2.2 (no network?); install it with --no-deps by hand"
fi
if [ -z "$MODULE" ]; then
    echo "upstream $NAME runs on the CoOp code base of the kgcoop checkout: bash bench/upstream_setup.sh kgcoop"
    exit 0
fi
if ! out=$("$PYTHON" -c "import sys; sys.path[:0] = sys.argv[1:]; import dassl.engine, trainers.$MODULE" \
        "$DIR/$CODE" "$DIR/$DASSL" 2>&1 >/dev/null); then
    fail "upstream's code does not import with $PYTHON (${out##*$'\n'}); install what it names"
fi
echo "upstream $NAME imports with $PYTHON"
