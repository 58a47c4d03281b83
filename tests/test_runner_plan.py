"""The protocol runner's plan: jobs and dependencies of each protocol, run folders that agree with the scripts',
run states, the projected GPU time, the dry-run printout, the fast profile's overrides and clear errors."""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys

import pytest

from datasets.sizes import PUBLISHED_SIZES
from runner.cli import main as runner_main
from runner.costs import LOADER_RATES, bound, projected_seconds, projection
from runner.jobs import job_states, record_job
from runner.profiles import FAST, PAPER, bf16_opts, launch_env
from runner.protocols import Planner, Sweep, merge_plans
from tests.helpers_run import ScriptRunner
from trainers.catalog import METHODS, find_method

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
B2N = ("imagenet", "caltech101", "oxford_pets", "stanford_cars", "oxford_flowers", "food101", "fgvc_aircraft",
       "sun397", "dtd", "eurosat", "ucf101")


def sweep(protocol: str, methods: tuple[str, ...], datasets: tuple[str, ...], tmp_path, **kw) -> Sweep:
    return Sweep(protocol=protocol, methods=tuple(find_method(m) for m in methods), datasets=datasets,
                 seeds=kw.pop("seeds", (1, 2, 3)), data=str(tmp_path / "data"), output=str(tmp_path / "out"),
                 teacher_dir=str(tmp_path / "teachers"), **kw)


def by_name(jobs):
    return {j.name: j for j in jobs}


def test_full_paper_base2new_plan(tmp_path):
    jobs = Planner(sweep("base2new", ("PETR", "PromptKD", "CoOp", "PETR+CoOp", "ZeroshotCLIP"), B2N,
                         tmp_path)).plan()
    kinds = {k: sum(j.kind == k for j in jobs) for k in ("teacher", "zero-shot", "train", "test", "plug-in")}
    # 11 teachers; per dataset and seed: PETR, PromptKD, CoOp train + test, PETR+CoOp plug-in; zero-shot once
    assert kinds == {"teacher": 11, "zero-shot": 11, "train": 11 * 3 * 3, "test": 11 * 3 * 3, "plug-in": 11 * 3}
    jobs = by_name(jobs)
    assert jobs["PETR train eurosat seed2"].deps == ("teacher eurosat",)
    assert jobs["PromptKD test dtd seed3"].deps == ("PromptKD train dtd seed3",)
    assert jobs["PETR+CoOp plug-in sun397 seed1"].deps == ("CoOp train sun397 seed1",)
    assert jobs["CoOp train eurosat seed1"].deps == ()
    coop_imagenet = jobs["CoOp train imagenet seed1"]
    assert coop_imagenet.knobs["CFG"] == "vit_b16_ep50_ctxv1" and jobs["CoOp train dtd seed1"].knobs["CFG"] == \
        "vit_b16_ctxv1"
    teacher = jobs["teacher eurosat"]
    assert teacher.call.argv == ("bash", "scripts/teacher/base2new_train.sh", "eurosat", "1")
    assert teacher.files == (str(tmp_path / "teachers" / "EuroSAT" / "VLPromptLearner" / "checkpoint"),)
    assert jobs["PETR test eurosat seed2"].runs == (
        str(tmp_path / "out/base2new/test_new/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed2"),)


def test_shots_limit_the_distilled_students_of_base_to_novel(tmp_path):
    """The sweep's shots are PromptKD's and PETR's train images per class (their training and test run folders and
    SHOTS), and their projected steps; the few-shot methods (CoOp, the plug-in, the teacher) keep their 16."""
    plan = Planner(sweep("base2new", ("PETR", "PromptKD", "PETR+CoOp"), ("eurosat",), tmp_path, seeds=(1,),
                         shots=120)).plan()
    jobs = by_name(plan)
    for method in ("PETR", "PromptKD"):
        for kind in ("train", "test"):
            job = jobs[f"{method} {kind} eurosat seed1"]
            assert job.knobs["SHOTS"] == "120" and "/eurosat/shots_120/" in job.runs[0], job.name
    assert jobs["teacher eurosat"].knobs["SHOTS"] == "16"
    for name in ("CoOp train eurosat seed1", "PETR+CoOp plug-in eurosat seed1"):
        assert jobs[name].knobs["SHOTS"] == "16" and "/eurosat/shots_16/" in jobs[name].runs[0], name
    # EuroSAT: 10 classes, 5 base; PETR 40 epochs of 120 x 5 base images at batch 8, PromptKD 20 of 120 x 10
    petr = projection(jobs["PETR train eurosat seed1"], "base2new", "paper")
    kd = projection(jobs["PromptKD train eurosat seed1"], "base2new", "paper")
    assert petr.gpu_s == pytest.approx(40 * math.ceil(600 / 8) * 38.4 / 1000)
    assert kd.gpu_s == pytest.approx(20 * math.ceil(1200 / 8) * 31.5 / 1000)


