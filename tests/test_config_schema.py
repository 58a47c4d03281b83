"""The config schema: every key of the project's config has exactly one rule, every default follows it, and each kind
of rule accepts and refuses the values written out here by hand."""
from __future__ import annotations

import math
import re

import pytest

import train
from engine.config import get_cfg_default
from engine.errors import ConfigError
from engine.registry import TRAINER_REGISTRY
from engine.schema import Bool, Choice, Int, Number, Seq, SquareSize, Text, check_config, config_leaves
from trainers import catalog
from trainers.config import catalog_trainers, config_schema, extend_cfg, trainer_keys
from trainers.coop import CoOp


def test_every_key_has_one_rule_and_every_rule_a_key():
    """A key declared without a rule (or a rule for a key that no longer exists) fails here, naming it."""
    keys = {key for key, _ in config_leaves(extend_cfg(get_cfg_default()))}
    schema = config_schema()
    assert sorted(keys - set(schema)) == [], "declare these keys with a rule (engine/config.py or trainers/config.py)"
    assert sorted(set(schema) - keys) == [], "these rules name keys the config does not have"


def test_every_default_follows_its_rule():
    cfg = extend_cfg(get_cfg_default())
    check_config(cfg, config_schema())
    for ns, keys in trainer_keys().items():
        for key, (default, rule) in keys.items():
            assert rule.problem(default) is None, f"TRAINER.{ns}.{key} default {default!r}"


@pytest.mark.parametrize("rule,good,bad", [
    (Bool(), [True, False], [0, 1, "True", None]),
    (Text(), ["", "ViT-B/16"], [None, 3, ("a",)]),
    (Int(1), [1, 16], [0, -1, 1.0, True, 2.5]),
    (Int(-1, 5), [-1, 0, 5], [-2, 6]),
    (Number(0, low_open=True), [1e-9, 3, 0.5], [0, 0.0, -1.0, math.inf, math.nan, True, "1"]),
    (Number(0, 100, low_open=True), [100, 100.0, 0.01], [0.0, 100.5]),
    (Number(0, 1, high_open=True), [0, 0.999], [1, 1.0, -0.1]),
    (Choice(("fp32", "amp")), ["fp32", "amp"], ["fp8", "", None, "FP32"]),
    (Seq(Choice(("a", "b"))), [(), ["a"], ("a", "b", "a")], ["a", ("a", "c"), None]),
    (Seq(Number(), 3), [(1, 2.5, 3), [0, 0, 0]], [(1, 2), (1, 2, 3, 4), (1, "x", 3)]),
    (SquareSize(), [(224, 224), [32, 32], (1, 1)], [(32,), (32, 48), (0, 0), (32.0, 32.0), 224, (32, 32, 32)]),
])
def test_rules_accept_and_refuse(rule, good, bad):
    assert [v for v in good if rule.problem(v) is not None] == []
    assert [v for v in bad if rule.problem(v) is None] == []


@pytest.mark.parametrize("rule,text", [
    (Int(1), "an integer >= 1"),
    (Int(-1, note="-1: not seeded"), "an integer >= -1 (-1: not seeded)"),
    (Number(0, low_open=True), "a number > 0"),
    (Number(0), "a number >= 0"),
    (Number(0, 100, low_open=True), "a number in (0, 100]"),
    (Number(0, 1, high_open=True), "a number in [0, 1)"),
    (Choice(("none", "fixed")), "one of none, fixed"),
])
def test_rules_describe_themselves(rule, text):
    assert rule.describe() == text


def test_the_first_wrong_value_is_one_line_naming_key_value_and_rule():
    cfg = extend_cfg(get_cfg_default())
    cfg.OPTIM.NAME = "adamw2"
    with pytest.raises(ConfigError) as info:
        check_config(cfg, config_schema())
    assert str(info.value) == ("OPTIM.NAME is 'adamw2'; it must be one of adam, amsgrad, sgd, rmsprop, radam, "
                               "adamw")
    cfg.OPTIM.NAME = "sgd"
    cfg.INPUT.TRANSFORMS = ["random_flip", "normalise"]
    with pytest.raises(ConfigError, match=r"^INPUT.TRANSFORMS is \('random_flip', 'normalise'\); it must be a list, "
                                          r"each one of .* \('normalise' is not\)$"):
        check_config(cfg, config_schema())


def _setup(*argv: str):
    return train.setup_cfg(train.build_parser().parse_args(list(argv)))


