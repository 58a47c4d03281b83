"""The built-in demo pipeline: the jobs it plans, and the reduced demo (``scripts/demo.sh --quick``) run end to end.

The end-to-end test runs the real pipeline in a subprocess (data, a short tiny-CLIP pretraining, teacher, CoOp,
PromptKD, PETR, PETR+CoOp, CoCoOp, MaPLe, IVLP and PETR+X on each through train.py for two seeds, then the
cross-dataset and domain-generalisation scripts) and checks the effects it robustly shows from the runs' results.json
files, with HM and chance level computed here.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from demo.pipeline import (
    DG_TARGETS,
    FULL,
    PROMPT_LEARNERS,
    QUICK,
    SOURCE,
    XD_TARGETS,
    Demo,
    Paths,
    default_paths,
    failures,
    stage_times,
)
from engine.utils import read_json
from runner.jobs import record_job
from runner.schedule import Report
from tests.helpers_jobs import Toy
from tests.helpers_run import HANG_GUARD_S
from units.call import TrainCall

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
METHODS = ("ZeroshotCLIP", "CoOp", "PromptKD", "PETR", "PETRCoOp")
LEARNERS = ("CoCoOp", "MaPLe", "IVLP")


def hm(a: float, b: float) -> float:
    return 2 * a * b / (a + b)


def test_default_paths_prefer_flags_then_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("DEMO_OUTPUT", str(tmp_path / "env_out"))
    monkeypatch.delenv("DEMO_DATA", raising=False)
    monkeypatch.delenv("DEMO_CACHE", raising=False)
    paths = default_paths(str(tmp_path), None, None, str(tmp_path / "flag_cache"))
    assert paths == Paths(str(tmp_path / "data" / "demo"), str(tmp_path / "env_out"), str(tmp_path / "flag_cache"))


def planned(tmp_path, plan=FULL):
    demo = Demo(plan, Paths(str(tmp_path / "data"), str(tmp_path / "out"), str(tmp_path / "cache")))
    demo.student_clip, demo.teacher_clip = "student.pt", "teacher.pt"
    return demo, {j.name: j for j in demo.b2n_jobs() + demo.transfer_jobs()}


def test_teacher_and_zero_shot_run_once_students_per_seed(tmp_path):
    demo, jobs = planned(tmp_path)
    names = list(jobs)
    assert sum(n.startswith("b2n PromptSRC") for n in names) == 2  # base + novel, seed 1 only
    assert sum(n.startswith("b2n ZeroshotCLIP") for n in names) == 2
    for seed in (1, 2, 3):
        for trainer in ("CoOp", "PromptKD", "PETR", "PETRCoOp"):
            base, novel = jobs[f"b2n {trainer} seed{seed} base"], jobs[f"b2n {trainer} seed{seed} novel"]
            assert novel.deps == (base.name,)
            assert base.call.args[base.call.args.index("--seed") + 1] == str(seed)
            assert "--eval-only" in novel.call.args and "--eval-only" not in base.call.args
        # every seed's students distil from the one teacher run; PETR+CoOp plugs in its own seed's CoOp context
        for trainer in ("PromptKD", "PETR"):
            job = jobs[f"b2n {trainer} seed{seed} base"]
            assert job.deps == ("b2n PromptSRC seed1 base",)
            assert job.call.args[job.call.args.index(f"TRAINER.{trainer.upper()}.TEACHER_CKPT") + 1].endswith(
                os.path.join("shots_16", "PromptSRC", "demo", "seed1"))
        plug = jobs[f"b2n PETRCoOp seed{seed} base"]
        assert plug.deps == (f"b2n CoOp seed{seed} base",)
        assert plug.call.args[plug.call.args.index("TRAINER.PETRCOOP.COOP_MODEL_DIR") + 1] == demo.run_dir(
            "train_base", 16, "CoOp", seed)


def test_each_prompt_learner_runs_per_seed_and_petr_x_routes_on_its_run(tmp_path):
    demo, jobs = planned(tmp_path)
    assert PROMPT_LEARNERS == LEARNERS
    for seed in (1, 2, 3):
        for x in LEARNERS:
            base, novel = jobs[f"b2n {x} seed{seed} base"], jobs[f"b2n {x} seed{seed} novel"]
            assert base.call.args[base.call.args.index("--config-file") + 1] == f"configs/trainers/{x}/demo.yaml"
            assert novel.deps == (base.name,) and novel.call.args[novel.call.args.index("--load-epoch") + 1] == "last"
            x_run = demo.run_dir("train_base", 16, x, seed)
            assert base.runs == (x_run,) and novel.runs == (demo.run_dir("test_new", 16, x, seed),)
            plug, plug_novel = jobs[f"b2n PETR+{x} seed{seed} base"], jobs[f"b2n PETR+{x} seed{seed} novel"]
            assert plug.deps == (base.name,) and plug_novel.deps == (plug.name,)
            args = plug.call.args
            assert args[args.index("--trainer") + 1] == "PETRX"
            assert args[args.index("--config-file") + 1] == f"configs/trainers/PETRX/demo_{x.lower()}.yaml"
            assert args[args.index("TRAINER.PETRX.TUNED_MODEL_DIR") + 1] == x_run
            assert args[args.index("DATASET.NUM_SHOTS") + 1] == "16"  # X's shots: its training images
            assert args[args.index("--seed") + 1] == str(seed)
            # the novel evaluation reads the router of the base run's folder; PETRX saves no model to load
            petr_x_base = os.path.join(str(tmp_path / "out"), "base2new", "train_base", "demo_shapes_hard", "shots_16",
                                       "PETRX", f"demo_{x.lower()}", f"seed{seed}")
            assert plug_novel.call.args[plug_novel.call.args.index("--model-dir") + 1] == petr_x_base
            assert "--eval-only" in plug_novel.call.args and "--load-epoch" not in plug_novel.call.args


def test_transfer_runs_use_the_scripts_with_the_toy_source(tmp_path):
    demo, jobs = planned(tmp_path, replace(FULL, transfer_seeds=(1, 2)))
    for seed in (1, 2):
        for ds in (SOURCE, *XD_TARGETS):
            job = jobs[f"PETR xd {ds} seed{seed}"]
            assert job.call.argv == ("bash", "scripts/petr/xd_train.sh", ds, str(seed))
            assert job.knobs["SOURCE"] == "demonet" and job.knobs["CFG"] == "demo" and job.knobs["KD_WEIGHT"] == "100.0"
            assert job.deps == ("xd teacher",)
            # the test script re-evaluates the saved model and router once (seed 1)
            retest = jobs.get(f"PETR xd test {ds} seed{seed}")
            assert (retest.deps == (job.name,)) if seed == 1 else retest is None
        for ds in DG_TARGETS:
            assert jobs[f"PETR dg {ds} seed{seed}"].call.argv == ("bash", "scripts/petr/dg_train.sh", ds, str(seed))
            kd = jobs[f"PromptKD dg {ds} seed{seed}"]
            assert kd.call.argv == ("bash", "scripts/promptkd/xd_test.sh", ds, str(seed))
            assert kd.deps == (f"PromptKD xd {SOURCE} seed{seed}",)  # the student distilled on the source
    teacher = jobs["xd teacher"]
    assert teacher.call.argv == ("bash", "scripts/teacher/xd_train.sh", "1")
    # finished when its pointer file exists; the scripts' runs when their folders are finished (results.json)
    assert teacher.files == (os.path.join(str(tmp_path / "out"), "teachers", "DemoNet-xd", "VLPromptLearner",
                                          "checkpoint"),) and teacher.runs == ()
    assert jobs["zero-shot democool"].runs == (os.path.join(str(tmp_path / "out"), "ZeroshotCLIP", "demo", "democool"),)
    assert jobs["PromptKD dg demonetv2 seed2"].runs == (
        os.path.join(str(tmp_path / "out"), "xd", "test", "demonetv2", "shots_0", "PromptKD", "demo", "seed2"),)


def test_quick_plan_passes_its_epochs_to_the_scripts(tmp_path):
    demo = Demo(QUICK, Paths(str(tmp_path / "d"), str(tmp_path / "o"), str(tmp_path / "c")))
    demo.student_clip = demo.teacher_clip = "tiny.pt"
    jobs = {j.name: j for j in demo.transfer_jobs()}
    assert jobs["PETR xd democool seed1"].knobs["EXTRA_OPTS"] == "OPTIM.MAX_EPOCH 5"
    assert jobs["xd teacher"].knobs["EXTRA_OPTS"] == "OPTIM.MAX_EPOCH 3"
    assert "EXTRA_OPTS" not in jobs["zero-shot democool"].knobs


def test_every_demo_job_is_a_train_py_or_unit_call(tmp_path):
    """The base-to-novel jobs are ``python train.py`` calls, the others known unit commands (what the slots' warm
    workers run)."""
    _, jobs = planned(tmp_path, replace(FULL, transfer_seeds=(1,)))
    assert all(isinstance(job.call, TrainCall) == name.startswith("b2n ") for name, job in jobs.items())
    assert all(isinstance(job.call, TrainCall) or job.call.known() for job in jobs.values())
    assert jobs["b2n PETR seed1 base"].kind == "train" and jobs["b2n PETR seed1 novel"].kind == "test"
    assert jobs["xd teacher"].kind == "teacher" and jobs["PETR xd test democool seed1"].kind == "test"


def test_stage_times_from_the_runner_report():
    stages = {"a": "one", "b": "one", "c": "two", "d": "two", "e": "three"}
    outcome = Report(done=["a", "b", "c"], finished_before=["d"], failed={"e": "exit status 1"},
                     spans={"a": (0.0, 2.0), "b": (3.0, 7.5), "c": (1.0, 4.0)})
    assert stage_times(stages, outcome) == [["one", 2, 0, 7.5, 6.5], ["two", 1, 1, 3.0, 3.0], ["three", 0, 0, 0.0, 0]]


def test_demo_skips_finished_runs_and_a_failure_stops_only_its_dependents(tmp_path):
    """The demo's jobs on the runner: a run folder with results.json (or the xd teacher's pointer file) that the job
    finished with the same command and data is not run again, a failed job is reported with its log's tail, the jobs
    that need it are not run and the others are."""
    demo = Demo(QUICK, Paths(str(tmp_path / "d"), str(tmp_path / "o"), str(tmp_path / "c")), threads=1, workers=2)
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
    regenerated = Demo(replace(QUICK, data=replace(QUICK.data, seed=1)), demo.paths, threads=1, workers=2)
    again = regenerated.job("stage", **{k: v for k, v in jobs[0].__dict__.items() if k != "reads"})
    assert regenerated.run_jobs([again], str(tmp_path / "logs")).done == ["finished"]  # other data: not skipped
    text = failures(outcome)
    assert text.startswith(f"FAILED bad: exit status 3; log {tmp_path / 'logs' / 'bad.log'}\n")
    assert "line 7\n" in text and "line 6\n" not in text and "error: the reason" in text  # the log's last 15 lines
    assert "Not run (they need a failed run): needs bad" in text and text.splitlines()[-1].startswith("error: 1 ")
    assert stage_times(demo.stages, outcome)[0][1:3] == [1, 2]


@pytest.fixture(scope="module")
def quick_demo(tmp_path_factory):
    """Run ``bash scripts/demo.sh --quick`` once into a temporary work folder; returns (workdir, stdout)."""
    work = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "PYTHON": sys.executable}
    for key in ("DEMO_DATA", "DEMO_OUTPUT", "DEMO_CACHE"):
        env.pop(key, None)
    proc = subprocess.run(["bash", "scripts/demo.sh", "--quick", "--workdir", str(work)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return work, proc.stdout


def _results(work, role: str, trainer: str, seed: int, config: str = "demo") -> dict:
    root = os.path.join(work, "output", "demo", "base2new", role, "demo_shapes_hard")
    (shots,) = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, trainer, config))]
    return read_json(os.path.join(root, shots, trainer, config, f"seed{seed}", "results.json"))


def _transfer(work, tree: str, dataset: str, trainer: str, seed: int = 1) -> dict:
    return read_json(os.path.join(work, "output", "demo", tree, dataset, "shots_0", trainer, "demo", f"seed{seed}",
                                  "results.json"))


@pytest.mark.slow
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
    assert _transfer(work, "xd/test", SOURCE, "PETR")["share_seen"] >= 80.0
    for target in QUICK.xd_targets:  # DemoCool: novel colours
        assert _transfer(work, "xd/test", target, "PETR")["share_seen"] <= 20.0
    for target in QUICK.dg_targets:
        for tree, trainer in (("dg/test", "PETR"), ("xd/test", "PromptKD")):
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
    # the summary: parse_test_res.py's table, the statistics, routing, effects, transfer tables, plot and times
    for m in METHODS + LEARNERS:
        assert f"demo_shapes_hard  {m}/demo" in stdout
    for x in LEARNERS:
        assert f"demo_shapes_hard  PETRX/demo_{x.lower()}" in stdout and f"PETR+{x}'s HM above {x}'s" in stdout
    for text in ("mean ± sample std", "Δ θ_u novel", "route novel", "PETR routes most base and novel images right",
                 "cross-dataset", "domain generalisation", "demonet (source)", "Time per stage",
                 "xd_test.sh / dg_test.sh (seed 1) reproduce the training runs' accuracies: yes"):
        assert text in stdout
    assert os.path.isfile(os.path.join(work, "output", "demo", "figures", "demo_shapes_hard_seed1_mahalanobis.png"))
