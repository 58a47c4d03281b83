"""Preemption: SIGTERM, SIGUSR1 or SIGHUP end a training run at the next safe point, with its state saved.

Clusters preempt with SIGTERM (SLURM, Kubernetes) or a chosen signal (``sbatch --signal=USR1``); a closed terminal
sends SIGHUP. ``handle_signals()`` (train.py) turns each of them into a request instead of the default death:

* inside :func:`deferred` (the training loop) the request only sets a flag; the trainer finishes the current step
  (or the epoch's validation and checkpoint writing), writes a step-level resume state and raises
  :class:`Preempted`;
* anywhere else (building the run, the final evaluation) :class:`Preempted` is raised at once: the resume state
  already on disk is the latest one;
* a repeated signal after the first is ignored: the run is already stopping.

``Preempted`` derives from BaseException (as KeyboardInterrupt) so that no ``except Exception`` on the way turns it
into another error; train.py reports it in one line and exits with status 75 (``EXIT_PREEMPTED``).
DataLoader workers ignore these signals (:func:`ignore_in_worker`): a signal sent to the whole process group must not
kill the workers of the step that is being finished. Multiprocessing ends daemonic children at exit with SIGTERM and
then waits for them, so workers still alive then (a loader that outlived its run) are ended with SIGKILL first
(:func:`end_workers`), else the process would never exit. Importing this module changes nothing in the
process: that exit handler is installed by :func:`handle_signals` and by :func:`worker_init_fn` (whoever builds a
loader whose workers ignore the signals).
"""
from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import signal
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGUSR1", "SIGHUP") if hasattr(signal, name))


class Preempted(BaseException):
    """The run stopped on a preemption signal; ``str()`` is the one line train.py prints."""


class _State:
    signal_name: str | None = None  # the signal received (None: no request)
    deferring = 0  # depth of deferred() blocks
    exits_after = False  # the process exits once the run ends (ignore_repeats_until_exit)
    stopped_by: str | None = None  # the signal that stopped the last run handle_signals() served (None: none)


def requested() -> str | None:
    """The name of the preemption signal received so far (None when there was none)."""
    return _State.signal_name


def _on_signal(signum: int, frame) -> None:
    if _State.signal_name:  # a repeat while the run saves its state and stops: the first request is being served
        return
    _State.signal_name = signal.Signals(signum).name
    if not _State.deferring:
        raise Preempted(f"preempted ({_State.signal_name}) outside a training step; the last saved state stays: "
                        "rerun the same command to continue")


@contextlib.contextmanager
def signal_handlers(signals: Iterable[int], handler: Callable[[int, object], None]) -> Iterator[None]:
    """Inside: ``handler`` for each of ``signals``, the previous handlers back afterwards; outside the main thread
    (where no handler can be installed) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def held(signals: Iterable[int]) -> Iterator[None]:
    """Inside: ``signals`` wait, and reach the handlers they had when the block ends, in the order they came: for work
    a signal must not cut in half (a checkpoint being written, a worker process being started), whose exception
    raised mid-way leaves a half-made file or process behind it. Outside the main thread nothing changes."""
    caught: list[int] = []
    try:
        with signal_handlers(signals, lambda signum, frame: caught.append(signum)):
            yield
    finally:
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)


@contextlib.contextmanager
def handle_signals() -> Iterator[None]:
    """Inside: the preemption signals are requests (see the module docstring); SIGINT raises KeyboardInterrupt even
    when the process started with it ignored (a background job). Previous handlers are restored afterwards (after a
    preemption in a process that exits next, :func:`ignore_repeats_until_exit`, the preemption signals are ignored
    instead); outside the main thread no signal handler is installed. The exit handler for leftover workers stays
    for the process."""
    install_exit_handler()
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _on_signal) for sig in SIGNALS}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    _State.signal_name, _State.deferring = None, 0
    try:
        yield
    finally:
        stopping = _State.exits_after and _State.signal_name is not None
        _State.stopped_by = _State.signal_name
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_IGN if stopping and sig in SIGNALS else handler)
        _State.signal_name, _State.deferring = None, 0


def stopped_by() -> str | None:
    """The name of the signal that stopped the last run of this process, or that came while it waited for a child's
    (:func:`waiting_for_child`); None when there was none: a caller that runs train.py tells a preemption (SIGUSR1)
    from the end of its job (SIGTERM)."""
    return _State.stopped_by


@contextlib.contextmanager
def waiting_for_child(signals: Iterable[int]) -> Iterator[None]:
    """Inside: ``signals`` do nothing in this process, which waits for the status of a child that gets them too (its
    process group, a SLURM job step); :func:`stopped_by` then names the first preemption signal that came."""
    _State.stopped_by = None

    def note(signum: int, frame) -> None:
        if signum in SIGNALS and _State.stopped_by is None:
            _State.stopped_by = signal.Signals(signum).name

    with signal_handlers(signals, note):
        yield


def ignore_repeats_until_exit() -> None:
    """For an entry point that exits when its run ends (``python train.py``): once a run stopped on a preemption
    signal, the preemption signals stay ignored (SIG_IGN, which the interpreter's shutdown leaves in place, unlike a
    Python handler it resets to the default), so a repeat (schedulers send several) cannot end the process by the
    signal (status 143) before it exits with its own status. A repeat that reached the interpreter just before the
    switch is reported by CPython as an OSError "ignored due to race condition"; that report is dropped
    (:func:`_drop_raced_repeats`)."""
    _State.exits_after = True
    sys.unraisablehook = _drop_raced_repeats(sys.unraisablehook)


def _drop_raced_repeats(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    """An ``sys.unraisablehook`` that drops CPython's report of a signal that arrived as its handler became SIG_IGN
    (a repeat, ignored anyway) and passes every other report to ``previous``."""

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if isinstance(error, OSError) and "ignored due to race condition" in str(error):
            return
        previous(unraisable)

    return hook


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside: a preemption signal only sets the flag that :func:`requested` reads."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1
    if _State.signal_name and not _State.deferring:  # arrived after the block's last check
        raise Preempted(f"preempted ({_State.signal_name}); the last saved state stays: rerun the same command to "
                        "continue")


def ignore_in_worker(worker_id: int) -> None:
    """Runs in each DataLoader worker: it ignores the preemption signals (its main process handles them)."""
    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def worker_init_fn() -> Callable[[int], None]:
    """The ``worker_init_fn`` of a DataLoader whose workers ignore the preemption signals (:func:`ignore_in_worker`);
    installs the exit handler that ends such workers when they outlive the process's last line."""
    install_exit_handler()
    return ignore_in_worker


def end_workers() -> None:
    """End this process's daemonic children still alive (DataLoader workers that outlived their run): SIGKILL, since
    they ignore the preemption signals and the SIGTERM multiprocessing's own exit handler sends before it waits for
    them, then reaped. torch's SIGCHLD handler, which would report each as a failed worker, is set aside meanwhile
    (call it from the main thread, where ``signal.signal`` is allowed: atexit handlers run there)."""
    workers = [child for child in multiprocessing.active_children() if child.daemon]
    if not workers:
        return
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL) if hasattr(signal, "SIGCHLD") else None
    try:
        for child in workers:
            child.kill()
        for child in workers:
            child.join()
    finally:
        if previous is not None:
            signal.signal(signal.SIGCHLD, previous)


def install_exit_handler() -> None:
    """Register :func:`end_workers` with atexit, once (a second call moves it to the front). atexit runs handlers
    last-registered first, and multiprocessing's own handler was registered when this module imported
    ``multiprocessing.util``, so this one runs before it."""
    atexit.unregister(end_workers)
    atexit.register(end_workers)
