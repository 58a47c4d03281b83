#!/usr/bin/env bash
# Puts upstream PromptKD at .upstream/PromptKD (git-ignored), where tools/upstream_promptkd.py (the upstream side of
# the side-by-side benchmark) runs it, and installs what upstream's code imports that requirements.txt lacks:
# tensorboard (Dassl's trainer imports torch.utils.tensorboard), pandas and wilds 1.2.2 (Dassl's domain-generalisation
# datasets, imported with the rest). wilds goes in without its dependencies: importing it needs none of them, and its
# optional `outdated` would ask the package index for a newer wilds at every import.
# Idempotent: an existing checkout is kept (its HEAD printed), installed packages are not reinstalled.
# Usage: bash scripts/bench/upstream_setup.sh        (UPSTREAM_DIR, UPSTREAM_URL and PYTHON override the defaults)
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-$(command -v python || command -v python3 || true)}
DIR=${UPSTREAM_DIR:-.upstream/PromptKD}
URL=${UPSTREAM_URL:-https://github.com/zhengli97/PromptKD}

fail() { echo "error: $*" >&2; exit 2; }

if [ ! -f "$DIR/trainers/promptkd.py" ]; then
    if [ -e "$DIR" ] && [ -n "$(ls -A "$DIR")" ]; then
        fail "$DIR exists but holds no upstream PromptKD (trainers/promptkd.py is missing); remove it and rerun"
    fi
    command -v git >/dev/null || fail "git is not installed; install it, or put a copy of $URL at $DIR by hand"
    parent=$(dirname "$DIR")
    created_parent=""
    if [ ! -d "$parent" ]; then
        mkdir -p "$parent"
        created_parent=$parent
    fi
    tmp=$(mktemp -d "$parent/.clone.XXXXXX")
    if ! GIT_TERMINAL_PROMPT=0 git clone --quiet "$URL" "$tmp/PromptKD" 2>/dev/null; then
        rm -rf "$tmp"
        [ -z "$created_parent" ] || rmdir "$created_parent"
        fail "cannot clone $URL into $DIR (no network?); rerun with network, or put a copy there by hand"
    fi
    [ ! -d "$DIR" ] || rmdir "$DIR"
    mv "$tmp/PromptKD" "$DIR"
    rmdir "$tmp"
fi
if [ "$(git -C "$DIR" rev-parse --show-toplevel 2>/dev/null)" = "$(cd "$DIR" && pwd -P)" ]; then
    echo "upstream PromptKD at $DIR: $(git -C "$DIR" rev-parse HEAD)"
else
    echo "upstream PromptKD at $DIR: no git checkout (commit unknown)"
fi

[ -n "$PYTHON" ] || fail "no python found; set PYTHON to the interpreter that runs the benchmark"
has() { "$PYTHON" -c "import $1" 2>/dev/null; }
missing=()
has tensorboard || missing+=(tensorboard)
has pandas || missing+=(pandas)
if [ ${#missing[@]} -gt 0 ]; then
    "$PYTHON" -m pip install --quiet "${missing[@]}" ||
        fail "pip could not install ${missing[*]} (no network?); install them into $PYTHON's environment by hand"
fi
if ! has wilds; then
    "$PYTHON" -m pip install --quiet --no-deps "wilds==1.2.2" ||
        fail "pip could not install wilds==1.2.2 (no network?); install it with --no-deps by hand"
fi
if ! out=$("$PYTHON" -c "import sys; sys.path[:0] = sys.argv[1:]; import dassl.engine, trainers.promptkd" \
        "$DIR" "$DIR/Dassl.pytorch" 2>&1 >/dev/null); then
    fail "upstream's code does not import with $PYTHON (${out##*$'\n'}); install what it names"
fi
echo "upstream PromptKD imports with $PYTHON"
