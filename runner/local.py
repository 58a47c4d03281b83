"""Local executor: a pool of slots over the visible GPUs (N jobs per GPU, or one job over several GPUs), or CPU
slots without a GPU.

A slot pins its jobs to its GPUs with ``CUDA_VISIBLE_DEVICES``; CPU slots set ``OMP_NUM_THREADS`` (torch threads per
job, read when torch loads). A job's call (a unit command, ``python train.py``) runs in a warm worker process of its
slot (:func:`runner.unit.run_job`), which keeps what its first run imported (torch and the project: a new Python pays
about 2-4 s of imports, as long as a small run) for the runs after it; NPROC > 1 units start torchrun from there.
The worker is started with the spawn method, so every run starts from the state a new process has (the engine
reseeds per run). Each warm worker is a process group
of its own: the signal that stops the runner (Ctrl-C, SIGTERM, SIGHUP) reaches it once, passed on by
:meth:`LocalExecutor.stop`.

A job leaves nothing running in its worker: train.py ends its loaders' persistent workers when a run ends
(``engine.data_manager.close_loaders``), loader workers still alive when the job returns are killed
(:func:`engine.preemption.end_workers`: a spawned worker's exit waits for its daemonic children, which ignore the
SIGTERM it sends them, so one left behind would keep the worker, and the runner waiting for it, from ever ending),
and what the job dropped is collected (a trainer in a reference cycle, such as a routed trainer and its router). A
worker also ends when the runner is gone, however it ended (SIGKILL and the OOM killer included): it stops its job
as :meth:`LocalExecutor.stop` would (:func:`_end_with_runner`).
"""
from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from engine.preemption import end_workers, held
from runner import unit
from runner.jobs import Job
from runner.profiles import ask_torch, card_has_bf16
from runner.schedule import STOP_SIGNALS, Outcome
from units.facts import REPO

T = TypeVar("T")
STOP_WAIT_S = 30.0
"""When the runner is stopped: how long its warm workers (sent the same signal) have to end before they are
killed."""


HELD_SIGNALS = (signal.SIGINT, *STOP_SIGNALS)
"""The signals that stop the runner (Ctrl-C, SIGTERM, SIGHUP): held back while it starts a warm worker (``held``),
since a stop that cut the start short, before the new process read its start-up data, made that process print an
``EOFError`` traceback."""


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else every card torch counts."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip()]
    count = ask_torch("torch.cuda.device_count()")
    return [str(i) for i in range(int(count) if count.isdigit() else 0)]


IDLE = threading.Event()
"""In a warm worker: set while no job runs."""


def _warm_up(devices: str | None, threads: int | None) -> None:
    """Worker initializer: a process group of its own (the runner passes signals on), the repository root
    (train.py's relative paths start there), the slot's GPUs and torch threads (``OMP_NUM_THREADS``, which torch reads
    when the first run imports it, as do torchrun's processes; ``torch.set_num_threads`` where the parent's main module,
    imported again here by spawn, brought torch already), and the thread that ends the worker with the runner
    (:func:`_end_with_runner`). Nothing heavy is imported here: the first run pays torch's imports, and the worker
    keeps them for the next."""
    os.setpgrp()
    os.chdir(REPO)
    if devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = devices
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        torch = sys.modules.get("torch")
        if torch is not None:  # imported already by the parent's main module, which spawn imports again (the demo)
            torch.set_num_threads(threads)  # OpenMP read the variable when it loaded: a thread per core
    IDLE.set()
    threading.Thread(target=_end_with_runner, name="end-with-runner", daemon=True).start()