def test_plugin_without_coop_and_teacher_given(tmp_path):
    """PETR+CoOp alone still trains CoOp (not its novel test); TEACHER_CKPT replaces the teacher jobs."""
    jobs = by_name(Planner(sweep("base2new", ("PETR+CoOp", "PETR"), ("dtd",), tmp_path, seeds=(1,),
                                 knobs={"TEACHER_CKPT": "/t.pt"})).plan())
    assert set(jobs) == {"CoOp train dtd seed1", "PETR+CoOp plug-in dtd seed1", "PETR train dtd seed1",
                         "PETR test dtd seed1"}
    assert jobs["PETR train dtd seed1"].deps == () and jobs["PETR train dtd seed1"].knobs["TEACHER_CKPT"] == "/t.pt"


def test_cross_dataset_and_dg_plans(tmp_path):
    xd = by_name(Planner(sweep("xd", ("PETR", "PromptKD", "ZeroshotCLIP"), ("dtd", "eurosat"), tmp_path,
                               seeds=(1, 2))).plan())
    assert sorted(xd) == sorted(["teacher imagenet", *[f"{m} train {d} seed{s}" for m in ("PETR", "PromptKD")
                                                      for d in ("imagenet", "dtd", "eurosat") for s in (1, 2)],
                                 *[f"ZeroshotCLIP zero-shot {d}" for d in ("imagenet", "dtd", "eurosat")]])
    assert xd["teacher imagenet"].call.argv == ("bash", "scripts/teacher/xd_train.sh", "1")
    assert xd["teacher imagenet"].files == (str(tmp_path / "teachers/ImageNet-xd/VLPromptLearner/checkpoint"),)
    assert xd["PETR train dtd seed2"].knobs["SOURCE"] == "imagenet"
    assert xd["PETR train dtd seed2"].knobs["CFG"] == "vit_b16_ep40_batch8_4ctx_cross_datasets"
    dg = by_name(Planner(sweep("dg", ("PETR", "PromptKD"), ("imagenet_a",), tmp_path, seeds=(1,))).plan())
    assert dg["PromptKD test imagenet_a seed1"].call.argv[1] == "scripts/promptkd/xd_test.sh"
    assert set(dg["PromptKD test imagenet_a seed1"].deps) == {"PromptKD train imagenet seed1", "teacher imagenet"}
    assert dg["PETR train imagenet_a seed1"].call.argv[1] == "scripts/petr/dg_train.sh"
    assert dg["PETR train imagenet_a seed1"].runs == (
        str(tmp_path / "out/dg/train/imagenet_a/shots_0/PETR/vit_b16_ep40_batch8_4ctx_cross_datasets/seed1"),)
    with pytest.raises(ValueError, match="CoOp: no xd scripts"):
        Planner(sweep("xd", ("CoOp",), ("dtd",), tmp_path)).plan()


def skipped_dirs(output: str) -> set[str]:
    return {os.path.normpath(m) for m in re.findall(r"Run finished(?: \(upstream[^)]*\))?, skipping(?: training)?: "
                                                    r"(\S+)", output)}


