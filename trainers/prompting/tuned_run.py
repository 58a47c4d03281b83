"""What a finished run records about itself: its config, the dataset and CLIP it was trained on, its state.

A run of this project records its merged config in ``run.json`` and its dataset and backbone in ``results.json``; an
upstream Dassl run (CoOp, PromptSRC, PromptKD) has neither, but Dassl prints the merged config at the top of its log
(``engine.runs.logged_config``; of a folder run again in place, the newest finished log, ``engine.runs.run_log``),
which is read instead. PETR+X refuses a tuned run recorded for another dataset, CLIP or trainer and notes one that is
unfinished or records nothing.

The record is the truth about the prompts a run learned: whoever reads a run's prompts (PETR+X's loaders, PETR+CoOp's
plug-in, an ``--eval-only`` run) takes the settings that shaped them (context words, token counts, class-token
position, depth) from it through :func:`recorded_settings`, the one place that does so; a run that reads another
run's prompts takes them into its config before its identity is made (:func:`recorded_config`), so a changed record
changes the reader's identity.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from yacs.config import CfgNode

import clip
from clip.prompts import WORDS_MAX_CTX, context_words
from engine.digests import file_digest
from engine.errors import InvalidInputError
from engine.inputs import read_input_json, read_input_text, record_input
from engine.registry import TRAINER_REGISTRY
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

    @classmethod
    def of_checkpoint(cls, path: str) -> TunedRun:
        """The records of the run that saved the checkpoint ``path`` (``<run>/<model folder>/<file>``)."""
        return cls.read(os.path.dirname(os.path.dirname(path)))

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


def learner_namespace(trainer: type) -> str:
    """The config namespace holding the recorded settings of ``trainer``'s runs (its ``RECORDED_KEYS``): its
    ``LEARNER_NS`` (PETR+CoOp's CoOp branch reads ``TRAINER.COOP``), else its own ``NS``."""
    return getattr(trainer, "LEARNER_NS", "") or trainer.NS


def recorded_namespace(run: TunedRun, ns: str) -> str:
    """The config namespace of the prompt settings the trainer ``run`` records (``ns`` when it records none): a run's
    record also holds the defaults of every other trainer's namespace, which say nothing about its prompts."""
    name = run.recorded("trainer", "TRAINER.NAME")
    if not name:
        return ns
    return learner_namespace(TRAINER_REGISTRY.get(name)) if name in TRAINER_REGISTRY else str(name).upper()


def typed_like(value: Any, like: Any, key: str, source: str) -> Any:
    """A recorded ``value`` (a log's config dump records text) as the type of ``like``, this run's value of ``key``
    (None: kept as recorded)."""
    if like is None:
        return value
    if isinstance(like, str):
        return str(value)
    if not isinstance(value, str):
        return value
    try:
        if isinstance(like, bool):
            return {"True": True, "False": False}[value]
        return type(like)(value)
    except (KeyError, ValueError):
        raise InvalidInputError(f"{source} records {key} {value!r}, which is no {type(like).__name__}; restore the "
                                "run's record or give the folder of another run") from None


def recorded_settings(run: TunedRun, ns: str, config: Mapping[str, Any], checkpoint: Mapping[str, Any] | None = None,
                      path: str = "") -> tuple[dict[str, Any], str]:
    """The settings ``TRAINER.<ns>.<KEY>`` that shaped the model of ``run`` (its prompts, an adapter's ratio), and
    the line to print ("" for none).

    ``config``: the keys the reader takes from a config, with its value (None: it has none); the run's recorded value
    replaces it, and the line names each that differs. ``checkpoint``: the keys read off the tensors of ``path``, which
    must be what the run records (else the checkpoint is not that run's: one error). The run's keys are read from its
    own trainer's namespace (:func:`recorded_namespace`)."""
    prefix, source = f"TRAINER.{recorded_namespace(run, ns)}.", run.config_source
    values, changed = {}, []
    for key, value in (checkpoint or {}).items():
        recorded = run.config.get(prefix + key)
        if recorded is not None and typed_like(recorded, value, prefix + key, source) != value:
            raise InvalidInputError(f"{path} has TRAINER.{ns}.{key} {value} (read off its prompts), but {source} "
                                    f"records {recorded}: the checkpoint is not that run's; give the folder of the run "
                                    "that saved it")
        values[key] = value
    for key, value in config.items():
        recorded = run.config.get(prefix + key)
        values[key] = value if recorded is None else typed_like(recorded, value, prefix + key, source)
        if value is not None and values[key] != value:
            ours = "" if prefix == f"TRAINER.{ns}." else f"'s TRAINER.{ns}.{key}"
            changed.append(f"{prefix}{key} {values[key]!r} (this config{ours}: {value!r})")
    note = (f"Note: {run.folder} records {'; '.join(changed)} in {source}: its prompts are read with the recorded "
            "values" if changed else "")
    return values, note


def recorded_config(cfg: CfgNode, model_dir: str = "") -> tuple[CfgNode, list[str]]:
    """The config of a run that reads the models of finished runs, with the settings that shaped them as those runs
    record them (:func:`recorded_settings`), and the lines saying which differ from ``cfg`` or that a run records no
    config. The runs: the one the trainer plugs in (its ``plugged_run``: PETR+CoOp's CoOp run, PETR+X's tuned run),
    then an ``--eval-only`` run's ``model_dir``; the settings: the ``RECORDED_KEYS`` of the trainer that made each, in
    its learner's namespace (:func:`learner_namespace`). Taken before the run's identity is made, so ``run.json`` and
    the log's config dump hold the values its model is built with, and a changed record is a changed identity."""
    trainer = TRAINER_REGISTRY.get(cfg.TRAINER.NAME) if cfg.TRAINER.NAME in TRAINER_REGISTRY else None
    if trainer is None:
        return cfg, []
    runs = [run for run in (trainer.plugged_run(cfg), (model_dir, trainer) if model_dir else None) if run]
    notes = []
    for folder, maker in runs:
        cfg, note = _take_recorded(cfg, folder, maker)
        notes += note
    return cfg, notes


def _take_recorded(cfg: CfgNode, folder: str, maker: type) -> tuple[CfgNode, list[str]]:
    """``cfg`` with the ``RECORDED_KEYS`` of ``maker`` (the trainer of the run in ``folder``) as that run records them,
    and the line to log."""
    keys, ns = getattr(maker, "RECORDED_KEYS", ()), learner_namespace(maker)
    if not keys:
        return cfg, []
    run = TunedRun.read(folder)
    if not run.config_source:
        return cfg, [f"Note: {folder} records no config ({IDENTITY_FILE}, or the config dump of {LOG_FILE}): its "
                     f"prompts are read with this config's TRAINER.{ns} {', '.join(keys)}"]
    values, note = recorded_settings(run, ns, {key: cfg.TRAINER[ns][key] for key in keys})
    if not note:
        return cfg, []
    cfg = cfg.clone()
    cfg.defrost()
    cfg.TRAINER[ns].update(values)
    cfg.freeze()
    return cfg, [note]


def deep_prompt_words(run: TunedRun, ns: str, sizes: dict[str, int], path: str) -> str:
    """The words before the class name in the class prompts of the IVLP / PromptSRC checkpoint ``path`` of ``run``
    ("" for N_CTX_TEXT placeholders): ``TRAINER.<ns>.CTX_INIT`` of the run's recorded config, whose prompt sizes must
    be the checkpoint's (``sizes``: ``VLPromptLearner.describe()``). A run that records no words is read with
    placeholders when its context is longer than upstream's words can start (every shipped upstream config starts
    from "a photo of a", four tokens, all learned with 4 text tokens: PromptKD's released teachers), else refused."""
    n_ctx = sizes["n_ctx_text"]
    read = {"N_CTX_TEXT": n_ctx, "N_CTX_VISION": sizes["n_ctx_vision"], "PROMPT_DEPTH_TEXT": sizes["depth_text"],
            "PROMPT_DEPTH_VISION": sizes["depth_vision"]}
    words = recorded_settings(run, ns, {"CTX_INIT": None}, read, path)[0]["CTX_INIT"]
    if words is None and n_ctx < WORDS_MAX_CTX:
        raise InvalidInputError(f"cannot tell the words of the class prompts of {path}: {run.folder} records no "
                                f"TRAINER.{ns}.CTX_INIT ({IDENTITY_FILE}, or the config dump of {LOG_FILE}), and its "
                                f"{n_ctx} text tokens may have been initialised from words that stay in the prompt; "
                                f"put the run's {LOG_FILE} (Dassl writes the config at its top) back in {run.folder}")
    return context_words(str(words or ""), n_ctx)
