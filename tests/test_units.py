"""The unit commands through their scripts: for a representative set of ``scripts/<method>/<command>.sh``, the run
folders and ``train.py`` argument lists (``python -m units --print-argv``) equal the ones written out here by hand,
element for element, and a mistake is one ``error:`` line with exit status 2."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers_run import HANG_GUARD_S, REPO, ScriptRunner
from tests.helpers_upstream import fork_train_tail
from trainers.catalog import METHODS

EXTRA = "OPTIM.MAX_EPOCH 1 INPUT.SIZE (32,32)"


def finished(run: str, model: str = "prompt_learner") -> None:
    """A finished run folder with one saved model (its last epoch: no model-best)."""
    os.makedirs(os.path.join(run, model))
    with open(os.path.join(run, model, "checkpoint"), "w") as f:
        f.write("model.pth.tar-5\n")
    with open(os.path.join(run, "results.json"), "w") as f:
        f.write("{}")


def setup(tmp_path) -> tuple[ScriptRunner, str, str, str]:
    data, out, teachers = str(tmp_path / "data"), str(tmp_path / "out"), str(tmp_path / "teachers")
    for folder in ("EuroSAT", "ImageNet-xd"):
        os.makedirs(os.path.join(teachers, folder))
    os.makedirs(data)
    env = {"DATA": data, "OUTPUT_ROOT": out, "TEACHER_DIR": teachers, "EXTRA_OPTS": EXTRA, "BACKBONE": "s.pt",
           "TEACHER_NAME": "t.pt"}
    for knob in ("CFG", "SHOTS", "SOURCE", "KD_WEIGHT", "TEACHER_CKPT", "LOAD_EPOCH", "NPROC", "MOVE_ASIDE", "SEEDS"):
        env[knob] = ""
    return ScriptRunner(tmp_path, env), data, out, teachers


def test_petr_base2new_train_and_test(tmp_path):
    runner, data, out, teachers = setup(tmp_path)
    train_dir = f"{out}/base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1"
    done, commands = runner.record(["bash", "scripts/petr/base2new_train.sh", "eurosat", "1"])
    assert done.stdout == f"Training PETR on eurosat (seed 1, α=1000.0) -> {train_dir}\n", done.stderr
    assert commands == [[
        "train.py", "--data", data, "--seed", "1", "--trainer", "PETR", "--dataset-config-file",
        "configs/datasets/eurosat.yaml", "--config-file", "configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml",
        "--output-dir", train_dir, "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "base", "TRAINER.MODAL",
        "base2novel", "TRAINER.PETR.KD_WEIGHT", "1000.0", "TRAINER.PETR.TEACHER_CKPT", f"{teachers}/EuroSAT",
        "MODEL.BACKBONE.NAME", "s.pt", "TRAINER.PETR.TEACHER_NAME", "t.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE",
        "(32,32)"]]
    done, _ = runner.record(["bash", "scripts/petr/base2new_test.sh", "eurosat", "1"])
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"error: no finished training run in {train_dir}: run scripts/petr/base2new_train.sh "
                           "eurosat 1\n")
    finished(train_dir)
    test_dir = train_dir.replace("train_base", "test_new")
    done, commands = runner.record(["bash", "scripts/petr/base2new_test.sh", "eurosat", "1"], {"NPROC": "2"})
    assert done.stdout == f"Evaluating PETR on the novel classes of eurosat (seed 1) -> {test_dir}\n"
    assert commands == [[
        "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "train.py", "--data", data,
        "--seed", "1", "--trainer", "PETR", "--dataset-config-file", "configs/datasets/eurosat.yaml",
        "--config-file", "configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml", "--output-dir", test_dir,
        "--model-dir", train_dir, "--load-epoch", "last", "--eval-only", "DATASET.NUM_SHOTS", "0",
        "DATASET.SUBSAMPLE_CLASSES", "new", "TRAINER.MODAL", "base2novel", "TRAINER.PETR.KD_WEIGHT", "1000.0",
        "TRAINER.PETR.TEACHER_CKPT", f"{teachers}/EuroSAT", "MODEL.BACKBONE.NAME", "s.pt",
        "TRAINER.PETR.TEACHER_NAME", "t.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE", "(32,32)"]]


def distilled(run: str, trainer: str, model: str, teacher_name: str, teacher_ckpt: str) -> None:
    """A finished distilled-student run whose run.json records the teacher it was distilled from."""
    finished(run, model)
    ns = trainer.upper()
    with open(os.path.join(run, "run.json"), "w") as f:
        json.dump({"trainer": trainer, "mode": "train", "config": {
            "TRAINER.NAME": trainer, f"TRAINER.{ns}.TEACHER_NAME": teacher_name,
            f"TRAINER.{ns}.TEACHER_CKPT": teacher_ckpt}}, f)


def test_a_distilled_student_is_tested_against_the_teacher_it_was_distilled_from(tmp_path):
    """The test command of PromptKD (and PETR) takes the teacher from the training run's run.json: no teacher knob is
    needed (no TEACHER_DIR folder exists here), and a TEACHER_CKPT or TEACHER_NAME naming another teacher (whose text
    features would score another classifier) is one line; a run recording a teacher that is gone is one line too."""
    runner, data, out, _ = setup(tmp_path)
    teacher = tmp_path / "my-teacher"
    teacher.mkdir()
    train_dir = f"{out}/base2new/train_base/eurosat/shots_0/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx/seed1"
    distilled(train_dir, "PromptKD", "VLPromptLearner", "t.pt", str(teacher))
    test_dir = train_dir.replace("train_base", "test_new")
    knobs = {"TEACHER_DIR": str(tmp_path / "no-teachers"), "TEACHER_NAME": ""}
    done, commands = runner.record(["bash", "scripts/promptkd/base2new_test.sh", "eurosat", "1"], knobs)
    assert done.stdout == f"Evaluating PromptKD on the novel classes of eurosat (seed 1) -> {test_dir}\n", done.stderr
    assert commands == [[
        "train.py", "--data", data, "--seed", "1", "--trainer", "PromptKD", "--dataset-config-file",
        "configs/datasets/eurosat.yaml", "--config-file",
        "configs/trainers/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx.yaml", "--output-dir", test_dir, "--model-dir",
        train_dir, "--load-epoch", "last", "--eval-only", "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "new",
        "TRAINER.MODAL", "base2novel", "TRAINER.PROMPTKD.TEACHER_NAME", "t.pt", "TRAINER.PROMPTKD.TEACHER_CKPT",
        str(teacher), "MODEL.BACKBONE.NAME", "s.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE", "(32,32)"]]
    same, _ = runner.record(["bash", "scripts/promptkd/base2new_test.sh", "eurosat", "1"],
                            {"TEACHER_CKPT": str(teacher) + "/", "TEACHER_NAME": "t.pt"})
    assert same.returncode == 0, same.stderr
    why = (f"error: {train_dir} was distilled from the teacher {teacher} (TEACHER_NAME t.pt), whose text features "
           "score its student; {} would score another classifier: unset it (the test takes the run's teacher)\n")
    for knob, value in (("TEACHER_CKPT", "none"), ("TEACHER_CKPT", str(tmp_path)), ("TEACHER_NAME", "ViT-B/16")):
        done, commands = runner.record(["bash", "scripts/promptkd/base2new_test.sh", "eurosat", "1"], {knob: value})
        assert (done.returncode, done.stderr, commands) == (2, why.format(f"{knob}={value}"), [])
    teacher.rmdir()
    done, _ = runner.record(["bash", "scripts/promptkd/base2new_test.sh", "eurosat", "1"])
    assert (done.returncode, done.stderr) == (2, f"error: {train_dir} was distilled from the teacher {teacher}, which "
                                                 "is gone: its text features score the student, so restore it there\n")


@pytest.mark.parametrize("method, trainer, config", [("promptkd", "PromptKD", "vit_b16_c2_ep20_batch8_4+4ctx"),
                                                     ("petr", "PETR", "vit_b16_ep40_batch8_4ctx")])
def test_shots_limit_a_distilled_students_base_to_novel_images(tmp_path, method, trainer, config):
    """SHOTS (default 0: every train image) is the students' train images per class in base-to-novel too, and names
    the run folders of the training and of its test, as in cross-dataset and DG."""
    runner, _, out, _ = setup(tmp_path)
    train_dir = f"{out}/base2new/train_base/eurosat/shots_120/{trainer}/{config}/seed1"
    done, (argv,) = runner.record(["bash", f"scripts/{method}/base2new_train.sh", "eurosat", "1"], {"SHOTS": "120"})
    assert done.stdout.endswith(f" -> {train_dir}\n") and argv[argv.index("--output-dir") + 1] == train_dir
    assert argv[argv.index("DATASET.NUM_SHOTS") + 1] == "120"
    done, _ = runner.record(["bash", f"scripts/{method}/base2new_test.sh", "eurosat", "1"], {"SHOTS": "120"})
    assert done.stderr.startswith(f"error: no finished training run in {train_dir}: ")
    distilled(train_dir, trainer, "VLPromptLearner", "t.pt", str(tmp_path))
    done, (argv,) = runner.record(["bash", f"scripts/{method}/base2new_test.sh", "eurosat", "1"], {"SHOTS": "120"})
    assert argv[argv.index("--model-dir") + 1] == train_dir and argv[argv.index("DATASET.NUM_SHOTS") + 1] == "120"
    assert argv[argv.index("--output-dir") + 1] == train_dir.replace("train_base", "test_new")


def test_a_seed_that_is_no_number_is_one_line(tmp_path):
    """A <seed> argument or a SEEDS entry that is no number stops the command with one line before any run (it never
    reaches train.py's argument parser)."""
    runner, _, out, _ = setup(tmp_path)
    for script, args, knobs in (("coop/base2new_train.sh", ["eurosat", "abc"], {}),
                                ("promptkd/base2new_test.sh", ["eurosat", "abc"], {}),
                                ("coop/main.sh", ["eurosat", "vit_b16", "end", "16", "1", "False"], {"SEEDS": "1 x"})):
        done, commands = runner.record(["bash", f"scripts/{script}", *args], knobs)
        seed = args[-1] if not knobs else "x"
        given = f" (in SEEDS={knobs['SEEDS']})" if knobs else ""
        assert (done.returncode, done.stdout, done.stderr, commands) == (
            2, "", f"error: scripts/{script}: seed must be a number (0, 1, 2, ...), not {seed!r}{given}\n", [])
    assert not os.path.exists(out)


@pytest.mark.parametrize("method", ["maple", "cocoop", "ivlp"])
def test_prompt_learner_tests_load_the_last_epoch_as_upstreams_scripts(tmp_path, method):
    """Upstream's test scripts of CoCoOp, MaPLe and IVLP load their config's last epoch (``--load-epoch``), also when
    the run kept a model-best.pth.tar (a best_val run); LOAD_EPOCH picks another."""
    runner, data, out, _ = setup(tmp_path)
    trainer, model, config = {"maple": ("MaPLe", "MultiModalPromptLearner", "vit_b16_c2_ep5_batch4_2ctx"),
                              "cocoop": ("CoCoOp", "prompt_learner", "vit_b16_c4_ep10_batch1_ctxv1"),
                              "ivlp": ("IVLP", "VLPromptLearner", "vit_b16_c2_ep20_batch4_4+4ctx")}[method]
    train_dir = f"{out}/base2new/train_base/eurosat/shots_16/{trainer}/{config}/seed1"
    xd_dir = train_dir.replace("base2new/train_base/eurosat", "xd/train/imagenet")
    for run in (train_dir, xd_dir.replace(config, f"{config}_cross_datasets") if method == "maple" else xd_dir):
        finished(run, model)
        open(os.path.join(run, model, "model-best.pth.tar"), "wb").close()
    done, commands = runner.record(["bash", f"scripts/{method}/base2new_test.sh", "eurosat", "1"])
    assert done.returncode == 0, done.stderr
    assert commands[0][commands[0].index("--model-dir"):][:5] == ["--model-dir", train_dir, "--load-epoch", "last",
                                                                  "--eval-only"]
    done, commands = runner.record(["bash", f"scripts/{method}/xd_test.sh", "caltech101", "1"])
    assert done.returncode == 0, done.stderr
    assert commands[0][commands[0].index("--model-dir") + 2:][:3] == ["--load-epoch", "last", "--eval-only"]
    done, commands = runner.record(["bash", f"scripts/{method}/base2new_test.sh", "eurosat", "1"], {"LOAD_EPOCH": "3"})
    assert commands[0][commands[0].index("--model-dir"):][:5] == ["--model-dir", train_dir, "--load-epoch", "3",
                                                                  "--eval-only"]


def test_promptkd_xd_train(tmp_path):
    runner, data, out, teachers = setup(tmp_path)
    run = f"{out}/xd/train/dtd/shots_0/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets/seed2"
    done, commands = runner.record(["bash", "scripts/promptkd/xd_train.sh", "dtd", "2"], {"MOVE_ASIDE": "1"})
    assert done.stdout == (f"Training PromptKD (cross, ImageNet teacher) on dtd (seed 2, 0 shots, α=1000.0) -> "
                           f"{run}\n")
    assert commands == [[
        "train.py", "--data", data, "--seed", "2", "--trainer", "PromptKD", "--dataset-config-file",
        "configs/datasets/dtd.yaml", "--config-file",
        "configs/trainers/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets.yaml", "--output-dir", run,
        "--move-aside", "DATASET.NUM_SHOTS", "0", "DATASET.SUBSAMPLE_CLASSES", "all", "TRAINER.MODAL", "cross",
        "TRAINER.PROMPTKD.KD_WEIGHT", "1000.0", "TRAINER.PROMPTKD.TEMPERATURE", "1.0",
        "TRAINER.PROMPTKD.TEACHER_CKPT", f"{teachers}/ImageNet-xd", "MODEL.BACKBONE.NAME", "s.pt",
        "TRAINER.PROMPTKD.TEACHER_NAME", "t.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE", "(32,32)"]]


def test_coop_main_runs_each_seed(tmp_path):
    runner, data, out, _ = setup(tmp_path)
    done, commands = runner.record(["bash", "scripts/coop/main.sh", "caltech101", "vit_b16", "end", "16", "4",
                                    "False"], {"SEEDS": "1 3"})
    runs = [f"{out}/caltech101/CoOp/vit_b16_4shots/nctx16_cscFalse_ctpend/seed{seed}" for seed in (1, 3)]
    assert done.stdout == "".join(f"Training CoOp on 4 shots of caltech101 (seed {seed}) -> {run}\n"
                                  for seed, run in zip((1, 3), runs))
    assert commands == [[
        "train.py", "--data", data, "--seed", str(seed), "--trainer", "CoOp", "--dataset-config-file",
        "configs/datasets/caltech101.yaml", "--config-file", "configs/trainers/CoOp/vit_b16.yaml", "--output-dir",
        run, "TRAINER.COOP.N_CTX", "16", "TRAINER.COOP.CSC", "False", "TRAINER.COOP.CLASS_TOKEN_POSITION", "end",
        "DATASET.NUM_SHOTS", "4", "MODEL.BACKBONE.NAME", "s.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE", "(32,32)"]
        for seed, run in zip((1, 3), runs)]


def test_petr_x_base2new_finds_upstream_kgcoops_folder(tmp_path):
    """Upstream KgCoOp's script writes shots_16_<W>: the one such run of the seed is X's run (a note says so); two
    (two weights) are one line naming both."""
    runner, _, out, _ = setup(tmp_path)
    tail = "KgCoOp/vit_b16_ep100_ctxv1/seed1"
    upstream = f"{out}/base2new/train_base/eurosat/shots_16_8.0/{tail}"
    os.makedirs(upstream)
    with open(os.path.join(upstream, "log.txt"), "w") as f:
        f.write(fork_train_tail("KgCoOp", 81.25))
    done, commands = runner.record(["bash", "scripts/petr_x/base2new.sh", "kgcoop", "eurosat", "1"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (f"note: X's run is upstream's {upstream} (no "
                                           f"{out}/base2new/train_base/eurosat/shots_16/{tail})")
    assert [c[c.index("TRAINER.PETRX.TUNED_MODEL_DIR") + 1] for c in commands] == [upstream, upstream]
    other = upstream.replace("shots_16_8.0", "shots_16_2.0")
    os.makedirs(other)
    done, _ = runner.record(["bash", "scripts/petr_x/base2new.sh", "kgcoop", "eurosat", "1"])
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: no KgCoOp run at {out}/base2new/train_base/eurosat/shots_16/{tail}; upstream's {other}, {upstream} "
        "are several: train one with its base-to-novel script (same dataset, seed and SHOTS), or give its folder as "
        "the fourth argument (X_RUN_DIR)"]


def test_petr_x_base2new_routes_on_the_coop_run(tmp_path):
    runner, data, out, _ = setup(tmp_path)
    coop = f"{out}/base2new/train_base/imagenet/shots_16/CoOp/vit_b16_ep50_ctxv1/seed1"
    done, _ = runner.record(["bash", "scripts/petr_x/base2new.sh", "coop", "imagenet", "1"])
    upstream = f"{out}/base2new/train_base/imagenet/shots_16_*/CoOp/vit_b16_ep50_ctxv1/seed1"
    assert (done.returncode, done.stderr) == (2, f"error: no CoOp run at {coop} nor upstream's {upstream}: train one "
                                                 "with its base-to-novel script (same dataset, seed and SHOTS), or "
                                                 "give its folder as the fourth argument (X_RUN_DIR)\n")
    finished(coop)
    done, commands = runner.record(["bash", "scripts/petr_x/base2new.sh", "coop", "imagenet", "1"],
                                   {"TUNED_LOAD_EPOCH": "3"})
    base, new = (f"{out}/base2new/{role}/imagenet/shots_16/PETRX/vit_b16_coop/seed1" for role in ("train_base",
                                                                                                  "test_new"))
    assert done.stdout.splitlines() == [
        f"PETR+X on CoOp run {coop}: router fit and base-class evaluation of imagenet (seed 1) -> {base}",
        f"PETR+X on CoOp run {coop}: novel-class evaluation of imagenet (seed 1) with the router of {base} -> {new}"]
    head = ["train.py", "--data", data, "--seed", "1", "--trainer", "PETRX", "--dataset-config-file",
            "configs/datasets/imagenet.yaml", "--config-file", "configs/trainers/PETRX/vit_b16.yaml"]
    x = ["TRAINER.PETRX.TUNED_TRAINER", "CoOp", "TRAINER.PETRX.TUNED_MODEL_DIR", coop, "TRAINER.PETRX.TUNED_LOAD_EPOCH",
         "3"]
    tail = ["MODEL.BACKBONE.NAME", "s.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE", "(32,32)"]
    assert commands == [
        [*head, "--output-dir", base, "DATASET.NUM_SHOTS", "16", "DATASET.SUBSAMPLE_CLASSES", "base",
         "TRAINER.MODAL", "base2novel", *x, *tail],
        [*head, "--output-dir", new, "--model-dir", base, "--eval-only", "DATASET.NUM_SHOTS", "16",
         "DATASET.SUBSAMPLE_CLASSES", "new", "TRAINER.MODAL", "base2novel", *x, *tail]]


def test_zsclip_zeroshot_has_no_seed_and_relative_paths_are_the_callers(tmp_path):
    runner, _, _, _ = setup(tmp_path)
    script = os.path.join(REPO, "scripts", "zsclip", "zeroshot.sh")
    done, commands = runner.record(["bash", "-c", f'cd "{tmp_path}" && bash "{script}" dtd vit_b16_ensemble'],
                                   {"DATA": "data", "OUTPUT_ROOT": "zs"})
    run = f"{tmp_path}/zs/ZeroshotCLIP/vit_b16_ensemble/dtd"
    assert done.stdout == f"Zero-shot CLIP (vit_b16_ensemble) on dtd -> {run}\n", done.stderr
    assert commands == [[
        "train.py", "--data", f"{tmp_path}/data", "--trainer", "ZeroshotCLIP", "--dataset-config-file",
        "configs/datasets/dtd.yaml", "--config-file", "configs/trainers/ZeroshotCLIP/vit_b16_ensemble.yaml",
        "--output-dir", run, "--eval-only", "MODEL.BACKBONE.NAME", "s.pt", "OPTIM.MAX_EPOCH", "1", "INPUT.SIZE",
        "(32,32)"]]


def test_mistakes_are_one_error_line(tmp_path):
    runner, _, _, _ = setup(tmp_path)
    done, commands = runner.record(["bash", "scripts/petr/base2new_train.sh", "eurosatt", "1"])
    assert (done.returncode, done.stdout, commands) == (2, "", [])
    assert done.stderr.startswith("error: unknown dataset 'eurosatt'; use one of: caltech101 ") and \
        done.stderr.count("\n") == 1
    done, _ = runner.record(["bash", "scripts/zsclip/zeroshot.sh"])
    assert (done.returncode, done.stderr) == (2, "error: usage: bash scripts/zsclip/zeroshot.sh <dataset> [cfg]\n")
    done, _ = runner.record(["bash", "scripts/petr/dg_train.sh", "eurosat", "1"], {"SOURCE": "demonet"})
    assert done.stderr == ("error: usage: SOURCE=demonet bash scripts/petr/dg_train.sh <demonetv2|demonet_sketch|"
                           "demonet_a|demonet_r> <seed> ('eurosat' is not a DG target of it)\n")


def test_unit_call_takes_its_knobs_not_the_environment(tmp_path, monkeypatch, capsys):
    """``units.call.UnitCall`` runs with the knobs it is given: the process's own DATA / OUTPUT_ROOT / EXTRA_OPTS
    (set to other values here) change nothing, and relative paths are taken from its caller folder."""
    from units.call import UnitCall

    os.makedirs(tmp_path / "data")
    for knob, value in {"DATA": "/elsewhere", "OUTPUT_ROOT": "/elsewhere/out", "EXTRA_OPTS": "OPTIM.LR 9"}.items():
        monkeypatch.setenv(knob, value)
    call = UnitCall("coop", "main", ("caltech101", "vit_b16", "end", "16", "4", "False"),
                    {"DATA": "data", "OUTPUT_ROOT": "out", "SEEDS": "2"}, caller=str(tmp_path))
    assert call(dry=True) == 0
    run = f"{tmp_path}/out/caltech101/CoOp/vit_b16_4shots/nctx16_cscFalse_ctpend/seed2"
    line, argv = capsys.readouterr().out.splitlines()
    assert line == f"Training CoOp on 4 shots of caltech101 (seed 2) -> {run}"
    assert json.loads(argv) == {"dir": run, "argv": [
        "train.py", "--data", f"{tmp_path}/data", "--seed", "2", "--trainer", "CoOp", "--dataset-config-file",
        "configs/datasets/caltech101.yaml", "--config-file", "configs/trainers/CoOp/vit_b16.yaml", "--output-dir",
        run, "TRAINER.COOP.N_CTX", "16", "TRAINER.COOP.CSC", "False", "TRAINER.COOP.CLASS_TOKEN_POSITION", "end",
        "DATASET.NUM_SHOTS", "4"]}
    assert UnitCall("coop", "no_such_command")() == 2
    assert capsys.readouterr().err.startswith("error: usage: python -m units")


def test_unit_call_plans_its_run_folders_before_their_inputs_exist(tmp_path, capsys):
    """``UnitCall.runs()``: the folders a command writes, in order, while the training run and the teacher it reads
    do not exist yet (the runner plans its jobs with them), where ``--check-argv`` refuses as the command would; it
    prints nothing. ``--print-argv`` prints the run without any of its inputs."""
    from units.call import UnitCall

    out = str(tmp_path / "out")
    knobs = {"DATA": str(tmp_path / "no-data"), "OUTPUT_ROOT": out, "TEACHER_DIR": str(tmp_path / "no-teachers")}
    test = UnitCall("petr", "base2new_test", ("eurosat", "1"), knobs)
    assert test.runs() == (f"{out}/base2new/test_new/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1",)
    assert UnitCall("zsclip", "base2new_test", ("dtd",), knobs).runs() == tuple(
        f"{out}/base2new/{role}/dtd/shots_0/ZeroshotCLIP/vit_b16/seed1" for role in ("train_base", "test_new"))
    assert capsys.readouterr() == ("", "")
    assert test(dry=True) == 2
    assert capsys.readouterr().err.startswith("error: DATA=")
    assert test(dry=True, check=False) == 0
    out_lines = capsys.readouterr().out.splitlines()
    assert json.loads(out_lines[-1])["dir"] == test.runs()[0] and "--model-dir" in json.loads(out_lines[-1])["argv"]


def test_units_help_lists_every_method_and_exits_0():
    done = subprocess.run([sys.executable, "-m", "units", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert done.returncode == 0 and done.stdout.startswith("usage: python -m units")
    for folder in {m.scripts for m in METHODS.values()}:
        assert f" {folder}: " in " " + " ".join(done.stdout.split()), folder
    bare = subprocess.run([sys.executable, "-m", "units"], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert bare.returncode == 2 and bare.stderr.count("\n") == 1 and bare.stderr.startswith("error: ")


@pytest.mark.parametrize("name", ["PETR+CoOp", "PETRCoOp"])
def test_a_method_is_named_as_the_tables_name_it_or_by_its_scripts_folder(name):
    """``python -m units METHOD``: the method's name in the tables or its trainer runs its scripts folder's command."""
    def argv(method: str) -> str:
        done = subprocess.run([sys.executable, "-m", "units", "--print-argv", method, "base2new_train", "eurosat", "1"],
                              cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert argv(name) == argv("petr_coop") and "PETRCoOp/vit_b16_ctxv1/seed1" in argv(name)


def test_a_stopping_signal_waits_for_torchruns_status():
    """A unit with NPROC > 1 runs torchrun as a child; a stopping signal (which the scheduler sends the child too)
    must not end or requeue the caller first: it gets the child's status (75 here, as after a saved state), and its
    own handlers are back afterwards."""
    from units.unit import run_train

    before = signal.getsignal(signal.SIGTERM)
    child = "import os, signal, sys; os.kill(os.getppid(), signal.SIGTERM); sys.exit(75)"
    assert run_train(["-c", child]) == 75
    assert signal.getsignal(signal.SIGTERM) is before


STOPPING_WORKER = """
import os, signal, sys, time
got = []
for sig in (signal.SIGTERM, signal.SIGUSR1):
    signal.signal(sig, lambda signum, frame: got.append(signum))
folder, rank = sys.argv[1], os.environ["RANK"]
open(os.path.join(folder, "ready" + rank), "w").close()
deadline = time.monotonic() + float(sys.argv[3])
if rank == "0":  # both workers wait for a signal: send it where a process group gets it (the unit, torchrun)
    while not os.path.exists(os.path.join(folder, "ready1")) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in (int(os.environ["UNIT_PID"]), os.getppid()):
        os.kill(pid, getattr(signal, sys.argv[2]))
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
if got:  # as train.py: its state saved, then 75
    open(os.path.join(folder, "saved" + rank), "w").write(signal.Signals(got[0]).name)
sys.exit(75 if got else 1)
"""


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGTERM"])
def test_a_unit_reports_75_when_torchruns_workers_stop_on_a_signal(tmp_path, monkeypatch, name):
    """A unit with NPROC > 1 runs torchrun, whose workers live in sessions of their own: a preemption signal to the
    unit's process group (the unit and torchrun) must reach them through torchrun, which then exits 1 whatever their
    status; the unit reports 75 (preempted), as its in-process train.py would, once both processes saved."""
    from engine.preemption import stopped_by
    from trainers.catalog import by_scripts
    from units.unit import Unit, run_train

    unit = Unit(by_scripts("petr"), "scripts/petr/base2new_train.sh", {"NPROC": "2", "DATA": str(tmp_path)},
                str(tmp_path))
    argv = unit.argv("eurosat", str(tmp_path / "out"), [], "demo", "1")
    launch = argv[:argv.index("train.py")]
    assert launch[:5] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    worker = tmp_path / "worker.py"
    worker.write_text(STOPPING_WORKER)
    monkeypatch.setenv("UNIT_PID", str(os.getpid()))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert run_train([*launch, str(worker), str(tmp_path), name, str(HANG_GUARD_S)]) == 75
    assert stopped_by() == name
    # torchrun passed the signal on and waited for both processes (a torchrun that dies of it leaves them behind)
    assert [(tmp_path / f"saved{rank}").read_text() for rank in (0, 1)] == [name, name]
