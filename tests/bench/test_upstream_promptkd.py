"""bench/upstream_promptkd.py, the upstream side of the side-by-side benchmark, and bench/upstream_setup.sh.

What needs no copy of upstream PromptKD runs everywhere: the contract's record arithmetic, the git HEAD reading, the
command line's one-line errors, the setup script's. The runs of upstream's own code need ``.upstream/PromptKD`` (and
what the setup script installs: tensorboard, pandas, wilds) and skip with the reason when it is absent."""
from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys

import pytest
import torch
import yaml

from bench import upstream_promptkd as up
from tests.helpers_run import HANG_GUARD_S, REPO
from tests.helpers_upstream import upstream_unavailable

SCRIPT = os.path.join(REPO, "bench", "upstream_promptkd.py")
SETUP = os.path.join(REPO, "bench", "upstream_setup.sh")
UPSTREAM = os.path.join(REPO, ".upstream", "PromptKD")
TINY_OPTS = ["--opts", "INPUT.SIZE", "(32, 32)", "TRAINER.PROMPTKD.PROMPT_DEPTH_VISION", "3",
             "TRAINER.PROMPTKD.PROMPT_DEPTH_TEXT", "3"]


def _child(*args: str, cwd: str = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def _stub_upstream(tmp_path) -> str:
    """A folder the command line takes for a checkout (its marker file), for the errors found before any import."""
    folder = tmp_path / "upstream"
    (folder / "trainers").mkdir(parents=True)
    (folder / "trainers" / "promptkd.py").write_text("")
    return str(folder)


def _stub_inputs(tmp_path, skip: str | None = None) -> str:
    folder = tmp_path / "inputs"
    for rel in up.INPUT_FILES:
        if rel != skip:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(b"")
    return str(folder)


def test_step_record_takes_the_median_in_ms_and_bytes_as_gib():
    rec = up.step_record(8, 10, 0.75, [0.030, 0.010, 0.020], 3 * 1024**3, 0.5)
    assert rec == {"batch": 8, "classes": 10, "first_step_s": 0.75, "step_ms": pytest.approx(20.0),
                   "peak_gib": 3.0, "loss": 0.5}
    # an even count: the mean of the two middle values; no CUDA peak on the CPU stays null
    even = up.step_record(64, 1000, 1.0, [0.010, 0.050, 0.020, 0.030], None, 1.25)
    assert even["step_ms"] == pytest.approx(25.0) and even["peak_gib"] is None


def test_eval_record_counts_images_per_second_over_the_call():
    assert up.eval_record(10, 100, 400, 0.5, 512 * 1024**2) == {
        "classes": 10, "batch": 100, "images": 400, "images_per_s": pytest.approx(800.0), "peak_gib": 0.5}


def test_novel_half_and_batches():
    # base-to-novel: the first ceil(C / 2) classes are base, the rest novel
    assert [up.novel_count(c) for c in (2, 10, 11, 1000)] == [1, 5, 5, 500]
    assert up.batch_sizes(250, 100) == [100, 100, 50]
    assert up.batch_sizes(200, 100) == [100, 100]
    assert up.batch_sizes(3, 100) == [3]
    assert len(set(up.class_names(1000))) == 1000


def _git(folder, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True, timeout=HANG_GUARD_S)


def test_upstream_head_is_the_checkouts_own_commit(tmp_path):
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "sub" / "f.txt").write_text("x")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    with open(repo / ".git" / "refs" / "heads" / "main") as f:  # the branch's ref file, read directly
        commit = f.read().strip()
    assert len(commit) == 40
    assert up.upstream_head(str(repo)) == commit
    # a folder inside a repository (as .upstream/PromptKD inside ours) has no HEAD of its own
    assert up.upstream_head(str(repo / "sub")) == "unknown"
    (tmp_path / "plain").mkdir()
    assert up.upstream_head(str(tmp_path / "plain")) == "unknown"


