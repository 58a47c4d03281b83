"""The built-in demo: the sweeps it plans, and the reduced demo (``scripts/demo.sh --quick``) run end to end.

The end-to-end test runs the real pipeline in a subprocess (data, a short tiny-CLIP pretraining, then the protocol
runner's sweeps: teacher, CoOp, PromptKD, PETR, PETR+CoOp, CoCoOp, MaPLe, IVLP and PETR+X on each for two seeds, the
cross-dataset and domain-generalisation runs) and checks the effects it robustly shows from the runs' results.json
files, with HM and chance level computed here.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from datasets.demo_specs import DATASET_DIRS
from demo.kernels import PINNED_KERNELS, machine, set_process_env
from demo.pipeline import (
    DEMO,
    FULL,
    QUICK,
    RUN_SECONDS,
    SOURCE,
    STUDENT_SHOTS,
    Paths,
    datasets,
    default_paths,
    expected_seconds,
    failures,
    stage_times,
    sweeps,
)
from demo.pipeline import Demo as Pipeline
from demo.study import FULL as STUDY
from demo.study import Demo
from engine.errors import InvalidInputError, first_line
from engine.utils import read_json
from runner.jobs import record_job
from runner.protocols import Planner, merge_plans
from runner.schedule import Report, critical_paths
from tests.helpers_jobs import Toy
from tests.helpers_run import DEMO_HANG_GUARD_S, HANG_GUARD_S

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("ZeroshotCLIP", "CoOp", "PromptKD", "PETR", "PETRCoOp")
LEARNERS = ("CoCoOp", "MaPLe", "IVLP")
CONFIGS = {"PETRCoOp": "demo_plugin"}
"""Config folders other than ``demo``: the PETR+CoOp plug-in's runs."""


def hm(a: float, b: float) -> float:
    return 2 * a * b / (a + b)


def test_default_paths_prefer_flags_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_OUTPUT", str(tmp_path / "env_out"))
    monkeypatch.delenv("DEMO_DATA", raising=False)
    monkeypatch.delenv("DEMO_CACHE", raising=False)
    paths = default_paths(str(tmp_path), None, None, str(tmp_path / "flag_cache"))
    assert paths == Paths(str(tmp_path / "data" / "demo"), str(tmp_path / "env_out"), str(tmp_path / "flag_cache"))


def test_process_env_pins_the_kernels_unless_already_set():
    environ = {"MKL_CBWR": "AVX512"}
    set_process_env(environ)
    assert environ == {"MKL_CBWR": "AVX512", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                       "OMP_WAIT_POLICY": "PASSIVE"}


PINS = "(ATEN_CPU_CAPABILITY=avx2, MKL_CBWR=AVX2, ONEDNN_MAX_CPU_ISA=AVX2)"
ENTRY_POINTS = """
import os, runpy, sys
from demo.kernels import PINNED_KERNELS, kernels_line
for module in ("demo.pipeline", "demo.shipped", "demo.pretrain"):
    sys.argv = [module, "--help"]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    print("pins", *(os.environ.pop(key, "unset") for key in PINNED_KERNELS))
os.environ.update(PINNED_KERNELS)
print(kernels_line())
"""
"""A child that runs each demo program's entry point (``--help``), says which pins it set, then which kernels torch
runs under them."""


def test_the_demo_programs_run_pinned_kernels():
    """``python -m demo.pipeline``, ``demo.shipped`` and ``demo.pretrain`` pin the CPU kernels in their own process
    (whose environment the demo's warm workers inherit), and torch then runs its AVX2 kernels."""
    env = {k: v for k, v in os.environ.items() if k not in PINNED_KERNELS}
    done = subprocess.run([sys.executable, "-c", ENTRY_POINTS], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if line.startswith("pins ")] == ["pins avx2 AVX2 AVX2"] * 3
    assert lines[-1] == f"CPU kernels: AVX2 {PINS}"


def planned(tmp_path, size):
    paths = Paths(str(tmp_path / "data"), str(tmp_path / "out"), str(tmp_path / "cache"))
    plans = [Planner(sweep).plan() for sweep in sweeps(size, paths, ("student.pt", "teacher.pt"))]
    return {j.name: j for j in merge_plans(plans)}