def _end_with_runner() -> None:
    """A warm worker's thread: once the runner is gone (the pipe multiprocessing keeps open to the parent closes
    whenever the parent ends, SIGKILL included), the worker's process group gets SIGTERM, as from
    :meth:`LocalExecutor.stop` (train.py saves its state and returns; torchrun passes it on; an idle worker ends at
    once), and SIGKILL (the worker and its loader workers) when the job has returned, or :data:`STOP_WAIT_S`
    later."""
    multiprocessing.parent_process().join()
    os.killpg(os.getpgrp(), signal.SIGTERM)
    IDLE.wait(STOP_WAIT_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _serve(job: Job, log: str, attempt: str, has_bf16: bool) -> int:
    """In a warm worker: ``job``'s exit status (:func:`runner.unit.run_job`); afterwards the loader workers still
    alive are killed (train.py ends those of the engine's loaders when its run ends) and what the job dropped is
    collected (a trainer in a reference cycle, and the memory it holds)."""
    IDLE.clear()
    try:
        return unit.run_job(job, log, attempt, has_bf16)
    finally:
        end_workers()
        gc.collect()
        IDLE.set()


@dataclass
class Slot:
    """Where one job runs at a time: GPUs (``CUDA_VISIBLE_DEVICES``) or none (CPU)."""

    devices: str | None
    busy: bool = False
    warm: ProcessPoolExecutor | None = None


@dataclass(eq=False)
class Running:
    """A started job: its slot and its warm worker's future."""

    slot: Slot
    future: Future


class LocalExecutor:
    """Runs jobs on this machine, ``slots`` at once."""

    poll_s = 0.5

    def __init__(self, gpus: Sequence[str], jobs_per_gpu: int = 1, gpus_per_job: int = 1, cpu_jobs: int = 1,
                 threads: int | None = None):
        if gpus:
            groups = [",".join(gpus[i:i + gpus_per_job]) for i in range(0, len(gpus) - gpus_per_job + 1, gpus_per_job)]
            self.pool = [Slot(g) for g in groups for _ in range(jobs_per_gpu)]
        else:
            self.pool = [Slot(None) for _ in range(cpu_jobs)]
        self.slots = len(self.pool)
        self.threads = threads
        self.has_bf16 = card_has_bf16() if gpus else False

    def describe(self) -> str:
        if self.pool[0].devices is None:
            return f"{self.slots} CPU slot(s), {self.threads or 'default'} torch thread(s) each"
        return f"{self.slots} GPU slot(s): " + ", ".join(f"[{s.devices}]" for s in self.pool)

    def start(self, job: Job, log: str) -> Running:
        slot = next(s for s in self.pool if not s.busy)
        slot.busy = True
        attempt = f"local {slot.devices or 'CPU'} slot, warm worker"
        return Running(slot, self._submit(slot, _serve, job, log, attempt, self.has_bf16))

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the first slot's warm worker (started when need be) and its result: the runner's own work
        that imports torch (the ``--extra-opts`` check before the jobs, the report after them) costs no process of
        its own, and the imports it pays serve the sweep's runs. ``fn`` must be a module-level function."""
        return self._submit(self.pool[0], fn, *args).result()

    def _submit(self, slot: Slot, fn: Callable[..., T], *args: Any) -> Future:
        """``fn(*args)`` in ``slot``'s warm worker, which ``submit`` starts when there is none (with the stop signals
        held: :data:`HELD_SIGNALS`)."""
        if slot.warm is None:
            slot.warm = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_warm_up,
                                            initargs=(slot.devices, self.threads))
        with held(HELD_SIGNALS):
            return slot.warm.submit(fn, *args)

    def wait(self, handles: Sequence[Running], timeout: float) -> None:
        """Return as soon as a job's worker answers (a job ends the moment it does), or after ``timeout``."""
        wait([run.future for run in handles], timeout, return_when=FIRST_COMPLETED)

    def poll(self, handles: Sequence[Running]) -> dict[Running, Outcome]:
        ended = {}
        for run in handles:
            if not run.future.done():
                continue
            run.slot.busy = False
            try:
                ended[run] = Outcome(run.future.result())
            except BrokenProcessPool as e:  # the worker process died: a new one serves the next job
                run.slot.warm = None
                ended[run] = Outcome(1, f"warm worker died: {e}")
            except Exception as e:  # the job could not start (its log refused): the worker serves the next one
                ended[run] = Outcome(1, str(e))
        return ended

    def stop(self, signum: int) -> None:
        """Pass ``signum`` on to the warm workers' process groups (train.py saves its state and ends), give them
        :data:`STOP_WAIT_S` to end, then kill what is left."""
        deadline = time.monotonic() + STOP_WAIT_S
        workers = [p for p in multiprocessing.active_children() if p.pid is not None]
        for slot in self.pool:
            if slot.warm is not None:
                slot.warm.shutdown(wait=False, cancel_futures=True)
        for worker in workers:
            with suppress(ProcessLookupError):
                os.killpg(worker.pid, signum)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                with suppress(ProcessLookupError):
                    os.killpg(worker.pid, signal.SIGKILL)
                worker.kill()

    def close(self) -> None:
        for slot in self.pool:
            if slot.warm is not None:
                slot.warm.shutdown()
