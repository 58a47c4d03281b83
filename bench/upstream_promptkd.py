"""Upstream PromptKD's student step and evaluation, timed on the side-by-side benchmark's random weights: the upstream
side of the comparison with ours (a child process of ``bench/side_by_side.py``; the JSON it writes is that
benchmark's contract).

    python bench/upstream_promptkd.py --upstream .upstream/PromptKD --inputs FOLDER --device cuda --prec fp16 \\
        --batches 8 64 --classes 10 1000 --iters 20 --warmup 5 --eval-images 1000 --json upstream.json

Standalone: it imports none of this repository's packages (upstream's ``clip``, ``trainers``, ``datasets`` and
``train`` share their names with ours); it puts the upstream checkout (``bench/upstream_setup.sh``) and its
``Dassl.pytorch`` first on ``sys.path`` and runs upstream's own code: Dassl's default config, upstream ``train.py``'s
``extend_cfg``, its EuroSAT and PromptKD config files with its base-to-novel script's options, then ``--opts``;
PromptKD's ``build_model``, ``forward_backward`` (the timed step) and ``test`` (evaluation, with Dassl's evaluator).
It works in ``--inputs`` (``bench.side_by_side_inputs.write_inputs``), where upstream's hard-coded relative paths
(``./clip/ViT-B-16.pt``, ``./clip/ViT-L-14.pt``, ``./teacher_model/EuroSAT/...``) find the shared random weights.

Set by hand, because Dassl's ``TrainerX.__init__`` would build a data manager from a dataset on disk: the trainer is
made with Dassl's ``TrainerBase.__init__`` (the model registries) and ``SimpleTrainer.__init__``'s attributes other
than the data (``device`` from ``--device``, the epoch counters, ``cfg``, the evaluator), ``dm.dataset.classnames``
(C made-up class names, what ``build_model`` reads) and ``lab2cname``; ``batch_idx`` / ``num_batches`` so the timed
steps are mid-epoch ones (the per-epoch LR step does not fire); ``test_loader`` is a list of batches of random images
(``DATALOADER.TEST.BATCH_SIZE`` each, labels among the novel half of the classes, which base-to-novel testing scores).
Step inputs are random images already on the device; evaluation batches start on the CPU as a loader's do.
Every change to upstream's behaviour is one line of the JSON's ``patches``.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import inspect
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from types import SimpleNamespace

SETUP_SCRIPT = "bench/upstream_setup.sh"
UPSTREAM_MARKER = os.path.join("trainers", "promptkd.py")
INPUT_FILES = (os.path.join("clip", "ViT-B-16.pt"), os.path.join("clip", "ViT-L-14.pt"),
               os.path.join("teacher_model", "EuroSAT", "VLPromptLearner", "model-best.pth.tar"))
"""What upstream reads relative to its working folder (``bench.side_by_side_inputs`` writes them)."""
CONFIG_FILES = (os.path.join("configs", "datasets", "eurosat.yaml"),
                os.path.join("configs", "trainers", "PromptKD", "vit_b16_c2_ep20_batch8_4+4ctx.yaml"))
SCRIPT_OPTS = ("DATASET.NUM_SHOTS", "0", "TRAINER.MODAL", "base2novel", "TRAINER.PROMPTKD.TEMPERATURE", "1.0",
               "TRAINER.PROMPTKD.KD_WEIGHT", "1000.0")
"""The options upstream's ``scripts/promptkd/base2new_train.sh`` passes for EuroSAT."""
REFUSED_PRECISIONS = {
    "fp32": "upstream PromptKD casts its student projector to fp16 (convert_weights in CustomCLIP) also when PREC is "
            "fp32, so its step stops on a float input meeting half weights",
    "amp": "upstream PromptKD's amp branch passes the student's (features, logit scale) tuple to GradScaler.scale "
           "and calls .backward() on the result",
}
"""Precisions upstream's own code cannot step on any torch; refused rather than patched (only fp16 runs upstream)."""


class UsageError(Exception):
    """A user mistake, reported as one ``error:`` line (exit status 2)."""


def median_ms(seconds: Sequence[float]) -> float:
    """The median of step times given in seconds, in milliseconds (the contract's ``step_ms``)."""
    return statistics.median(seconds) * 1000.0


def gib(n_bytes: int | None) -> float | None:
    """Bytes as GiB (2**30), None (no CUDA peak on the CPU) kept."""
    return None if n_bytes is None else n_bytes / 2**30


