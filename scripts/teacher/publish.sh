# Sourced by scripts/teacher/*.sh (after scripts/common.sh): copy a finished PromptSRC run to the teacher folder.

# publish_teacher RUN_DIR FOLDER: copy RUN_DIR's last checkpoint (VLPromptLearner/checkpoint + the file it names) and
# teacher_text_features.pt to ${TEACHER_DIR:-teachers}/FOLDER, where the student scripts look for teachers. An existing
# folder is kept (a note says how to use this run instead).
publish_teacher() {
    local run=$1 dest="${TEACHER_DIR:-teachers}/$2"
    [ -f "$run/VLPromptLearner/checkpoint" ] || die "no checkpoint in $run/VLPromptLearner: the teacher run did not finish"
    if [ -e "$dest" ]; then
        echo "note: $dest exists and is kept; to use this run instead, set TEACHER_CKPT=$run"
        return
    fi
    local file
    file=$("$PYTHON" -c 'import sys; from engine.runs import pointed_checkpoint; print(pointed_checkpoint(sys.argv[1]))' \
        "$run/VLPromptLearner") || die "cannot read $run/VLPromptLearner/checkpoint"
    mkdir -p "$dest/VLPromptLearner"
    cp "$run/VLPromptLearner/checkpoint" "$file" "$dest/VLPromptLearner/"
    if [ -f "$run/teacher_text_features.pt" ]; then
        cp "$run/teacher_text_features.pt" "$dest/"
    fi
    echo "Teacher published to $dest (students read it with TEACHER_DIR=${TEACHER_DIR:-teachers})"
}
