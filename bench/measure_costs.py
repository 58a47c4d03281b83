"""Measure on this device what ``runner/costs.py`` otherwise estimates: CoOp's training step, evaluation per image
and a run's start-up; print a table, the lines to paste into runner/costs.py, and optionally write a JSON.

* CoOp step: ``forward_backward`` of CoOp built by ``train.main`` with its base-to-novel config (batch and precision
  from the yaml) on the base classes of a generated EuroSAT-layout tree (5 classes), one fixed batch.
* evaluation, ms per test image at batch 100 (images already through the test transform, no loading): PromptKD's
  student (one ViT-B/16 forward), PETR's two branches in one batched forward and the PromptSRC teacher (ViT-L/14),
  each built by ``train.main`` with its shipped config and precision.
* start-up: a ``python train.py`` process (PETR, shipped config) from launch to the start of its first training
  step (the first progress line's time less that step's own time).

Random-weight CLIPs of the real shapes (``--model vit_b16``) or the tiny pair (``--model tiny``: tests):

    python -m bench.measure_costs --device cuda --model vit_b16 --json costs.json
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from functools import partial

import torch
import yaml
from tabulate import tabulate

from bench.benchmark_train import (
    CONFIGS,
    REPO,
    StepSetting,
    build_trainer,
    config_argv,
    fixed_step,
    quiet,
    quiet_main,
    trainer_argv,
    write_clip_files,
    write_jpeg_tree,
)
from bench.models import SPECS, ModelSpec, benchmark_device, time_calls
from engine.precision import resolve_precision

EVAL_BATCH = 100
PER_CLASS = 16
"""Images per class of the generated tree: 40 base-class train images, one CoOp batch of 32."""
FIRST_STEP = re.compile(r"^epoch \[1/\d+\] batch \[1/\d+\] time ([\d.]+) ")


def shipped_prec(trainer: str) -> str:
    """``TRAINER.<NS>.PREC`` of the trainer's measured config (fp16 when the yaml leaves it to the default)."""
    with open(os.path.join(REPO, "configs", "trainers", f"{CONFIGS[trainer]}.yaml")) as f:
        cfg = yaml.safe_load(f) or {}
    return cfg.get("TRAINER", {}).get(trainer.upper(), {}).get("PREC", "fp16")


def base_argv(trainer: str, spec: ModelSpec, clip_file: str, data: str, out: str, device: torch.device) -> list[str]:
    """``train.py --no-train`` arguments of CoOp or the PromptSRC teacher on the generated tree (base classes)."""
    argv = [*config_argv(trainer, spec, clip_file, data, out), "DATALOADER.NUM_WORKERS", "0",
            "USE_CUDA", str(device.type == "cuda")]
    if trainer == "PromptSRC":
        argv += ["TRAINER.PROMPTSRC.PROMPT_DEPTH_VISION", str(spec.depth),
                 "TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT", str(spec.depth)]
    return argv


def eval_forwards(spec: ModelSpec, files: dict, data: str, tmp: str, device: torch.device) -> dict:
    """``{model: (function of no argument, images per call)}``: the evaluation forwards at batch 100."""
    size = spec.student["image_resolution"]
    images = torch.randn(EVAL_BATCH, 3, size, size, device=device)
    out = {}
    for trainer in ("PromptKD", "PETR"):
        setting = StepSetting(trainer, shipped_prec(trainer))
        built = build_trainer(setting, spec, files, data, os.path.join(tmp, f"eval_{trainer}"), device, 8)
        built.set_model_mode("eval")
        forward = built.branch_logits if trainer == "PETR" else built.model_inference
        out["ViT-B/16 x2" if trainer == "PETR" else "ViT-B/16"] = torch.no_grad()(partial(forward, images))
    teacher_out = os.path.join(tmp, "eval_teacher")
    teacher = quiet_main(base_argv("PromptSRC", spec, files["teacher"], data, teacher_out, device))
    teacher.set_model_mode("eval")
    teacher.before_test()
    out["ViT-L/14"] = torch.no_grad()(partial(teacher.model_inference, images))
    return out


def startup_seconds(spec: ModelSpec, files: dict, data: str, out: str, device: torch.device) -> float:
    """Seconds from launching ``python train.py`` (PETR, shipped config) to the start of its first training step."""
    prec = resolve_quiet(shipped_prec("PETR"), device)
    argv = [a for a in trainer_argv("PETR", spec, files, data, out, device, prec, "TRAIN.PRINT_FREQ", "1",
                                    "OPTIM.MAX_EPOCH", "1") if a != "--no-train"]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "train.py", *argv], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            first = FIRST_STEP.match(line)
            if first:
                return time.perf_counter() - start - float(first.group(1))
    finally:
        proc.kill()
        proc.wait()
    raise RuntimeError("train.py ended before its first training step:\n" + "".join(lines[-20:]))


