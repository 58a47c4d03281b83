"""The toy base-to-novel protocol (demo world, tiny CLIPs: teacher → PETR, CoOp → PETR+CoOp, train → test) through
the protocol runner on the local executor and on a real one-node SLURM cluster through submitit: the same tables,
a job preempted mid-run (``scancel --signal=USR1``, ``scontrol requeue``, a higher partition's job) requeues or is
submitted again, resumes and ends identical, a job of two processes (torchrun, gloo) ends with the weights of the
same two-process run on the local executor, uninterrupted or preempted, and a failed job skips only its dependents
and is reported with its log's tail. (How a lost job counts, and the runner without SLURM:
tests/test_runner_slurm_unit.py.)"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch

from datasets.check import decoded_images
from demo.shapes import GenParams, generate
from tests.helpers_datasets import write_image
from tests.helpers_run import HANG_GUARD_S
from tests.helpers_slurm import RequeueRelease, slurm_cluster, squeue_state

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOY = GenParams(train_per_class=2, val_per_class=1, test_per_class=2, xd_train_per_class=1, xd_val_per_class=1,
                xd_test_per_class=1)
"""DemoShapesHard with 2 train and 2 test images per class (48 classes, 24 base)."""
EXTRA = "OPTIM.MAX_EPOCH 20 USE_CUDA False"
"""Every run: 20 epochs (PETR: one step each), long enough to be interrupted in the middle."""
DATASET = "demo_shapes_hard"
PETR_RUN = f"base2new/train_base/{DATASET}/shots_0/PETR/demo/seed1"


@pytest.fixture(scope="module")
def toy(tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file) -> dict:
    tmp = tmp_path_factory.mktemp("runner_toy")
    generate(str(tmp / "data"), TOY, verbose=False)
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATA", "TEACHER_CKPT", "TEACHER_DIR", "EXTRA_OPTS", "KD_WEIGHT", "LOAD_EPOCH")}
    env.update(BACKBONE=tiny_clip_file, TEACHER_NAME=tiny_teacher_clip_file, PYTHONUNBUFFERED="1")
    return {"tmp": tmp, "data": str(tmp / "data"), "env": env}


def runner_argv(toy: dict, output: str, *args: str, methods=("PETR", "PETR+CoOp"), datasets=(DATASET,),
                teachers: str = "", data: str = "") -> list[str]:
    return [sys.executable, "-m", "runner", "base2new", "--methods", *methods, "--datasets", *datasets, "--seeds", "1",
            "--config", "demo", "--data", data or toy["data"], "--output", output,
            "--teacher-dir", teachers or os.path.join(output, "teachers"), "--extra-opts", EXTRA, "--threads", "1",
            "--gpus-per-job", "0", *args]


def run(argv: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, toy) -> dict:
    with slurm_cluster(str(tmp_path_factory.mktemp("slurm"))) as env:
        yield {**toy["env"], **env}


SLURM_ARGS = ("--executor", "slurm", "--cpus-per-job", "1", "--time", "60", "--poll", "1")
TWO_PROCESSES = ("--gpus-per-job", "0", "--procs-per-job", "2")
"""Each run as two CPU processes under torchrun (gloo); on SLURM a job then asks for two CPUs."""
SLURM_TWO_PROCESS_ARGS = ("--executor", "slurm", "--cpus-per-job", "2", "--time", "60", "--poll", "1",
                          *TWO_PROCESSES)


@pytest.fixture(scope="module")
def local_run(toy) -> tuple[str, subprocess.CompletedProcess]:
    output = str(toy["tmp"] / "local")
    return output, run(runner_argv(toy, output, "--cpu-jobs", "2"), toy["env"])


@pytest.fixture(scope="module")
def local_two_process_run(toy) -> tuple[str, subprocess.CompletedProcess]:
    """The toy PETR jobs (teacher, train, test), each run as two processes, on the local executor."""
    output = str(toy["tmp"] / "local_two_processes")
    return output, run(runner_argv(toy, output, *TWO_PROCESSES, methods=("PETR",)), toy["env"])


@pytest.fixture(scope="module")
def slurm_run(toy, cluster) -> tuple[str, subprocess.CompletedProcess, float]:
    output = str(toy["tmp"] / "slurm")
    start = time.monotonic()
    done = run(runner_argv(toy, output, *SLURM_ARGS), cluster)
    return output, done, time.monotonic() - start


def results(output: str) -> dict[str, float]:
    """accuracy of every results.json under ``output``, by run folder relative to it."""
    found = {}
    for folder, _, files in os.walk(output):
        if "results.json" in files:
            with open(os.path.join(folder, "results.json")) as f:
                found[os.path.relpath(folder, output)] = json.load(f)["accuracy"]
    return found


def test_toy_protocol_on_local_and_slurm_gives_identical_tables(local_run, slurm_run):
    (local, done), (slurm, slurm_done, seconds) = local_run, slurm_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert slurm_done.returncode == 0, slurm_done.stdout[-3000:] + slurm_done.stderr[-3000:]
    print(f"toy protocol through SLURM: {seconds:.0f} s")
    runs = results(local)
    # teacher, PETR train + test, CoOp train (for the plug-in), PETR+CoOp base + novel (plug-in)
    assert len(runs) == 6 and runs == results(slurm)
    table = open(os.path.join(local, "base2new", "b2n_table.txt")).read()
    assert table == open(os.path.join(slurm, "base2new", "b2n_table.txt")).read()
    petr = next(line.split() for line in table.splitlines() if line.split()[:2] == [DATASET, "PETR"])
    base, novel = runs[PETR_RUN], runs[PETR_RUN.replace("train_base", "test_new")]
    assert petr[3:5] == [f"{base:.2f}", f"{novel:.2f}"]  # the table holds the runs' accuracies
    assert table in done.stdout and "Jobs: 5 done, 0 finished before" in done.stdout
    for name in ("teacher_demo_shapes_hard", "PETR_train_demo_shapes_hard_seed1", "PETR-CoOp_plug-in_demo_shapes_"
                 "hard_seed1"):
        log = open(os.path.join(slurm, "logs", "base2new", f"{name}.log")).read()
        assert log.startswith("=== ") and "SLURM job " in log.splitlines()[0]
    jobs = json.load(open(os.path.join(slurm, "logs", "base2new", "slurm", "jobs.json")))
    assert len(jobs) == 5 and all(i.isdigit() for i in jobs.values())


def weights(run_dir: str) -> dict[str, torch.Tensor]:
    """Every tensor of the run's last checkpoints (one per model folder)."""
    out = {}
    for model in sorted(os.listdir(run_dir)):
        pointer = os.path.join(run_dir, model, "checkpoint")
        if os.path.isfile(pointer):
            name = open(pointer).read().strip()
            state = torch.load(os.path.join(run_dir, model, name), weights_only=True)["state_dict"]
            out.update({f"{model}.{k}": v for k, v in state.items()})
    return out


