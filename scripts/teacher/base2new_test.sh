#!/usr/bin/env bash
# Teacher (PromptSRC) on the novel classes: evaluate the base-trained teacher of base2new_train.sh on the novel classes
# of DATASET (the teacher's own base-to-novel numbers).
# Usage: DATA=/path/to/datasets bash scripts/teacher/base2new_test.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/test_new/<dataset>/shots_16/PromptSRC/<cfg>/seed<S>. Knobs: CFG, SHOTS, TEACHER_NAME,
# LOAD_EPOCH, EXTRA_OPTS (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" teacher base2new_test "$@"