@pytest.mark.parametrize("protocol,methods,datasets", [
    ("base2new", ("PETR", "PromptKD", "CoOp", "PETR+CoOp", "ZeroshotCLIP", "PromptSRC"), ("demo_shapes_hard",)),
    ("xd", ("PETR", "PromptKD", "ZeroshotCLIP"), ("democool",)),
    ("dg", ("PETR", "PromptKD", "ZeroshotCLIP"), ("demonet_a",)),
])
def test_planned_run_folders_are_the_scripts_folders(tmp_path, protocol, methods, datasets):
    """Mark every planned run finished (a results.json); each job's own script must then hand exactly those folders
    to train.py (which skips a finished run of the same config; recorded here, not run) or skip them itself, so the
    runner's idea of a finished job is the unit command's."""
    plan = sweep(protocol, methods, datasets, tmp_path, seeds=(1,), source="demonet", config="demo")
    (tmp_path / "data").mkdir()
    jobs = Planner(plan).plan()
    assert set(job_states(jobs).values()) == {"new"}
    for job in jobs:
        for run in job.runs:
            os.makedirs(run, exist_ok=True)
            with open(os.path.join(run, "results.json"), "w") as f:
                json.dump({"accuracy": 50.0}, f)
            model = os.path.join(run, "VLPromptLearner")  # a saved model (the teacher's folder name) to evaluate
            os.makedirs(model, exist_ok=True)
            for name, text in (("checkpoint", "model.pth.tar-1\n"), ("model.pth.tar-1", "")):
                with open(os.path.join(model, name), "w") as f:
                    f.write(text)
        if job.method == "PETR+CoOp":  # plugin.sh checks that the CoOp run it plugs into exists
            os.makedirs(os.path.join(job.runs[0].replace("PETRCoOp", "CoOp").replace("demo_plugin", "demo"),
                                     "prompt_learner"), exist_ok=True)
    recorder = ScriptRunner(tmp_path, {})
    for job in (j for j in jobs if j.runs):  # a teacher job without a run to check would train
        env = {k: v for k, v in job.knobs.items() if k != "PYTHON"}
        done, commands = recorder.record(list(job.call.argv), {**env, "TEACHER_CKPT": "none"})
        said = skipped_dirs(done.stdout) | {os.path.normpath(c[c.index("--output-dir") + 1]) for c in commands}
        assert {os.path.normpath(r) for r in job.runs} <= said, (job.name, done.stdout, done.stderr)
    finished = {j.name for j in jobs if all(os.path.exists(f) for f in j.files)}
    assert {name for name, state in job_states(jobs).items() if state == "check"} == finished  # no job recorded them
    for job in jobs:
        if job.name in finished:
            record_job(job)
    current = set()  # finished and recorded, and so is every job it needs (an unpublished teacher runs again)
    for job in jobs:
        if job.name in finished and all(d in current for d in job.deps):
            current.add(job.name)
    assert {name for name, state in job_states(jobs).items() if state == "finished"} == current
    assert {name for name, state in job_states(jobs).items() if state == "check"} == finished - current


def loaded(rate_of: str, size: str, cpus: int = 8) -> float:
    """Seconds per image that ``cpus`` loader processes need on the path ``rate_of`` at ``size``."""
    return 1 / (cpus * LOADER_RATES[size][rate_of])


def test_projected_seconds_by_hand(tmp_path):
    """Start-up, evaluation (the longer of the GPU's and the loader's time per image) and the training steps (the
    longer of the GPU step and the loading of its images, at 8 loader processes on the dataset's image size: EuroSAT's
    64 px), plus the fast profile's compilation and views build."""
    jobs = by_name(Planner(sweep("base2new", ("PETR", "CoOp"), ("eurosat",), tmp_path, seeds=(1,))).plan())
    # EuroSAT: 10 classes, 13,500 train / 8,100 test images; base = the first 5 classes, half of the images
    steps = 40 * math.ceil(6750 / 8)
    petr = (60 + 4050 * max(0.6 / 1000, loaded("pil test", "64x64"))
            + max(steps * 38.4 / 1000, steps * 16 * loaded("pil", "64x64")))
    assert projected_seconds(jobs["PETR train eurosat seed1"], "base2new", "paper") == pytest.approx(petr)
    fast = (60 + 4050 * max(0.6 / 1000, loaded("tensor test", "64x64"))
            + max(steps * 20.4 / 1000, steps * 16 * loaded("tensor", "64x64")) + 39
            + max(4 * 13500 * 0.57 / 1000, 13500 * loaded("views build", "64x64")))
    assert projected_seconds(jobs["PETR train eurosat seed1"], "base2new", "fast") == pytest.approx(fast)
    coop_steps = 200 * math.ceil(16 * 5 / 32)
    coop_eval = 4050 * max(0.3 / 1000, loaded("pil test", "64x64"))
    coop = 60 + coop_eval + max(coop_steps * 20.0 / 1000, coop_steps * 32 * loaded("pil", "64x64"))
    assert projected_seconds(jobs["CoOp train eurosat seed1"], "base2new", "paper") == pytest.approx(coop)
    assert projected_seconds(jobs["CoOp test eurosat seed1"], "base2new", "paper") == pytest.approx(60 + coop_eval)
    teacher_steps = 20 * math.ceil(80 / 8)
    assert projected_seconds(jobs["teacher eurosat"], "base2new", "paper") == pytest.approx(
        60 + 4050 * max(1.0 / 1000, loaded("pil test", "64x64"))
        + max(teacher_steps * 43.3 / 1000, teacher_steps * 8 * loaded("pil", "64x64")))
    assert PUBLISHED_SIZES["imagenet"].train == 1_281_167