def test_write_json_leaves_nothing_half_written(tmp_path):
    path = tmp_path / "out.json"
    up.write_json(str(path), {"a": [1, 2.5, None]})
    assert json.loads(path.read_text()) == {"a": [1, 2.5, None]}
    with pytest.raises(TypeError):
        up.write_json(str(path), {"a": object()})
    assert json.loads(path.read_text()) == {"a": [1, 2.5, None]}
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


def test_the_child_imports_only_the_standard_library_and_torch():
    # upstream's clip/trainers/datasets/train share our packages' names: the child must not import ours
    with open(SCRIPT, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    names |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert names - {"torch"} <= set(sys.stdlib_module_names) | {"__future__"}, names


def test_missing_upstream_folder_is_one_line_naming_the_setup_script(tmp_path):
    out = tmp_path / "out.json"
    done = _child("--upstream", str(tmp_path / "nowhere"), "--inputs", _stub_inputs(tmp_path), "--json", str(out))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"error: --upstream {tmp_path / 'nowhere'}: no upstream PromptKD checkout there (trainers/promptkd.py is "
        "missing); put one there with 'bash bench/upstream_setup.sh'"]
    assert not out.exists()


def test_missing_input_file_is_named(tmp_path):
    teacher = os.path.join("clip", "ViT-L-14.pt")
    done = _child("--upstream", _stub_upstream(tmp_path), "--inputs", _stub_inputs(tmp_path, skip=teacher),
                  "--json", str(tmp_path / "out.json"))
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("error: --inputs ") and f": {teacher} is missing; write the inputs with " \
        "bench.side_by_side_inputs.write_inputs" in line


@pytest.mark.parametrize("prec", ["fp32", "amp"])
def test_precisions_upstream_cannot_step_are_refused_in_one_line(tmp_path, prec):
    done = _child("--upstream", _stub_upstream(tmp_path), "--inputs", _stub_inputs(tmp_path), "--prec", prec,
                  "--json", str(tmp_path / "out.json"))
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: --prec {prec}: upstream PromptKD") and line.endswith("use --prec fp16 "
                                                                                          "(upstream's default)")


def test_bad_numbers_are_refused_by_the_parser(tmp_path):
    done = _child("--upstream", _stub_upstream(tmp_path), "--inputs", _stub_inputs(tmp_path), "--batches", "1",
                  "--json", str(tmp_path / "out.json"))
    assert done.returncode == 2 and "--batches: must be at least 2, got 1" in done.stderr


# --- setup script --------------------------------------------------------------------------------------------------

def _setup(tmp_path, path: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SETUP], capture_output=True, text=True, timeout=HANG_GUARD_S,
                          env={"PATH": path, "HOME": str(tmp_path), "UPSTREAM_DIR": str(tmp_path / "up"), **env})


