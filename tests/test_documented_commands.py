"""Every command README.md, DATASETS.md and docs/*.md show is in one table here (:data:`COMMANDS`): run by this module
as written, run with the demo's data and tiny CLIPs in place of its placeholders, run by a named test, or not run for
a stated reason; what a page says around a command (lines, the blocks and tables it quotes, how many lines) is
checked against its output, not only its exit status; and the numbers README.md quotes from ``make demo`` equal those
of a run of its command.

A command is a line of a ```bash block or of an indented code block (continuations joined, comments dropped; ``a && b``
is one command), or an inline code span of the prose that starts with python, python3, bash, make, torchrun or
.venv/bin/python, after any ``KEY=value`` knobs (tests/helpers_docs.py). A command in no class fails
:func:`test_every_documented_command_is_in_the_table`, naming the file and what to do. ``pytest -s`` prints the list
with each command's class. Commands run as written from the repository root in a sandbox: a fresh HOME and caches,
``PETR_OFFLINE=1`` and ``HF_HUB_OFFLINE=1`` (nothing is downloaded), none of the caller's environment. A command's
program is one every user has (``python`` of the active environment, ``bash``, ``make``), never a path into one
checkout's ``.venv``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from analysis.stats import harmonic_mean
from demo.pipeline import STUDENT_SHOTS
from engine.utils import read_json
from tests.helpers_docs import (
    DOC_FILES,
    Documented,
    documented_commands,
    markdown_table,
    node_exists,
    quoted_block,
    read_doc,
    run_as_written,
    sandbox_env,
    table_shapes,
)
from tests.helpers_run import DEMO_HANG_GUARD_S, HANG_GUARD_S, REPO

WHY = {
    "data": "needs a real dataset root",
    "weights": "needs real CLIP or teacher weights",
    "gpu": "needs a GPU",
    "slurm": "needs a SLURM cluster",
    "network": "downloads",
    "long": "takes more than a few minutes on 2 cores",
    "placeholder": "holds a placeholder (<...>, ..., [optional], an upper-case NAME)",
    "install": "changes the environment",
    "output": "reads the outputs of an earlier real run",
}
"""The reasons a command is not run here."""
HUB = "https://huggingface.co/zhengli97/prompt_learning_dataset/tree/main"
DRIVE = "https://drive.google.com/drive/folders/1OdQ9WauZmYAzVSUTTw7tIKKChyECIS5B"
THIS = "tests/test_documented_commands.py"
DEMO_TEST = f"{THIS}::test_make_demo_prints_the_numbers_readme_quotes"


@dataclass(frozen=True)
class Run:
    """Run here as written; it ends with ``status`` and its output (stdout and stderr) holds each of ``lines`` (text
    within a line, or a pattern; ``{repo}``, ``{data}`` filled in). ``errors_last``: once an ``error:`` line comes,
    only ``error:`` lines follow. ``quoted``: (document, first line[, a line above it]) of a fenced block of that
    document whose every line the output holds (the sandbox's home folder written ``~``). ``table``: the same for a
    block holding a table, whose columns and rows (numbers aside) the output's table of those columns must have.
    ``count``: how many lines the output has (a page's "one line"). ``env``: knobs the command reads (``DATA``:
    ``{data}``, a folder that is not there). ``absent``: paths that must not exist for the documented outcome (else
    the command is reported, not run). ``slow``: run by the slow test."""

    status: int
    lines: tuple[str | re.Pattern, ...] = ()
    errors_last: bool = False
    quoted: tuple[str, ...] | None = None
    table: tuple[str, ...] | None = None
    count: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    absent: tuple[str, ...] = ()
    slow: bool = False


@dataclass(frozen=True)
class OnDemo(Run):
    """Run after ``make demo``'s command with the demo's data, tiny CLIPs and folders in place of its placeholders and
    paths (:func:`on_demo`), in document order (README's path is a sequence); checked as :class:`Run`'s are."""


@dataclass(frozen=True)
class Elsewhere:
    """Run by the test ``node`` (``file::function``), as ``how`` says."""

    node: str
    how: str


@dataclass(frozen=True)
class NotRun:
    """Not run: ``why`` is a key of :data:`WHY`; ``detail`` says more."""

    why: str
    detail: str = ""


@dataclass(frozen=True)
class Name:
    """A program named in prose (no command line to run as written); the test checks that the program exists."""


Check = Run | OnDemo | Elsewhere | NotRun | Name


def fetch_lines(root: str, *datasets: tuple[str, str]) -> tuple[str, ...]:
    """What datasets.fetch prints offline: the error line, then per (DATASET.NAME, folder) what and where."""
    return (f"error: cannot list {HUB} (PETR_OFFLINE=1 is set: this node does not download); what each dataset would "
            "fetch, and how to place it by hand:",
            *(f"{name}: the files named like '{folder}' in {HUB} -> {root}/{folder}; by hand: download them on a "
              f"machine with internet and unpack them so that {root}/{folder} has the layout of "
              f"DATASETS.md#{name.lower()}" for name, folder in datasets))


def teacher_lines(*names: str) -> tuple[str, ...]:
    return (f"error: cannot list {DRIVE} (PETR_OFFLINE=1 is set: this node does not download)",
            *(f"{name}: the file named like '{name}' in {DRIVE} -> {{repo}}/teachers/{name}; by hand: "
              for name in names))


ALL_FETCHED = (("Caltech101", "caltech-101"), ("EuroSAT", "eurosat"), ("ImageNetR", "imagenet-rendition"))
"""Three of the 14 datasets ``all`` fetches: the first, one in the middle and the last."""
DATA_ENV = (("DATA", "{data}"),)
PLAN = "Plan: base2new, 11 dataset(s) (imagenet caltech101 oxford_pets stanford_cars oxford_flowers food101 " \
       "fgvc_aircraft sun397 dtd eurosat ucf101), seeds 1 2 3, methods "
PREFLIGHT_STOPS = ("error: EuroSAT: /data/eurosat: dataset folder missing; put EuroSAT there (see DATASETS.md#eurosat)",
                   re.compile(r"^error: \d+ problem\(s\) with the sweep's inputs; fix them, or pass --skip-missing",
                              re.M))
NOT_ON_DEMO = "the slow test runs it on the demo's output folder, against README's description"
DEMO_RUN = Elsewhere(DEMO_TEST, "runs `make demo`'s command, `PYTHON=... bash scripts/demo.sh`, in a temporary work "
                     "folder (make demo also installs .venv and writes output/demo in the repository)")

OPEN_CLIP_OFFLINE = "error: open_clip:ViT-B-16/laion2b_s34b_b88k: open_clip weights not in the hub cache nor placed"
PETR_B2N = "DATA=/data bash scripts/petr/base2new_{}.sh eurosat 1"
DG_TEACHER = "DATA=data/demo SOURCE=demonet CFG=demo TEACHER_NAME=<teacher clip> bash scripts/teacher/xd_train.sh 1"
DG_PETR = ("DATA=data/demo SOURCE=demonet CFG=demo BACKBONE=<student clip> TEACHER_NAME=<teacher clip> bash "
           "scripts/petr/dg_train.sh demonet_sketch 1")
TRAIN_PY = ("python train.py --data /data --seed 1 --trainer PETR --dataset-config-file configs/datasets/eurosat.yaml "
            "--config-file configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml --output-dir "
            "output/base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1 DATASET.NUM_SHOTS 0 "
            "DATASET.SUBSAMPLE_CLASSES base TRAINER.MODAL base2novel TRAINER.PETR.KD_WEIGHT 1000.0 "
            "TRAINER.PETR.TEACHER_CKPT teachers/EuroSAT")
"""docs/usage.md's train.py example: README's step 4 (:func:`test_the_train_py_example_is_the_scripts_run`)."""

COMMANDS: list[tuple[str | re.Pattern, Check]] = [
    # README's path from an empty data root, and the DG example of docs/usage.md, on the demo's data, in this order
    ("python -m datasets.check --data /data eurosat", OnDemo(0, (
        re.compile(r"^DemoShapesHard +demo_shapes_hard/ +ok ", re.M), "All 1 dataset(s) match."))),
    ("DATA=/data bash scripts/teacher/base2new_train.sh eurosat 1", OnDemo(0, (
        "Teacher published to {tmp}/teachers/DemoShapesHard",))),
    (PETR_B2N.format("train"), OnDemo(0, (
        "Training PETR on demo_shapes_hard (seed 1, α=1000.0) -> {tmp}/output/base2new/train_base/demo_shapes_hard/"
        "shots_0/PETR/demo/seed1",))),
    (PETR_B2N.format("test"), OnDemo(0, ("Evaluating PETR on the novel classes of demo_shapes_hard (seed 1)",))),
    ("python parse_test_res.py b2n output/base2new --methods PETR --paper --baseline paper:PromptKD", OnDemo(0, (
        re.compile(r"^demo_shapes_hard +PETR +1/1 ", re.M), re.compile(r"^average +PETR \(paper\) +- +88\.42 ", re.M),
        "Δ = row − paper:PromptKD (baseline: set with --baseline;"))),
    (TRAIN_PY, OnDemo(0, ("Run finished, skipping: {tmp}/output/base2new/train_base/demo_shapes_hard/shots_0/PETR/demo/"
                          "seed1",))),  # the script's run, so found finished
    ("python -m demo.shapes --data data/demo", OnDemo(0, (  # make demo drew DemoShapesHard alone
        re.compile(r"^Wrote \d+ images with split files to .*/demonet_sketch", re.M),))),
    (DG_TEACHER, OnDemo(0, ("Teacher published to {tmp}/teachers/DemoNet-xd",))),
    (DG_PETR, OnDemo(0, ("Training PETR (dg: DemoNet -> demonet_sketch, seed 1, 0 shots, α=1000.0)",))),
    # run here as written
    ("python -m datasets.fetch --data /data eurosat", Run(2, fetch_lines("/data", ("EuroSAT", "eurosat")),
                                                          absent=("/data",))),
    ("python -m tools.fetch_teachers --teacher-dir teachers EuroSAT",  # slow: torch's imports, 4-5 s of CPU each
     Run(2, teacher_lines("EuroSAT"), absent=("{repo}/teachers",), slow=True)),
    ("python -m runner base2new --data /data --datasets eurosat --seeds 1 --dry-run",
     Run(2, ("Plan: base2new, 1 dataset(s) (eurosat), seeds 1, methods PETR PromptKD CoOp PETR+CoOp ZeroshotCLIP; "
             "profile paper", *PREFLIGHT_STOPS), errors_last=True, absent=("/data",))),
    ("HF_HUB_OFFLINE=1 python -m clip.download open_clip:ViT-B-16/laion2b_s34b_b88k --dir /shared/hub",
     Run(2, quoted=("docs/backbones.md", OPEN_CLIP_OFFLINE), count=1, env=(("PETR_OFFLINE", ""),),
         absent=("/shared",))),  # one line, at once, naming --dir (tests/test_openclip.py: the same without a route)
    ("python -m tools.fetch_teachers --teacher-dir teachers EuroSAT ImageNet-xd",
     Run(2, teacher_lines("EuroSAT", "ImageNet-xd"), absent=("{repo}/teachers",), slow=True)),
    ("python -m runner base2new --methods PETR PromptKD CoOp --datasets all --seeds 1 2 3 --data /data --dry-run",
     Run(2, (PLAN + "PETR PromptKD CoOp; profile paper", *PREFLIGHT_STOPS), errors_last=True, absent=("/data",))),
    ("python -m runner base2new --data /data --datasets all --seeds 1 2 3 --dry-run",
     Run(2, PREFLIGHT_STOPS, errors_last=True, quoted=("docs/RUNNER.md", "jobs         count"),
         absent=("/data", "{repo}/output"))),  # no run of an earlier sweep: every job is new
    ("python -m runner --help", Run(0, ("usage: python -m runner [-h] {{base2new,xd,dg,report}} ...",))),
    ("python -m runner base2new --help", Run(0, ("usage: python -m runner base2new", "--skip-missing", "--dry-run",
                                                 "--executor {{local,slurm}}"))),
    ("python -m units --print-argv petr base2new_train eurosat 1", Run(0, (
        "Training PETR on eurosat (seed 1, α=1000.0) -> "
        "output/base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1",
        '"argv": ["train.py", "--data", "", "--seed", "1", "--trainer", "PETR"'))),
    ("python -m units --help", Run(0, ("methods and their commands: ", "petr: base2new_train base2new_test"))),
    ("python train.py --help", Run(0, (re.compile(r"^trainers: .*\bPETR\b", re.M),
                                       re.compile(r"^datasets: .*\bEuroSAT\b", re.M)))),
    ("python parse_test_res.py paper", Run(0, (  # README's published numbers
        re.compile(r"^average +PETR +88\.42 +82\.09 +85\.14 ", re.M),
        re.compile(r"^average +PromptKD +86\.96 +80\.73 +83\.73 ", re.M)))),
    ("python -m tools.import_graph", Run(0, ("engine -> nothing", "train -> clip, datasets, engine, trainers"))),
    ("python -m datasets.fetch --data $DATA all", Run(2, fetch_lines("{data}", *ALL_FETCHED), env=DATA_ENV)),
    ("python -m datasets.fetch --data $DATA eurosat oxford_pets",
     Run(2, fetch_lines("{data}", ("EuroSAT", "eurosat"), ("OxfordPets", "oxford_pets")), env=DATA_ENV)),
    ("python -m datasets.fetch --data $DATA all --dry-run", Run(2, fetch_lines("{data}", *ALL_FETCHED), env=DATA_ENV)),
    ("python -m datasets.fetch --data $DATA imagenet", Run(2, (
        "ImageNet is not in the Hugging Face copy; place it by hand in {data}/imagenet (DATASETS.md#imagenet):",
        "  5. check it: python -m datasets.check --data {data} imagenet"), env=DATA_ENV)),
    ("python -m datasets.check --data $DATA", Run(1, (
        "ImageNet: {data}/imagenet: dataset folder missing", "ImageNetR: {data}/imagenet-rendition: dataset folder "
        "missing"), env=DATA_ENV)),
    ("python -m datasets.check --data $DATA eurosat imagenet --full", Run(1, (
        "EuroSAT: {data}/eurosat: dataset folder missing; put EuroSAT there (see DATASETS.md#eurosat)",
        "ImageNet: {data}/imagenet: dataset folder missing"), env=DATA_ENV)),
    ("python -m bench.benchmark train --model tiny --classes 10 --train-iters 5 --warmup 2 --threads 1 --precisions "
     "fp32 amp bf16 --compile none --epochs 0", Run(0, (
         "tiny student/teacher (tests, smoke runs); CPU, 1 threads;",
         "== Training steps of the real trainers (train.main, shipped configs)"),
         table=("docs/throughput.md", "step ", "--compile none --epochs 0`"), slow=True)),
    # run by a named test
    ("make demo", DEMO_RUN),
    ("bash scripts/demo.sh", DEMO_RUN),
    ("python -m demo.pipeline", DEMO_RUN),
    ("python -m tools.lambda_sweep output/demo/base2new --lambdas 1.0 1.4",
     Elsewhere(DEMO_TEST, "run as written in the demo's work folder (PYTHONPATH: the repository), after the demo")),
    ("python parse_test_res.py b2n output/base2new --methods PETR PromptKD CoOp PETR+CoOp ZeroshotCLIP",
     Elsewhere(DEMO_TEST, NOT_ON_DEMO)),
    ("make scripts", Elsewhere("tests/test_wrappers.py::test_the_checked_in_wrappers_are_the_rendered_ones",
                               "renders every wrapper and compares it with the checked-in one (make scripts writes)")),
    ("python -m units.wrappers", Elsewhere("tests/test_wrappers.py::test_the_checked_in_wrappers_are_the_rendered_ones",
                                           "as make scripts")),
    ("python -m demo.shipped expand", Elsewhere(
        "tests/test_demo_shipped.py::test_clip_files_expand_once_into_files_clip_load_reads",
        "expands the shipped files into a temporary cache (the command writes ./demo_cache)")),
    ("python -m pytest -q tests/test_demo_pipeline.py", Elsewhere(
        "tests/test_demo_pipeline.py::test_quick_demo_shows_the_effects",
        "the tests it runs (make test-all runs them)")),
    ("python -m pytest -q tests/bench/test_upstream_kgcoop.py", Elsewhere(
        "tests/bench/test_upstream_kgcoop.py::test_one_batch_equals_upstreams_own_code",
        "the tests it runs (make test-bench runs them; the comparisons skip without upstream's checkout)")),
    ("python -m pytest -q tests/bench/test_upstream_clip_adapter.py", Elsewhere(
        "tests/bench/test_upstream_clip_adapter.py::test_one_batch_equals_upstreams_own_trainer",
        "the tests it runs (make test-bench runs them; the comparison skips without upstream's checkouts)")),
    # not run
    ("python3 -m venv .venv && . .venv/bin/activate", NotRun("install")),
    ("make install", NotRun("install")),
    ("pip install -r requirements.txt", NotRun("install")),
    ("pip install -r requirements-dev.txt", NotRun("install")),
    ("export CLIP_WEIGHTS_DIR=/shared/clip", NotRun("install", "sets the shell's environment")),
    ("bash bench/upstream_setup.sh", NotRun("network", "clones upstream PromptKD and installs its packages")),
    ("bash bench/upstream_setup.sh kgcoop", NotRun("network", "clones upstream KgCoOp and installs "
                                                                      "tensorboard")),
    ("bash bench/upstream_setup.sh kgcoop && bash bench/upstream_setup.sh clip_adapter", NotRun(
        "network", "clones upstream KgCoOp and CLIP-Adapter and installs tensorboard")),
    ("python -m clip.download ViT-B/16 ViT-L/14", NotRun(
        "network", "downloads 1 GB into ~/.cache/clip (its --dry-run and offline lines: tests/test_fetch_clip.py)")),
    ("python -m clip.download ViT-B/16 ViT-L/14 --dir /shared/clip", NotRun(
        "network", "downloads 1 GB; offline it would create /shared/clip (its --dry-run: tests/test_fetch_clip.py)")),
    ("make test", NotRun("long", "the fast tier this module belongs to: 3–5 min on 2 cores")),
    ("make test-bench", NotRun("long", "the tests of bench/: 1–3 min on 2 cores")),
    ("make test-all", NotRun("long", "every test: 11–16 min on 2 cores")),
    ("make demo-full", NotRun("long", "18–20 min on 2 cores")),
    ("make demo-pretrain", NotRun("long", "7–8 min on 2 cores; rewrites demo/weights")),
    ("python -m demo.shipped pretrain", NotRun("long", "as make demo-pretrain")),
    ("python -m demo.shipped pretrain --ship", NotRun("long", "as make demo-pretrain")),
    ("python -m demo.shipped pretrain --ship --cache demo_cache", NotRun("long", "as make demo-pretrain")),
    ("python -m bench.demo_novel_gap", NotRun("long", "about 13 min on 2 cores")),
    ("python -m bench.demo_transfer", NotRun("long", "about 4 min on 2 cores")),
    (re.compile(r"^python -m bench\.demo_transfer --variants "), NotRun("long", "minutes per variant on 2 cores")),
    ("python -m bench.demo_profiles --seeds 1 2 3 --quick", NotRun("long", "about 30 min on 2 cores")),
    ("python -m runner report OUTPUT_ROOT", Elsewhere("tests/test_report.py::test_report_files_and_the_runner_command",
                                                 "run on a small output tree")),
    (re.compile(r"^python -m bench\.benchmark loader( --model tiny --threads 1)?$"), Elsewhere(
        "tests/bench/test_benchmark.py::test_loader_part_prints_per_core_rates_the_cost_models_block_and_epochs",
        "the loader part on one small image size")),
    ("python -m bench.benchmark train --model tiny --classes 10 --train-iters 5 --warmup 2 --threads 1",
     NotRun("long", "about 6 min on 2 cores (compiles every model)")),
    ("python -m bench.benchmark_cocoop --threads 2 --classes 10 --batch 4 --iters 3 --warmup 1",
     NotRun("long", "ViT-B/16-sized models on the CPU: about 15 min on 2 cores")),
    ("python -m bench.benchmark train", NotRun("gpu", "ViT-B/16 and ViT-L/14 shapes")),
    (re.compile(r"--device cuda"), NotRun("gpu")),
    ("bash bench/gpu_step.sh", NotRun("gpu")),
    ("bash bench/gpu_costs.sh", NotRun("gpu")),
    ("bash bench/side_by_side.sh", NotRun("gpu", "and upstream's checkout (bench/upstream_setup.sh)")),
    ("torchrun --nproc_per_node 4 train.py --root DATA --seed 1 --trainer PETR ...", NotRun("gpu", "4 GPUs")),
    ("NPROC=4 DATA=/data bash scripts/petr/base2new_train.sh eurosat 1", NotRun("gpu", "4 GPUs")),
    ("python -m runner base2new --data /data --jobs-per-gpu 2", NotRun("gpu")),
    (re.compile(r"--executor slurm"), NotRun("slurm")),
    ("python tools/import_promptkd_teacher.py teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar --clip ViT-L/14",
     NotRun("weights", "a released PromptKD teacher and ViT-L/14")),
    (re.compile(r"^(NPROC=\d+ )?DATA=/data bash scripts/"), NotRun("data", "/data")),
    ("CFG=vit_b16_c2_ep20_batch4_4+4ctx TEACHER_NAME=ViT-B/16 TEACHER_DIR=promptsrc_b16 bash "
     "scripts/teacher/base2new_train.sh eurosat 1", NotRun("data", "DATA")),
    ("bash scripts/teacher/xd_train.sh 1", NotRun("data", "DATA (ImageNet)")),
    (re.compile(r"^bash scripts/\w+/base2new_(train|test)\.sh eurosat 1( && bash scripts/\w+/base2new_test\.sh eurosat "
                r"1)?$"), NotRun("data", "DATA")),
    ("python -m clip.openclip --write", Elsewhere(
        "tests/test_openclip.py::test_the_registry_module_is_open_clips_registry",
        "checks that the written table is what --write writes")),
    (re.compile(r"^python -m clip\.download (--dry-run )?open_clip:"), NotRun("network", "the hub's weights")),
    (re.compile(r"^python -m runner base2new .*--backbone open_clip:"), NotRun("data", "/data and the hub's weights")),
    ("python -m runner base2new --data /data", NotRun("data", "/data; without it the preflight stops, as --dry-run's")),
    ("python -m runner dg --data /data --profile fast", NotRun("data", "/data (ImageNet and its variants)")),
    (re.compile(r"^python parse_test_res\.py (b2n|xd|dg) output"), NotRun("output", "tests/test_parse_results.py "
                                                                               "runs each mode on fixtures")),
    (re.compile(r"[<>]|\.\.\.|\[.*\]|\b(DIR|N|NAME|FILE|ARGS|METHOD|COMMAND|FOLDER|DATA)\b|\|"),
     NotRun("placeholder")),
    (re.compile(r"^(python3?|torchrun|python -m [\w.]+|python [\w/]+\.py)$"), Name()),
    ("python -m engine.runs state", Name()),
    ("torchrun --nproc_per_node 1", Name()),
]
"""Each documented command's class, first match wins: a string is one command's exact text, a pattern (``re``) a
family of commands; every entry must match a documented command."""


def classify(command: str) -> Check | None:
    for match, check in COMMANDS:
        if (command == match) if isinstance(match, str) else match.search(command):
            return check
    return None


def kind(check: Check) -> str:
    if isinstance(check, OnDemo):
        return "run on the demo's data (slow)"
    if isinstance(check, Run):
        return "run here (slow)" if check.slow else "run here"
    if isinstance(check, Elsewhere):
        return "run by a named test"
    return f"not run: {check.why}" if isinstance(check, NotRun) else "a program named in prose"


def test_every_documented_command_is_in_the_table():
    """Every command of the docs has a class, and every entry of the table still matches a command; ``-s`` prints
    the list (each command once, with where it appears) and the count per class."""
    commands = documented_commands()
    by_text: dict[str, list[Documented]] = {}
    for c in commands:
        by_text.setdefault(c.text, []).append(c)
    missing = [f"{places[0].file}:{places[0].line}: `{text}` is in no class of {THIS} COMMANDS: add it there (Run if "
               "it runs here on CPU without the network, Elsewhere naming the test that runs it, or NotRun with the "
               f"reason: {', '.join(WHY)})" for text, places in by_text.items() if classify(text) is None]
    assert missing == [], "\n".join(missing)
    stale = [str(match) for match, _ in COMMANDS
             if not any((t == match) if isinstance(match, str) else match.search(t) for t in by_text)]
    assert stale == [], f"entries of COMMANDS that match no documented command (remove them): {stale}"
    counts = Counter(kind(classify(text)) for text in by_text)
    print(f"\n{len(by_text)} documented commands ({len(commands)} places in {len(DOC_FILES)} files):")
    for text, places in sorted(by_text.items(), key=lambda item: (kind(classify(item[0])), item[0])):
        check = classify(text)
        detail = check.node if isinstance(check, Elsewhere) else getattr(check, "detail", "")
        where = ", ".join(sorted({p.file for p in places}))
        print(f"  [{kind(check)}] {text}  ({where}){f'  -- {detail}' if detail else ''}")
    print("  " + "; ".join(f"{k}: {n}" for k, n in sorted(counts.items())))


def test_named_tests_and_programs_exist():
    nodes = {check.node for _, check in COMMANDS if isinstance(check, Elsewhere)}
    assert [node for node in sorted(nodes) if not node_exists(node)] == []
    for text in {c.text for c in documented_commands() if isinstance(classify(c.text), Name)}:
        words = text.split()
        if words[0] == "python" and words[1] == "-m":
            assert importlib.util.find_spec(words[2]) is not None, text
        elif words[0] == "python":
            assert os.path.isfile(os.path.join(REPO, words[1])), text
        else:  # python3, torchrun: on PATH or beside this interpreter
            path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"
            assert shutil.which(words[0], path=path), text


def test_documented_programs_are_every_users():
    """A documented command starts (after its knobs) with a program every user has on PATH: ``.venv/bin/python`` is
    not there when the user's own virtual environment is the active one (exit status 127)."""
    knobs = re.compile(r"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*")
    odd = sorted({f"{c.file}:{c.line}: `{c.text}`" for c in documented_commands()
                  if "/" in knobs.sub("", c.text).split()[0]})
    assert odd == [], "write `python` (the active environment's), not a path into one checkout:\n" + "\n".join(odd)


PACKAGES = ("engine", "clip", "datasets", "trainers", "analysis", "runner", "units", "demo", "tools", "bench")
NAMED = re.compile(rf"^((?:{'|'.join(PACKAGES)})(?:/\w+)+)\.([A-Za-z_]\w*)$")
"""A code span naming a name in a module by its path (``trainers/routing/routers.ROUTERS``)."""


def test_a_name_the_docs_place_in_a_module_is_defined_there():
    """``pkg/module.NAME`` in a page: the module (or package) defines NAME (a class, a function or an assignment at
    its top level), so the reader finds it where the page sends them."""
    wrong = []
    for doc in DOC_FILES:
        for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", read_doc(doc)):
            found = NAMED.match(span)
            if not found or found.group(2) in ("py", "md", "sh", "yaml", "json", "txt", "pt", "png"):
                continue
            base = os.path.join(REPO, found.group(1))
            module = f"{base}.py" if os.path.isfile(f"{base}.py") else os.path.join(base, "__init__.py")
            source = open(module).read() if os.path.isfile(module) else ""
            if not re.search(rf"^(?:class|def) {found.group(2)}\b|^{found.group(2)}\b[^=\n]*=", source, re.M):
                wrong.append(f"{doc}: `{span}`: {os.path.relpath(module, REPO)} defines no {found.group(2)}")
    assert wrong == [], "\n".join(wrong)


def test_the_train_py_example_is_the_scripts_run():
    """docs/usage.md's ``train.py`` example is the command README's step 4 runs (``--print-argv``), word for word: the
    paper's run (α, teacher), in the script's folder, which the script then finds finished."""
    done = subprocess.run([sys.executable, "-m", "units", "--print-argv", "petr", "base2new_train", "eurosat", "1"],
                          cwd=REPO, env={**os.environ, "DATA": "/data"}, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    printed = json.loads(done.stdout.splitlines()[-1])["argv"]
    assert TRAIN_PY in {c.text for c in documented_commands() if c.file == "docs/usage.md"}
    assert shlex.split(TRAIN_PY)[1:] == printed


def output_table_problems(want: list[str], out_lines: list[str]) -> list[str]:
    """What differs between a page's table (``want``, a block's lines) and the output's table of its columns."""
    (columns, rows), = table_shapes(want)
    printed = [shape for shape in table_shapes(out_lines) if shape[0] == columns]
    if not printed:
        return [f"the page quotes a table of the columns {columns}, which the output has not"]
    return [] if printed[0][1] == rows else [f"the page's table has the rows {rows}, the output's {printed[0][1]}"]


def outcome_problems(command: str, check: Run, status: int, output: str, fill: dict[str, str]) -> list[str]:
    """What differs between a run's (status, output) and what ``check`` says the docs promise."""
    problems = [] if status == check.status else [f"exit status {status}, documented {check.status}"]
    out_lines = output.splitlines()
    for want in check.lines:
        if isinstance(want, re.Pattern):
            if not want.search(output):
                problems.append(f"no line matches {want.pattern!r}")
        elif not any(want.format(**fill) in line for line in out_lines):
            problems.append(f"no line holds {want.format(**fill)!r}")
    if check.quoted:
        home = [line.replace(fill["home"], "~").rstrip() for line in out_lines]
        problems += [f"{check.quoted[0]} quotes {line!r}, which it does not print"
                     for line in quoted_block(*check.quoted) if line.rstrip() not in home]
    if check.table:
        problems += output_table_problems(quoted_block(*check.table), out_lines)
    if check.count is not None and len(out_lines) != check.count:
        problems.append(f"{len(out_lines)} lines of output, the page says {check.count}")
    if check.errors_last:
        first = next((i for i, line in enumerate(out_lines) if line.startswith("error:")), len(out_lines))
        problems += [f"a line after the first error line is no error line: {line!r}" for line in out_lines[first:]
                     if not line.startswith("error:")]
    return [f"`{command}`: {p}" for p in problems]


def repo_entries() -> list[str]:
    """The repository root's entries, less the caches Python and the tools keep there."""
    return sorted(e for e in os.listdir(REPO) if e not in ("__pycache__", ".pytest_cache", ".ruff_cache"))


def run_documented(tmp_path, slow: bool) -> None:
    """Run every documented command of class Run (of that speed) in the sandbox, a few at a time, and check each
    outcome; nothing may appear in the repository or at /data."""
    texts = sorted({c.text for c in documented_commands()})
    runs = [(text, check) for text in texts for check in [classify(text)]
            if isinstance(check, Run) and not isinstance(check, OnDemo) and check.slow == slow]
    assert runs, "no command to run"
    fill = {"repo": REPO, "data": str(tmp_path / "data"), "home": str(tmp_path / "home")}
    skipped = [(text, path.format(**fill)) for text, check in runs for path in check.absent
               if os.path.exists(path.format(**fill))]
    runs = [(text, check) for text, check in runs if text not in dict(skipped)]
    before = repo_entries()

    def one(item: tuple[str, Run]) -> tuple[int, str]:
        text, check = item
        env = sandbox_env(str(tmp_path), **{k: v.format(**fill) for k, v in check.env})
        done = run_as_written(text, env)
        return done.returncode, done.stdout

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        outcomes = list(pool.map(one, runs))
    for text, path in skipped:
        print(f"not run here: `{text}`: {path} exists on this machine")
    problems = [p for (text, check), (status, output) in zip(runs, outcomes)
                for p in outcome_problems(text, check, status, output, fill)]
    assert problems == [], "\n".join(problems)
    assert repo_entries() == before, "a documented command wrote into the repository"
    assert not os.path.exists(fill["data"]) and "/data" not in dict(skipped).values() and not os.path.exists("/data")


def test_documented_commands_run_as_written(tmp_path):
    run_documented(tmp_path, slow=False)


@pytest.mark.slow
def test_slow_documented_commands_run_as_written(tmp_path):
    run_documented(tmp_path, slow=True)


TEACHER_ROW = "PromptSRC teacher (wider CLIP)"
README_NAMES = {"zero-shot CLIP": ("ZeroshotCLIP", "demo"), "CoOp": ("CoOp", "demo"),
                TEACHER_ROW: ("PromptSRC", "demo"), "PromptKD": ("PromptKD", "demo"), "PETR": ("PETR", "demo"),
                "PETR+CoOp": ("PETRCoOp", "demo_plugin")}
"""README's demo table rows: (trainer, config folder) of their runs."""


@pytest.fixture(scope="module")
def made_demo(tmp_path_factory):
    """``make demo``'s command (``PYTHON=... bash scripts/demo.sh``, the default size, seed 1) in a temporary work
    folder; (work folder, its output)."""
    work = tmp_path_factory.mktemp("make-demo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEMO_")}
    done = subprocess.run(["bash", "scripts/demo.sh", "--workdir", str(work)], cwd=REPO,
                          env={**env, "PYTHON": sys.executable}, capture_output=True, text=True,
                          timeout=DEMO_HANG_GUARD_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return work, done.stdout


def demo_clips(work) -> tuple[str, str]:
    """The demo's tiny CLIP files (student, teacher) in ``work``'s cache."""
    done = subprocess.run([sys.executable, "-m", "demo.shipped", "expand", "--cache", str(work / "demo_cache")],
                          cwd=REPO, capture_output=True, text=True, check=True, timeout=HANG_GUARD_S)
    student, teacher = done.stdout.split()
    return student, teacher


DEMO_KNOBS = {"CFG": "demo", "OUTPUT_ROOT": "{tmp}/output", "TEACHER_DIR": "{tmp}/teachers",
              "EXTRA_OPTS": "OPTIM.MAX_EPOCH 1"}
"""The knobs the demo's substitutes add (its config, this test's folders) besides its tiny CLIPs; one epoch per run,
to keep the slow tier short."""
DEMO_WORDS = ((re.compile(r"teachers/EuroSAT"), "{tmp}/teachers/DemoShapesHard"),
              (re.compile(r"vit_b16_ep40_batch8_4ctx"), "demo"), (re.compile(r"eurosat"), "demo_shapes_hard"),
              (re.compile(r"(?<=[\s=])(/data|data/demo)\b"), "{work}/data/demo"),
              (re.compile(r"(?<![\w/{])output/"), "{tmp}/output/"))
"""The demo's data, dataset, config and this test's output folder in place of README's (in this order)."""


def on_demo(command: str, fill: dict[str, str]) -> tuple[str, dict[str, str]]:
    """``command`` with the demo's substitutes (:data:`DEMO_WORDS`, its tiny CLIPs for ``<student clip>`` and
    ``<teacher clip>``) and the knobs to run it with; a ``train.py`` command gets the options the scripts add for
    those knobs (its CLIPs, EXTRA_OPTS), as the script's run of it has them."""
    for pattern, value in DEMO_WORDS:
        command = pattern.sub(value.format(**fill), command)
    command = command.replace("<student clip>", fill["student"]).replace("<teacher clip>", fill["teacher"])
    knobs = {**{k: v.format(**fill) for k, v in DEMO_KNOBS.items()}, "BACKBONE": fill["student"],
             "TEACHER_NAME": fill["teacher"], "PYTHON": sys.executable}
    if command.startswith("python train.py"):
        ns = shlex.split(command)[shlex.split(command).index("--trainer") + 1].upper()
        command += (f" MODEL.BACKBONE.NAME {fill['student']} TRAINER.{ns}.TEACHER_NAME {fill['teacher']} "
                    f"{knobs['EXTRA_OPTS']}")
    return command, knobs


@pytest.mark.slow
def test_placeholders_run_with_the_demos_data(made_demo, tmp_path):
    """README's path from an empty data root and the other commands of class :class:`OnDemo`, in document order, with
    the demo's data and tiny CLIPs where a page writes /data, eurosat or <student clip>: each ends with its status and
    prints its lines (the path's teacher, students and table; the train.py example found finished as the script's
    run; the DG example's teacher and run)."""
    work, _ = made_demo
    student, teacher = demo_clips(work)
    fill = {"repo": REPO, "work": str(work), "tmp": str(tmp_path), "home": str(tmp_path / "home"),
            "student": student, "teacher": teacher, "data": str(work / "data" / "demo")}
    texts = dict.fromkeys(c.text for c in documented_commands() if isinstance(classify(c.text), OnDemo))
    assert texts, "no command runs on the demo's data"
    problems = []
    for text in texts:
        command, knobs = on_demo(text, fill)
        done = run_as_written(command, sandbox_env(str(tmp_path), **knobs))
        print(f"$ {command}\n{done.stdout[-1500:]}")
        problems += outcome_problems(text, classify(text), done.returncode, done.stdout, fill)
    assert problems == [], "\n".join(problems)


def demo_results(work, trainer: str, config: str) -> dict[str, dict]:
    """{"base": results.json, "novel": results.json} of a method's seed-1 runs (any shots folder)."""
    out = {}
    for part, role in (("base", "train_base"), ("novel", "test_new")):
        root = os.path.join(work, "output", "demo", "base2new", role, "demo_shapes_hard")
        (shots,) = [d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d, trainer, config, "seed1"))]
        out[part] = read_json(os.path.join(root, shots, trainer, config, "seed1", "results.json"))
    return out


@pytest.mark.slow
@pytest.mark.timeout(2 * DEMO_HANG_GUARD_S)
def test_make_demo_prints_the_numbers_readme_quotes(made_demo, tmp_path):
    """README's demo table (Base / Novel / HM, the best of each column in bold) and routing sentence are those of a
    run of ``make demo``'s command, recomputed here from the runs' results.json; ``tools.lambda_sweep`` says what
    docs/demo.md says of λ; and step 6 of the README holds on the demo's runs: the runner's table of the sweep is
    ``parse_test_res.py b2n DIR --methods ...`` of its methods, and without ``--methods`` the table lists the teacher
    too, by name, with Δ against zero-shot CLIP."""
    work, _ = made_demo
    readme = read_doc("README.md")
    rows = markdown_table(readme, "| method | Base | Novel | HM |")
    assert [row[0] for row in rows] == list(README_NAMES)
    measured = {}
    for name, base, novel, hm in rows:
        res = demo_results(work, *README_NAMES[name])
        b, n = res["base"]["accuracy"], res["novel"]["accuracy"]
        measured[name] = (b, n, harmonic_mean(b, n))
        assert [cell.strip("*") for cell in (base, novel, hm)] == [f"{v:.2f}" for v in measured[name]], name
    students = [name for name in measured if name != TEACHER_ROW]
    for column in range(3):  # the bold cell of each column is the best student's (the teacher is another CLIP)
        bold = [row[0] for row in rows if row[1 + column].startswith("**")]
        assert bold == [max(students, key=lambda m: measured[m][column])], column
    petr = demo_results(work, "PETR", "demo")
    sentence = (f"PETR routes {petr['base']['route_acc_seen']:.1f} % of base and "
                f"{petr['novel']['route_acc_unseen']:.1f} % of novel test images to the right student.")
    assert sentence in " ".join(readme.split())

    # docs/demo.md: at λ = 1.4 a markedly smaller share of the novel training images reaches θ_u, base about the same
    env = {**os.environ, "PYTHONPATH": REPO}
    sweep = subprocess.run([sys.executable, "-m", "tools.lambda_sweep", "output/demo/base2new", "--lambdas", "1.0",
                            "1.4", "--format", "csv"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=HANG_GUARD_S)
    assert sweep.returncode == 0, sweep.stderr
    row = next(r for r in sweep.stdout.splitlines() if r.startswith("demo_shapes_hard,PETR/demo,"))
    seen1, unseen1, seen14, unseen14 = map(float, row.split(",")[2:6])
    assert unseen14 < unseen1 - 10 and abs(seen14 - seen1) < 2, row

    # README's runner table, on the demo's sweep run again by the runner (every run found finished): its table file
    out = work / "output" / "demo"
    student, teacher = demo_clips(work)
    sweep_argv = ["base2new", "--config", "demo", "--data", str(work / "data" / "demo"), "--output-root", str(out),
                  "--teacher-dir", str(out / "teachers"), "--datasets", "demo_shapes_hard", "--seeds", "1",
                  "--shots", str(STUDENT_SHOTS),
                  "--backbone", student, "--teacher-name", teacher]
    runner = subprocess.run([sys.executable, "-m", "runner", *sweep_argv], cwd=REPO,
                            env={**os.environ, "KD_WEIGHT": "100.0"}, capture_output=True, text=True,
                            timeout=HANG_GUARD_S)
    assert runner.returncode == 0, runner.stdout[-3000:] + runner.stderr[-3000:]
    table = (out / "base2new" / "b2n_table.txt").read_text()

    def parse(*args: str) -> str:
        done = subprocess.run([sys.executable, "parse_test_res.py", "b2n", str(out / "base2new"), *args], cwd=REPO,
                              capture_output=True, text=True, timeout=HANG_GUARD_S)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    assert table == parse("--methods", "PETR", "PromptKD", "CoOp", "PETR+CoOp", "ZeroshotCLIP")
    everything = parse()
    methods = [line.split()[1] for line in everything.splitlines() if line.startswith("demo_shapes_hard ")]
    assert methods == sorted(methods) and "PromptSRC" in methods and "PromptSRC" not in table
    assert "Δ = row − ZeroshotCLIP" in everything and "Δ = row − PETR" in table


def test_demo_md_quotes_the_shipped_manifest():
    """docs/demo.md's pretraining times and the shipped files' size are those demo/weights/manifest.json records."""
    text = " ".join(read_doc("docs/demo.md").split())
    manifest = read_json(os.path.join(REPO, "demo", "weights", "manifest.json"))["files"]
    seconds = {role: f"{manifest[role]['seconds']:.0f}" for role in ("student", "teacher")}
    threads = manifest["student"]["threads"]
    assert f"with {threads} torch threads, the student in {seconds['student']} s and the teacher in " \
           f"{seconds['teacher']} s" in text
    assert f"({seconds['student']} + {seconds['teacher']} s, {threads} threads)" in text
    on_disk = sum(os.path.getsize(os.path.join(REPO, "demo", "weights", name))
                  for name in ("tinyclip-student.safetensors", "tinyclip-teacher.safetensors", "manifest.json"))
    assert f"`manifest.json`, {on_disk / 1e6:.1f} MB together" in text
