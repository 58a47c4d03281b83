"""Small picklable calls for runner jobs in tests: the executors run them as they run a unit command (in a warm
worker, in a SLURM job), and they stand for one without training anything."""
from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from runner.schedule import EXIT_PREEMPTED


def leave_loader(workers: int) -> None:
    """A DataLoader with ``workers`` persistent worker processes that ignore the preemption signals (as the engine's
    loaders' workers do), one pass taken (every worker has started), then left in a reference cycle, as a trainer that
    outlives its run leaves its loaders: only the garbage collector would drop it."""
    if not workers:
        return
    import torch

    from engine.preemption import worker_init_fn

    loader = torch.utils.data.DataLoader(range(8), batch_size=2, num_workers=workers, persistent_workers=True,
                                         worker_init_fn=worker_init_fn())
    for _ in loader:
        pass
    loader.cycle = loader


@dataclass(frozen=True)
class Toy:
    """Prints ``say``, appends its first line to ``count``, sleeps, writes what it sees of its environment, then
    exits with ``status``, or with 75 (preempted) while ``count`` holds fewer than ``preempted + 1`` lines, or else
    marks the run folder ``finish`` finished (a ``results.json``, as a unit command's run)."""

    say: str = ""
    count: str = ""
    """A file that gets one line per call: the first line of ``say`` ("-" when empty)."""
    preempted: int = 0
    """Calls that end preempted before one goes on."""
    sleep_s: float = 0.0
    environ: str = ""
    """A file that gets ``CUDA_VISIBLE_DEVICES|OMP_NUM_THREADS|<knob X>`` of the call."""
    status: int = 0
    finish: str = ""
    loader_workers: int = 0
    """Persistent loader worker processes it leaves behind (:func:`leave_loader`)."""
    knobs: Mapping[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> tuple[str, ...]:
        return ("toy", self.say.splitlines()[0] if self.say else "-")

    def __call__(self) -> int:
        leave_loader(self.loader_workers)
        if self.say:
            print(self.say, flush=True)
        if self.count:
            with open(self.count, "a") as f:
                f.write(f"{self.argv[1]}\n")
            with open(self.count) as f:
                if len(f.readlines()) <= self.preempted:
                    return EXIT_PREEMPTED
        time.sleep(self.sleep_s)
        if self.environ:
            with open(self.environ, "w") as f:
                f.write(f"{os.environ.get('CUDA_VISIBLE_DEVICES')}|{os.environ.get('OMP_NUM_THREADS')}|"
                        f"{self.knobs.get('X')}\n")
        if self.status or not self.finish:
            return self.status
        os.makedirs(self.finish, exist_ok=True)
        with open(os.path.join(self.finish, "results.json"), "w") as f:
            f.write("{}\n")
        return 0


@dataclass(frozen=True)
class Sleeper:
    """Writes its process id to ``pid_file`` and runs until SIGINT, SIGTERM or SIGHUP, whose number it writes to
    ``got_file`` before it returns 0 (with ``loader_workers``, :func:`leave_loader` first)."""

    pid_file: str
    got_file: str
    loader_workers: int = 0
    knobs: Mapping[str, str] = field(default_factory=dict)

    @property
    def argv(self) -> tuple[str, ...]:
        return ("sleeper", self.pid_file)

    def __call__(self) -> int:
        got: list[int] = []
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, lambda signum, frame: got.append(signum))
        leave_loader(self.loader_workers)
        with open(self.pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(self.pid_file + ".tmp", self.pid_file)
        while not got:
            time.sleep(0.05)
        with open(self.got_file, "w") as f:
            f.write(str(got[0]))
        return 0

