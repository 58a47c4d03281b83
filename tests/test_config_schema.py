"""The config schema: every key of the project's config has exactly one rule, every default follows it, and each kind
of rule accepts and refuses the values written out here by hand."""
from __future__ import annotations

import math

import pytest

from engine.config import get_cfg_default
from engine.errors import ConfigError
from engine.schema import Bool, Choice, Int, Number, Seq, SquareSize, Text, check_config, config_leaves
from trainers.config import TRAINER_KEYS, config_schema, extend_cfg


def test_every_key_has_one_rule_and_every_rule_a_key():
    """A key declared without a rule (or a rule for a key that no longer exists) fails here, naming it."""
    keys = {key for key, _ in config_leaves(extend_cfg(get_cfg_default()))}
    schema = config_schema()
    assert sorted(keys - set(schema)) == [], "declare these keys with a rule (engine/config.py or trainers/config.py)"
    assert sorted(set(schema) - keys) == [], "these rules name keys the config does not have"


def test_every_default_follows_its_rule():
    cfg = extend_cfg(get_cfg_default())
    check_config(cfg, config_schema())
    for ns, keys in TRAINER_KEYS.items():
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