def test_the_loader_bounds_a_step_it_cannot_feed(tmp_path):
    """ImageNet (500 x 375) PromptKD in the paper profile: at one loader process per GPU, loading 8 images takes
    longer than the 31.5 ms step, so the steps take the loader's time and the plan names the loader (and how many
    times the step it needs); at 8, the fast profile's tensor decoder keeps up with its 10.3 ms step."""
    jobs = by_name(Planner(sweep("base2new", ("PromptKD",), ("imagenet",), tmp_path, seeds=(1,))).plan())
    job = jobs["PromptKD train imagenet seed1"]
    steps = 20 * math.ceil(1_281_167 / 8)
    gpu, loader = steps * 31.5 / 1000, steps * 8 * loaded("pil", "500x375", cpus=1)
    assert loader > gpu
    found = projection(job, "base2new", "paper", cpus_per_gpu=1)
    assert (found.gpu_s, found.loader_s) == (pytest.approx(gpu), pytest.approx(loader))
    assert found.seconds == pytest.approx(60 + 25000 * max(0.3 / 1000, loaded("pil test", "500x375", 1)) + loader)
    assert bound([job], "base2new", "paper", cpus_per_gpu=1) == f"loader {loader / gpu:.1f}x"
    assert bound([job], "base2new", "fast", cpus_per_gpu=8) == "GPU"
    assert bound([jobs["PromptKD test imagenet seed1"]], "base2new", "paper") == ""  # no training step


def test_upstream_projection_by_hand(tmp_path):
    """Upstream's speed: PromptKD's paper step plus the teacher's text features of every class each step, PETR as
    two such steps, CoOp and the teacher at the paper step; no compilation or teacher cache; the steps bounded by
    the PIL loader as in the paper profile (upstream loads with Dassl's)."""
    jobs = by_name(Planner(sweep("base2new", ("PETR", "PromptKD", "CoOp"), ("eurosat", "imagenet"), tmp_path,
                                 seeds=(1,))).plan())
    # EuroSAT: 10 classes, 13,500 train / 8,100 test images (base: 6,750 / 4,050); ImageNet: 1000 classes
    step_s = loaded("pil", "64x64")
    eval_b16 = 4050 * max(0.3 / 1000, loaded("pil test", "64x64"))
    kd_steps = 20 * math.ceil(13500 / 8)
    kd = 60 + eval_b16 + max(kd_steps * (31.5 + 10 * 0.047) / 1000, kd_steps * 8 * step_s)
    assert projected_seconds(jobs["PromptKD train eurosat seed1"], "base2new", "upstream") == pytest.approx(kd)
    petr_steps = 40 * math.ceil(6750 / 8)
    petr = (60 + 4050 * max(0.6 / 1000, loaded("pil test", "64x64"))
            + max(petr_steps * (63.0 + 10 * 0.094) / 1000, petr_steps * 16 * step_s))
    assert projected_seconds(jobs["PETR train eurosat seed1"], "base2new", "upstream") == pytest.approx(petr)
    in_steps = 20 * math.ceil(1_281_167 / 8)
    imagenet_kd = (60 + 25000 * max(0.3 / 1000, loaded("pil test", "500x375"))
                   + max(in_steps * (31.5 + 1000 * 0.047) / 1000, in_steps * 8 * loaded("pil", "500x375")))
    assert projected_seconds(jobs["PromptKD train imagenet seed1"], "base2new", "upstream") == pytest.approx(
        imagenet_kd)
    coop_steps = 200 * math.ceil(16 * 5 / 32)
    coop = 60 + eval_b16 + max(coop_steps * 20.0 / 1000, coop_steps * 32 * step_s)
    assert projected_seconds(jobs["CoOp train eurosat seed1"], "base2new", "upstream") == pytest.approx(coop)