def test_make_demo_is_one_base_to_novel_sweep_of_six_methods(tmp_path):
    """``make demo``: seed 1 of zero-shot CLIP, CoOp, the teacher, PromptKD, PETR and PETR+CoOp as unit commands
    with the demo config and the tiny CLIPs; the students distil on 120 train images per class (shots_120) from the
    teacher, which learns from 16 (shots_16), as CoOp does."""
    jobs = planned(tmp_path, DEMO)
    ds = "demo_shapes_hard"
    assert sorted(jobs) == sorted([f"ZeroshotCLIP zero-shot {ds}", f"teacher {ds}", f"PromptSRC test {ds}",
                                   *(f"{m} {k} {ds} seed1" for m in ("CoOp", "PromptKD", "PETR")
                                     for k in ("train", "test")), f"PETR+CoOp plug-in {ds} seed1"])
    for job in jobs.values():
        assert job.call.knobs["CFG"] == "demo" and job.call.knobs["BACKBONE"] == "student.pt"
        assert job.call.knobs["TEACHER_NAME"] == "teacher.pt" and job.call.knobs["KD_WEIGHT"] == "100.0"
        assert "EXTRA_OPTS" not in job.call.knobs
    for student in ("PromptKD", "PETR"):
        train, test = jobs[f"{student} train {ds} seed1"], jobs[f"{student} test {ds} seed1"]
        assert train.deps == (f"teacher {ds}",) and train.call.knobs["SHOTS"] == test.call.knobs["SHOTS"] == "120"
        assert train.runs == (str(tmp_path / "out/base2new/train_base" / ds / "shots_120" / student / "demo/seed1"),)
        assert test.runs == (str(tmp_path / "out/base2new/test_new" / ds / "shots_120" / student / "demo/seed1"),)
    for job in (jobs[f"teacher {ds}"], jobs[f"CoOp train {ds} seed1"]):
        assert job.call.knobs["SHOTS"] == "16" and "/shots_16/" in job.runs[0]
    assert jobs[f"teacher {ds}"].files == (str(tmp_path / "out/teachers/DemoShapesHard/VLPromptLearner/checkpoint"),)
    assert jobs[f"PETR+CoOp plug-in {ds} seed1"].deps == (f"CoOp train {ds} seed1",)


def test_make_demo_starts_the_teacher_then_petr(tmp_path):
    """Every run of ``make demo`` has an expected time, from which the runner starts the longest chain first: the
    teacher, then PETR's training (the chain that decides when the demo ends), before PromptKD's and CoOp's."""
    jobs = planned(tmp_path, DEMO)
    assert {(job.method, job.kind) for job in jobs.values()} == set(RUN_SECONDS)
    longest = critical_paths(list(jobs.values()), expected_seconds)
    ds = "demo_shapes_hard"
    assert longest[f"teacher {ds}"] == sum(RUN_SECONDS[k] for k in (("PromptSRC", "teacher"), ("PETR", "train"),
                                                                     ("PETR", "test")))
    first = sorted(jobs, key=lambda name: -longest[name])[:4]
    assert first == [f"teacher {ds}", f"PETR train {ds} seed1", f"PromptKD train {ds} seed1", f"CoOp train {ds} seed1"]
    assert expected_seconds(planned(tmp_path, FULL)["PETR train democool seed1"]) is None  # another dataset's run


def test_each_size_draws_only_the_datasets_it_runs_on():
    assert datasets(DEMO) == ["DemoShapesHard"]
    assert datasets(QUICK) == ["DemoShapesHard", "DemoNet", "DemoCool", "DemoNetSketch"]
    assert sorted(datasets(FULL)) == sorted(set(DATASET_DIRS) - {"DemoShapes"})


def test_full_demo_runs_every_method_and_both_transfer_protocols(tmp_path):
    jobs = planned(tmp_path, FULL)
    ds = "demo_shapes_hard"
    for seed in (1, 2, 3):
        for x in LEARNERS:
            plug = jobs[f"PETR+{x} plug-in {ds} seed{seed}"]
            x_run = str(tmp_path / "out/base2new/train_base" / ds / "shots_16" / x / "demo" / f"seed{seed}")
            assert plug.deps == (f"{x} train {ds} seed{seed}",) and plug.call.argv[-1] == x_run
            assert plug.call.knobs["CFG"] == "demo" and plug.runs[0].endswith(f"/PETRX/demo_{x.lower()}/seed{seed}")
        for target in ("democool", "demosoft", "demofancy", SOURCE):
            argv = jobs[f"PETR train {target} seed{seed}"].call.argv
            assert argv[1:] == ("scripts/petr/xd_train.sh", target, str(seed))
        for target in ("demonetv2", "demonet_sketch", "demonet_a", "demonet_r"):
            assert jobs[f"PETR train {target} seed{seed}"].call.argv[1] == "scripts/petr/dg_train.sh"
            assert jobs[f"PromptKD test {target} seed{seed}"].deps[0] == f"PromptKD train {SOURCE} seed{seed}"
    assert jobs["PETR train democool seed2"].call.knobs["SOURCE"] == SOURCE
    assert sum(n.startswith("teacher ") for n in jobs) == 2  # base-to-novel's and the source's, each once