PREEMPTIONS = {"scancel-USR1": ["scancel", "--signal=USR1"], "scontrol-requeue": ["scontrol", "requeue"],
               "partition-preemption": ["sbatch", "--partition=urgent", "--exclusive", "--output=/dev/null",
                                        "--wrap=sleep 2"]}
"""How the tests preempt a job (the last one takes no job id: a job of a higher partition takes the node, and the
cluster cancels the preempted job, see tests/slurm_cluster.sh)."""


def slurm_story(output: str, cluster: dict) -> str:
    """What SLURM and submitit wrote about the sweep's jobs (for a failure message)."""
    conf_dir = os.path.dirname(cluster["SLURM_CONF"])
    found = []
    for folder, _, files in os.walk(os.path.join(output, "logs", "base2new", "slurm")):
        found += [os.path.join(folder, f) for f in files if f.endswith("_log.out")]
    found.append(os.path.join(conf_dir, "slurmctld.log"))
    return "\n".join(f"--- {path}\n" + "".join(open(path, errors="replace").readlines()[-25:]) for path in found)


@pytest.mark.parametrize("how,procs", [*(pytest.param(how, 1, id=how) for how in PREEMPTIONS),
                                       *(pytest.param(how, 2, id=f"{how}-2-processes")
                                         for how in ("scancel-USR1", "scontrol-requeue"))])