def test_fast_profile_overrides(tmp_path):
    plan = sweep("base2new", ("PETR", "CoOp", "ZeroshotCLIP"), ("dtd",), tmp_path, seeds=(1,), profile=FAST,
                 extra_opts="OPTIM.MAX_EPOCH 2")
    jobs = by_name(Planner(plan).plan())
    cache = str(tmp_path / "out" / "teacher_cache")
    # the profile's overrides first, the user's after them (they win), bf16 first of all at launch
    assert jobs["PETR train dtd seed1"].knobs["EXTRA_OPTS"].split() == [
        "DATALOADER.PERSISTENT_WORKERS", "True", "INPUT.DECODER", "tensor", "TRAIN.COMPILE", "compile",
        "TRAINER.PETR.TEACHER_CACHE", "views", "TRAINER.PETR.TEACHER_CACHE_DIR", cache, "OPTIM.MAX_EPOCH", "2"]
    assert jobs["CoOp train dtd seed1"].knobs["EXTRA_OPTS"].split() == [
        "DATALOADER.PERSISTENT_WORKERS", "True", "INPUT.DECODER", "tensor", "OPTIM.MAX_EPOCH", "2"]
    assert jobs["teacher dtd"].knobs["EXTRA_OPTS"].split() == ["DATALOADER.PERSISTENT_WORKERS", "True",
                                                             "INPUT.DECODER", "tensor", "OPTIM.MAX_EPOCH", "2"]
    assert jobs["teacher dtd"].bf16_ns == "" and jobs["CoOp train dtd seed1"].bf16_ns == "COOP"
    petr = jobs["PETR train dtd seed1"]
    assert launch_env(petr.knobs, petr.bf16_ns, has_bf16=True)["EXTRA_OPTS"].startswith(
        "TRAINER.PETR.PREC bf16 DATALOADER.PERSISTENT_WORKERS True INPUT.DECODER tensor")
    assert launch_env(petr.knobs, petr.bf16_ns, has_bf16=False) == petr.knobs  # fp16 kept without bf16
    assert jobs["ZeroshotCLIP zero-shot dtd"].bf16_ns == ""  # evaluates in fp32
    paper = by_name(Planner(sweep("base2new", ("PETR",), ("dtd",), tmp_path, seeds=(1,), profile=PAPER)).plan())
    assert "EXTRA_OPTS" not in paper["PETR train dtd seed1"].knobs and paper["PETR train dtd seed1"].bf16_ns == ""


def test_fast_profile_options_are_config_keys(tmp_path):
    """Every key the fast profile sets for each method of the catalog is declared, with one of the values its owner
    accepts, and sets what the method's row says it takes (``Method.fast``)."""
    from engine import get_cfg_default
    from engine.compile import COMPILE_MODES
    from engine.decoding import DECODERS
    from engine.precision import PRECISIONS
    from trainers.config import extend_cfg
    from trainers.distillation.teacher_cache import CACHE_MODES

    for method in METHODS.values():
        cfg = extend_cfg(get_cfg_default())
        shipped = cfg.TRAINER[method.ns].PREC
        cfg.merge_from_list(FAST.opts(method, str(tmp_path)) + bf16_opts(FAST.bf16_ns(method), has_bf16=True))
        trainer = cfg.TRAINER[method.ns]
        assert cfg.DATALOADER.PERSISTENT_WORKERS is True and trainer.PREC in PRECISIONS
        assert cfg.INPUT.DECODER == "tensor" in DECODERS
        assert trainer.PREC == ("bf16" if "bf16" in method.fast else shipped), method.name
        assert cfg.TRAIN.COMPILE == ("compile" if "compile" in method.fast else "none") and cfg.TRAIN.COMPILE in \
            COMPILE_MODES
        if "teacher_cache" in method.fast:
            assert trainer.TEACHER_CACHE == "views" in CACHE_MODES
            assert trainer.TEACHER_CACHE_DIR == os.path.join(str(tmp_path), "teacher_cache")
            assert trainer.TEACHER_CACHE_IMAGES is False  # decoded views: the user's choice (their disk)
    assert {m.name for m in METHODS.values() if "teacher_cache" in m.fast} == {
        m.name for m in METHODS.values() if m.distilled}  # the distilled students have the teacher cache


