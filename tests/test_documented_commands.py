"""Every command README.md, DATASETS.md and docs/*.md show is in one table here (:data:`COMMANDS`): run by this module
as written, run by a named test, or not run for a stated reason; and the numbers README.md quotes from ``make demo``
equal those of a run of its command.

A command is a line of a ```bash block or of an indented code block (continuations joined, comments dropped; ``a && b``
is one command), or an inline code span of the prose that starts with python, python3, bash, make, torchrun or
.venv/bin/python, after any ``KEY=value`` knobs (tests/helpers_docs.py). A command in no class fails
:func:`test_every_documented_command_is_in_the_table`, naming the file and what to do. ``pytest -s`` prints the list
with each command's class. Commands run as written from the repository root in a sandbox: a fresh HOME and caches,
``PETR_OFFLINE=1`` and ``HF_HUB_OFFLINE=1`` (nothing is downloaded), none of the caller's environment.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from analysis.stats import harmonic_mean
from engine.utils import read_json
from tests.helpers_docs import (
    DOC_FILES,
    Documented,
    documented_commands,
    markdown_table,
    node_exists,
    read_doc,
    run_as_written,
    sandbox_env,
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
    only ``error:`` lines follow. ``quoted``: (document, first line) of a fenced block of that document whose every
    line the output holds. ``env``: knobs the command reads (``DATA``: ``{data}``, a folder that is not there).
    ``absent``: paths that must not exist for the documented outcome (else the command is reported, not run).
    ``slow``: run by the slow test."""

    status: int
    lines: tuple[str | re.Pattern, ...] = ()
    errors_last: bool = False
    quoted: tuple[str, str] | None = None
    env: tuple[tuple[str, str], ...] = ()
    absent: tuple[str, ...] = ()
    slow: bool = False


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


Check = Run | Elsewhere | NotRun | Name


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