def test_preempted_slurm_job_resumes_and_ends_identical(toy, cluster, request, how, procs):
    """A job preempted after saving its state resumes and ends identical to the uninterrupted local run (of as many
    processes). ``scancel --signal=USR1``: submitit checkpoints and requeues it; ``scontrol requeue``: SLURM requeues
    it, and the runner, killed too and run again, follows the requeued job instead of submitting another; a job of a
    higher partition: the cluster cancels the job (PREEMPTED), which saved its state, and the runner submits it
    again. With two processes (torchrun) SLURM signals every process of the job: each saves and stops (75), and the
    unit command reports 75 for them; USR1 and SIGTERM are its two stopping points (a higher partition's job ends
    it with SIGTERM too, and the runner's resubmission is the one-process case's)."""
    local = request.getfixturevalue("local_run" if procs == 1 else "local_two_process_run")[0]
    output = str(toy["tmp"] / f"preempt_{how}_{procs}")
    run_dir = os.path.join(output, PETR_RUN)
    slurm_args = SLURM_ARGS if procs == 1 else SLURM_TWO_PROCESS_ARGS
    argv = runner_argv(toy, output, *slurm_args, methods=("PETR",), teachers=os.path.join(local, "teachers"))
    proc = subprocess.Popen(argv, cwd=REPO, env=cluster, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    record = os.path.join(output, "logs", "base2new", "slurm", "jobs.json")
    deadline = time.monotonic() + HANG_GUARD_S
    while not os.path.isfile(os.path.join(run_dir, "resume.pth.tar")):  # epoch 1 of 20 is saved
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.05)
    job_id = json.load(open(record))["PETR train demo_shapes_hard seed1"]
    assert not os.path.isfile(os.path.join(run_dir, "results.json"))
    by_id = [job_id] if how != "partition-preemption" else []
    subprocess.run([*PREEMPTIONS[how], *by_id], check=True, env=cluster, capture_output=True)
    if how == "scontrol-requeue":
        proc.kill()
        proc.wait()
        proc = subprocess.Popen(argv, cwd=REPO, env=cluster, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    requeue = RequeueRelease(job_id, cluster)
    while proc.poll() is None:
        assert time.monotonic() < deadline
        requeue.poll()
        time.sleep(0.2)
    out = proc.stdout.read()
    assert proc.returncode == 0, out[-4000:] + "\n" + slurm_story(output, cluster)
    final_id = json.load(open(record))["PETR train demo_shapes_hard seed1"]
    job_log = open(os.path.join(output, "logs", "base2new", "PETR_train_demo_shapes_hard_seed1.log")).read()
    assert f"SLURM job {job_id}, attempt 1" in job_log
    first = job_log.split("=== ")[1]  # the first attempt's output, up to the runner's line on how it ended
    stops = [line for line in first.splitlines() if line.startswith("preempted (")]
    assert len(stops) == procs and all("is saved; rerun the same command to continue" in s for s in stops), first
    ended = ("exit 75 (preempted): requeueing through submitit" if how == "scancel-USR1" else
             "SLURM ended the job (SIGTERM): leaving without a result")
    assert f"=== {ended}" in job_log, job_log
    resubmitted = (f"preempted PETR train demo_shapes_hard seed1 (SLURM job {job_id} ended (PREEMPTED) without a "
                   "result")
    if how == "partition-preemption":  # cancelled by the cluster: the runner submitted the job again
        assert final_id != job_id and resubmitted in out and "its runs saved their resume state" in out, out
        assert f"SLURM job {final_id}, attempt 1" in job_log and not requeue.released
    else:  # requeued: the same job ran again
        assert final_id == job_id and requeue.released and f"SLURM job {job_id}, attempt 2" in job_log
        assert "starting it again" not in out
    assert squeue_state(final_id, cluster).startswith("COMPLETED")
    if how == "scontrol-requeue":
        assert f"following SLURM job {job_id} (PETR train demo_shapes_hard seed1)" in out
    assert "Resuming from" in open(os.path.join(run_dir, "log.txt")).read()
    # the steps logged over both attempts are the uninterrupted run's, in order: none done twice, none lost
    assert steps_logged(run_dir) == steps_logged(os.path.join(local, PETR_RUN))
    assert results(output) == {k: v for k, v in results(local).items() if "/PETR/" in k}
    same_weights(os.path.join(local, PETR_RUN), run_dir)


def steps_logged(run_dir: str) -> list[tuple[int, int]]:
    """(epoch, step) of every training-step line in the run's log.txt, in order, over every attempt it holds (an
    epoch with fewer steps than TRAIN.PRINT_FREQ logs each of them)."""
    text = open(os.path.join(run_dir, "log.txt")).read()
    return [(int(e), int(b)) for e, b in re.findall(r"^epoch \[(\d+)/\d+\] batch \[(\d+)/\d+\]", text, re.MULTILINE)]


def same_weights(reference_run: str, run_dir: str) -> None:
    """The run's last checkpoints hold exactly the reference run's tensors."""
    reference, other = weights(reference_run), weights(run_dir)
    assert reference.keys() == other.keys() and len(reference) > 0
    unequal = [k for k in reference if not torch.equal(reference[k], other[k])]
    assert not unequal, f"{len(unequal)} of {len(reference)} tensors differ, e.g. {unequal[:3]}"


def test_two_process_slurm_job_equals_the_local_two_process_run(toy, cluster, local_two_process_run):
    """NPROC=2 reaches the unit inside the SLURM job: its PETR run trains with two processes (gloo) and ends with the
    weights and results of the same two-process run on the local executor."""
    local, done = local_two_process_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    output = str(toy["tmp"] / "slurm_two_processes")
    slurm_done = run(runner_argv(toy, output, *SLURM_TWO_PROCESS_ARGS, methods=("PETR",),
                                 teachers=os.path.join(local, "teachers")), cluster)
    assert slurm_done.returncode == 0, slurm_done.stdout[-3000:] + "\n" + slurm_story(output, cluster)
    for folder in (local, output):
        log = open(os.path.join(folder, PETR_RUN, "log.txt")).read()
        assert "2 processes (gloo)" in log and "global training batch" in log, folder
    job_log = open(os.path.join(output, "logs", "base2new", "PETR_train_demo_shapes_hard_seed1.log")).read()
    assert "SLURM job " in job_log.splitlines()[0] and "NPROC=2 " in job_log.splitlines()[1]
    assert results(output) == {k: v for k, v in results(local).items() if "/PETR/" in k}
    same_weights(os.path.join(local, PETR_RUN), os.path.join(output, PETR_RUN))


def test_failed_slurm_job_skips_only_its_dependents(toy, cluster, slurm_run):
    """demo_shapes has a corrupt base-class train image that the preflight's decoded sample does not hold (the sweep
    starts): its teacher and its CoOp training fail on it; PETR (needs the teacher) and PETR+CoOp (needs CoOp) are not
    run there; demo_shapes_hard's finished jobs are skipped; the table is printed."""
    output = slurm_run[0]
    partial = toy["tmp"] / "partial_data"
    partial.mkdir()
    (partial / DATASET).symlink_to(os.path.join(toy["data"], DATASET))
    shutil.copytree(os.path.join(toy["data"], "demo_shapes"), partial / "demo_shapes")
    split = json.loads((partial / "demo_shapes" / "split_zhou_DemoShapes.json").read_text())
    base = len({label for _, label, _ in split["train"]}) // 2  # the first half of the labels are the base classes
    images = partial / "demo_shapes" / "images"
    sampled = set(decoded_images([str(images / rel) for split_items in split.values() for rel, _, _ in split_items]))
    corrupt = next(str(images / rel) for rel, label, _ in split["train"]
                   if label < base and str(images / rel) not in sampled)
    write_image(corrupt, corrupt=True)
    done = run(runner_argv(toy, output, *SLURM_ARGS, datasets=(DATASET, "demo_shapes"), data=str(partial)), cluster)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "Jobs: 0 done, 5 finished before (skipped), 2 failed, 3 not run because a job they need failed" in out
    for failed, blocked in (("teacher demo_shapes", "PETR train demo_shapes seed1, PETR test demo_shapes seed1"),
                            ("CoOp train demo_shapes seed1", "PETR+CoOp plug-in demo_shapes seed1")):
        # a failure's block: its line and the indented lines under it (the blocks come in the order the jobs ended)
        found = re.search(rf"^FAILED {re.escape(failed)}: SLURM job \d+: exit status 2; log .*\n(?:[ ]+.*\n?)*", out,
                          re.MULTILINE)
        assert found, out[-3000:]
        assert f"| error: Cannot read image {corrupt}" in found.group(0)  # the log's tail
        assert found.group(0).rstrip().splitlines()[-1] == f"  not run because of it: {blocked}"
    assert f"{DATASET}  PETR" in out  # the table of what finished