def test_quick_demo_passes_its_epochs_to_the_unit_commands(tmp_path):
    jobs = planned(tmp_path, QUICK)
    assert jobs["PromptKD train democool seed1"].call.knobs["EXTRA_OPTS"] == "OPTIM.MAX_EPOCH 1"
    assert jobs["teacher demonet"].call.knobs["EXTRA_OPTS"] == "OPTIM.MAX_EPOCH 3"
    assert jobs["PETR train democool seed1"].call.knobs["EXTRA_OPTS"] == "OPTIM.MAX_EPOCH 4"
    assert "EXTRA_OPTS" not in jobs["ZeroshotCLIP zero-shot democool"].call.knobs


def test_stage_times_from_the_runner_report():
    stages = {"a": "one", "b": "one", "c": "two", "d": "two", "e": "three"}
    outcome = Report(done=["a", "b", "c"], finished_before=["d"], failed={"e": "exit status 1"},
                     spans={"a": (0.0, 2.0), "b": (3.0, 7.5), "c": (1.0, 4.0)})
    assert stage_times(stages, outcome) == [["one", 2, 0, 7.5, 6.5], ["two", 1, 1, 3.0, 3.0], ["three", 0, 0, 0.0, 0]]


def test_demo_skips_finished_runs_and_a_failure_stops_only_its_dependents(tmp_path):
    """The studies' jobs on the runner: a run folder with results.json (or the xd teacher's pointer file) that the job
    finished with the same command and data is not run again, a failed job is reported with its log's tail, the jobs
    that need it are not run and the others are."""
    demo = Demo(STUDY, Paths(str(tmp_path / "d"), str(tmp_path / "o"), str(tmp_path / "c")), threads=1, workers=2)
    ran = tmp_path / "ran.txt"

    def job(name: str, run: str = "", files: tuple[str, ...] = (), deps: tuple[str, ...] = (), say: str = "",
            status: int = 0):
        call = Toy(say=f"{name}\n{say}".strip(), count=str(ran), status=status, finish=run)
        return demo.job("stage", name=name, kind="train", method="M", dataset="d", call=call,
                        runs=(run,) if run else (), files=files, deps=deps)

    done_run, pointer = tmp_path / "done", tmp_path / "teacher" / "checkpoint"
    done_run.mkdir()
    (done_run / "results.json").write_text("{}")
    pointer.parent.mkdir()
    pointer.write_text("model.pth.tar-3")
    lines = "\n".join(f"line {i}" for i in range(1, 21))
    jobs = [job("finished", str(done_run)), job("teacher", files=(str(pointer),)),
            job("bad", str(tmp_path / "bad"), say=f"{lines}\nerror: the reason", status=3),
            job("needs bad", str(tmp_path / "x"), deps=("bad",)),
            job("other", str(tmp_path / "other"), deps=("finished", "teacher"))]
    record_job(jobs[0])  # as the runner does when a job finishes its runs
    outcome = demo.run_jobs(jobs, str(tmp_path / "logs"))
    assert sorted(ran.read_text().split("\n")) == ["", "bad", "other"]
    assert outcome.finished_before == ["finished", "teacher"] and outcome.done == ["other"]
    assert outcome.skipped == {"needs bad": "bad"} and list(outcome.failed) == ["bad"]
    regenerated = Demo(replace(STUDY, data=replace(STUDY.data, seed=1)), demo.paths, threads=1, workers=2)
    again = regenerated.job("stage", **{k: v for k, v in jobs[0].__dict__.items() if k != "reads"})
    assert regenerated.run_jobs([again], str(tmp_path / "logs")).done == ["finished"]  # other data: not skipped
    text = failures(outcome)
    assert text.startswith(f"FAILED bad: exit status 3; log {tmp_path / 'logs' / 'bad.log'}\n")
    assert "line 7\n" in text and "line 6\n" not in text and "error: the reason" in text  # the log's last 15 lines
    assert "Not run (they need a failed run): needs bad" in text and text.splitlines()[-1].startswith("error: 1 ")


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    """Run ``bash scripts/demo.sh --quick`` once into a temporary work folder; returns (workdir, stdout)."""
    work = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "PYTHON": sys.executable}
    for key in ("DEMO_DATA", "DEMO_OUTPUT", "DEMO_CACHE"):
        env.pop(key, None)
    proc = subprocess.run(["bash", "scripts/demo.sh", "--quick", "--workdir", str(work)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=DEMO_HANG_GUARD_S)
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return work, proc.stdout


def _results(work, role: str, trainer: str, seed: int, config: str = "") -> dict:
    config = config or CONFIGS.get(trainer, "demo")
    root = os.path.join(work, "output", "demo", "base2new", role, "demo_shapes_hard")
    (shots,) = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, trainer, config))]
    return read_json(os.path.join(root, shots, trainer, config, f"seed{seed}", "results.json"))


