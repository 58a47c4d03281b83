"""Preemption: SIGTERM / SIGUSR1 / SIGHUP finish the step, save a step-level resume state and exit 75; a rerun of the
same command continues inside the epoch and ends with the weights and results of an uninterrupted run (torch.equal),
for CoOp (TrainerX) and PETR (TrainerXU, whose shorter loader restarts mid-epoch), with 0 and 2 loader workers; a
SIGKILL loses only the steps since the last time-based state (TRAIN.STEP_RESUME_MINUTES). The loaders' passes
(engine/data_stream.py) are checked directly too: any position resumes to the same batches. TRAIN.CUDA_GRAPH refuses
the CPU in one line.

Run with ``-s`` to see the preemption table.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types

import pytest
import torch
from tabulate import tabulate

import train
from engine import TRAINER_REGISTRY, DataManager, get_cfg_default, preemption
from engine.data_stream import LoaderStream, draw_seed
from tests.helpers_engine import EngineLinearProbe, tiny_argv, write_image_tree
from tests.helpers_petr import petr_argv, write_eurosat
from tests.helpers_run import HANG_GUARD_S, default_sigint, run_until, train_argv
from trainers.config import extend_cfg

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TABLE: list[list] = []
EPOCHS = 2


@pytest.fixture(scope="module")
def tiny_root(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("preempt_tiny")
    write_image_tree(str(root))
    return str(root)


def tiny_cfg(root: str, workers: int, *opts: str):
    cfg = extend_cfg(get_cfg_default())
    cfg.merge_from_list(["DATASET.ROOT", root, "DATASET.NAME", "EngineTinyDataset", "USE_CUDA", "False",
                         "INPUT.SIZE", "(8, 8)", "INPUT.TRANSFORMS", "['random_resized_crop', 'random_flip']",
                         "DATALOADER.NUM_WORKERS", str(workers), "DATALOADER.TRAIN_X.BATCH_SIZE", "5",
                         "VERBOSE", "False", *opts])
    return cfg


def take(stream: LoaderStream, n: int) -> list[torch.Tensor]:
    return [stream.next()["img"] for _ in range(n)]


@pytest.mark.parametrize("workers,persistent,decoder", [(0, False, "pil"), (2, False, "pil"), (2, True, "pil"),
                                                        (0, False, "tensor"), (2, True, "tensor")])
def test_a_stream_resumed_at_any_position_yields_the_same_batches(tiny_root, workers, persistent, decoder):
    """12 training images, batch 5: 2 batches per pass, so 5 batches cross two restarts. A stream continued from
    the state after k batches yields the remaining batches of the uninterrupted stream, pixel for pixel, with 0 or
    2 workers (persistent or not) alike, with either image decoder (INPUT.DECODER); each pass moves the global RNG
    by exactly one draw."""
    opts = ("DATALOADER.PERSISTENT_WORKERS", str(persistent), "INPUT.DECODER", decoder)
    loader = DataManager(tiny_cfg(tiny_root, workers, *opts)).train_loader_x
    torch.manual_seed(0)
    stream = LoaderStream(loader)
    reference, states = [], []
    for _ in range(5):
        states.append(stream.state())
        reference.append(stream.next()["img"])
    after = torch.get_rng_state()
    torch.manual_seed(0)
    for _ in range(3):  # passes started: at the first batch, then after batches 2 and 4
        draw_seed()
    assert torch.equal(after, torch.get_rng_state())
    workers0 = LoaderStream(DataManager(tiny_cfg(tiny_root, 0, "INPUT.DECODER", decoder)).train_loader_x)
    torch.manual_seed(0)
    assert all(torch.equal(a, b) for a, b in zip(take(workers0, 5), reference))
    for k in range(1, 5):
        torch.manual_seed(0)
        for _ in range(1 + (k - 1) // 2):  # the global RNG as the uninterrupted run had it after k batches
            draw_seed()
        resumed = LoaderStream(loader)
        resumed.start(states[k])
        assert all(torch.equal(a, b) for a, b in zip(take(resumed, 5 - k), reference[k:])), k
    assert len({tuple(b.flatten()[:8].tolist()) for b in reference}) == 5  # augmented: no two batches alike


class SignalledProbe(EngineLinearProbe):
    """The engine's linear probe that sends itself ``signal_at = (signal, epoch, batch)`` during that step."""

    signal_at: tuple[int, int, int] | None = None

    def forward_backward(self, batch: dict) -> dict:
        if self.signal_at is not None and self.signal_at[1:] == (self.epoch, self.batch_idx):
            os.kill(os.getpid(), self.signal_at[0])
        return super().forward_backward(batch)


