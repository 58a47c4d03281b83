"""The runner's profiles on the toy world: PromptKD's and PETR's base-to-novel runs per seed as the paper runs them
(``paper``), with the runner's ``fast`` overrides, and with ``fast`` plus ``TRAIN.CUDA_GRAPH`` (CUDA only); and the
data path alone: the paper profile with the real configs' random resized crops (the demo configs only flip, and
their 32 px images are already at the input size, so neither decoder resamples them), decoded by PIL and by the
tensor decoder (``INPUT.DECODER tensor``).

Every variant takes its overrides from ``runner.profiles`` (``Profile.opts``, ``bf16_opts``), so the toy runs what
a sweep of that profile runs, then its own (:data:`GRAPH_OPTS`, :data:`CROPS`, :data:`TENSOR_DECODER`). The demo's
configs pin ``USE_CUDA False``; ``--device cuda`` sets it True for every run (the teacher's too). The teacher
(PromptSRC, first seed) is trained once per device and shared by the variants, so they differ in the students only.
Output:
``<output>/profiles/<device>/``; one table of per-seed base / new / HM test accuracy and the median training step
(train.py's ``time`` meter), with mean ± sample std over the seeds.

Command line: ``python -m bench.demo_profiles [--seeds 1 2 3] [--device cpu|cuda] [--quick] [--jobs N] [--threads N]``.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tabulate import tabulate

from analysis import stats
from analysis.report import CONVENTION
from analysis.stats import harmonic_mean
from demo import report
from demo.pipeline import QUICK, failures
from demo.study import PLAN, RESULTS, Demo, add_study_options, study_paths
from engine.cuda_graph import CAPTURED_OPTIMS
from engine.runs import LOG_FILE
from engine.utils import read_json
from runner.costs import trainer_config
from runner.jobs import Job
from runner.profiles import FAST, PAPER, Profile, bf16_opts, card_has_bf16
from trainers.catalog import find_method

GRAPH_OPTS = ("TRAIN.COMPILE", "none", "TRAIN.CUDA_GRAPH", "True")
"""Added after the fast profile's overrides: the whole step as one CUDA graph, on eager CLIPs (compilation and the
graph do not capture together, docs/throughput.md)."""
CROPS = ("INPUT.TRANSFORMS", "['random_resized_crop', 'random_flip', 'normalize']")
"""The CoOp, PromptKD and PETR configs' training transform, on the toy world's images."""
TENSOR_DECODER = ("INPUT.DECODER", "tensor")
TRAINERS = ("PromptKD", "PETR")
STEP_TIME = re.compile(r"^epoch \[\d+/\d+\] batch \[\d+/\d+\] time ([\d.]+) ", re.MULTILINE)


@dataclass(frozen=True)
class Variant:
    """One column of the study: a runner profile, then overrides of its own (the step as a CUDA graph, the data
    path)."""

    name: str
    profile: Profile
    extra: tuple[str, ...] = ()

    def opts(self, trainer: str, cache_root: str, has_bf16: bool) -> list[str]:
        """The overrides a sweep of this profile gives ``trainer`` (bf16 first, as ``runner.profiles.launch_env``
        puts it), then the variant's own."""
        method = find_method(trainer)
        return [*bf16_opts(self.profile.bf16_ns(method), has_bf16), *self.profile.opts(method, cache_root),
                *self.extra]


VARIANTS = (Variant("paper", PAPER), Variant("fast", FAST), Variant("fast + CUDA graph", FAST, GRAPH_OPTS),
            Variant("paper + crops", PAPER, CROPS), Variant("paper + crops + tensor decoder", PAPER,
                                                             CROPS + TENSOR_DECODER))


def demo_optimizer(trainer: str) -> str:
    """``OPTIM.NAME`` of the demo config of ``trainer``."""
    return trainer_config(trainer, "demo").get("OPTIM", {}).get("NAME", "adam")


def skipped_variants(device: str) -> dict[str, str]:
    """Variant name -> why it does not run on ``device`` (the CUDA graph: off the GPU, or when a demo config's
    optimiser is not one the graph captures)."""
    if device != "cuda":
        return {"fast + CUDA graph": "TRAIN.CUDA_GRAPH needs a CUDA GPU (run with --device cuda)"}
    other = {t: demo_optimizer(t) for t in TRAINERS if demo_optimizer(t) not in CAPTURED_OPTIMS}
    if other:
        named = ", ".join(f"{t} {o}" for t, o in other.items())
        return {"fast + CUDA graph": f"TRAIN.CUDA_GRAPH captures {', '.join(CAPTURED_OPTIMS)} steps only; the demo "
                                     f"configs use {named} (configs/trainers/<trainer>/demo.yaml)"}
    return {}


def median_step_ms(log_text: str) -> float:
    """Median of the per-step times train.py's progress lines print (ms); NaN without a progress line."""
    times = [float(t) for t in STEP_TIME.findall(log_text)]
    return 1000 * statistics.median(times) if times else float("nan")