def resolve_quiet(prec: str, device: torch.device) -> str:
    """The precision ``prec`` runs at on ``device`` (engine.precision's fallback, its note silenced)."""
    with quiet():
        return resolve_precision(prec, device)


def measure(spec: ModelSpec, device: torch.device, iters: int, warmup: int) -> dict:
    """The measurements as a JSON-ready dict (milliseconds and seconds rounded as printed)."""
    with tempfile.TemporaryDirectory() as tmp:
        data = write_jpeg_tree(os.path.join(tmp, "data"), PER_CLASS, spec.student["image_resolution"])
        files = write_clip_files(spec, tmp)
        coop = quiet_main(base_argv("CoOp", spec, files["student"], data, os.path.join(tmp, "coop"), device))
        calls = {"CoOp step": fixed_step(coop)}
        evals = eval_forwards(spec, files, data, tmp, device)
        calls |= {f"eval {model}": fn for model, fn in evals.items()}
        seconds = time_calls(calls, iters, warmup, device)
        startup = startup_seconds(spec, files, data, os.path.join(tmp, "startup"), device)
        batch = coop.cfg.DATALOADER.TRAIN_X.BATCH_SIZE
        coop_prec, classes = coop.cfg.TRAINER.COOP.PREC, coop.dm.num_classes
    return {"device": device_name(device), "torch": torch.__version__, "model": spec.label,
            "coop_step_ms": round(1e3 * seconds["CoOp step"], 2),
            "coop": {"config": CONFIGS["CoOp"], "batch": batch, "prec": resolve_quiet(coop_prec, device),
                     "classes": classes},
            "eval_ms_per_image": {m: round(1e3 * seconds[f"eval {m}"] / EVAL_BATCH, 4) for m in evals},
            "eval_batch": EVAL_BATCH, "startup_s": round(startup, 2),
            "startup": {"config": CONFIGS["PETR"], "prec": resolve_quiet(shipped_prec("PETR"), device)}}


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"


def table(result: dict) -> str:
    coop = result["coop"]
    rows = [["CoOp training step", f"{result['coop_step_ms']} ms",
             f"{coop['config']}, batch {coop['batch']}, {coop['prec']}, {coop['classes']} classes"]]
    rows += [[f"evaluation, {m}", f"{ms} ms per image", f"batch {result['eval_batch']}, no loading"]
             for m, ms in result["eval_ms_per_image"].items()]
    rows.append(["start-up", f"{result['startup_s']} s", f"{result['startup']['config']}, launch to first step"])
    return tabulate(rows, headers=["what", "measured", "setting"])


def paste_block(result: dict, command: str) -> str:
    """The lines of runner/costs.py's measured block with these numbers."""
    where = textwrap.wrap(f"{command} on {result['device']}, torch {result['torch']}, {result['model']}", 96,
                          drop_whitespace=False)
    coop = result["coop"]
    return "\n".join([
        "MEASURED_ON = (" + "\n               ".join(json.dumps(part) for part in where) + ")",
        f"COOP_STEP = StepTime({result['coop_step_ms']}, f\"measured ({{MEASURED_ON}}): {coop['config']}, batch "
        f"{coop['batch']}, {coop['prec']}, {coop['classes']} classes\")",
        f"EVAL_MS_PER_IMAGE = {json.dumps(result['eval_ms_per_image'])}",
        f"EVAL_SOURCE = f\"measured ({{MEASURED_ON}}): batch {result['eval_batch']}, test transform, no loading\"",
        f"JOB_OVERHEAD_S = {result['startup_s']}",
        "JOB_OVERHEAD_SOURCE = f\"measured ({MEASURED_ON}): train.py launch to first step, "
        f"{result['startup']['config']}\""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure what runner/costs.py estimates (CoOp step, evaluation, "
                                                 "start-up).")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where to measure (default cuda)")
    parser.add_argument("--model", default="vit_b16", choices=("vit_b16", "tiny"),
                        help="CLIP shapes (tiny: a check of the code in seconds)")
    parser.add_argument("--iters", type=int, default=10, help="timed calls per measurement (median)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls first")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument("--json", help="write the measurements to this file")
    args = parser.parse_args(argv)
    device, where = benchmark_device(args.device, args.threads)
    result = measure(SPECS[args.model], device, args.iters, args.warmup)
    print(f"Measured on {where}, torch {result['torch']}, {result['model']}:")
    print(table(result))
    command = f"python -m bench.measure_costs --device {args.device} --model {args.model}"
    print("\nPaste over runner/costs.py's measured block:\n" + paste_block(result, command))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