TRAINER_REGISTRY.register(SignalledProbe, force=True)


def probe_argv(root: str, out: str, workers: int) -> list[str]:
    return tiny_argv(root, out, epochs=3, opts=["DATALOADER.NUM_WORKERS", str(workers)], trainer="SignalledProbe")


def probe_weights(out: str) -> dict:
    return torch.load(os.path.join(out, "linear_probe", "model.pth.tar-3"), weights_only=True)["state_dict"]


@pytest.mark.parametrize("sig,workers", [(signal.SIGTERM, 0), (signal.SIGUSR1, 2)], ids=["SIGTERM-w0", "SIGUSR1-w2"])
def test_in_process_preemption_resumes_to_the_same_weights(tiny_root, tmp_path, monkeypatch, capsys, sig, workers):
    """train.cli in this process: the signal arrives in epoch 2, batch 2 of 3 (the probe sends it itself); status
    75, one line, a step-level state, and the rerun equals the uninterrupted run."""
    reference = str(tmp_path / "reference")
    assert train.cli(probe_argv(tiny_root, reference, workers)) == 0
    out = str(tmp_path / "preempted")
    monkeypatch.setattr(SignalledProbe, "signal_at", (sig, 1, 1))
    capsys.readouterr()
    assert train.cli(probe_argv(tiny_root, out, workers)) == train.EXIT_PREEMPTED
    err = capsys.readouterr().err.strip().splitlines()
    name = signal.Signals(sig).name
    assert preemption.stopped_by() == name  # what a SLURM job running train.cli in-process reads
    assert err == [f"preempted ({name}): the state at epoch 2/3, batch 2/3 is saved; rerun the same command to "
                   "continue"]
    state = torch.load(os.path.join(out, "resume.pth.tar"), weights_only=True)
    assert state["epoch"] == 1 and state["step"]["batch"] == 2
    assert err[0] in open(os.path.join(out, "log.txt")).read()
    monkeypatch.setattr(SignalledProbe, "signal_at", None)
    assert train.cli(probe_argv(tiny_root, out, workers)) == 0
    assert preemption.stopped_by() is None
    assert "Resuming inside epoch 2 after batch 2" in open(os.path.join(out, "log.txt")).read()
    resumed, expected = probe_weights(out), probe_weights(reference)
    assert all(torch.equal(resumed[k], expected[k]) for k in expected)
    assert json.load(open(os.path.join(out, "results.json"))) == json.load(open(os.path.join(reference,
                                                                                               "results.json")))


def test_a_signal_outside_training_stops_at_once(tiny_root, tmp_path, monkeypatch, capsys):
    """A signal during the final evaluation (not deferred): exit 75 at once, the epoch-level state stays, and the
    rerun only evaluates."""
    out = str(tmp_path / "run")

    def signalled_test(self, split=None):
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(SignalledProbe, "test", signalled_test)
    assert train.cli(probe_argv(tiny_root, out, 0)) == train.EXIT_PREEMPTED
    assert "outside a training step" in capsys.readouterr().err
    assert torch.load(os.path.join(out, "resume.pth.tar"), weights_only=True)["epoch"] == 3
    monkeypatch.undo()
    assert train.cli(probe_argv(tiny_root, out, 0)) == 0
    assert "Previous epoch: 3" in open(os.path.join(out, "log.txt")).read().split("new attempt")[-1]


# ----- train.py as a subprocess: the preemption table ----------------------------------------------------------
@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("preempt") / "data"
    write_eurosat(root, train_per_class=6)  # base classes: 18 labelled images; novel: 12 unlabelled
    return str(root)