COMMANDS: list[tuple[str | re.Pattern, Check]] = [
    # run here as written
    ("python -m datasets.fetch --root /data all", Run(2, fetch_lines("/data", *ALL_FETCHED), absent=("/data",))),
    ("python -m datasets.check --root /data", Run(1, (
        "Data root /data (counts: found / published where they differ)",
        "ImageNet: /data/imagenet: dataset folder missing; put ImageNet there (see DATASETS.md#imagenet)"),
        absent=("/data",))),
    ("python -m tools.fetch_teachers --dir teachers all",  # slow: torch's imports, 4-5 s of CPU each
     Run(2, teacher_lines("Caltech101", "ImageNet-xd"), absent=("{repo}/teachers",), slow=True)),
    ("python -m tools.fetch_teachers --dir teachers EuroSAT ImageNet-xd",
     Run(2, teacher_lines("EuroSAT", "ImageNet-xd"), absent=("{repo}/teachers",), slow=True)),
    ("python -m runner base2new --data /data --dry-run",
     Run(2, (PLAN + "PETR PromptKD CoOp PETR+CoOp ZeroshotCLIP; profile paper", *PREFLIGHT_STOPS), errors_last=True,
         absent=("/data",))),
    ("python -m runner base2new --methods PETR PromptKD CoOp --datasets all --seeds 1 2 3 --data /data --dry-run",
     Run(2, (PLAN + "PETR PromptKD CoOp; profile paper", *PREFLIGHT_STOPS), errors_last=True, absent=("/data",))),
    ("python -m runner base2new --data /data --datasets all --seeds 1 2 3 --dry-run",
     Run(2, PREFLIGHT_STOPS, errors_last=True, quoted=("docs/RUNNER.md", "jobs         count"),
         absent=("/data", "{repo}/output"))),  # no run of an earlier sweep: every job is new
    ("python -m runner --help", Run(0, ("usage: python -m runner", "--skip-missing", "--dry-run", "--executor"))),
    ("python -m units --print-argv petr base2new_train eurosat 1", Run(0, (
        "Training PETR on eurosat (seed 1, α=1000.0) -> "
        "output/base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1",
        '"argv": ["train.py", "--root", "", "--seed", "1", "--trainer", "PETR"'))),
    ("python -m units --help", Run(0, ("methods and their commands: ", "petr: base2new_train base2new_test"))),
    ("python train.py --help", Run(0, (re.compile(r"^trainers: .*\bPETR\b", re.M),
                                       re.compile(r"^datasets: .*\bEuroSAT\b", re.M)))),
    ("python parse_test_res.py paper", Run(0, (  # README's published numbers
        re.compile(r"^average +PETR +88\.42 +82\.09 +85\.14 ", re.M),
        re.compile(r"^average +PromptKD +86\.96 +80\.73 +83\.73 ", re.M)))),
    ("python -m tools.import_graph", Run(0, ("engine -> nothing", "train -> datasets, engine, trainers"))),
    ("python -m datasets.fetch --root $DATA all", Run(2, fetch_lines("{data}", *ALL_FETCHED), env=DATA_ENV)),
    ("python -m datasets.fetch --root $DATA eurosat oxford_pets",
     Run(2, fetch_lines("{data}", ("EuroSAT", "eurosat"), ("OxfordPets", "oxford_pets")), env=DATA_ENV)),
    ("python -m datasets.fetch --root $DATA all --dry-run", Run(2, fetch_lines("{data}", *ALL_FETCHED), env=DATA_ENV)),
    ("python -m datasets.fetch --root $DATA imagenet", Run(2, (
        "ImageNet is not in the Hugging Face copy; place it by hand in {data}/imagenet (DATASETS.md#imagenet):",
        "  5. check it: python -m datasets.check --root {data} imagenet"), env=DATA_ENV)),
    ("python -m datasets.check --root $DATA", Run(1, (
        "ImageNet: {data}/imagenet: dataset folder missing", "ImageNetR: {data}/imagenet-rendition: dataset folder "
        "missing"), env=DATA_ENV)),
    ("python -m datasets.check --root $DATA eurosat imagenet --full", Run(1, (
        "EuroSAT: {data}/eurosat: dataset folder missing; put EuroSAT there (see DATASETS.md#eurosat)",
        "ImageNet: {data}/imagenet: dataset folder missing"), env=DATA_ENV)),
    ("python tools/benchmark.py train --model tiny --classes 10 --train-iters 5 --warmup 2 --threads 1 --precisions "
     "fp32 amp bf16 --compile none --epochs 0", Run(0, (
         "tiny student/teacher (tests, smoke runs); CPU, 1 threads;",
         "== Training steps of the real trainers (train.main, shipped configs)"), slow=True)),
    # run by a named test
    ("make demo", DEMO_RUN),
    ("bash scripts/demo.sh", DEMO_RUN),
    ("python -m demo.pipeline", DEMO_RUN),
    ("python -m tools.lambda_sweep output/demo/base2new --lambdas 1.0 1.4",
     Elsewhere(DEMO_TEST, "run as written in the demo's work folder (PYTHONPATH: the repository), after the demo")),
    ("python parse_test_res.py b2n output/base2new --methods PETR PromptKD CoOp PETRCoOp ZeroshotCLIP",
     Elsewhere(DEMO_TEST, NOT_ON_DEMO)),
    ("python parse_test_res.py b2n output/base2new", Elsewhere(DEMO_TEST, NOT_ON_DEMO)),
    ("make scripts", Elsewhere("tests/test_wrappers.py::test_the_checked_in_wrappers_are_the_rendered_ones",
                               "renders every wrapper and compares it with the checked-in one (make scripts writes)")),
    ("python -m units.wrappers", Elsewhere("tests/test_wrappers.py::test_the_checked_in_wrappers_are_the_rendered_ones",
                                           "as make scripts")),
    ("python -m demo.shipped expand", Elsewhere(
        "tests/test_demo_shipped.py::test_clip_files_expand_once_into_files_clip_load_reads",
        "expands the shipped files into a temporary cache (the command writes ./demo_cache)")),
    (".venv/bin/python -m pytest -q tests/test_demo_pipeline.py", Elsewhere(
        "tests/test_demo_pipeline.py::test_quick_demo_shows_the_effects",
        "the tests it runs (make test-all runs them)")),
    (".venv/bin/python -m pytest -q tests/test_upstream_kgcoop.py", Elsewhere(
        "tests/test_upstream_kgcoop.py::test_one_batch_equals_upstreams_own_code",
        "the tests it runs (the fast tier runs them; the comparisons skip without upstream's checkout)")),
    # not run
    ("python3 -m venv .venv && . .venv/bin/activate", NotRun("install")),
    ("make install && . .venv/bin/activate", NotRun("install")),
    ("make install", NotRun("install")),
    ("pip install -r requirements.txt", NotRun("install")),
    ("pip install -r requirements-dev.txt", NotRun("install")),
    ("export CLIP_WEIGHTS_DIR=/shared/clip", NotRun("install", "sets the shell's environment")),
    ("bash scripts/bench/upstream_setup.sh", NotRun("network", "clones upstream PromptKD and installs its packages")),
    ("bash scripts/bench/upstream_setup.sh kgcoop", NotRun("network", "clones upstream KgCoOp and installs "
                                                                      "tensorboard")),
    ("python -m clip.download ViT-B/16 ViT-L/14 --dir /shared/clip", NotRun(
        "network", "downloads 1 GB; offline it would create /shared/clip (its --dry-run: tests/test_fetch_clip.py)")),
    ("make test", NotRun("long", "the fast tier this module belongs to: 3–5 min on 2 cores")),
    ("make test-all", NotRun("long", "every test: 11–16 min on 2 cores")),
    ("make demo-full", NotRun("long", "18–20 min on 2 cores")),
    ("make demo-pretrain", NotRun("long", "7–8 min on 2 cores; rewrites demo/weights")),
    ("python -m demo.shipped pretrain", NotRun("long", "as make demo-pretrain")),
    ("python -m demo.shipped pretrain --ship", NotRun("long", "as make demo-pretrain")),
    ("python -m demo.shipped pretrain --ship --cache demo_cache", NotRun("long", "as make demo-pretrain")),
    ("python -m demo.novel_gap", NotRun("long", "about 13 min on 2 cores")),
    ("python -m demo.transfer", NotRun("long", "about 4 min on 2 cores")),
    (re.compile(r"^python -m demo\.transfer --variants "), NotRun("long", "minutes per variant on 2 cores")),
    ("python -m demo.profiles --seeds 1 2 3 --quick", NotRun("long", "about 30 min on 2 cores")),
    ("python -m runner report OUTPUT", Elsewhere("tests/test_report.py::test_report_files_and_the_runner_command",
                                                 "run on a small output tree")),
    (re.compile(r"^python tools/benchmark\.py loader( --model tiny --threads 1)?$"), Elsewhere(
        "tests/test_benchmark.py::test_loader_part_prints_per_core_rates_the_cost_models_block_and_epochs",
        "the loader part on one small image size")),
    ("python tools/benchmark.py train --model tiny --classes 10 --train-iters 5 --warmup 2 --threads 1",
     NotRun("long", "about 6 min on 2 cores (compiles every model)")),
    ("python tools/benchmark_cocoop.py --threads 2 --classes 10 --batch 4 --iters 3 --warmup 1",
     NotRun("long", "ViT-B/16-sized models on the CPU: about 15 min on 2 cores")),
    ("python tools/benchmark.py train", NotRun("gpu", "ViT-B/16 and ViT-L/14 shapes")),
    (re.compile(r"--device cuda"), NotRun("gpu")),
    ("bash scripts/bench/gpu_step.sh", NotRun("gpu")),
    ("bash scripts/bench/gpu_costs.sh", NotRun("gpu")),
    ("bash scripts/bench/side_by_side.sh", NotRun("gpu", "and upstream's checkout (scripts/bench/upstream_setup.sh)")),
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
    ("python train.py --root DATA --seed 1 --trainer PETR --dataset-config-file configs/datasets/eurosat.yaml "
     "--config-file configs/trainers/PETR/vit_b16_ep40_batch8_4ctx.yaml --output-dir "
     "output/base2new/train_base/eurosat/shots_0/PETR/vit_b16_ep40_batch8_4ctx/seed1 DATASET.SUBSAMPLE_CLASSES base",
     NotRun("data", "DATA, ViT-B/16 and the EuroSAT teacher")),
    ("cat output/base2new/b2n_table.txt", NotRun("output", f"a sweep's table; {DEMO_TEST} checks what README says "
                                                           "of it on the demo's sweep")),
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


def quoted_block(doc: str, first: str) -> list[str]:
    """The lines of ``doc``'s fenced block that starts with the line ``first``."""
    lines = read_doc(doc).split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    return lines[start:end]


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
        problems += [f"{check.quoted[0]} quotes {line!r}, which it does not print"
                     for line in quoted_block(*check.quoted) if line.rstrip() not in map(str.rstrip, out_lines)]
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
    runs = [(text, classify(text)) for text in texts if isinstance(classify(text), Run) and classify(text).slow == slow]
    assert runs, "no command to run"
    fill = {"repo": REPO, "data": str(tmp_path / "data")}
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

    # README step 6, on the demo's sweep run again by the runner (every run found finished): its table file
    out = work / "output" / "demo"
    student, teacher = subprocess.run([sys.executable, "-m", "demo.shipped", "expand", "--cache",
                                       str(work / "demo_cache")], cwd=REPO, capture_output=True, text=True,
                                      check=True, timeout=HANG_GUARD_S).stdout.split()
    sweep_argv = ["base2new", "--config", "demo", "--data", str(work / "data" / "demo"), "--output", str(out),
                  "--teacher-dir", str(out / "teachers"), "--datasets", "demo_shapes_hard", "--seeds", "1",
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

    assert table == parse("--methods", "PETR", "PromptKD", "CoOp", "PETRCoOp", "ZeroshotCLIP")
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