def _transfer(work, tree: str, dataset: str, trainer: str, seed: int = 1) -> dict:
    return read_json(os.path.join(work, "output", "demo", tree, dataset, "shots_0", trainer, "demo", f"seed{seed}",
                                  "results.json"))


@pytest.mark.slow
@pytest.mark.timeout(2 * DEMO_HANG_GUARD_S)
def test_quick_demo_shows_the_effects(quick_demo):
    """The effects the full demo shows that the reduced version (--quick) reproduces over its two seeds (README "Demo").

    Its 150-step tiny CLIP knows colour but not yet shape, so zero-shot novel accuracy sits near the colour-only
    level (1/6 of the classes of a colour) and CoOp's loss on novel classes, which needs shape knowledge to lose,
    is left to the full demo.
    """
    work, stdout = quick_demo
    seeds = QUICK.seeds
    res = {s: {m: {part: _results(work, role, m, 1 if m == "ZeroshotCLIP" else s)
                   for part, role in (("base", "train_base"), ("novel", "test_new"))} for m in METHODS}
           for s in seeds}
    for s in seeds:
        for m in METHODS:
            assert res[s][m]["base"]["subsample_classes"] == "base" and res[s][m]["novel"]["subsample_classes"] == "new"
        assert res[s]["PETR"]["base"]["seed"] == s and res[s]["PromptKD"]["novel"]["seed"] == s
    zs = res[seeds[0]]["ZeroshotCLIP"]
    chance = 100.0 / 24  # 48 classes: 24 novel
    assert zs["novel"]["accuracy"] > 2 * chance
    # θ_s gains on base over zero-shot in the seed mean
    assert np.mean([res[s]["PETR"]["base"]["acc_seen_branch"] for s in seeds]) > zs["base"]["accuracy"]
    for s in seeds:
        petr_base, petr_novel = res[s]["PETR"]["base"], res[s]["PETR"]["novel"]
        assert petr_base["route_acc_seen"] >= 80.0 and petr_novel["route_acc_unseen"] >= 80.0
        single = [hm(petr_base[k], petr_novel[k]) for k in ("acc_seen_branch", "acc_unseen_branch")]
        assert hm(petr_base["accuracy"], petr_novel["accuracy"]) >= max(single)
    # cross-dataset: the router keeps source images on θ_s and sends the novel-colour targets to θ_u
    assert _transfer(work, "xd/train", SOURCE, "PETR")["share_seen"] >= 80.0
    for target in QUICK.xd_targets:  # DemoCool: novel colours
        assert _transfer(work, "xd/train", target, "PETR")["share_seen"] <= 20.0
    for target in QUICK.dg_targets:
        for tree, trainer in (("dg/train", "PETR"), ("xd/test", "PromptKD")):
            assert _transfer(work, tree, target, trainer)["accuracy"] > chance
    # each prompt learner X ran, and PETR+X routed on its run: θ_s alone answers as X did (the same logits over
    # all classes, restricted to the evaluated ones)
    for s in seeds:
        for x in LEARNERS:
            for part, role in (("base", "train_base"), ("novel", "test_new")):
                learner = _results(work, role, x, s)
                routed = _results(work, role, "PETRX", s, f"demo_{x.lower()}")
                assert learner["subsample_classes"] == routed["subsample_classes"] == part.replace("novel", "new")
                assert routed["tuned_trainer"] == x and routed["seed"] == learner["seed"] == s
                assert routed["acc_seen_branch"] == pytest.approx(learner["accuracy"], abs=1e-6)
    # the summary: the tables on stdout, the same in report.md with the figure beside it
    for text in ("Base-to-novel on DemoShapesHard (seeds 1, 2; mean ± sample std)", "novel → θ_u %",
                 "PETR routes most base and novel images right", "Cross-dataset from demonet",
                 "Domain generalisation from demonet", "demonet (source)"):
        assert text in stdout
    for m in ("ZeroshotCLIP", "CoOp", "PETR+CoOp", *LEARNERS, *(f"PETR+{x}" for x in LEARNERS)):
        assert f"\n{m} " in stdout
    output = os.path.join(work, "output", "demo")
    markdown = open(os.path.join(output, "report.md")).read()
    assert "| PETR+CoOp " in markdown and "Time per stage" in markdown and "(report.png)" in markdown
    where = next(line for line in stdout.splitlines() if "CPU kernels: " in line)  # the runs' kernels and machine
    assert where.endswith(f"CPU kernels: AVX2 {PINS}; {machine()}") and where.split("] ", 1)[1] in markdown
    with open(os.path.join(output, "report.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_a_demo_folder_made_with_other_files_is_one_error_line(tmp_path):
    """A demo's output copied from another folder records a teacher this demo's tiny CLIPs are not: planning stops
    with one line naming the run, the folder and the fix, not a traceback."""
    paths = Paths(str(tmp_path / "data"), str(tmp_path / "out"), str(tmp_path / "cache"))
    run = tmp_path / f"out/base2new/train_base/demo_shapes_hard/shots_{STUDENT_SHOTS}/PromptKD/demo/seed1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"config": {
        "TRAINER.PROMPTKD.TEACHER_NAME": "/elsewhere/demo_cache/teacher.pt",
        "TRAINER.PROMPTKD.TEACHER_CKPT": "/elsewhere/output/demo/teachers/DemoShapesHard"}}))
    with pytest.raises(InvalidInputError) as error:
        Pipeline(DEMO, paths).run_jobs(sweeps(DEMO, paths, ("student.pt", "teacher.pt")))
    assert first_line(error.value) == (
        f"PromptKD test demo_shapes_hard seed1: {run} was distilled from the teacher "
        "/elsewhere/output/demo/teachers/DemoShapesHard (TEACHER_NAME /elsewhere/demo_cache/teacher.pt), whose text "
        f"features score its student: the runs under {tmp_path / 'out'} were made with other tiny CLIP files or "
        "teachers than this demo's (copied from another folder, or weights regenerated); move "
        f"{tmp_path / 'out'} away, or give the demo another --output-root")