def step_record(batch: int, classes: int, first_s: float, seconds: Sequence[float], peak_bytes: int | None,
                loss: float) -> dict:
    """One ``steps`` record of the contract: the first step, the median of the timed ones, the peak of one step."""
    return {"batch": batch, "classes": classes, "first_step_s": first_s, "step_ms": median_ms(seconds),
            "peak_gib": gib(peak_bytes), "loss": loss}


def eval_record(classes: int, batch: int, images: int, seconds: float, peak_bytes: int | None) -> dict:
    """One ``eval`` record of the contract: images per second over the whole ``test()`` call."""
    return {"classes": classes, "batch": batch, "images": images, "images_per_s": images / seconds,
            "peak_gib": gib(peak_bytes)}


def novel_count(classes: int) -> int:
    """How many classes upstream's base-to-novel ``test()`` scores: the second half, after ``ceil(C / 2)`` base."""
    return classes - math.ceil(classes / 2)


def class_names(classes: int) -> list[str]:
    """C made-up class names (upstream tokenises ``"a photo of a <name>."``)."""
    return [f"class {i}" for i in range(classes)]


def batch_sizes(total: int, batch: int) -> list[int]:
    """The sizes of the batches ``total`` images make at ``batch`` per batch (the last one partial)."""
    return [min(batch, total - start) for start in range(0, total, batch)]


def upstream_head(folder: str) -> str:
    """The git HEAD commit of ``folder`` when it is a repository's root (not merely inside one), else "unknown"."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        if os.path.realpath(git("rev-parse", "--show-toplevel")) != os.path.realpath(folder):
            return "unknown"
        return git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def check_paths(upstream: str, inputs: str) -> None:
    """Refuse a folder that is not an upstream checkout, or inputs without one of upstream's weight files."""
    if not os.path.isfile(os.path.join(upstream, UPSTREAM_MARKER)):
        raise UsageError(f"--upstream {upstream}: no upstream PromptKD checkout there ({UPSTREAM_MARKER} is missing); "
                         f"put one there with 'bash {SETUP_SCRIPT}'")
    for rel in INPUT_FILES:
        if not os.path.isfile(os.path.join(inputs, rel)):
            raise UsageError(f"--inputs {inputs}: {rel} is missing; write the inputs with "
                             "bench.side_by_side_inputs.write_inputs(FOLDER, SPECS[...])")


def write_json(path: str, record: dict) -> None:
    """Write ``record`` to ``path`` whole or not at all (a temporary file beside it, then a rename)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".upstream_promptkd.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load_inputs(torch, path: str, keys: Sequence[str]) -> dict:
    """The entries of the upstream children's ``--inputs`` file (tensors, strings; nothing pickled runs): an
    unreadable file or a missing entry is one UsageError naming ``keys``."""
    try:
        inputs = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user error
        raise UsageError(f"--inputs {path}: not a torch.save file of tensors and strings ({type(e).__name__}); "
                         f"write it with torch.save({{{', '.join(keys)}}})") from None
    missing = [key for key in keys if not isinstance(inputs, dict) or key not in inputs]
    if missing:
        raise UsageError(f"--inputs {path}: no {', '.join(missing)}; it needs {', '.join(keys)}")
    return inputs


def cpu_shim(torch, calls: str = "the student projector, the teacher's text encoder and its inputs") -> str:
    """Make ``Module.cuda()`` / ``Tensor.cuda()`` return their object unchanged, for upstream's hard-coded calls on
    ``calls``."""
    torch.nn.Module.cuda = lambda self, device=None: self
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    return f"CPU dry run only: Module.cuda() and Tensor.cuda() return their object unchanged (upstream calls .cuda() " \
           f"on {calls})"


def scheduler_shim(torch) -> list[str]:
    """Let Dassl's warmup schedulers pass ``verbose`` positionally to a torch whose ``LRScheduler`` no longer takes
    it (dropped: it only printed each new LR); nothing on a torch that still does."""
    sched = torch.optim.lr_scheduler
    if "verbose" in inspect.signature(sched.LRScheduler.__init__).parameters:
        return []

    def init(self, optimizer, last_epoch: int = -1, verbose: bool = False) -> None:
        sched.LRScheduler.__init__(self, optimizer, last_epoch)

    sched._LRScheduler.__init__ = init
    return [f"torch {torch.__version__}: LRScheduler.__init__ no longer takes verbose, which Dassl's warmup "
            "schedulers (subclasses of _LRScheduler) pass positionally; _LRScheduler.__init__ drops it"]


def import_upstream(upstream: str) -> SimpleNamespace:
    """Upstream's modules the run uses, imported from ``upstream`` (put first on ``sys.path``)."""
    sys.path[:0] = [os.path.abspath(upstream), os.path.abspath(os.path.join(upstream, "Dassl.pytorch"))]
    names = {"train": "train", "promptkd": "trainers.promptkd", "config": "dassl.config",
             "trainer": "dassl.engine.trainer", "evaluation": "dassl.evaluation", "utils": "dassl.utils"}
    return SimpleNamespace(**{key: importlib.import_module(name) for key, name in names.items()})