def test_dry_run_prints_the_plan(tmp_path, capsys):
    (tmp_path / "out/base2new/train_base/dtd/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1").mkdir(parents=True)
    (tmp_path / "out/base2new/train_base/dtd/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1/resume.pth.tar").touch()
    status = runner_main(["base2new", "--methods", "PETR", "--datasets", "dtd", "eurosat", "--seeds", "1",
                          "--data", str(tmp_path / "data"), "--output", str(tmp_path / "out"), "--teacher-dir",
                          str(tmp_path / "teachers"), "--dry-run", "--verbose"])
    out = capsys.readouterr().out
    assert status == 2  # the preflight: no data (tests/test_runner_preflight.py); the plan is printed all the same
    assert re.search(r"^dataset +dtd +missing +3$", out, re.MULTILINE)  # its teacher, PETR train and test
    plan = out.split("Preflight (data root", 1)[0]  # the plan first, then the preflight table, the problems last
    table = {line.split()[0]: line.split()[1:] for line in plan.splitlines()
             if line.split() and line.split()[0] in ("teacher", "train", "test", "total")}
    assert table["teacher"][:5] == ["2", "2", "0", "0", "0"] and table["train"][:5] == ["2", "1", "1", "0", "0"]
    assert table["total"][:2] == ["7", "6"]  # + the tables step
    planned = Planner(sweep("base2new", ("PETR",), ("dtd", "eurosat"), tmp_path, seeds=(1,))).plan()
    assert re.search(r"GPU-h paper +GPU-h fast +GPU-h upstream$", out, re.MULTILINE)
    for column, profile in ((-3, "paper"), (-2, "fast"), (-1, "upstream")):
        expected_h = sum(projected_seconds(j, "base2new", profile) for j in planned) / 3600
        assert float(table["total"][column]) == pytest.approx(expected_h, abs=0.05)
    assert "[resume] PETR train dtd seed1 (after teacher dtd)" in out
    assert "CFG=vit_b16_ep40_batch8_4ctx SHOTS=0 bash scripts/petr/base2new_train.sh eurosat 1" in out
    assert "PETR paper: 38.4 ms (docs/throughput.md GPU table" in out
    assert "PETR upstream: 63.0 ms + 0.094 ms per class (two upstream PromptKD steps" in out
    # per method: GPU-hours and what bounds its steps, at the default 8 loader processes per GPU
    assert "Per method, with 8 loader processes per GPU (--cpus-per-gpu;" in out
    assert re.search(r"^method +GPU-h paper +GPU-h fast +GPU-h upstream +bound paper +bound fast +bound upstream$",
                     out, re.MULTILINE)
    row = next(line for line in out.splitlines() if line.startswith("PETR "))
    petr = [j for j in planned if j.method == "PETR"]  # all to run (one resumes)
    hours = [sum(projected_seconds(j, "base2new", p) for j in petr) / 3600 for p in ("paper", "fast", "upstream")]
    assert [float(v) for v in row.split()[1:4]] == pytest.approx(hours, abs=0.05)
    assert row.split(None, 4)[4].split("  ")[0] == bound(petr, "base2new", "paper")
    assert row.rstrip().endswith(bound(petr, "base2new", "upstream"))


