"""Upstream PromptKD's student step next to ours, on one card, in one call, on the same weights.

Writes the inputs once (``bench.side_by_side_inputs.write_inputs``: random student/teacher CLIPs and a random
teacher checkpoint in upstream's layout), runs upstream PromptKD's own code on them as a child process
(``bench/upstream_promptkd.py``, in fp16: upstream's setting and the only one its step runs in, on the CPU too), then
our trainers in this process on the same files, as train.py builds them (``bench.benchmark_train``) on a generated
EuroSAT-layout tree of C classes: PromptKD fp16 (as upstream) and "best", PETR fp16 and "best" (best: bf16 + teacher
cache fixed + TRAIN.CUDA_GRAPH, eager, on CUDA; on the CPU, where our fp16 runs as fp32: fp32 + teacher cache fixed),
at each batch x class count; then the evaluation images/s (the trainer's test pass over the tree's test split, batch
100: PromptKD's student, PETR's two branches + router) and peak GPU memory. Prints one ratio table and writes every
raw number with it to ``--json``.

    python -m bench.side_by_side --device cuda --json output/bench/side_by_side.json          # ViT-B/16, ViT-L/14
    python -m bench.side_by_side --device cpu --model tiny_upstream --batches 2 4 --iters 2    # CPU dry run
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import torch
from tabulate import tabulate

from bench.benchmark_train import (
    REPO,
    StepSetting,
    build_trainer,
    fixed_step,
    quiet,
    release_memory,
    write_jpeg_tree,
)
from bench.models import SPECS, ModelSpec, benchmark_device, sync, time_calls
from bench.side_by_side_inputs import write_inputs
from bench.upstream_promptkd import SETUP_SCRIPT, UPSTREAM_MARKER
from engine.atomic import atomic_write_text
from engine.errors import first_line

CHILD = os.path.join(REPO, "bench", "upstream_promptkd.py")
EVAL_BATCH = 100
"""DATALOADER.TEST.BATCH_SIZE of the shipped PromptKD and PETR configs (and upstream's)."""
GPU_WORKERS = 8
"""DATALOADER.NUM_WORKERS of the shipped configs, kept on CUDA; the CPU dry run loads in the main process."""
HEADERS = ["batch", "classes", "run", "settings", "step ms", "step speed-up", "eval images/s", "eval speed-up",
           "peak GiB"]
COLALIGN = ["right", "right", "left", "left", "right", "right", "right", "right", "right"]


class UsageError(Exception):
    """A mistake in the command line or its inputs: one ``error:`` line, exit status 2."""


class ChildError(Exception):
    """The upstream child failed (its own output says why): one ``error:`` line, exit status 1."""


@dataclass(frozen=True)
class OurRun:
    """One of our rows: a trainer with the settings its step runs with, and how the table names them."""

    name: str
    setting: StepSetting
    settings: str

    @property
    def petr(self) -> bool:
        return self.setting.trainer == "PETR"


def our_runs(device: torch.device) -> list[OurRun]:
    """PromptKD and PETR in upstream's precision and in our best settings for ``device``."""
    runs = []
    for trainer in ("PromptKD", "PETR"):
        if device.type == "cuda":
            runs += [OurRun(f"{trainer} fp16", StepSetting(trainer, "fp16"), "fp16 (as upstream)"),
                     OurRun(f"{trainer} best", StepSetting(trainer, "bf16", cache=True, cuda_graph=True),
                            "bf16 + teacher cache fixed + CUDA graph (eager)")]
        else:
            runs += [OurRun(f"{trainer} fp16", StepSetting(trainer, "fp32"), "fp32 (our fp16 is fp32 on a CPU)"),
                     OurRun(f"{trainer} best", StepSetting(trainer, "fp32", cache=True), "fp32 + teacher cache fixed")]
    return runs


def split_sizes(n: int) -> tuple[int, int, int]:
    """Train, val and test images of a class folder of ``n`` images under EuroSAT's 50/20/30 cut (Python's
    ``round``, as ``datasets.splits.split_class_folders``)."""
    train, val = round(n * 0.5), round(n * 0.2)
    return train, val, n - train - val


def images_per_class(classes: int, eval_images: int, batch: int) -> int:
    """The fewest images per class folder (at least 4) whose split gives ``eval_images`` test images over
    ``classes`` classes and a full training batch of ``batch`` images on each of PETR's halves (base classes
    labelled, novel classes unlabelled: ``classes // 2`` of the smaller)."""
    n = 4
    while True:
        train, val, test = split_sizes(n)
        if val and test and classes * test >= eval_images and (classes // 2) * train >= batch:
            return n
        n += 1


def upstream_opts(spec: ModelSpec) -> list[str]:
    """yacs overrides that give upstream's config the spec's image size and prompt shape (for ViT-B/16 they equal
    upstream's own values)."""
    size = spec.student["image_resolution"]
    return ["INPUT.SIZE", f"({size}, {size})",
            "TRAINER.PROMPTKD.N_CTX_VISION", str(spec.n_ctx), "TRAINER.PROMPTKD.N_CTX_TEXT", str(spec.n_ctx),
            "TRAINER.PROMPTKD.PROMPT_DEPTH_VISION", str(spec.depth),
            "TRAINER.PROMPTKD.PROMPT_DEPTH_TEXT", str(spec.depth)]


def upstream_command(args: argparse.Namespace, spec: ModelSpec, inputs: str, out_json: str) -> list[str]:
    """The child's command line (the shared contract), fp16 as upstream (its only precision that steps: its fp32 and
    amp branches fail on any torch), also on the CPU."""
    return [sys.executable, args.child, "--upstream", args.upstream, "--inputs", inputs, "--device", args.device,
            "--prec", "fp16", "--batches", *map(str, args.batches), "--classes", *map(str, args.classes),
            "--iters", str(args.iters), "--warmup", str(args.warmup), "--eval-images", str(args.eval_images),
            "--json", out_json, "--opts", *upstream_opts(spec)]


def check_upstream_json(result: dict, path: str, batches: list[int], classes: list[int]) -> None:
    """The child's JSON must hold a step record per batch x classes and an eval record per classes."""
    missing = [key for key in ("device", "torch", "prec", "steps", "eval") if key not in result]
    if missing:
        raise ChildError(f"{path}: the upstream child's JSON lacks {', '.join(missing)}")
    steps = {(r.get("batch"), r.get("classes")) for r in result["steps"]}
    evals = {r.get("classes") for r in result["eval"]}
    lacking = [f"step batch {b} classes {c}" for b in batches for c in classes if (b, c) not in steps]
    lacking += [f"eval classes {c}" for c in classes if c not in evals]
    if lacking:
        raise ChildError(f"{path}: the upstream child's JSON has no record for {', '.join(lacking)}")


def run_upstream(command: list[str], out_json: str, batches: list[int], classes: list[int]) -> dict:
    """Run the upstream child (its output and upstream's prints go to stderr) and return its checked JSON."""
    print("$ " + shlex.join(command), flush=True)
    status = subprocess.run(command, cwd=REPO, stdout=2, check=False).returncode  # fd 2: this process's stderr
    if status != 0:
        raise ChildError(f"the upstream child exited with status {status} (its output is above): {command[1]}")
    try:
        with open(out_json) as f:
            result = json.load(f)
    except (OSError, ValueError) as e:
        raise ChildError(f"{out_json}: the upstream child left no readable JSON ({first_line(e)})") from e
    check_upstream_json(result, out_json, batches, classes)
    return result


def _reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gib(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    sync(device)
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 3)


def measure_step(step, device: torch.device, iters: int, warmup: int) -> dict:
    """First step (seconds, its loss), median ms of ``iters`` steps after ``warmup`` and the peak GiB over all of
    them (the eager warm-up steps and a CUDA graph's capture included, so a replayed step's buffers count)."""
    _reset_peak(device)
    start = time.perf_counter()
    loss = float(step()["loss"])
    sync(device)
    first = time.perf_counter() - start
    median = time_calls({"step": step}, iters, warmup, device)["step"]
    return {"first_step_s": round(first, 3), "step_ms": round(1e3 * median, 3), "peak_gib": _peak_gib(device),
            "loss": loss}


def measure_eval(trainer, device: torch.device) -> dict:
    """The trainer's test pass (its loader, batch 100) after one untimed pass: images/s and peak GiB (a routed
    trainer's router is fitted first, when it deploys)."""
    with quiet():
        trainer.deploy()
        trainer.test()
        _reset_peak(device)
        start = time.perf_counter()
        trainer.test()
        sync(device)
        elapsed = time.perf_counter() - start
    images = len(trainer.test_loader.dataset)
    return {"batch": trainer.test_loader.batch_size, "images": images, "images_per_s": round(images / elapsed, 2),
            "peak_gib": _peak_gib(device)}


def measure_ours(spec: ModelSpec, device: torch.device, files: dict, trees: dict[int, str], batches: list[int],
                 iters: int, warmup: int, work: str) -> dict:
    """Our rows: each run built once per class count (train.py's way, largest batch), stepped at each batch on the
    first images of one loader batch, then evaluated; a run that fails becomes a note, the others go on."""
    steps, evals, notes = [], [], []
    workers = GPU_WORKERS if device.type == "cuda" else 0
    for classes, tree in trees.items():
        for i, run in enumerate(our_runs(device)):
            where = f"{run.name}, {classes} classes"
            try:
                no_dump = ["TRAINER.PETR.DUMP_TRAIN_U", "False"] if run.petr else []  # an untimed pass less
                trainer = build_trainer(run.setting, spec, files, tree, os.path.join(work, f"out{classes}_{i}"),
                                        device, max(batches), "DATALOADER.NUM_WORKERS", str(workers), *no_dump,
                                        subsample="all")
                for batch in batches:
                    record = measure_step(fixed_step(trainer, batch), device, iters, warmup)
                    steps.append({"run": run.name, "settings": run.settings, "batch": batch, "classes": classes,
                                  **record})
                    print(f"  ours {where}, batch {batch}: {record['step_ms']:.1f} ms", file=sys.stderr, flush=True)
                record = measure_eval(trainer, device)
                evals.append({"run": run.name, "settings": run.settings, "classes": classes, **record})
                print(f"  ours {where}, eval: {record['images_per_s']:.1f} images/s", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001 - one failing setting must not cost the other rows
                notes.append(f"{where}: failed: {type(e).__name__}: {first_line(e)[:200]}")
            finally:
                trainer = None
                release_memory(device)
    return {"runs": [{"name": r.name, "trainer": r.setting.trainer, "prec": r.setting.prec,
                      "teacher_cache": "fixed" if r.setting.cache else "none", "cuda_graph": r.setting.cuda_graph,
                      "settings": r.settings} for r in our_runs(device)],
            "steps": steps, "eval": evals, "notes": notes}


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio_rows(upstream: dict, ours: dict) -> list[list]:
    """Per batch x classes: upstream's row, then each of ours with its speed-up over upstream (PETR: over two
    upstream PromptKD steps / evaluations, one per student): step ms ratio upstream / ours, eval images/s ratio
    ours / upstream."""
    up_steps = {(r["batch"], r["classes"]): r for r in upstream["steps"]}
    up_eval = {r["classes"]: r for r in upstream["eval"]}
    our_steps = {(r["run"], r["batch"], r["classes"]): r for r in ours["steps"]}
    our_eval = {(r["run"], r["classes"]): r for r in ours["eval"]}
    rows = []
    for batch, classes in sorted(up_steps):
        up, up_ips = up_steps[batch, classes], up_eval[classes]["images_per_s"]
        rows.append([batch, classes, "upstream PromptKD", upstream["prec"] + " (upstream)", _number(up["step_ms"]),
                     "ref", _number(up_ips), "ref", _number(up["peak_gib"], 2)])
        for run in ours["runs"]:
            step, ev = our_steps.get((run["name"], batch, classes)), our_eval.get((run["name"], classes))
            copies = 2 if run["trainer"] == "PETR" else 1
            ms = step["step_ms"] if step else None
            ips = ev["images_per_s"] if ev else None
            rows.append([batch, classes, run["name"], run["settings"], _number(ms) if step else "failed",
                         _ratio(copies * up["step_ms"] / ms if ms else None), _number(ips) if ev else "failed",
                         _ratio(copies * ips / up_ips if ips else None),
                         _number(step["peak_gib"] if step else None, 2)])
    return rows


def table_header(where: str, upstream: dict) -> str:
    """The card and torch version of both sides, and upstream's revision."""
    return (f"{where} | torch {torch.__version__} | upstream child: {upstream['device']}, torch {upstream['torch']}, "
            f"upstream PromptKD {upstream.get('upstream', 'unknown')}")


LEGEND = """\
step ms: median training step; step speed-up: upstream ms / ours (PETR: 2 x upstream ms / PETR's, one upstream step
  per student). eval images/s: one test pass at batch 100 after an untimed one (ours: the trainer's, over the
  generated JPEG test split, loading and decoding included; PETR: two branches + router); eval speed-up: ours /
  upstream (PETR: against half upstream's, two upstream evaluations). peak GiB: peak GPU memory of the step (ours:
  over all its steps, warm-up and CUDA-graph capture included)."""


def format_table(result: dict) -> str:
    """The header, the ratio table, its legend and our notes, as printed."""
    lines = [table_header(result["device"], result["upstream"]),
             tabulate(ratio_rows(result["upstream"], result["ours"]), headers=HEADERS, disable_numparse=True,
                      colalign=COLALIGN), LEGEND]
    lines += [f"Note: {note}" for note in result["ours"]["notes"]]
    lines += [f"Upstream patch: {patch}" for patch in result["upstream"].get("patches", [])]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vit_b16", choices=["vit_b16", "tiny_upstream"],
                   help="CLIP shapes (tiny_upstream: the CPU dry run)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--upstream", default=os.path.join(REPO, ".upstream", "PromptKD"),
                   help=f"upstream PromptKD's checkout ({SETUP_SCRIPT} puts it there)")
    p.add_argument("--child", default=CHILD, help="the upstream child script")
    p.add_argument("--batches", type=int, nargs="+", default=[8, 64], help="training batches")
    p.add_argument("--classes", type=int, nargs="+", default=[10, 1000], help="class counts C")
    p.add_argument("--iters", type=int, default=10, help="timed steps per measurement (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them (CUDA: at least 2, the graph "
                   "captures at the third step)")
    p.add_argument("--eval-images", type=int, default=500, help="test images per class count (at least)")
    p.add_argument("--json", default=os.path.join("output", "bench", "side_by_side.json"), help="output JSON")
    args = p.parse_args(argv)
    checks = [(min(args.batches) >= 2, "--batches must each be at least 2 (the student projector's BatchNorm trains "
                                       "on batch statistics)"),
              (min(args.classes) >= 2, "--classes must each be at least 2 (PETR needs base and novel classes)"),
              (args.iters >= 1, "--iters must be at least 1"),
              (args.eval_images >= 1, "--eval-images must be at least 1"),
              (args.warmup >= (2 if args.device == "cuda" else 0),
               "--warmup must be at least 2 on CUDA (the CUDA-graph step captures at its third call) and 0 or more")]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    if not os.path.isfile(os.path.join(args.upstream, UPSTREAM_MARKER)):
        raise UsageError(f"--upstream {args.upstream}: no upstream PromptKD checkout there ({UPSTREAM_MARKER} "
                         f"missing); run bash {SETUP_SCRIPT} to put it there, or pass --upstream DIR")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda, but CUDA is not available here; use --device cpu (with --model "
                         "tiny_upstream for the dry run)")
    folder = os.path.dirname(os.path.abspath(args.json))
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        raise UsageError(f"--json {args.json}: cannot write there ({folder} is not a writable folder)")
    if not os.path.isfile(args.child):
        raise UsageError(f"--child {args.child}: no such file (the upstream child, bench/upstream_promptkd.py)")
    args.batches, args.classes = sorted(set(args.batches)), sorted(set(args.classes))
    return args


def side_by_side(args: argparse.Namespace) -> dict:
    """Both sides on one set of inputs; the result JSON (raw numbers, the table rows and text)."""
    device, where = benchmark_device(args.device, None)
    spec = SPECS[args.model]
    with tempfile.TemporaryDirectory(prefix="side_by_side_") as work:
        inputs = os.path.join(work, "inputs")
        files = write_inputs(inputs, spec)
        out_json = os.path.join(work, "upstream.json")
        upstream = run_upstream(upstream_command(args, spec, inputs, out_json), out_json, args.batches, args.classes)
        trees = {}
        for classes in args.classes:
            per_class = images_per_class(classes, args.eval_images, max(args.batches))
            trees[classes] = write_jpeg_tree(os.path.join(work, f"data{classes}"), per_class,
                                             spec.student["image_resolution"], classes=classes)
        ours = measure_ours(spec, device, files, trees, args.batches, args.iters, args.warmup, work)
    result = {"model": args.model, "label": spec.label, "device": where, "torch": torch.__version__,
              "iters": args.iters, "warmup": args.warmup, "upstream": upstream, "ours": ours}
    result["table"] = [dict(zip(HEADERS, row)) for row in ratio_rows(upstream, ours)]
    result["table_text"] = format_table(result)
    return result


def main(argv: list[str] | None = None) -> int:
    """Run both sides, print the table, write the JSON; after one ``error:`` line, 2 for a usage mistake and 1 when
    the upstream child failed."""
    try:
        args = parse_args(argv)
        result = side_by_side(args)
    except (UsageError, ChildError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    print(result["table_text"])
    atomic_write_text(json.dumps(result, indent=1) + "\n", args.json)
    print(f"Wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