def build_cfg(up: SimpleNamespace, upstream: str, prec: str, opts: Sequence[str]):
    """Upstream train.py's ``setup_cfg`` for its base-to-novel EuroSAT PromptKD run, then ``opts``."""
    cfg = up.config.get_cfg_default()
    up.train.extend_cfg(cfg)
    for rel in CONFIG_FILES:
        cfg.merge_from_file(os.path.join(os.path.abspath(upstream), rel))
    cfg.TRAINER.NAME = "PromptKD"
    cfg.SEED = 1
    cfg.merge_from_list(list(SCRIPT_OPTS) + ["TRAINER.PROMPTKD.PREC", prec])
    try:
        cfg.merge_from_list(list(opts))
    except (KeyError, ValueError, AssertionError) as e:
        raise UsageError(f"--opts: {e.args[0] if e.args else e}") from None
    cfg.freeze()
    return cfg


def build_trainer(up: SimpleNamespace, cfg, classes: int, device):
    """Upstream's PromptKD trainer for ``classes`` made-up classes, without Dassl's data manager (module docstring)."""
    trainer = up.promptkd.PromptKD.__new__(up.promptkd.PromptKD)
    up.trainer.TrainerBase.__init__(trainer)
    trainer.check_cfg(cfg)
    trainer.device = device
    trainer.start_epoch = trainer.epoch = 0
    trainer.max_epoch = cfg.OPTIM.MAX_EPOCH
    trainer.output_dir = cfg.OUTPUT_DIR
    trainer.cfg = cfg
    names = class_names(classes)
    trainer.dm = SimpleNamespace(dataset=SimpleNamespace(classnames=names))
    trainer.lab2cname = dict(enumerate(names))
    trainer.num_classes = classes
    trainer.val_loader = None
    up.utils.set_random_seed(cfg.SEED)
    trainer.build_model()
    trainer.evaluator = up.evaluation.build_evaluator(cfg, lab2cname=trainer.lab2cname)
    trainer.batch_idx, trainer.num_batches = 0, sys.maxsize
    return trainer


class Clock:
    """Wall time of calls on one device (CUDA synchronised before and after), and their CUDA peak memory."""

    def __init__(self, torch, device) -> None:
        self.torch, self.device = torch, device
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.device)

    def seconds(self, fn: Callable[[], object]) -> float:
        """Seconds one call of ``fn`` takes."""
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def peak(self, fn: Callable[[], object]) -> tuple[float, int | None]:
        """Seconds and peak allocated CUDA bytes (None on the CPU) of one call of ``fn``."""
        if self.cuda:
            self.sync()
            self.torch.cuda.reset_peak_memory_stats(self.device)
        seconds = self.seconds(fn)
        return seconds, self.torch.cuda.max_memory_allocated(self.device) if self.cuda else None


def time_steps(torch, clock: Clock, trainer, batch: int, classes: int, iters: int, warmup: int) -> dict:
    """Upstream's ``forward_backward`` on ``batch`` random images: the first step, ``warmup`` untimed steps, the
    median of ``iters`` timed ones and the peak memory of one more."""
    images = torch.randn(batch, 3, *trainer.cfg.INPUT.SIZE, device=clock.device)
    labels = torch.randint(0, math.ceil(classes / 2), (batch,), device=clock.device)
    data = {"img": images, "label": labels}
    losses = []

    def step() -> None:
        losses.append(trainer.forward_backward(data)["loss"])

    trainer.set_model_mode("train")
    first = clock.seconds(step)
    for _ in range(warmup):
        step()
    seconds = [clock.seconds(step) for _ in range(iters)]
    _, peak = clock.peak(step)
    return step_record(batch, classes, first, seconds, peak, losses[-1])


def time_eval(torch, clock: Clock, trainer, classes: int, images: int, warmup: int) -> dict:
    """Images/s of one upstream ``test()`` call over ``images`` random images (one untimed batch first when
    ``warmup``), and its peak memory."""
    batch = trainer.cfg.DATALOADER.TEST.BATCH_SIZE
    size = trainer.cfg.INPUT.SIZE
    novel = novel_count(classes)
    loader = [{"img": torch.randn(n, 3, *size), "label": torch.randint(0, novel, (n,))}
              for n in batch_sizes(images, batch)]
    if warmup:
        trainer.test_loader = loader[:1]
        trainer.test()
    trainer.test_loader = loader
    seconds, peak = clock.peak(trainer.test)
    return eval_record(classes, batch, images, seconds, peak)


