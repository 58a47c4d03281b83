"""Running train.py and the scripts as subprocesses in tests."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence

# Subprocess timeouts only guard against hangs: far above any expected run, even on a slow, busy 2-core machine.
HANG_GUARD_S = 3600
DEMO_HANG_GUARD_S = 6 * 3600
"""The hang guard of a demo-sized run (the quick demo, ``make demo``'s command): minutes on 2 idle cores, but a machine
loaded 8 to 13 deep on 2 cores stretches it several times. A test that runs one takes twice as long as its pytest
timeout (``pytest.mark.timeout``, which counts the fixture that runs it), so neither is reached short of a hang."""
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY_RUN = ("INPUT.SIZE", "(32, 32)", "DATALOADER.NUM_WORKERS", "0", "USE_CUDA", "False")
"""KEY VALUE pairs every tiny test run of a CLIP trainer shares: 32-pixel images, no loader workers, the CPU."""


def train_argv(trainer: str, config: str | None, root, out, *opts: str, dataset: str | None = "eurosat",
               seed: int | str = 1, flags: Sequence[str] = (), backbone: str | None = None,
               tiny: bool = True) -> list[str]:
    """train.py arguments of a test run: ``trainer`` with configs/trainers/<trainer>/<config>.yaml on
    configs/datasets/<dataset>.yaml (None: no such file), ``flags`` (--eval-only, ...) and then the KEY VALUE pairs:
    the ``backbone``, TINY_RUN (when ``tiny``) and ``opts`` (a key set twice: the later value wins)."""
    argv = ["--root", str(root), "--seed", str(seed), "--trainer", trainer, *flags]
    if dataset is not None:
        argv += ["--dataset-config-file", f"configs/datasets/{dataset}.yaml"]
    if config is not None:
        argv += ["--config-file", f"configs/trainers/{trainer}/{config}.yaml"]
    argv += ["--output-dir", str(out)]
    if backbone is not None:
        argv += ["MODEL.BACKBONE.NAME", backbone]
    return [*argv, *(TINY_RUN if tiny else ()), *opts]


def refused_line(out, change: str) -> str:
    """train.py's line for a rerun into ``out`` (a Path) holding a finished run that differs by ``change``."""
    return (f"error: {out} holds a finished run that differs from this one: {change}. Nothing was changed: give this "
            "run another --output-dir (scripts: OUTPUT_ROOT), or add --move-aside (scripts: MOVE_ASIDE=1) to move that "
            f"run to {out.parent / ('.' + out.name + '.old-1')} and start this one")


def default_sigint() -> None:
    """In a child before it starts: SIGINT back to its default action. A suite started as a background job inherits
    SIGINT ignored, and an ignored signal stays ignored across exec (Python and bash then never see Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped, does not); Linux /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


TREE_ENV = "PETR_TEST_TREE"
"""An environment variable that marks a process started by a test and everything it starts."""


def processes_marked(marker: str) -> list[int]:
    """The live processes whose environment holds ``PETR_TEST_TREE=marker``: every process started, directly or
    through others, by one started with it (it is inherited), whichever process adopted it since; Linux /proc."""
    needle = f"{TREE_ENV}={marker}".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
        except OSError:  # ended meanwhile, or another user's
            continue
        if needle in environ and alive(int(entry)):
            found.append(int(entry))
    return found


def left_behind(marker: str) -> list[str]:
    """The command lines of the processes marked ``marker`` (:func:`processes_marked`) still alive once none is, or
    once :data:`HANG_GUARD_S` has passed: empty when the whole tree has ended."""
    deadline = time.monotonic() + HANG_GUARD_S
    while processes_marked(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    lines = []
    for pid in processes_marked(marker):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"{pid}: {command[:160]}")
    return lines


def run_until(cmd: list[str], marker: str | None, sig: int, cwd: str, env: dict) -> tuple[int, str, bool]:
    """Run ``cmd`` in its own process group, reading its output (stdout and stderr) line by line, and send ``sig`` to
    the group at the first line containing ``marker``; returns (exit status, output, whether the signal was sent).
    The child starts with SIGINT at its default, whatever this process inherited."""
    proc = subprocess.Popen(cmd, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=default_sigint)
    lines, sent = [], False
    try:
        for line in proc.stdout:
            lines.append(line)
            if not sent and marker is not None and marker in line:
                os.killpg(proc.pid, sig)
                sent = True
        proc.wait(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, "".join(lines), sent


class ScriptRunner:
    """Runs a scripts/<method>/*.sh script with a recording ``PYTHON`` and replays its train.py commands in-process.

    The recorder (a small shell script) turns the script's ``python -m units METHOD COMMAND ...`` into ``python -m
    units --check-argv ...``, which prints each run's folder and train.py argument list instead of running it (and
    stops as the command would on a missing prerequisite);
    replaying those through ``train.main`` runs the exact commands without paying a fresh interpreter per run. The
    scripts' ``-c`` check that the interpreter has torch runs in this interpreter. ``skipped`` tells, per replayed
    command, whether train.py found the same run finished and skipped it.
    """

    def __init__(self, tmp_path, env: dict, script: str = "scripts/{}"):
        recorder = tmp_path / "record_python.sh"
        recorder.write_text('#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = units ]; then shift 2; '
                            f'exec "{sys.executable}" -m units --check-argv "$@"; fi\n'
                            f'exec "{sys.executable}" "$@"\n')
        recorder.chmod(0o755)
        self.env = {**os.environ, **env, "PYTHON": str(recorder)}
        self.script = script
        self.skipped: list[bool] = []

    def record(self, argv: list[str], env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
        """Run ``argv`` (a script command line, ``env`` added) with the recording ``PYTHON``; returns its result (its
        printed lines, without the recorded commands) and the train.py commands it issued, not run."""
        done = subprocess.run(argv, cwd=REPO, env={**self.env, **(env or {}), "PYTHON": self.env["PYTHON"]},
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
        lines = done.stdout.splitlines(keepends=True)
        commands = [json.loads(line)["argv"] for line in lines if line.startswith("{")]
        done.stdout = "".join(line for line in lines if not line.startswith("{"))
        return done, commands

    def run(self, script: str, *args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
        """Run ``script`` (formatted into the runner's script pattern); returns its result and the train.py commands
        it issued (already replayed; a user error of one propagates)."""
        import train

        done, commands = self.record(["bash", *self.script.format(script).split(), *args])
        self.skipped = []
        for command in commands:
            assert command[0] == "train.py"
            self.skipped.append(train.main(command[1:]) is None)
        return done, commands


_HOLD = """import fcntl, json, os, sys, time
fd = os.open(os.path.join(sys.argv[1], "run.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, json.dumps({"pid": os.getpid(), "host": "h", "started": "s", "command": "train.py x"}).encode())
print("locked", flush=True)
time.sleep(3600)
"""


@contextlib.contextmanager
def lock_held_elsewhere(folder) -> Iterator[int]:
    """Another live process holding the run folder's lock as a run does (``flock`` on run.lock, its record: host h,
    started s, command ``train.py x``); yields its pid, kills it on exit."""
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "locked\n"
        yield holder.pid
    finally:
        holder.kill()
        holder.wait(timeout=HANG_GUARD_S)
        holder.stdout.close()


@contextlib.contextmanager
def read_only(*folders: str) -> Iterator[list[str]]:
    """A command prefix under which ``folders`` cannot be written, as on a read-only mount.

    Root ignores file permissions, so for root the prefix runs the command in new user and mount namespaces with
    each folder bind-mounted read-only (``unshare``; the test is skipped where that is not allowed); for other users
    the folders are made read-only (``chmod``) until the block ends and the prefix is empty.
    """
    import pytest

    if os.geteuid() != 0:
        modes = {folder: os.stat(folder).st_mode for folder in folders}
        for folder, mode in modes.items():
            os.chmod(folder, mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        try:
            yield []
        finally:
            for folder, mode in modes.items():
                os.chmod(folder, mode)
        return
    mount = ('while [ "$1" != -- ]; do mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" || exit 1; shift; '
             'done; shift && exec "$@"')
    prefix = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, "sh",
              *folders, "--"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=HANG_GUARD_S)
    if probe.returncode != 0:
        pytest.skip(f"running as root and no read-only mount possible ({probe.stderr.decode().strip()[:80]})")
    yield prefix


@contextlib.contextmanager
def full_disk(folder: str, free_kib: int) -> Iterator[list[str]]:
    """A command prefix under which ``folder`` is a small filesystem (tmpfs, in new user and mount namespaces) with
    about ``free_kib`` KiB left (0: full), so writes there fail with ENOSPC as on a full disk. The command's files
    there vanish with it: it must report them itself. Skips the test where such a mount is not allowed."""
    import pytest

    fill = ('mount -t tmpfs -o size=1m tmpfs "$1" && { head -c $((1024 * (1024 - $2))) /dev/zero > "$1/filler"; '
            'true; } && shift 2 && exec "$@"')
    prefix = [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "sh", "-c", fill, "sh",
              folder, str(free_kib)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=HANG_GUARD_S)
    if probe.returncode != 0:
        pytest.skip(f"no small filesystem can be mounted here ({probe.stderr.decode().strip()[:80]})")
    yield prefix
