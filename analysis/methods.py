"""Which runs a ``--methods`` list names, and in what order: each entry is a method as the tables print it
(``PETR+CoOp``, or any name ``trainers.catalog.find_method`` takes: ``PETRCoOp``, ``petr_coop``), or a glob of
trainer folders or ``TRAINER/config`` folders (``CoOp``, ``PETR/*``). Runs are named by their method only once read
(a PETRX run by the learner it routed on), so the folders are chosen first (:meth:`MethodPatterns.folder`) and the
methods after (:meth:`MethodPatterns.rank`)."""
from __future__ import annotations

import fnmatch
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainers.catalog import METHODS, Method, find_method


def catalog_method(entry: str) -> Method | None:
    """The catalog method an entry names, None for a glob or another name."""
    try:
        return find_method(entry)
    except ValueError:
        return None


@dataclass(frozen=True)
class MethodPatterns:
    """A ``--methods`` list (empty: every run)."""

    entries: tuple[str, ...] = ()

    @classmethod
    def of(cls, entries: Sequence[str] | None) -> MethodPatterns:
        return cls(tuple(entries or ()))

    def folder(self, trainer: str, config: str) -> bool:
        """Whether runs in ``<trainer>/<config>`` folders may be named: an entry globs the folder, or names (or
        globs) a method of that trainer."""
        methods = [m.name for m in METHODS.values() if m.trainer == trainer]
        return not self.entries or any(
            any(fnmatch.fnmatchcase(n, e) for n in (trainer, f"{trainer}/{config}", *methods))
            or getattr(catalog_method(e), "trainer", None) == trainer for e in self.entries)

    @staticmethod
    def names(entry: str, method: str, trainer: str, config: str) -> bool:
        """Whether ``entry`` names the runs of ``method`` (a trainer's ``config`` folder): by method, or as a glob of
        the method, the trainer or the folder."""
        return any(fnmatch.fnmatchcase(n, entry) for n in (method, trainer, f"{trainer}/{config}")) or \
            getattr(catalog_method(entry), "name", None) == method

    def rank(self, method: str, trainer: str, config: str) -> int | None:
        """The position of the first entry naming the runs of ``method`` (a trainer's ``config`` folder); None when
        no entry names them (0 without entries)."""
        if not self.entries:
            return 0
        return next((i for i, e in enumerate(self.entries) if self.names(e, method, trainer, config)), None)

    def warn_unmatched(self, kept: Iterable[tuple[str, str, str]], there: Iterable[str], where: str) -> None:
        """One ``warning:`` line (stderr) per entry that names none of the ``kept`` (method, trainer, config), with
        the methods ``there`` are under ``where``."""
        kept = list(kept)
        for entry in self.entries:
            if not any(self.names(entry, *key) for key in kept):
                print(f"warning: --methods {entry} names no run under {where} (methods there: "
                      f"{', '.join(sorted(set(there))) or 'none'})", file=sys.stderr)
