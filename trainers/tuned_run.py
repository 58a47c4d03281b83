"""What a tuned run records about itself, for PETR+X: its config, the dataset and CLIP it was trained on, its state.

A run of this project records its merged config in ``run.json`` and its dataset and backbone in ``results.json``; an
upstream Dassl run (CoOp, PromptSRC, PromptKD) has neither, but Dassl prints the merged config at the top of its log
(``engine.runs.logged_config``; of a folder run again in place, the newest finished log, ``engine.runs.run_log``),
which is read instead. PETR+X refuses a tuned run recorded for another dataset, CLIP or trainer and notes one that is
unfinished or records nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import clip
from engine.digests import file_digest
from engine.errors import InvalidInputError
from engine.inputs import read_input_json, read_input_text, record_input
from engine.run_identity import read_identity
from engine.runs import IDENTITY_FILE, LOG_FILE, RESULTS_FILE, logged_config, run_log, run_state

FINISHED_STATES = ("finished", "finished-upstream")


@dataclass(frozen=True)
class TunedRun:
    """A tuned run folder and what it records: ``config`` (flat keys; from ``config_source``, "" when nothing
    records one), ``results`` (its results.json, or empty) and ``state`` (``engine.runs.run_state``)."""

    folder: str
    config: dict[str, Any] = field(default_factory=dict)
    config_source: str = ""
    results: dict[str, Any] = field(default_factory=dict)
    state: str = "new"
    clips: tuple[str, ...] = ()
    """SHA-256 of the CLIP files the run read (its inputs ledger); empty when it records none (an upstream run)."""

    @classmethod
    def read(cls, folder: str) -> TunedRun:
        """The records of the run in ``folder``: run.json's config, else the config dump of its log
        (``engine.runs.run_log``: a Dassl rerun's newest finished log)."""
        results_path, log_path = os.path.join(folder, RESULTS_FILE), run_log(folder)
        results = read_input_json(results_path, "run-record") if os.path.isfile(results_path) else {}
        identity = read_identity(folder)
        config, source, clips = {}, "", ()
        if identity and isinstance(identity.get("config"), dict):
            config, source = identity["config"], os.path.join(folder, IDENTITY_FILE)
            clips = tuple(sorted({e.get("sha256") for e in (identity.get("inputs") or {}).values()
                                  if isinstance(e, dict) and e.get("role") == "clip"}))
        elif log_path is not None:
            config = logged_config(read_input_text(log_path, "run-record", errors="replace"))
            source = log_path if config else ""
        return cls(folder, config, source, results if isinstance(results, dict) else {}, run_state(folder), clips)

    def recorded(self, results_key: str, config_key: str) -> Any:
        """A value the run records: ``results_key`` of results.json, else ``config_key`` of its config (None)."""
        value = self.results.get(results_key)
        return value if value not in (None, "") else self.config.get(config_key) or None

    def check(self, cfg, trainer: str) -> list[str]:
        """Refuse a run recorded for another trainer, dataset or CLIP than this PETR+X run (``cfg``) uses; the notes
        (one line each) on what may be wrong: an unfinished run, missing records, other training images."""
        where = f"TRAINER.PETRX.TUNED_MODEL_DIR {self.folder}"
        recorded_trainer = self.recorded("trainer", "TRAINER.NAME")
        if recorded_trainer and recorded_trainer != trainer:
            raise InvalidInputError(f"{where} is a {recorded_trainer} run, but TRAINER.PETRX.TUNED_TRAINER is "
                                    f"{trainer}; set TUNED_TRAINER {recorded_trainer} or give a {trainer} run")
        source = cfg.TRAINER.MODAL != "base2novel"
        dataset = cfg.DATASET.SOURCE_DATASET if source else cfg.DATASET.NAME
        key = "DATASET.SOURCE_DATASET" if source else "DATASET.NAME"
        recorded_dataset = self.recorded("dataset", "DATASET.NAME")
        if recorded_dataset and recorded_dataset != dataset:
            raise InvalidInputError(f"{where} was trained on {recorded_dataset}, but this run's {key} is {dataset}; "
                                    f"give a {trainer} run of {dataset}")
        backbone = cfg.MODEL.BACKBONE.NAME
        recorded_backbone = self.recorded("backbone", "MODEL.BACKBONE.NAME")
        if recorded_backbone and not self.same_backbone(recorded_backbone, backbone):
            raise InvalidInputError(f"{where} was trained on the CLIP {recorded_backbone}, but this run's "
                                    f"MODEL.BACKBONE.NAME is {backbone}; set MODEL.BACKBONE.NAME to the tuned run's "
                                    "CLIP")
        notes = []
        if self.state not in FINISHED_STATES:
            notes.append(f"{where} is unfinished ({self.state}: a checkpoint, no {RESULTS_FILE}); θ_s is its last "
                         "saved checkpoint, not its final model")
        missing = [what for what, value in (("dataset", recorded_dataset), ("CLIP", recorded_backbone)) if not value]
        if missing:
            notes.append(f"{where} records no {' and no '.join(missing)} ({RESULTS_FILE}, {IDENTITY_FILE} or the "
                         f"config dump of {LOG_FILE}): it cannot be checked against {dataset} and {backbone}")
        ours = {"seed": cfg.SEED, "num_shots": cfg.DATASET.NUM_SHOTS}
        differ = [f"{k} {self.results[k]} there, {v} here" for k, v in ours.items()
                  if k in self.results and self.results[k] != v]
        if differ:
            notes.append(f"{os.path.join(self.folder, RESULTS_FILE)} differs from this run ({'; '.join(differ)}): "
                         "the router is fitted on other images than the tuned model's training images; use the tuned "
                         "run's SEED and NUM_SHOTS for PETR+X")
        return notes


    def same_backbone(self, recorded: str, backbone: str) -> bool:
        """Whether the run's CLIP (``recorded``: its MODEL.BACKBONE.NAME) is this run's ``backbone``: by content when
        the run's inputs ledger names its CLIP file or both names are files, else by name."""
        if self.clips:
            return file_digest(clip.weights_path(backbone)) in self.clips
        if os.path.isfile(recorded) and os.path.isfile(backbone):
            record_input(recorded, "clip")
            return file_digest(recorded) == file_digest(backbone)
        return recorded == backbone


UPSTREAM_INIT_MAX_CTX = 4
"""Upstream IVLP and PromptSRC start their text context from CTX_INIT's words only when N_CTX_TEXT is at most 4:
the class prompt is then "<CTX_INIT> <class>." with its first N_CTX_TEXT tokens learned and the other words kept;
with more tokens the context starts at random and the prompt holds placeholders. Every shipped upstream config
initialises from "a photo of a", four tokens: with N_CTX_TEXT 4 all of them are learned, so a run that does not
record its words (PromptKD's released teachers) has the placeholders' prompt."""


def deep_prompt_words(run: TunedRun, ns: str, sizes: dict[str, int], path: str) -> str:
    """The words before the class name in the class prompts of the IVLP / PromptSRC checkpoint ``path`` of ``run``
    ("" for N_CTX_TEXT placeholders): ``TRAINER.<ns>.CTX_INIT`` of the run's recorded config, whose prompt sizes must
    be the checkpoint's (``sizes``: ``VLPromptLearner.describe()``)."""
    n_ctx, key = sizes["n_ctx_text"], f"TRAINER.{ns}."
    if key + "CTX_INIT" not in run.config:
        if n_ctx >= UPSTREAM_INIT_MAX_CTX:
            return ""
        raise InvalidInputError(f"cannot tell the words of the class prompts of {path}: {run.folder} records no "
                                f"{key}CTX_INIT ({IDENTITY_FILE}, or the config dump of {LOG_FILE}), and its {n_ctx} "
                                "text tokens may have been initialised from words that stay in the prompt; put the "
                                f"run's {LOG_FILE} (Dassl writes the config at its top) back in {run.folder}")
    for name, size in (("N_CTX_TEXT", n_ctx), ("N_CTX_VISION", sizes["n_ctx_vision"]),
                       ("PROMPT_DEPTH_TEXT", sizes["depth_text"]), ("PROMPT_DEPTH_VISION", sizes["depth_vision"])):
        value = run.config.get(key + name)
        if value is not None and str(value) != str(size):
            raise InvalidInputError(f"{path} has {key}{name} {size} (read off its prompts), but "
                                    f"{run.config_source} records {value}: the checkpoint is not that run's; give the "
                                    "folder of the run that saved it")
    words = str(run.config[key + "CTX_INIT"]).replace("_", " ").strip()
    return words if n_ctx <= UPSTREAM_INIT_MAX_CTX else ""
