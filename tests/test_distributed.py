"""Data parallelism with torchrun on the CPU (gloo, two processes) against a one-process run of the same global batch.

A two-process PETR run, killed after one of its per-epoch checkpoints and resumed, ends with the prompts and
projectors of an uninterrupted one-process run; a two-process evaluation of that run (router refitted on gathered
logits) gives the one-process numbers and logits row for row. Images are resized without random augmentation and
read in order (SequentialSampler), so both runs see the same global batches: per-process random crops cannot
equal one process's (each process draws its own).
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch.utils.data import DistributedSampler

import train
from engine.distributed import merge_in_order
from tests.helpers_petr import petr_argv, write_eurosat
from tests.helpers_run import HANG_GUARD_S, lock_held_elsewhere

REPO = Path(__file__).resolve().parents[1]
EPOCHS = 8
TRAIN_PER_CLASS = 5  # 15 base train images: the router fit set does not split evenly over two processes
MODELS = ("seen_student", "unseen_student")
# Tolerance on max|two - one| / max|one| per tensor. Float sums over two shards differ from one batch's in the last
# bits: at most 2.3e-6 of a tensor's scale after the first epoch (the projector's BatchNorm bias, still near 0),
# growing through the α = 1000 distillation to about 5e-5 after 8 epochs. A real mismatch is far larger: with
# per-process BatchNorm statistics (TRAIN.SYNC_BN False) the first epoch already differs by 0.36.
TOL_FIRST_EPOCH, TOL_LAST_EPOCH = 1e-4, 1e-3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_cmd(argv: list[str], nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-addr",
            "127.0.0.1", "--master-port", str(free_port()), "train.py", *argv]


def cpu_env() -> dict:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def ddp_argv(data: Path, out: Path, student: str, teacher: str, *opts: str, flags: tuple = ()) -> list[str]:
    return petr_argv(data, out, student, teacher, "DATASET.SUBSAMPLE_CLASSES", "base", "INPUT.TRANSFORMS",
                     "['normalize']", "DATALOADER.TRAIN_X.SAMPLER", "SequentialSampler",
                     "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE", "4",
                     "OPTIM.MAX_EPOCH", str(EPOCHS), "TRAIN.CHECKPOINT_FREQ", "1", *opts, flags=flags)


def saved_state(out: Path, name: str, epoch: int) -> dict:
    return torch.load(out / name / f"model.pth.tar-{epoch}", weights_only=True)["state_dict"]


def assert_states_close(two: dict, one: dict, tol: float, what: str) -> None:
    assert two.keys() == one.keys()
    for key, ref in one.items():
        if ref.is_floating_point():
            scale = ref.abs().max().item()
            assert (two[key] - ref).abs().max().item() <= tol * scale, f"{what}: {key}"
        else:
            assert torch.equal(two[key], ref), f"{what}: {key}"


def pointers(out: Path) -> list[str]:
    files = [out / name / "checkpoint" for name in MODELS]
    return [f.read_text().strip() if f.is_file() else "" for f in files]


def worker_pids(pid: int) -> list[int]:
    """The processes torchrun ``pid`` started (its children, from /proc)."""
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(c) for c in (task / "children").read_text().split()]
    return children


def kill_after_first_checkpoint(cmd: list[str], out: Path) -> str:
    """Start ``cmd``; once every model has a checkpoint, freeze the workers at a moment when both models' pointers
    name the same epoch, and SIGKILL them and torchrun. Returns that epoch's checkpoint file name."""
    proc = subprocess.Popen(cmd, cwd=REPO, env=cpu_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + HANG_GUARD_S
        while not all(pointers(out)):
            assert proc.poll() is None, f"torchrun ended before its first checkpoint:\n{proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "no checkpoint within the hang guard"
            time.sleep(0.01)
        workers = worker_pids(proc.pid)
        assert len(workers) == 2
        while True:
            for pid in workers:
                os.kill(pid, signal.SIGSTOP)
            seen, unseen = pointers(out)
            if seen == unseen:
                break
            for pid in workers:
                os.kill(pid, signal.SIGCONT)
            time.sleep(0.005)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        proc.kill()
    finally:
        proc.wait(timeout=HANG_GUARD_S)
        proc.stderr.close()
    return seen


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file):
    """Data and a finished one-process run (plain train.py, no torchrun), global batch 4."""
    tmp = tmp_path_factory.mktemp("ddp")
    write_eurosat(tmp / "data", train_per_class=TRAIN_PER_CLASS)
    train.main(ddp_argv(tmp / "data", tmp / "one", tiny_clip_file, tiny_teacher_clip_file))
    return tmp