def test_cpus_per_gpu_changes_the_projection(tmp_path, capsys):
    """One loader process per GPU instead of 8: PETR on ImageNet-sized images is bound by its loader."""
    args = ["base2new", "--methods", "PETR", "--datasets", "food101", "--seeds", "1", "--data", str(tmp_path / "d"),
            "--output", str(tmp_path / "out"), "--teacher-dir", str(tmp_path / "t"), "--dry-run"]
    totals = {}
    for cpus in ("8", "1"):
        runner_main([*args, "--cpus-per-gpu", cpus])
        out = capsys.readouterr().out
        totals[cpus] = float(next(line.split()[-3] for line in out.splitlines() if line.startswith("total")))
        row = next(line for line in out.splitlines() if line.startswith("PETR "))
        assert (" loader " in row) == (cpus == "1"), row
    assert totals["1"] > totals["8"]


def test_the_plan_says_why_a_job_has_no_projection(tmp_path, capsys):
    """A trainer without a measured step (CoCoOp) and a dataset without published sizes (the demo's) are named as
    such; the datasets of the first are not blamed."""
    runner_main(["base2new", "--methods", "CoCoOp", "PETR", "--datasets", "dtd", "demo_shapes", "--seeds", "1",
                 "--config", "demo", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "out"),
                 "--teacher-dir", str(tmp_path / "teachers"), "--dry-run"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("No projection")]
    assert lines == ["No projection for CoCoOp (no step time in runner/costs.py), demo_shapes (no sizes in "
                     "datasets/sizes.py): counted as 0 h."]