class ProfileStudy:
    """The runs of each variant, trainer and seed, and their table."""

    def __init__(self, demo: Demo, variants: Sequence[Variant], seeds: Sequence[int], device: str, has_bf16: bool,
                 extra: dict[str, tuple[str, ...]]):
        self.demo, self.variants, self.seeds = demo, variants, seeds
        self.device, self.has_bf16, self.extra = device, has_bf16, extra
        self.root = demo.paths.output

    def run_dir(self, variant: Variant, trainer: str, seed: int) -> str:
        return os.path.join(self.root, variant.name.replace(" ", "").replace("+", "_"), trainer, f"seed{seed}")

    def device_opts(self) -> tuple[str, ...]:
        return ("USE_CUDA", str(self.device == "cuda"))

    def teacher_job(self) -> Job:
        return self.demo.teacher_job((*self.device_opts(), *self.extra.get("PromptSRC", ())))

    def jobs(self, teacher_job: str) -> list[Job]:
        """Per variant, trainer and seed: training on the base classes (tested on them), then the novel test."""
        jobs = []
        for v in self.variants:
            for trainer in TRAINERS:
                opts = (*self.demo.distill_opts(trainer), *self.device_opts(), *self.extra.get(trainer, ()),
                        *v.opts(trainer, self.root, self.has_bf16))
                for seed in self.seeds:
                    run = self.run_dir(v, trainer, seed)
                    train, new = os.path.join(run, "train_base"), os.path.join(run, "test_new")
                    name = f"{trainer} {v.name} seed{seed}"
                    call = self.demo.train_call(trainer, train, seed, "base", opts)
                    jobs.append(self.demo.job(v.name, name=name, kind="train", method=trainer, dataset=self.demo.short,
                                              call=call, runs=(train,), deps=(teacher_job,), seed=seed,
                                              trainer=trainer))
                    call = self.demo.train_call(trainer, new, seed, "new", opts, model_dir=train)
                    jobs.append(self.demo.job(v.name, name=f"{name} new", kind="test", method=trainer,
                                              dataset=self.demo.short, call=call, runs=(new,), deps=(name,),
                                              seed=seed, trainer=trainer))
        return jobs

    def read(self, variant: Variant, trainer: str, seed: int) -> list[float]:
        """Base, new and HM accuracy (test split) and the median step ms of one run."""
        run = self.run_dir(variant, trainer, seed)
        base = read_json(os.path.join(run, "train_base", RESULTS))["accuracy"]
        new = read_json(os.path.join(run, "test_new", RESULTS))["accuracy"]
        with open(os.path.join(run, "train_base", LOG_FILE)) as f:
            step = median_step_ms(f.read())
        return [base, new, harmonic_mean(base, new), step]

    def finished(self, variant: Variant, trainer: str, seed: int) -> bool:
        run = self.run_dir(variant, trainer, seed)
        return all(os.path.exists(os.path.join(run, part, RESULTS)) for part in ("train_base", "test_new"))

    def table(self) -> str:
        """The table of the runs that finished (after a failed run, the others still show)."""
        return profile_table({(t, v.name, s): self.read(v, t, s) for t in TRAINERS for v in self.variants
                              for s in self.seeds if self.finished(v, t, s)})


def profile_table(values: dict[tuple[str, str, int], list[float]]) -> str:
    """Rows per (method, profile, seed) of base / new / HM / step ms, each (method, profile) of several seeds followed
    by its mean ± std row."""
    groups: dict[tuple[str, str], dict[int, list[float]]] = {}
    for (method, profile, seed), row in values.items():
        groups.setdefault((method, profile), {})[seed] = row
    rows = []
    for (method, profile), by_seed in groups.items():
        rows += [[method, profile, seed, *(f"{x:.2f}" for x in row[:3]), f"{row[3]:.1f}"]
                 for seed, row in by_seed.items()]
        if len(by_seed) < 2:
            continue
        steps = [row[3] for row in by_seed.values()]
        rows.append([method, profile, "mean ± std", *(report.mean_std([row[i] for row in by_seed.values()])
                                                      for i in range(3)),
                     f"{stats.mean(steps):.1f} ± {stats.std(steps, CONVENTION):.1f}"])
    return tabulate(rows, headers=["method", "profile", "seed", "base", "new", "HM", "step ms (median)"],
                    disable_numparse=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the profile study."""
    parser = argparse.ArgumentParser(description="The runner's paper and fast profiles on the toy world.")
    add_study_options(parser)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the runs train (default cpu)")
    parser.add_argument("--quick", action="store_true", help="the quick demo's smaller data and fewer epochs")
    args = parser.parse_args(argv)
    paths = study_paths(args.workdir)
    size = "quick" if args.quick else "demo"
    paths = replace(paths, output=os.path.join(paths.output, "profiles", f"{args.device}-{size}"),
                    data=paths.data + ("-quick" if args.quick else ""))
    plan = replace(PLAN, seeds=tuple(args.seeds))
    extra: dict[str, tuple[str, ...]] = {}
    if args.quick:
        plan = replace(plan, data=QUICK.data)
        extra = {m: tuple(QUICK.method_opts[m].split()) for m in ("PromptSRC", *TRAINERS)}
    has_bf16 = args.device == "cuda" and card_has_bf16()
    skipped = skipped_variants(args.device)
    variants = [v for v in VARIANTS if v.name not in skipped]
    demo = Demo(plan, paths, args.threads, args.jobs)
    demo.prepare()
    study = ProfileStudy(demo, variants, args.seeds, args.device, has_bf16, extra)
    teacher = study.teacher_job()
    outcome = demo.run_jobs([teacher, *study.jobs(teacher.name)], os.path.join(study.root, "logs"))
    print(study.table())
    print(f"{size} size on {args.device} ({'bf16' if has_bf16 else 'shipped precision'} in the fast profile); "
          "test split; mean ± sample std over seeds.")
    for name, why in skipped.items():
        print(f"Not run: {name}: {why}")
    if not outcome.ok:
        print(failures(outcome))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