@pytest.mark.slow  # two torchrun launches and a resume: 15-20 s; the evaluation test keeps torchrun in the fast tier
def test_two_processes_killed_and_resumed_equal_one_process(one_process_run, tiny_clip_file, tiny_teacher_clip_file):
    tmp = one_process_run
    out = tmp / "two"
    argv = ddp_argv(tmp / "data", out, tiny_clip_file, tiny_teacher_clip_file)
    killed_at = kill_after_first_checkpoint(torchrun_cmd(argv), out)
    assert not (out / "results.json").exists() and killed_at != f"model.pth.tar-{EPOCHS}"

    done = subprocess.run(torchrun_cmd(argv), cwd=REPO, env=cpu_env(), capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    logs = sorted(p.name for p in out.iterdir() if p.name.startswith("log.txt"))
    assert logs == ["log.txt"]  # rank 0 alone logs; the rerun appends its attempt to the killed one's log
    log = (out / "log.txt").read_text()
    assert log.count("** Arguments **") == 2
    resumed = log[log.rindex("** Arguments **"):]
    assert (f'Resuming from "{out / "resume.pth.tar"}"' in resumed
            or f'Loading checkpoint from "{out / "seen_student" / killed_at}"' in resumed)
    assert "2 processes (gloo)" in resumed and "global training batch 4 = 2 per process x 2" in resumed

    for name in MODELS:
        assert_states_close(saved_state(out, name, 1), saved_state(tmp / "one", name, 1), TOL_FIRST_EPOCH, name)
        one = saved_state(tmp / "one", name, EPOCHS)
        assert_states_close(saved_state(out, name, EPOCHS), one, TOL_LAST_EPOCH, name)
        moved = (one["prompt.prompts.0"] - saved_state(tmp / "one", name, 1)["prompt.prompts.0"]).abs().max()
        assert moved > 100 * TOL_LAST_EPOCH * one["prompt.prompts.0"].abs().max()  # training moved the prompts
    first = json.loads((tmp / "one" / "results.json").read_text())
    second = json.loads((out / "results.json").read_text())
    for key in ("accuracy", "macro_f1", "route_acc_seen", "share_seen", "acc_seen_branch", "acc_unseen_branch"):
        assert second[key] == first[key], key


def test_two_process_evaluation_equals_one_process(one_process_run, tiny_clip_file, tiny_teacher_clip_file):
    tmp = one_process_run
    out = tmp / "eval_two"
    flags = ("--eval-only", "--model-dir", str(tmp / "one"), "--load-epoch", str(EPOCHS))
    argv = ddp_argv(tmp / "data", out, tiny_clip_file, tiny_teacher_clip_file, "TRAINER.PETR.REFIT_ROUTER", "True",
                    flags=flags)
    done = subprocess.run(torchrun_cmd(argv), cwd=REPO, env=cpu_env(), capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]

    # the router is fitted on the same 15 images (gathered from two shards of 8, one padded) in the same order
    one_fit = torch.load(tmp / "one" / "router_fit_logits.pt", weights_only=True)["q"]
    two_fit = torch.load(out / "router_fit_logits.pt", weights_only=True)["q"]
    assert two_fit.shape == one_fit.shape == (3 * TRAIN_PER_CLASS, 10)
    torch.testing.assert_close(two_fit, one_fit, atol=1e-5, rtol=1e-5)
    one_dump = torch.load(tmp / "one" / "logits_test.pt", weights_only=True)
    two_dump = torch.load(out / "logits_test.pt", weights_only=True)
    assert torch.equal(two_dump["labels"], one_dump["labels"]) and torch.equal(two_dump["is_seen"], one_dump["is_seen"])
    for key in ("q_s", "q_u"):
        torch.testing.assert_close(two_dump[key], one_dump[key], atol=1e-5, rtol=1e-5)
    first = json.loads((tmp / "one" / "results.json").read_text())
    second = json.loads((out / "results.json").read_text())
    for key in ("accuracy", "macro_f1", "route_acc_seen", "share_seen", "acc_seen_branch", "acc_unseen_branch",
                "acc_oracle", "n_seen"):
        assert second[key] == first[key], key
    assert second["threshold"] == pytest.approx(first["threshold"], rel=1e-5)


@pytest.mark.slow  # three torchrun launches: 15 s
def test_every_process_follows_rank_0_on_a_finished_or_busy_folder(one_process_run, tiny_clip_file,
                                                                     tiny_teacher_clip_file):
    """Only rank 0 claims the output folder; the others do what it decided: all skip the same finished run, or all
    stop when a live run holds the folder (rank 0 alone prints the line)."""
    tmp = one_process_run
    finished = subprocess.run(torchrun_cmd(ddp_argv(tmp / "data", tmp / "one", tiny_clip_file,
                                                    tiny_teacher_clip_file)),
                              cwd=REPO, env=cpu_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert finished.stdout.splitlines() == [f"Run finished, skipping: {tmp / 'one'}"]
    busy = tmp / "busy"
    busy.mkdir()
    with lock_held_elsewhere(busy) as pid:
        done = subprocess.run(torchrun_cmd(ddp_argv(tmp / "data", busy, tiny_clip_file, tiny_teacher_clip_file)),
                              cwd=REPO, env=cpu_env(), capture_output=True, text=True, timeout=HANG_GUARD_S)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode != 0 and errors == [
        f"error: {busy} is in use by another run (pid {pid} on h, started s: train.py x); wait for it to end or stop "
        "it, or give this run another --output-dir"], done.stderr[-3000:]
    assert os.listdir(busy) == ["run.lock"]


def test_merge_in_order_restores_dataset_order_and_drops_padding():
    # DistributedSampler's unshuffled shards of 5 samples over 2 processes: [0, 2, 4] and [1, 3, 0] (0 repeated)
    shards = [list(DistributedSampler(range(5), num_replicas=2, rank=r, shuffle=False)) for r in (0, 1)]
    assert shards == [[0, 2, 4], [1, 3, 0]]
    index = torch.tensor(shards[0] + shards[1])
    values = 10.0 * index
    rows = torch.stack([index, -index], dim=1)
    ordered_values, ordered_rows = merge_in_order(index, [values, rows])
    assert ordered_values.tolist() == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert ordered_rows.tolist() == [[i, -i] for i in range(5)]


@pytest.fixture
def one_process_group():
    """A gloo process group of one process (this one), so the engine takes its torchrun code paths in-process."""
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_train_samplers_are_distributed_and_reshuffled_every_epoch(one_process_group, tmp_path, tiny_clip_file,
                                                                    tiny_teacher_clip_file):
    write_eurosat(tmp_path / "data", train_per_class=TRAIN_PER_CLASS)
    trainer = train.main(petr_argv(tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file,
                                   "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "OPTIM.MAX_EPOCH", "2"))
    assert len(trainer._ddp) == 2  # both students; the frozen CLIP and teacher are not wrapped
    for loader in (trainer.train_loader_x, trainer.train_loader_u):
        sampler = loader.sampler.base  # inside the seeded passes of engine/data_stream.py
        assert isinstance(sampler, DistributedSampler) and sampler.shuffle and sampler.drop_last
        assert sampler.epoch == 1  # set by the last epoch
        last = list(sampler)
        sampler.set_epoch(0)
        assert sorted(list(sampler)) == sorted(last) and list(sampler) != last
    assert not trainer.test_loader.sampler.shuffle
    assert (tmp_path / "out" / "results.json").is_file()


def test_scripts_launch_through_torchrun_when_nproc_is_set(tmp_path):
    """NPROC unset or 1: train.py itself; N > 1: train.py under torchrun with N processes; a non-number: one line."""
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py"]
    for nproc, launch in (("", ["train.py"]), ("1", ["train.py"]), ("2", torchrun)):
        env = {**os.environ, "DATA": str(tmp_path), "NPROC": nproc, "TEACHER_CKPT": "none"}
        done = subprocess.run([sys.executable, "-m", "units", "--print-argv", "petr", "base2new_train", "eurosat",
                               "1"], cwd=REPO, env=env, capture_output=True, text=True, check=True,
                              timeout=HANG_GUARD_S)
        argv = json.loads(done.stdout.splitlines()[-1])["argv"]
        assert argv[:len(launch) + 1] == [*launch, "--data"], nproc
    env = {**os.environ, "DATA": str(tmp_path), "NPROC": "two", "TEACHER_CKPT": "none", "PYTHON": sys.executable}
    done = subprocess.run(["bash", "scripts/petr/base2new_train.sh", "eurosat", "1"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 2 and done.stderr.endswith("error: NPROC=two: give the number of processes (GPUs), "
                                                         "e.g. NPROC=4\n")