def _bin_without_git(tmp_path) -> str:
    """A PATH folder with what the script runs before it looks for git (no git)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("dirname", "bash"):
        os.symlink(subprocess.run(["bash", "-c", f"command -v {tool}"], capture_output=True, text=True,
                                  check=True).stdout.strip(), folder / tool)
    return str(folder)


def test_setup_without_git_is_one_line(tmp_path):
    done = _setup(tmp_path, _bin_without_git(tmp_path), PYTHON=sys.executable)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: git is not installed; install it, or put a copy of "
                                        f"https://github.com/zhengli97/PromptKD at {tmp_path / 'up'} by hand"]
    assert not (tmp_path / "up").exists()


def test_setup_clone_failure_is_one_line_and_leaves_nothing(tmp_path):
    source = tmp_path / "no-such-repository"
    done = _setup(tmp_path, os.environ["PATH"], PYTHON=sys.executable, UPSTREAM_URL=str(source))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: cannot clone {source} into {tmp_path / 'up'} (no network?); "
                                        "rerun with network, or put a copy there by hand"]
    assert sorted(os.listdir(tmp_path)) == []


def test_setup_refuses_a_folder_that_is_no_checkout(tmp_path):
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "notes.txt").write_text("x")
    done = _setup(tmp_path, os.environ["PATH"], PYTHON=sys.executable)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"error: {tmp_path / 'up'} exists but holds no upstream PromptKD "
                                        "(trainers/promptkd.py is missing); remove it and rerun"]
    assert os.listdir(tmp_path / "up") == ["notes.txt"]


# --- upstream's own code (needs .upstream/PromptKD) ----------------------------------------------------------------

UPSTREAM_UNAVAILABLE = upstream_unavailable("PromptKD", UPSTREAM, os.path.join("trainers", "promptkd.py"),
                                           [UPSTREAM, os.path.join(UPSTREAM, "Dassl.pytorch")],
                                           "bash bench/upstream_setup.sh")
needs_upstream = pytest.mark.skipif(bool(UPSTREAM_UNAVAILABLE), reason=UPSTREAM_UNAVAILABLE or "-")


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory) -> str:
    from bench.models import SPECS
    from bench.side_by_side_inputs import write_inputs

    folder = tmp_path_factory.mktemp("sbs_inputs")
    write_inputs(str(folder), SPECS["tiny_upstream"])
    return str(folder)


@needs_upstream
def test_tiny_cpu_run_writes_the_contracts_record(tmp_path, tiny_inputs):
    out = tmp_path / "up.json"
    done = _child("--upstream", UPSTREAM, "--inputs", tiny_inputs, "--device", "cpu", "--prec", "fp16",
                  "--batches", "2", "3", "--classes", "4", "--iters", "2", "--warmup", "0", "--eval-images", "5",
                  "--json", str(out), *TINY_OPTS)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert set(rec) == {"upstream", "torch", "device", "prec", "patches", "steps", "eval"}
    assert rec["torch"] == torch.__version__ and rec["prec"] == "fp16"
    assert rec["device"].startswith("CPU, ") and rec["device"].endswith(" threads")
    assert rec["upstream"] == "unknown" or len(rec["upstream"]) == 40
    assert any(p.startswith("CPU dry run only: ") for p in rec["patches"])
    assert [(s["batch"], s["classes"]) for s in rec["steps"]] == [(2, 4), (3, 4)]
    for s in rec["steps"]:
        assert set(s) == {"batch", "classes", "first_step_s", "step_ms", "peak_gib", "loss"}
        assert s["peak_gib"] is None and s["step_ms"] > 0 and s["first_step_s"] > 0
        assert math.isfinite(s["loss"]) and s["loss"] > 0  # a KL divergence of two different softmaxes
    with open(os.path.join(UPSTREAM, up.CONFIG_FILES[1])) as f:
        test_batch = yaml.safe_load(f)["DATALOADER"]["TEST"]["BATCH_SIZE"]
    [ev] = rec["eval"]
    assert (ev["classes"], ev["batch"], ev["images"], ev["peak_gib"]) == (4, test_batch, 5, None)
    assert ev["images_per_s"] > 0
    progress = [line for line in done.stderr.splitlines() if line.startswith("upstream fp16 ")]
    assert len(progress) == 3  # one line per measurement


@needs_upstream
def test_upstreams_fp32_step_fails_as_the_refusal_says(tmp_path, tiny_inputs):
    # run() past main's refusal: upstream's own fp32 build must still fail on the projector's half weights
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import upstream_promptkd as u; "
            "u.run(u.build_parser().parse_args(sys.argv[2:]))")
    done = subprocess.run([sys.executable, "-c", code, os.path.dirname(SCRIPT), "--upstream", UPSTREAM, "--inputs",
                           tiny_inputs, "--device", "cpu", "--prec", "fp32", "--batches", "2", "--classes", "2",
                           "--iters", "1", "--warmup", "0", "--eval-images", "1", "--json", str(tmp_path / "x.json"),
                           *TINY_OPTS], cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith("RuntimeError: Input type (float) and bias type (c10::Half)")


@needs_upstream
def test_unknown_opts_key_is_one_line(tmp_path, tiny_inputs):
    done = _child("--upstream", UPSTREAM, "--inputs", tiny_inputs, "--device", "cpu", "--json",
                  str(tmp_path / "x.json"), "--opts", "TRAINER.PROMPTKD.NO_SUCH_KEY", "1")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["error: --opts: Non-existent key: TRAINER.PROMPTKD.NO_SUCH_KEY"]
    assert not (tmp_path / "x.json").exists()