def test_each_trainer_declares_its_keys_next_to_its_class():
    """The schema's trainer namespaces are exactly the catalog trainers' own ``CONFIG_KEYS``, and every key a
    trainer borrows from another namespace is a declared key there."""
    classes = catalog_trainers()
    assert sorted(cls.__name__ for cls in classes.values()) == sorted(catalog.TRAINERS)
    assert {ns: cls.__name__ for ns, cls in classes.items()} == {m.ns: m.trainer for m in catalog.METHODS.values()}
    assert classes["ZSCLIP"].__name__ == "ZeroshotCLIP" and classes["PETRCOOP"].__name__ == "PETRCoOp"
    schema = config_schema()
    for tuned in catalog.TUNED_TRAINERS:
        cfg = _setup("--trainer", "PETRX", "TRAINER.PETRX.TUNED_TRAINER", tuned)
        assert all(key in schema for key in classes["PETRX"].borrowed_keys(cfg))
    assert classes["PETRCOOP"].borrowed_keys(None) == ("TRAINER.COOP.N_CTX", "TRAINER.COOP.CSC",
                                                       "TRAINER.COOP.CTX_INIT", "TRAINER.COOP.CLASS_TOKEN_POSITION")


class EngineUndeclared(CoOp):
    """A catalog entry that inherits CoOp's keys instead of declaring its own namespace's."""

    NS = "UNDECLARED"


def test_a_catalog_trainer_without_its_own_keys_is_refused(monkeypatch):
    monkeypatch.setitem(catalog.TRAINERS, "EngineUndeclared", __name__)
    TRAINER_REGISTRY.register(EngineUndeclared)
    try:
        with pytest.raises(TypeError, match=rf"^EngineUndeclared \({re.escape(__name__)}\) declares no CONFIG_KEYS of "
                                            r"its own: declare the keys of TRAINER.UNDECLARED in its class$"):
            extend_cfg(get_cfg_default())
    finally:
        TRAINER_REGISTRY._obj_map.pop("EngineUndeclared")


@pytest.mark.parametrize("argv,line", [
    (["--trainer", "CoOp", "TRAINER.MAPLE.N_CTX", "4"],
     "command-line opts: TRAINER.MAPLE.N_CTX is a key of MaPLe, but CoOp reads TRAINER.COOP and would ignore it: "
     "set TRAINER.COOP.N_CTX instead, or run --trainer MaPLe"),
    (["--trainer", "CoOp", "--config-file", "configs/trainers/MaPLe/vit_b16_c2_ep5_batch4_2ctx.yaml"],
     "configs/trainers/MaPLe/vit_b16_c2_ep5_batch4_2ctx.yaml: TRAINER.MAPLE.N_CTX is a key of MaPLe, but CoOp reads "
     "TRAINER.COOP and would ignore it: set TRAINER.COOP.N_CTX instead, or run --trainer MaPLe"),
    (["--trainer", "PETR", "TRAINER.PROMPTKD.TEACHER_CKPT", "t.pth"],  # PETR's teacher keys are its own
     "command-line opts: TRAINER.PROMPTKD.TEACHER_CKPT is a key of PromptKD, but PETR reads TRAINER.PETR and would "
     "ignore it: set TRAINER.PETR.TEACHER_CKPT instead, or run --trainer PromptKD"),
    (["--trainer", "PETRCoOp", "TRAINER.COOP.PREC", "fp32"],  # its CoOp branch runs in PETRCOOP's precision
     "command-line opts: TRAINER.COOP.PREC is a key of CoOp, but PETRCoOp reads TRAINER.PETRCOOP and would ignore "
     "it: set TRAINER.PETRCOOP.PREC instead, or run --trainer CoOp"),
    (["--trainer", "PETRX", "--config-file", "configs/trainers/PETRX/vit_b16.yaml", "TRAINER.PETRX.TUNED_TRAINER",
      "IVLP", "TRAINER.MAPLE.CTX_INIT", "a photo of a"],  # the MaPLe prompt words are read for a MaPLe run only
     "command-line opts: TRAINER.MAPLE.CTX_INIT is a key of MaPLe, but PETRX reads TRAINER.PETRX and would ignore "
     "it: leave it out, or run --trainer MaPLe"),
    (["--trainer", "ZeroshotCLIP", "TRAINER.COOP.N_CTX", "16"],  # given at its default value: still given
     "command-line opts: TRAINER.COOP.N_CTX is a key of CoOp, but ZeroshotCLIP reads TRAINER.ZSCLIP and would "
     "ignore it: leave it out, or run --trainer CoOp"),
])
def test_a_key_of_another_trainers_namespace_is_refused_in_one_line(argv, line):
    with pytest.raises(ConfigError) as info:
        _setup(*argv)
    assert str(info.value) == line


