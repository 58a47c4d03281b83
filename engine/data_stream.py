"""Training data as seeded passes, so that a run stopped after any step resumes with exactly the same batches.

A *pass* is one iteration over a training loader: an epoch, or a restart of the shorter loader of a TrainerXU
epoch. Each pass draws one seed from the global torch RNG when it starts (:class:`LoaderStream`), and that seed alone
fixes the whole pass:

* the order: the sampler's permutation comes from a generator seeded with it (:class:`SeededPassSampler`; a
  DistributedSampler keeps its own (seed, epoch) order);
* the augmentations: sample ``i`` of the pass is transformed with torch's, Python's and NumPy's global RNGs seeded
  from (pass seed, rank, i) (:func:`sample_context`), in whichever process loads it.

A pass is then a pure function of (seed, position). Resuming at a step re-creates each loader's current pass from
its saved seed and skips the samples already consumed, without reading or transforming them, so the remaining
batches are the uninterrupted run's whether the loader has 0 workers (transforms in the main process) or several
(transforms in workers, whose own seeds and order no longer matter), with persistent workers or not. The loader's
own RNG draws (DataLoader's worker base seed) happen inside ``fork_rng``, so the global RNG, which the run's
resume states save and restore, moves by exactly one draw per pass. Loaders built without a stream (plain ``for batch
in loader``) draw their pass seed when iterated, as torch's RandomSampler does.
"""
from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler, Sampler

_MASK64 = (1 << 64) - 1


def draw_seed() -> int:
    """A 63-bit seed drawn from the global torch RNG (one draw)."""
    return int(torch.randint(0, (1 << 63) - 1, (), dtype=torch.int64))


def sample_seed(pass_seed: int, rank: int, position: int) -> int:
    """The 63-bit seed of the sample at ``position`` of a pass (splitmix64 over the three numbers)."""
    h = 0
    for value in (pass_seed, rank, position):
        h = (h + (value & _MASK64) + 0x9E3779B97F4A7C15) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h >> 1


@contextlib.contextmanager
def seeded_rngs(seed: int) -> Iterator[None]:
    """Inside: torch's CPU RNG and Python's and NumPy's global RNGs seeded from ``seed``; restored afterwards."""
    saved = torch.get_rng_state(), random.getstate(), np.random.get_state()
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed & 0xFFFFFFFF)
    try:
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        np.random.set_state(saved[2])


def sample_context(key) -> tuple[int, contextlib.AbstractContextManager]:
    """The dataset index of a sampler key and the RNG context to load that sample in: ``(index, seed)`` (a
    :class:`SeededPassSampler` key) is loaded with seeded RNGs, a plain index with the process's RNGs as they are."""
    if isinstance(key, tuple):
        index, seed = key
        return int(index), seeded_rngs(seed)
    return int(key), contextlib.nullcontext()


class SeededPassSampler(Sampler):
    """Yields ``(index, sample seed)`` for one pass of ``base`` (RandomSampler, SequentialSampler or a
    DistributedSampler) fixed by the pass seed given to :meth:`plan` (or drawn when iteration starts)."""

    def __init__(self, base: Sampler, rank: int = 0) -> None:
        self.base, self.rank = base, rank
        self._plan: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.base)

    def set_epoch(self, epoch: int) -> None:
        """Forwarded to a DistributedSampler (its order depends on the epoch)."""
        self.base.set_epoch(epoch)

    def plan(self, seed: int, skip: int = 0) -> None:
        """The next iteration is the pass of ``seed`` without its first ``skip`` samples."""
        self._plan = (seed, skip)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        seed, skip = self._plan if self._plan is not None else (draw_seed(), 0)
        self._plan = None
        if isinstance(self.base, RandomSampler):
            self.base.generator = torch.Generator().manual_seed(seed)
        for position, index in enumerate(self.base):
            if position >= skip:
                yield index, sample_seed(seed, self.rank, position)


class LoaderStream:
    """The batches of one training loader across an epoch: passes restart when exhausted; ``state()`` is the position
    (pass seed, batches taken from the pass) that ``start(state)`` continues from."""

    def __init__(self, loader: DataLoader) -> None:
        if not isinstance(loader.sampler, SeededPassSampler):
            raise TypeError("LoaderStream needs a loader built by engine.data_manager.build_data_loader(is_train=True)")
        self.loader = loader
        self.seed: int | None = None
        self.batches = 0
        self._iterator: Iterator | None = None

    def start(self, state: dict | None = None) -> None:
        """Begin a new pass (one draw from the global torch RNG), or continue the saved pass ``state``."""
        seed, batches = (draw_seed(), 0) if state is None else (int(state["seed"]), int(state["batches"]))
        self.loader.sampler.plan(seed, batches * self.loader.batch_size)
        self._iterator = None  # shuts down the previous pass's workers
        with torch.random.fork_rng(devices=[]):
            self._iterator = iter(self.loader)
        self.seed, self.batches = seed, batches

    def next(self) -> dict:
        """The next batch; a new pass starts when the current one is exhausted."""
        if self._iterator is None:
            self.start()
        try:
            batch = next(self._iterator)
        except StopIteration:
            self.start()
            batch = next(self._iterator)
        self.batches += 1
        return batch

    def state(self) -> dict:
        """The position to resume from: ``{"seed": pass seed, "batches": batches taken from the pass}``."""
        return {"seed": self.seed, "batches": self.batches}

    def close(self) -> None:
        """Drop the current pass and shut its loader workers down now: left to the garbage collector (a run that
        ended on an error keeps the iterator in its traceback's reference cycle), their shutdown waits out
        torch's 5 s join per worker, in a runner's warm worker too. Persistent workers serve the next epoch's pass
        (the loader keeps them): they end with the run (``engine.data_manager.close_loaders``)."""
        iterator, self._iterator = self._iterator, None
        shutdown = getattr(iterator, "_shutdown_workers", None)  # a multi-process iterator; torch's own close
        if shutdown is not None and not self.loader.persistent_workers:
            shutdown()
