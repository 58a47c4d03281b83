"""The config schema: each key's type and its choices or range, declared once and checked before a run prepares
anything (``check_config``), so a wrong value is one ``error:`` line naming the key, the value and what it must be.

A schema maps dotted key names to rules. The engine's keys are declared in ``engine/config.py``
(``ENGINE_SCHEMA``), the protocol keys in ``trainers/config.py`` and each trainer's keys by its class
(``CONFIG_KEYS``, a ``KeyTable``), each next to its default. Rules check one value; constraints between keys belong
in a trainer's ``check_cfg``.
"""
from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .errors import ConfigError


class Rule:
    """What one key accepts: ``problem(value)`` is None for a valid value, else how "it must be ..." ends."""

    def problem(self, value: Any) -> str | None:
        raise NotImplementedError

    def describe(self) -> str:
        """What a valid value is, as the end of "it must be ..."."""
        raise NotImplementedError


KeyTable = dict[str, tuple[Any, Rule]]
"""The keys of one config namespace: key -> (default, rule)."""


class Bool(Rule):
    """True or False."""

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, bool) else self.describe()

    def describe(self) -> str:
        return "True or False"


class Text(Rule):
    """Any string (names, paths, prompt text)."""

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, str) else self.describe()

    def describe(self) -> str:
        return "a string"


INT_LIMIT = 2**31 - 1
"""The largest integer any key takes (a C int): every count, size and seed of a run fits in one, and a larger value
would overflow where torch, NumPy or the OS take it (a seed, a batch of islice, an ETA) instead of being refused."""
MAX_IMAGE_SIDE = 4096
"""The largest ``INPUT.SIZE`` side: more than any CLIP's input (336 to 448 px), less than a resize that would
allocate gigabytes per image."""


class Number(Rule):
    """A finite number within optional bounds; ``integer=True`` also requires an int, of at most :data:`INT_LIMIT` in
    size. ``low_open``/``high_open`` exclude the bound itself; ``note`` explains special values (e.g. "-1: every
    image")."""

    def __init__(self, low: float | None = None, high: float | None = None, *, integer: bool = False,
                 low_open: bool = False, high_open: bool = False, note: str = "") -> None:
        self.low, self.high, self.integer = low, high, integer
        self.low_open, self.high_open, self.note = low_open, high_open, note

    def problem(self, value: Any) -> str | None:
        kinds = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not math.isfinite(value):
            return self.describe()
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return self.describe()
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return self.describe()
        if self.integer and abs(value) > INT_LIMIT:
            return f"{self.describe()} and at most {INT_LIMIT} in size"
        return None

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        low = "" if self.low is None else f"{'(' if self.low_open else '['}{self.low:g}"
        high = "" if self.high is None else f"{self.high:g}{')' if self.high_open else ']'}"
        if low and high:
            text = f"{kind} in {low}, {high}"
        elif low:
            text = f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        elif high:
            text = f"{kind} {'<' if self.high_open else '<='} {self.high:g}"
        else:
            text = kind
        return f"{text} ({self.note})" if self.note else text


class Int(Number):
    """An integer within the inclusive bounds ``low`` .. ``high``."""

    def __init__(self, low: int | None = None, high: int | None = None, note: str = "") -> None:
        super().__init__(low, high, integer=True, note=note)


POSITIVE = Number(0, low_open=True)
NON_NEGATIVE = Number(0)
FRACTION = Number(0, 1)
"""Rules many keys share: > 0, >= 0, in [0, 1]."""


class Choice(Rule):
    """One of the listed strings."""

    def __init__(self, choices: Sequence[str] | Mapping[str, Any]) -> None:
        self.choices = tuple(choices)

    def problem(self, value: Any) -> str | None:
        return None if isinstance(value, str) and value in self.choices else self.describe()

    def describe(self) -> str:
        return f"one of {', '.join(self.choices)}"


class Seq(Rule):
    """A list or tuple whose items each follow ``item`` (``length``: exactly that many items)."""

    def __init__(self, item: Rule, length: int | None = None) -> None:
        self.item, self.length = item, length

    def problem(self, value: Any) -> str | None:
        if not isinstance(value, (list, tuple)) or (self.length is not None and len(value) != self.length):
            return self.describe()
        wrong = next((v for v in value if self.item.problem(v)), None)
        return None if wrong is None else f"{self.describe()} ({wrong!r} is not)"

    def describe(self) -> str:
        count = f"{self.length} items" if self.length is not None else "a list"
        return f"{count}, each {self.item.describe()}"


class SquareSize(Rule):
    """``(height, width)``: two equal integers from 1 to :data:`MAX_IMAGE_SIDE` (a CLIP image encoder takes square
    images)."""

    def problem(self, value: Any) -> str | None:
        ok = (isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]
              and Int(1, MAX_IMAGE_SIDE).problem(value[0]) is None)
        return None if ok else self.describe()

    def describe(self) -> str:
        return (f"two equal integers from 1 to {MAX_IMAGE_SIDE}, e.g. (224, 224) (height, width: CLIP takes square "
                "images)")


Schema = Mapping[str, Rule]
"""Dotted key name → its rule."""


def config_leaves(node: Mapping, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of a config tree."""
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from config_leaves(value, name + ".")
        else:
            yield name, value


def check_config(cfg: Mapping, schema: Schema) -> None:
    """Raise ConfigError for the first key whose value breaks its rule (keys without a rule are not checked)."""
    for key, value in config_leaves(cfg):
        rule = schema.get(key)
        problem = rule.problem(value) if rule is not None else None
        if problem:
            shown = tuple(value) if isinstance(value, list) else value
            raise ConfigError(f"{key} is {shown!r}; it must be {problem}")