@pytest.mark.parametrize("args,message", [
    (["base2new", "--methods", "PETRXX"], f"error: unknown method 'PETRXX'; choose from {', '.join(METHODS)}\n"),
    (["base2new", "--methods", "PETRX"], "error: 'PETRX' is the trainer of PETR+KgCoOp, PETR+CoCoOp, PETR+MaPLe, "
                                         "PETR+IVLP, PETR+CLIP-Adapter: name one of them\n"),
    (["xd", "--methods", "CoOp"], "error: CoOp: no xd scripts; the xd protocol runs ZeroshotCLIP, PromptKD and PETR"),
    (["base2new", "--datasets", "eurosatt"], "error: unknown dataset 'eurosatt'; use one of: caltech101"),
    (["xd", "--source", "demonet"], "error: no default cross-dataset targets for source 'demonet': name them"),
    (["base2new", "--cpu-jobs", "0"], "error: --cpu-jobs must be at least 1"),
    (["base2new", "--cpus-per-gpu", "0"], "error: --cpus-per-gpu must be at least 1"),
    (["base2new", "--procs-per-job", "2"], "error: --procs-per-job 2 is for CPU jobs (--gpus-per-job 0): a GPU job "
                                           "runs one process per GPU (--gpus-per-job 1)"),
    (["base2new", "--config", "vit_b99"], "error: no config configs/trainers/PromptSRC/vit_b99.yaml for PromptSRC: "
                                          "check --config"),
])
def test_bad_arguments_are_one_line(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "runner", *args, "--data", str(tmp_path), "--dry-run"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith(message) and len(done.stderr.splitlines()) == 1, \
        done.stderr
    no_data = {k: v for k, v in os.environ.items() if k != "DATA"}
    done = subprocess.run([sys.executable, "-m", "runner", "base2new", "--dry-run"], cwd=REPO, env=no_data,
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("error: no datasets folder: pass --data DIR or set DATA")


def test_processes_per_job_set_nproc(tmp_path, capsys):
    """NPROC of every job: --gpus-per-job N (N > 1), or --procs-per-job N for CPU jobs; one process sets none."""
    args = ["base2new", "--methods", "CoOp", "--datasets", "dtd", "--seeds", "1", "--data", str(tmp_path / "data"),
            "--output", str(tmp_path / "out"), "--dry-run", "--verbose"]
    for extra, nproc in ((["--gpus-per-job", "2"], "NPROC=2"), (["--gpus-per-job", "0", "--procs-per-job", "3"],
                                                                "NPROC=3"), (["--gpus-per-job", "0"], None)):
        runner_main([*args, *extra])
        found = re.findall(r"NPROC=\d+", capsys.readouterr().out)
        assert (found[0] if found else None) == nproc, extra


def test_petr_x_plug_ins_route_on_their_prompt_learners_runs(tmp_path):
    jobs = by_name(Planner(sweep("base2new", ("PETR+MaPLe", "PETR+IVLP"), ("eurosat",), tmp_path, seeds=(2,))).plan())
    out = tmp_path / "out" / "base2new"
    for name, x, trainer, config in (("MaPLe", "maple", "MaPLe", "vit_b16_c2_ep5_batch4_2ctx"),
                                     ("IVLP", "ivlp", "IVLP", "vit_b16_c2_ep20_batch4_4+4ctx")):
        plugin = jobs[f"PETR+{name} plug-in eurosat seed2"]
        assert plugin.deps == (f"{name} train eurosat seed2",)
        tuned_run = str(out / "train_base/eurosat/shots_16" / trainer / config / "seed2")
        assert plugin.call.argv == ("bash", "scripts/petr_x/base2new.sh", x, "eurosat", "2", tuned_run)
        assert plugin.runs == tuple(str(out / role / "eurosat/shots_16/PETRX" / f"vit_b16_{x}" / "seed2")
                                    for role in ("train_base", "test_new"))
    assert sorted(jobs) == sorted([*(f"{m} train eurosat seed2" for m in ("MaPLe", "IVLP")),
                                   *(f"PETR+{m} plug-in eurosat seed2" for m in ("MaPLe", "IVLP"))])


def test_one_config_family_and_per_method_overrides(tmp_path):
    """``--config demo`` names each method's ``demo`` config, PETR+X's too (its runs: ``demo_<x>``); a method's own
    overrides come after the sweep's EXTRA_OPTS, and only in its jobs."""
    jobs = by_name(Planner(sweep("base2new", ("PETR+CoCoOp", "PETR"), ("demo_shapes_hard",), tmp_path, seeds=(1,),
                                 config="demo", extra_opts="TRAIN.PRINT_FREQ 5",
                                 method_opts={"CoCoOp": "OPTIM.MAX_EPOCH 3"})).plan())
    out = tmp_path / "out" / "base2new"
    plugin = jobs["PETR+CoCoOp plug-in demo_shapes_hard seed1"]
    assert plugin.call.knobs["CFG"] == "demo" and plugin.config == "demo"
    assert plugin.call.argv[-1] == str(out / "train_base/demo_shapes_hard/shots_16/CoCoOp/demo/seed1")
    assert plugin.runs[0] == str(out / "train_base/demo_shapes_hard/shots_16/PETRX/demo_cocoop/seed1")
    cocoop = jobs["CoCoOp train demo_shapes_hard seed1"].call.knobs
    assert cocoop["EXTRA_OPTS"] == "TRAIN.PRINT_FREQ 5 OPTIM.MAX_EPOCH 3"
    assert jobs["PETR train demo_shapes_hard seed1"].call.knobs["EXTRA_OPTS"] == "TRAIN.PRINT_FREQ 5"
    assert plugin.call.knobs["EXTRA_OPTS"] == "TRAIN.PRINT_FREQ 5"


def test_sweeps_of_one_source_share_their_jobs(tmp_path):
    """Cross-dataset and DG from one source in one plan: the teacher and the source's runs once, the targets' jobs
    of both; two different jobs of one name are refused."""
    xd = sweep("xd", ("PETR", "PromptKD", "ZeroshotCLIP"), ("dtd",), tmp_path, seeds=(1,))
    dg = sweep("dg", ("PETR", "PromptKD", "ZeroshotCLIP"), ("imagenet_a",), tmp_path, seeds=(1,))
    names = [j.name for j in merge_plans([Planner(xd).plan(), Planner(dg).plan()])]
    shared = ["ZeroshotCLIP zero-shot imagenet", "teacher imagenet", "PETR train imagenet seed1",
              "PromptKD train imagenet seed1"]
    assert sorted(names) == sorted([*shared, "ZeroshotCLIP zero-shot dtd", "PETR train dtd seed1",
                                    "PromptKD train dtd seed1", "ZeroshotCLIP zero-shot imagenet_a",
                                    "PETR train imagenet_a seed1", "PromptKD test imagenet_a seed1"])
    other = sweep("dg", ("PETR",), ("imagenet_a",), tmp_path, seeds=(1,), knobs={"KD_WEIGHT": "5.0"})
    with pytest.raises(ValueError, match="two sweeps plan different jobs named 'teacher imagenet'"):
        merge_plans([Planner(xd).plan(), Planner(other).plan()])
