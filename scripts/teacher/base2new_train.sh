#!/usr/bin/env bash
# Teacher (PromptSRC on ViT-L/14, PromptKD's recipe): train deep vision+language prompts on the 16-shot base classes of
# DATASET, evaluate on the base classes, write teacher_text_features.pt (all classes) and publish the teacher to
# ${TEACHER_DIR:-teachers}/<DATASET.NAME> for the PromptKD/PETR scripts.
# Usage: DATA=/path/to/datasets bash scripts/teacher/base2new_train.sh eurosat 1
# Output: $OUTPUT_ROOT/base2new/train_base/<dataset>/shots_16/PromptSRC/<cfg>/seed<S> (finished runs are skipped,
# interrupted ones resume). Knobs: CFG (default vit_l14_c2_ep20_batch8_4+4ctx), SHOTS, TEACHER_NAME (the teacher's CLIP,
# a model name or weight file), TEACHER_DIR, EXTRA_OPTS (docs/usage.md).
exec bash "$(dirname "$0")/../unit.sh" "$0" teacher base2new_train "$@"