def device_name(torch, device) -> str:
    """The GPU's name, or the CPU with its torch thread count."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"


def run(args: argparse.Namespace) -> dict:
    """Build upstream's trainer per class count, time its steps at each batch and its evaluation; the contract's
    record."""
    import torch

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: torch sees no CUDA device here; use --device cpu for a dry run")
    head = upstream_head(args.upstream)
    patches = scheduler_shim(torch) + ([cpu_shim(torch)] if device.type == "cpu" else [])
    up = import_upstream(args.upstream)
    cfg = build_cfg(up, args.upstream, args.prec, args.opts)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as upstream train.py's main
    clock = Clock(torch, device)
    record = {"upstream": head, "torch": torch.__version__, "device": device_name(torch, device), "prec": args.prec,
              "patches": patches, "steps": [], "eval": []}
    os.chdir(args.inputs)
    for classes in args.classes:
        trainer = build_trainer(up, cfg, classes, device)
        for batch in args.batches:
            rec = time_steps(torch, clock, trainer, batch, classes, args.iters, args.warmup)
            record["steps"].append(rec)
            print(f"upstream {args.prec} step, batch {batch}, {classes} classes: first {rec['first_step_s']:.2f} s, "
                  f"{rec['step_ms']:.1f} ms/step, peak {_gib_text(rec['peak_gib'])}, loss {rec['loss']:.4g}",
                  file=sys.stderr, flush=True)
        rec = time_eval(torch, clock, trainer, classes, args.eval_images, args.warmup)
        record["eval"].append(rec)
        print(f"upstream {args.prec} eval, {classes} classes: {rec['images_per_s']:.1f} images/s over "
              f"{rec['images']} images, peak {_gib_text(rec['peak_gib'])}", file=sys.stderr, flush=True)
        del trainer
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return record


def _gib_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} GiB"


def _at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python bench/upstream_promptkd.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--upstream", required=True, help=f"upstream PromptKD checkout (made by {SETUP_SCRIPT})")
    p.add_argument("--inputs", required=True, help="folder written by bench.side_by_side_inputs.write_inputs")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where to step (default cuda)")
    p.add_argument("--prec", choices=("fp16", "fp32", "amp"), default="fp16", help="TRAINER.PROMPTKD.PREC")
    p.add_argument("--batches", type=_at_least(2), nargs="+", default=[8, 64],
                   help="step batch sizes (at least 2: the student projector's BatchNorm trains on batch statistics)")
    p.add_argument("--classes", type=_at_least(2), nargs="+", default=[10, 1000],
                   help="class counts (at least 2: base-to-novel tests the second half)")
    p.add_argument("--iters", type=_at_least(1), default=20, help="timed steps per measurement (their median)")
    p.add_argument("--warmup", type=_at_least(0), default=5, help="untimed steps after the first one")
    p.add_argument("--eval-images", type=_at_least(1), default=1000, help="random images per evaluation")
    p.add_argument("--json", required=True, help="where the record goes")
    p.add_argument("--opts", nargs="*", default=[], help="extra yacs overrides, KEY VALUE ...")
    return p


def run_and_write(args: argparse.Namespace, check: Callable[[argparse.Namespace], None],
                  run_child: Callable[[argparse.Namespace], dict]) -> int:
    """``check(args)``, then ``run_child(args)``'s record to ``args.json`` (whole or not at all); a ``UsageError`` on
    the way is one ``error:`` line and exit status 2, nothing written. The command line of each upstream child."""
    try:
        check(args)
        args.json = os.path.abspath(args.json)
        if not os.path.isdir(os.path.dirname(args.json)):
            raise UsageError(f"--json {args.json}: its folder does not exist")
        record = run_child(args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_json(args.json, record)
    return 0


def check_args(args: argparse.Namespace) -> None:
    """Refuse what upstream cannot run before anything is imported; make the folders absolute."""
    check_paths(args.upstream, args.inputs)
    if args.prec in REFUSED_PRECISIONS:
        raise UsageError(f"--prec {args.prec}: {REFUSED_PRECISIONS[args.prec]}; use --prec fp16 (upstream's default)")
    if len(args.opts) % 2:
        raise UsageError(f"--opts takes KEY VALUE pairs; got {len(args.opts)} words")
    args.upstream, args.inputs = os.path.abspath(args.upstream), os.path.abspath(args.inputs)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry; returns the exit status (2: a user error, one line)."""
    return run_and_write(build_parser().parse_args(argv), check_args, run)


if __name__ == "__main__":
    sys.exit(main())