@pytest.mark.slow  # the quick demo's data and tiny CLIPs, then runs that a signal stops
def test_a_signal_stops_the_demo_with_the_runners_line(quick_demo, tmp_path):
    """SIGTERM to ``scripts/demo.sh`` while its runs train: the runs stop as the runner stops them, and the demo ends
    with the line the runner prints for a signal and 128 + the signal, no traceback."""
    work, _ = quick_demo
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(["bash", "scripts/demo.sh", "--quick", "--data", str(work / "data" / "demo"), "--cache",
                             str(work / "demo_cache"), "--output-root", str(tmp_path / "out")], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if " started " in line:  # a run is training: the runner's signal handling is in place
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=HANG_GUARD_S)
    assert proc.returncode == 128 + signal.SIGTERM, out[-2000:] + err[-2000:]
    # Python's resource tracker may add its own warning after the demo has ended: a warm worker that was idle when
    # the runner passed the signal on dies of it with a semaphore of its job's still registered (runner/local.py)
    ours = [line for line in err.splitlines() if "resource_tracker" not in line]
    assert "Traceback" not in err and ours[-1] == (
        "interrupted (SIGTERM): rerun the same command to continue (finished runs are skipped, interrupted ones "
        "resume)"), err[-3000:]


def test_docs_count_the_runs_each_size_plans(tmp_path):
    """docs/demo.md's run counts of ``make demo`` and ``make demo-full`` are those of their plans (a catalog row with
    ``demo`` changes them) and it names every method of the full demo's base-to-novel sweep."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "demo.md"), encoding="utf-8") as f:
        text = f.read()
    for target, size in (("make demo", DEMO), ("make demo-full", FULL)):
        found = re.search(rf"- `{target}`:.*?\((\d+) runs\)", text, re.S)
        assert found and int(found.group(1)) == len(planned(tmp_path, size)), target
    full = re.search(r"- `make demo-full`:(.*?)\(\d+ runs\)", text, re.S).group(1)
    assert [m for m in FULL.methods if m not in DEMO.methods and not m.startswith("PETR+") and m not in full] == []