@pytest.mark.parametrize("argv", [
    ["--trainer", "PETRCoOp", "--config-file", "configs/trainers/PETRCoOp/vit_b16_ctxv1.yaml", "TRAINER.COOP.N_CTX",
     "4", "TRAINER.COOP.CLASS_TOKEN_POSITION", "front"],  # PETR+CoOp builds its CoOp branch from TRAINER.COOP
    ["--trainer", "PETRX", "--config-file", "configs/trainers/PETRX/vit_b16.yaml", "TRAINER.PETRX.TUNED_TRAINER",
     "MaPLe", "TRAINER.MAPLE.CTX_INIT", "a photo of a"],  # MaPLe's prompt words, when its run records none
    ["--trainer", "PETRX", "--config-file", "configs/trainers/PETRX/vit_b16.yaml", "TRAINER.PETRX.TUNED_TRAINER",
     "CoOp", "TRAINER.COOP.CLASS_TOKEN_POSITION", "middle"],
    ["--trainer", "NoSuchTrainer", "TRAINER.COOP.N_CTX", "4"],  # building the trainer names the unknown one
    ["--config-file", "configs/trainers/CoOp/vit_b16_ctxv1.yaml"],  # no trainer named: nothing to compare with
])
def test_the_keys_a_trainer_reads_from_another_namespace_are_accepted(argv):
    cfg = _setup(*argv)
    assert cfg.TRAINER.NAME == (argv[1] if argv[0] == "--trainer" else "")


def test_command_keys_name_each_key_a_command_line_sets_with_its_last_source():
    """``train.command_keys``: the keys of the dataset and trainer config files, of the arguments that name a key
    (``--seed 0`` included, the default -1 not; the trainer file's name sets CONFIG_NAME) and of the opts, each with
    the source train.py merges last (the
    protocol runner refuses in --extra-opts the keys its jobs' command lines set but through their trainer config);
    the expected sets are written from the two files and the command line here."""
    dataset, config = "configs/datasets/eurosat.yaml", "configs/trainers/CoOp/vit_b16_ctxv1.yaml"
    args = train.build_parser().parse_args(["--root", "r", "--seed", "0", "--trainer", "CoOp", "--dataset-config-file",
                                            dataset, "--config-file", config, "--output-dir", "o", "OPTIM.LR", "0.1",
                                            "DATASET.NUM_SHOTS", "4"])
    from_config = {"DATALOADER.TRAIN_X.BATCH_SIZE", "DATALOADER.TEST.BATCH_SIZE", "DATALOADER.NUM_WORKERS",
                   "INPUT.SIZE", "INPUT.INTERPOLATION", "INPUT.PIXEL_MEAN", "INPUT.PIXEL_STD", "INPUT.TRANSFORMS",
                   "OPTIM.NAME", "OPTIM.MAX_EPOCH", "OPTIM.LR_SCHEDULER", "OPTIM.WARMUP_EPOCH", "OPTIM.WARMUP_TYPE",
                   "OPTIM.WARMUP_CONS_LR", "TRAIN.PRINT_FREQ", "MODEL.BACKBONE.NAME", "TRAINER.COOP.CTX_INIT",
                   "CONFIG_NAME"}
    assert train.command_keys(args) == {
        "DATASET.NAME": dataset, **dict.fromkeys(from_config, config), "DATASET.ROOT": "command-line arguments",
        "SEED": "command-line arguments", "TRAINER.NAME": "command-line arguments",
        "OUTPUT_DIR": "command-line arguments", "OPTIM.LR": "command-line opts",
        "DATASET.NUM_SHOTS": "command-line opts"}
    unseeded = train.build_parser().parse_args(["--trainer", "CoOp", "--backbone", "RN50"])
    assert train.command_keys(unseeded) == {"TRAINER.NAME": "command-line arguments",
                                            "MODEL.BACKBONE.NAME": "command-line arguments"}
    cfg = train.setup_cfg(args)  # what the arguments set, they set in the config (reset_cfg reads the same table)
    assert (cfg.DATASET.ROOT, cfg.SEED, cfg.TRAINER.NAME, cfg.OUTPUT_DIR) == ("r", 0, "CoOp", "o")