def coop_command(data: str, out: str, clip_file: str, teacher_file: str, *opts: str) -> list[str]:
    """Tiny CoOp through train.py: 4 steps per epoch (18 images, batch 4), shipped config otherwise."""
    return [sys.executable, "train.py",
            *train_argv("CoOp", "vit_b16_ctxv1", data, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
                        "DATALOADER.TEST.BATCH_SIZE", "2", "OPTIM.MAX_EPOCH", str(EPOCHS), "TRAIN.PRINT_FREQ", "1",
                        "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "base", *opts, backbone=clip_file)]


def petr_command(data: str, out: str, clip_file: str, teacher_file: str, *opts: str) -> list[str]:
    """Tiny PETR: 4 steps per epoch over train_x (18 images, batch 4); train_u (12 images) restarts after 3."""
    return [sys.executable, "train.py", *petr_argv(data, out, clip_file, teacher_file, "DATALOADER.TRAIN_X.BATCH_SIZE",
                                                   "4", "TRAIN.PRINT_FREQ", "1", *opts)]


COMMANDS = {"CoOp": (coop_command, "prompt_learner"), "PETR": (petr_command, "seen_student")}


def final_state(out: str, trainer: str) -> tuple[dict, dict]:
    weights = {}
    for folder in sorted(os.listdir(out)):
        path = os.path.join(out, folder, f"model.pth.tar-{EPOCHS}")
        if os.path.isfile(path):
            weights.update({f"{folder}.{k}": v for k, v in torch.load(path, weights_only=True)["state_dict"].items()})
    assert any(k.startswith(COMMANDS[trainer][1]) for k in weights)
    return weights, json.load(open(os.path.join(out, "results.json")))


@pytest.fixture(scope="module")
def references(data, tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file) -> dict:
    """Uninterrupted runs (0 workers) of each trainer."""
    refs = {}
    for trainer, (command, _) in COMMANDS.items():
        out = str(tmp_path_factory.mktemp("reference") / trainer)
        status, output, _ = run_until(command(data, out, tiny_clip_file, tiny_teacher_clip_file,
                                              "DATALOADER.NUM_WORKERS", "0"), None, 0, REPO, ENV)
        assert status == 0, output[-3000:]
        refs[trainer] = final_state(out, trainer)
    return refs


@pytest.fixture(scope="module", autouse=True)
def print_table():
    yield
    if TABLE:
        print("\n" + tabulate(TABLE, headers=["trainer", "workers", "signal", "sent at (output line)", "exit",
                                              "the rerun resumed at", "final weights / results.json"],
                              tablefmt="github"))


def resumed_at(log: str) -> str:
    attempt = log.split("new attempt (earlier ones above)")[-1]
    inside = re.search(r"Resuming inside epoch (\d+) after batch (\d+)", attempt)
    if inside:
        return f"epoch {inside[1]}, after batch {inside[2]}"
    previous = re.search(r"Previous epoch: (\d+)", attempt)
    return f"end of epoch {previous[1]}" if previous else "from scratch"


# (trainer, workers, signal, the output line the signal waits for, extra opts of the interrupted run and its rerun):
# each distinct stopping point (a step inside an epoch, an epoch's last step, the step where PETR's train_u loader
# restarts, the checkpoint write, the final evaluation, a SIGKILL after a time-based state) once per loader mode; the
# three signals share one handler, so each appears at least once rather than at every point.
CASES = [
    ("CoOp", 0, signal.SIGTERM, f"epoch [1/{EPOCHS}] batch [2/4]", ()),
    ("CoOp", 0, signal.SIGUSR1, f"epoch [1/{EPOCHS}] batch [3/4]", ()),  # arrives during the epoch's last step
    ("CoOp", 0, signal.SIGHUP, "Checkpoint saved to", ()),  # writing the last epoch's checkpoint
    ("CoOp", 0, signal.SIGTERM, "Evaluate on the *test* set", ()),  # the final evaluation
    ("CoOp", 0, signal.SIGKILL, f"epoch [2/{EPOCHS}] batch [3/4]", ("TRAIN.STEP_RESUME_MINUTES", "1e-9")),
    ("CoOp", 2, signal.SIGUSR1, f"epoch [1/{EPOCHS}] batch [2/4]", ()),
    ("CoOp", 2, signal.SIGTERM, f"epoch [2/{EPOCHS}] batch [3/4]", ()),
    ("PETR", 0, signal.SIGTERM, f"epoch [1/{EPOCHS}] batch [3/4]", ()),  # the step where train_u restarts
    ("PETR", 2, signal.SIGUSR1, f"epoch [2/{EPOCHS}] batch [2/4]", ()),
    ("PETR", 2, signal.SIGKILL, f"epoch [2/{EPOCHS}] batch [3/4]", ("TRAIN.STEP_RESUME_MINUTES", "1e-9")),
]


@pytest.mark.slow
@pytest.mark.parametrize("trainer,workers,sig,marker,opts", CASES,
                         ids=[f"{c[0]}-w{c[1]}-{signal.Signals(c[2]).name}-{i}" for i, c in enumerate(CASES)])
def test_preempted_runs_resume_to_the_same_weights_and_results(trainer, workers, sig, marker, opts, data, references,
                                                               tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    out = str(tmp_path / "run")
    command = COMMANDS[trainer][0](data, out, tiny_clip_file, tiny_teacher_clip_file, "DATALOADER.NUM_WORKERS",
                                   str(workers), *opts)
    status, output, sent = run_until(command, marker, sig, REPO, ENV)
    assert sent, output[-3000:]
    expected = -signal.SIGKILL if sig == signal.SIGKILL else train.EXIT_PREEMPTED
    assert status == expected, output[-3000:]
    assert not os.path.exists(os.path.join(out, "results.json"))
    if sig != signal.SIGKILL:  # one line on the console, the same line in log.txt, no traceback
        line = f"preempted ({signal.Signals(sig).name})"
        assert "Traceback" not in output and sum(line in row for row in output.splitlines()) == 1
        assert line in open(os.path.join(out, "log.txt")).read()
    status, rerun, _ = run_until(command, None, sig, REPO, ENV)
    assert status == 0, rerun[-3000:]
    weights, results = final_state(out, trainer)
    ref_weights, ref_results = references[trainer]
    assert weights.keys() == ref_weights.keys() and all(torch.equal(weights[k], ref_weights[k]) for k in weights)
    assert results == ref_results
    assert "resume.pth.tar" not in os.listdir(out)
    TABLE.append([trainer, workers, signal.Signals(sig).name, marker, expected,
                  resumed_at(open(os.path.join(out, "log.txt")).read()), "identical to the uninterrupted run"])


@pytest.mark.slow
def test_a_unit_script_passes_the_preempted_status_on(data, tmp_path, tiny_clip_file):
    """bash scripts/coop/base2new_train.sh with SIGTERM sent to its whole process group (bash and python, as SLURM
    does): the script ends with 75, and the rerun finishes identical to an uninterrupted script run."""
    opts = ("INPUT.SIZE (32,32) OPTIM.MAX_EPOCH 2 DATALOADER.NUM_WORKERS 0 DATALOADER.TRAIN_X.BATCH_SIZE 4 "
            "DATALOADER.TEST.BATCH_SIZE 2 USE_CUDA False TRAIN.PRINT_FREQ 1")
    env = {**ENV, "DATA": data, "PYTHON": sys.executable, "BACKBONE": tiny_clip_file, "EXTRA_OPTS": opts,
           "SHOTS": "4"}
    script = ["bash", "scripts/coop/base2new_train.sh", "eurosat", "1"]
    status, output, _ = run_until(script, None, 0, REPO, {**env, "OUTPUT_ROOT": str(tmp_path / "ref")})
    assert status == 0, output[-3000:]
    env["OUTPUT_ROOT"] = str(tmp_path / "out")
    status, output, sent = run_until(script, "epoch [2/2] batch [1/", signal.SIGTERM, REPO, env)
    assert sent and status == train.EXIT_PREEMPTED, (status, output[-3000:])
    status, output, _ = run_until(script, None, 0, REPO, env)
    assert status == 0 and "Resuming the interrupted run" in output, output[-3000:]
    runs = [os.path.join(root, "base2new/train_base/eurosat/shots_4/CoOp/vit_b16_ctxv1/seed1")
            for root in (str(tmp_path / "ref"), env["OUTPUT_ROOT"])]
    finals = [final_state(run, "CoOp") for run in runs]
    assert all(torch.equal(finals[0][0][k], finals[1][0][k]) for k in finals[0][0]) and finals[0][1] == finals[1][1]
    TABLE.append(["CoOp (bash base2new_train.sh)", 0, "SIGTERM (process group)", "epoch [2/2] batch [1/",
                  train.EXIT_PREEMPTED, resumed_at(open(os.path.join(runs[1], "log.txt")).read()),
                  "identical to the uninterrupted run"])


def signal_until_exit(cmd: list[str], marker: str, sig: int) -> tuple[int, str]:
    """Run ``cmd``; from the first output line containing ``marker`` on, send ``sig`` to it again and again (every
    10 ms) until it exits, so repeats reach it while it saves, after it stopped training and while it exits. Returns
    its exit status and output."""
    proc = subprocess.Popen(cmd, cwd=REPO, env={**ENV, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=default_sigint)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:
            if seen.is_set():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, sig)
            time.sleep(0.01)
        proc.wait(timeout=HANG_GUARD_S)
        reader.join(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, "".join(lines)


def test_repeated_sigterms_still_end_with_the_preempted_status(data, tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    """SIGTERM again and again from a training step on (a scheduler that repeats its signal): the state is saved and
    train.py ends with 75, never killed by a repeat (143) nor with a traceback."""
    out = str(tmp_path / "run")
    command = coop_command(data, out, tiny_clip_file, tiny_teacher_clip_file, "DATALOADER.NUM_WORKERS", "0")
    status, output = signal_until_exit(command, f"epoch [1/{EPOCHS}] batch [2/4]", signal.SIGTERM)
    assert status == train.EXIT_PREEMPTED, output[-3000:]
    assert "Traceback" not in output and sum("preempted (SIGTERM)" in row for row in output.splitlines()) == 1
    assert torch.load(os.path.join(out, "resume.pth.tar"), weights_only=True)["step"]["batch"] >= 2


def test_cuda_graph_refuses_the_cpu_in_one_line(tiny_root, tmp_path, capsys):
    """TRAIN.CUDA_GRAPH True on the CPU: exit 2 with one error line naming the key, before anything is trained."""
    out = str(tmp_path / "graph")
    argv = tiny_argv(tiny_root, out, epochs=1, opts=["TRAIN.CUDA_GRAPH", "True"])
    assert train.cli(argv) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: TRAIN.CUDA_GRAPH True needs a CUDA GPU (USE_CUDA True on a machine with one); set it to "
                   "False on the CPU"]
    assert not os.path.exists(os.path.join(out, "resume.pth.tar")) and not os.path.exists(os.path.join(out,
                                                                                                       "linear_probe"))


def test_a_loader_alive_at_exit_does_not_hang_the_process(tmp_path):
    """Multiprocessing ends daemonic children at exit with SIGTERM, which the workers ignore (``worker_init_fn()``),
    then waits for them: a loader still iterating when the interpreter exits must not keep the process alive (the
    hang that kept a CI run waiting after its last test), nor print torch's "worker killed" error."""
    script = tmp_path / "loader_at_exit.py"
    script.write_text("from torch.utils.data import DataLoader\n"
                      "from engine.preemption import worker_init_fn\n"
                      "loader = DataLoader(list(range(64)), batch_size=4, num_workers=2, "
                      "worker_init_fn=worker_init_fn())\n"
                      "batches = iter(loader)\n"
                      "print(next(batches).tolist(), flush=True)\n")
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env={**ENV, "PYTHONPATH": REPO},
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 0 and done.stdout == "[0, 1, 2, 3]\n" and done.stderr == "", done.stderr


def test_a_repeat_raced_into_the_ignored_handler_is_not_reported():
    """CPython reports a signal that reached the interpreter just as its handler became SIG_IGN as an unraisable
    OSError, with a traceback; once repeats are ignored that report is dropped, and every other one still reaches the
    previous hook."""
    seen = []
    hook = preemption._drop_raced_repeats(seen.append)
    raced = types.SimpleNamespace(exc_type=OSError, exc_value=OSError("Signal 15 ignored due to race condition"),
                                  exc_traceback=None, err_msg=None, object=None)
    other = types.SimpleNamespace(exc_type=OSError, exc_value=OSError("No space left on device"),
                                  exc_traceback=None, err_msg=None, object=None)
    hook(raced)
    hook(other)
    assert seen == [other]
