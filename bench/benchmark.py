"""Cost of PETR next to PromptKD, on random-weight CLIPs of the real shapes (no weight files, CPU or CUDA).

* inference: GFLOPs per image (torch.utils.flop_counter), latency (median of --iters runs after --warmup) and
  images/s at batch 1 and --batch for PromptKD (one student branch), PETR two-pass (two student forwards) and PETR
  batched (both branches in one CLIP forward, trainers.distillation.student.batched_features); PETR includes its router,
  whose share of the PETR forward is reported separately (Mahalanobis router fitted on random logits of width 2C).
* train: one PromptKD student step (ViT-B/16-shaped student, ViT-L/14-shaped prompted teacher) with the teacher's
  text features computed once (ours) vs recomputed for all C classes every batch (upstream PromptKD), both on our
  trimmed text tokens and on the full 77-token context as upstream runs them; then (bench/benchmark_train.py)
  PETR's, PromptKD's and the PromptSRC teacher's full steps for each precision, TRAIN.COMPILE mode and teacher
  cache off/on with peak GPU memory, train.py epochs on a generated 224 px image tree (images/s with data
  loading, persistent workers off/on), and a projected ImageNet base-to-novel epoch on the device.
* loader (bench/loader.py): one core loading a training image per image size (64 px to 800 x 600) and path
  (PIL or tensor decoding, the teacher cache's decoded views, stored images), and train.py epochs of PETR and
  PromptKD per teacher cache and decoder with their data share; prints runner/costs.py's LOADER_RATES lines.

    python -m bench.benchmark                         # both parts, ViT-B/16 + ViT-L/14 shapes
    python -m bench.benchmark inference --batch 8 --iters 3 --threads 2
    python -m bench.benchmark train --classes 10 --train-batch 2 --train-iters 2
    python -m bench.benchmark train --model tiny --train-iters 3 --workers 2     # CPU table of docs/throughput.md
    python -m bench.benchmark train --device cuda --classes 1000 --train-iters 20 --warmup 5
    python -m bench.benchmark --device cuda --prec amp --batch 64 --iters 20 --warmup 5
    python -m bench.benchmark loader --threads 1      # the data path: per-core loading, train.py epochs (data share)
"""
from __future__ import annotations

import argparse
from functools import partial

import torch
import torch.nn.functional as F
from tabulate import tabulate

import clip
from bench.benchmark_train import train_parts
from bench.loader import SIZES, loader_part
from bench.models import (  # noqa: F401 (public names)
    SPECS,
    ModelSpec,
    benchmark_device,
    count_flops,
    random_clip,
    time_calls,
)
from engine.compile import COMPILE_MODES
from engine.precision import PRECISIONS, autocast
from trainers.distillation.losses import kd_loss
from trainers.distillation.student import VisualPromptStudent, batched_features
from trainers.distillation.teacher import Teacher
from trainers.prompting.deep_prompts import VLPromptLearner
from trainers.routing.routers import MahalanobisRouter

TRAIN_MODES = {
    "once": "ours: teacher text features computed once",
    "per_batch": "text features recomputed every batch (our trimmed tokens)",
    "per_batch_77": "upstream PromptKD: recomputed every batch, 77 tokens",
}


class InferenceModels:
    """One frozen student CLIP, two student prompt sets (θ_s, θ_u), random teacher text features and a router."""

    def __init__(self, spec: ModelSpec, classes: int, device: torch.device, prec: str = "fp32", seed: int = 0,
                 router_fit: int = 5000):
        self.device, self.prec, self.classes = device, prec, classes
        self.clip_model = random_clip(spec.student, device, seed)
        out_dim = spec.teacher["embed_dim"]
        torch.manual_seed(seed + 1)
        self.students = [VisualPromptStudent(self.clip_model, spec.n_ctx, spec.depth, out_dim).to(device).eval()
                         .requires_grad_(False) for _ in range(2)]
        self.text_features = F.normalize(torch.randn(classes, out_dim), dim=-1).to(device)
        self.scale = float(self.clip_model.logit_scale.exp())
        self.router = MahalanobisRouter().fit(10.0 * torch.randn(router_fit, 2 * classes, device=device))
        self.resolution = spec.student["image_resolution"]

    def images(self, batch: int) -> torch.Tensor:
        return torch.randn(batch, 3, self.resolution, self.resolution, device=self.device)

    def logits(self, features: torch.Tensor) -> torch.Tensor:
        return self.scale * features.float() @ self.text_features.t()

    def promptkd(self, images: torch.Tensor) -> torch.Tensor:
        """PromptKD inference: one student forward, logits against the precomputed text features."""
        with autocast(self.prec, self.device):
            return self.logits(self.students[0](self.clip_model, images))

    def route(self, q_s: torch.Tensor, q_u: torch.Tensor) -> torch.Tensor:
        """The router's decision and answer: Mahalanobis distance of [q_s, q_u], threshold, chosen branch."""
        return self.router.decide(torch.cat([q_s, q_u], dim=1), self.classes)[1]

    def petr_branches_two_pass(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(self.prec, self.device):
            return tuple(self.logits(s(self.clip_model, images)) for s in self.students)

    def petr_branches_batched(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(self.prec, self.device):
            return tuple(self.logits(f) for f in batched_features(self.clip_model, self.students, images))

    def petr_two_pass(self, images: torch.Tensor) -> torch.Tensor:
        """PETR with two separate student forwards, then routing."""
        return self.route(*self.petr_branches_two_pass(images))

    def petr_batched(self, images: torch.Tensor) -> torch.Tensor:
        """PETR with both branches in one CLIP forward (per-sample prompts), then routing."""
        return self.route(*self.petr_branches_batched(images))


ROUTER_REPEATS = 20  # router timings per timed method run
INFERENCE_METHODS = {"PromptKD (one branch)": "promptkd", "PETR two-pass": "petr_two_pass",
                     "PETR batched": "petr_batched"}


@torch.inference_mode()
def inference_report(models: InferenceModels, batches: list[int], iters: int, warmup: int) -> tuple[list, list]:
    """Rows of the method table (per batch size) and of the router table."""
    one = models.images(1)
    gflops = {label: count_flops(getattr(models, name), one) / 1e9 for label, name in INFERENCE_METHODS.items()}
    q = torch.cat(models.petr_branches_batched(one), dim=1)
    router_flops = count_flops(models.router.decide, q, models.classes)
    rows, router_rows = [], []
    for batch in batches:
        images = models.images(batch)
        q = torch.cat(models.petr_branches_batched(images), dim=1)
        fns = {label: partial(getattr(models, name), images) for label, name in INFERENCE_METHODS.items()}
        median = time_calls(fns, iters, warmup, models.device)
        # the router is cheap: many more repetitions give a stable median
        median.update(time_calls({"router": partial(models.router.decide, q, models.classes)},
                                 ROUTER_REPEATS * iters, warmup + 1, models.device))
        base = median["PromptKD (one branch)"]
        for label in INFERENCE_METHODS:
            rows.append([label, batch, f"{gflops[label]:.4g}", f"{1e3 * median[label]:.1f}",
                         f"{batch / median[label]:.2f}", f"{median[label] / base:.2f}x"])
        share = 100.0 * median["router"] / median["PETR batched"]
        batched_ok = median["PETR batched"] <= median["PETR two-pass"]
        router_rows.append([batch, f"{router_flops / 1e3:.1f}", f"{1e3 * median['router']:.3f}",
                            f"{1e3 * median['PETR batched']:.1f}", f"{share:.3f}%", "yes" if share < 0.5 else "NO",
                            "yes" if batched_ok else "NO"])
    return rows, router_rows


def format_inference(rows: list, router_rows: list) -> str:
    table = tabulate(rows, headers=["method", "batch", "GFLOPs/image", "latency ms", "images/s", "x PromptKD"])
    router = tabulate(router_rows, headers=["batch", "router kFLOPs/image", "router ms", "PETR batched ms",
                                            "router share", "share < 0.5%", "batched <= two-pass"])
    return f"{table}\n\n{router}"


class TrainStepModels:
    """PromptKD's student step: frozen student CLIP + trainable prompts/projector, frozen prompted teacher."""

    def __init__(self, spec: ModelSpec, classes: int, device: torch.device, prec: str = "fp32", seed: int = 0):
        self.device, self.prec = device, prec
        self.clip_model = random_clip(spec.student, device, seed)
        teacher_clip = random_clip(spec.teacher, device, seed + 1)
        torch.manual_seed(seed + 2)
        prompts = VLPromptLearner.build(teacher_clip, spec.n_ctx, spec.n_ctx, spec.depth, spec.depth).to(device)
        self.classnames = [f"category number {i}" for i in range(classes)]
        self.teacher = Teacher(teacher_clip, self.classnames, prompts=prompts)
        placeholder = " ".join(["X"] * spec.n_ctx)
        self.full_tokens = clip.tokenize([f"{placeholder} {name}." for name in self.classnames]).to(device)
        self.student = VisualPromptStudent(self.clip_model, spec.n_ctx, spec.depth, spec.teacher["embed_dim"])
        self.student.to(device).train()
        self.optim = torch.optim.SGD(self.student.parameters(), lr=0.005, momentum=0.9)
        self.scale = float(self.clip_model.logit_scale.exp())
        self.resolution = spec.student["image_resolution"]

    def images(self, batch: int) -> torch.Tensor:
        return torch.randn(batch, 3, self.resolution, self.resolution, device=self.device)

    @torch.no_grad()
    def text_features(self, mode: str) -> torch.Tensor:
        """Teacher text features of all classes: cached (once), recomputed, or recomputed on 77 tokens (upstream)."""
        if mode == "once":
            return self.teacher.text_features
        if mode == "per_batch":
            return self.teacher.text_features_for(self.classnames)
        prompts = self.teacher.prompts.text_prompts()
        return F.normalize(self.teacher.clip_model.encode_text(self.full_tokens, prompts).float(), dim=-1)

    def step(self, images: torch.Tensor, mode: str) -> float:
        """One distillation step (teacher forward, student forward/backward, SGD update); returns the loss."""
        with autocast(self.prec, self.device):
            text = self.text_features(mode)
            teacher_logits = self.teacher.logit_scale * self.teacher.encode_image(images) @ text.t()
            student_logits = self.scale * self.student(self.clip_model, images) @ text.t()
        loss = kd_loss(student_logits.float(), teacher_logits.float(), 1.0)
        self.optim.zero_grad()
        loss.backward()
        self.optim.step()
        return loss.item()


def train_report(models: TrainStepModels, batch: int, iters: int, warmup: int) -> list:
    """Rows of the training-step table: seconds per step, images/s, GFLOPs per step, ratio to ours."""
    images = models.images(batch)
    gflops = {mode: count_flops(models.step, images, mode) / 1e9 for mode in TRAIN_MODES}
    median = time_calls({mode: partial(models.step, images, mode) for mode in TRAIN_MODES}, iters, warmup,
                        models.device)
    return [[label, batch, len(models.classnames), f"{gflops[mode]:.4g}", f"{median[mode]:.3f}",
             f"{batch / median[mode]:.2f}", f"{median[mode] / median['once']:.2f}x"]
            for mode, label in TRAIN_MODES.items()]


def format_train(rows: list) -> str:
    return tabulate(rows, headers=["PromptKD student step", "batch", "classes", "GFLOPs/step", "s/step", "images/s",
                                   "x ours"])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", nargs="?", default="all", choices=["all", "inference", "train", "steps", "loader"],
                   help="what to measure (steps: only the real trainers' step table; loader: the data path)")
    p.add_argument("--model", default="vit_b16", choices=sorted(SPECS), help="model shapes (tiny: seconds, tests)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda[:N]")
    p.add_argument("--prec", default="fp32", choices=["fp32", "amp"],
                   help="inference and text-feature table: amp = autocast (bf16 CPU, fp16 CUDA)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--classes", type=int, default=10, help="C, classes of the task (10 = EuroSAT)")
    p.add_argument("--batch", type=int, default=8, help="inference batch N (batch 1 is always measured too)")
    p.add_argument("--iters", type=int, default=3, help="timed inference runs per method (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per method first")
    p.add_argument("--router-fit", type=int, default=5000, help="random seen-train logits the router is fitted on")
    p.add_argument("--train-batch", type=int, default=2, help="training-step batch (ViT-L/14 on CPU is slow)")
    p.add_argument("--train-iters", type=int, default=2, help="timed training steps per variant (median)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the random weights and inputs")
    p.add_argument("--precisions", nargs="+", choices=PRECISIONS, help="full-step precisions (default: all)")
    p.add_argument("--compile", nargs="+", default=["none", "compile"], choices=list(COMPILE_MODES),
                   help="TRAIN.COMPILE modes of the full steps")
    p.add_argument("--cuda-graph", action="store_true",
                   help="also time the steps with TRAIN.CUDA_GRAPH (teacher cache on; CUDA only)")
    p.add_argument("--gpu-rows", action="store_true", help="the GPU table's rows only: fp32, bf16, bf16 + compile, "
                   "+ teacher cache, + CUDA graph (instead of --precisions x --compile)")
    p.add_argument("--step-batch", type=int, default=8, help="full-step batch (PETR: as many unlabelled again)")
    p.add_argument("--epochs", type=int, default=2, help="train.py epochs per setting (0: skip that part)")
    p.add_argument("--epoch-model", default="tiny224", choices=sorted(SPECS), help="model shapes of the epochs")
    p.add_argument("--epoch-images-per-class", type=int, default=64, help="images per class of the generated tree")
    p.add_argument("--workers", type=int, default=None, help="DATALOADER.NUM_WORKERS (default: the config's; loader "
                   "part: this machine's cores)")
    p.add_argument("--loader-sizes", nargs="+", default=list(SIZES), metavar="WxH",
                   help="image sizes of the per-core loading table")
    p.add_argument("--loader-images", type=int, default=32, help="images per size of the per-core table")
    p.add_argument("--loader-rounds", type=int, default=7, help="timed passes per path (median)")
    p.add_argument("--epoch-size", default="500x375", metavar="WxH", help="image size of the loader part's epochs")
    args = p.parse_args(argv)
    for name in ("classes", "batch", "iters", "router_fit", "train_batch", "train_iters", "step_batch",
                 "epoch_images_per_class", "loader_images", "loader_rounds"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.train_batch < 2 or args.step_batch < 2:
        p.error("--train-batch and --step-batch must be at least 2 (the student projector's BatchNorm trains on "
                "batch statistics)")
    return args


def main(argv: list[str] | None = None) -> None:
    """Run the requested parts and print their tables."""
    args = parse_args(argv)
    device, where = benchmark_device(args.device, args.threads)
    spec = SPECS[args.model]
    print(f"{spec.label}; {where}; {args.prec}; torch {torch.__version__}; random weights; "
          f"prompts {spec.n_ctx} tokens x depth {spec.depth}; C = {args.classes}")
    if args.part in ("all", "inference"):
        models = InferenceModels(spec, args.classes, device, args.prec, args.seed, args.router_fit)
        batches = sorted({1, args.batch})
        print(f"\n== Inference: median of {args.iters} runs after {args.warmup} warm-up, torch.inference_mode; "
              f"PETR includes routing; router fitted on {args.router_fit:,} random logits of width {2 * args.classes}; "
              "FLOPs from torch.utils.flop_counter, 2 per multiply-add")
        print(format_inference(*inference_report(models, batches, args.iters, args.warmup)))
        del models
    if args.part == "steps":
        train_parts(args, spec, device)
    if args.part == "loader":
        loader_part(args, device, where)
    if args.part in ("all", "train"):
        print(f"\n== Training step (PromptKD student, KD loss, SGD): median of {args.train_iters} steps after "
              f"{args.warmup} warm-up, batch {args.train_batch}")
        models = TrainStepModels(spec, args.classes, device, args.prec, args.seed)
        print(format_train(train_report(models, args.train_batch, args.train_iters, args.warmup)))
        del models
        train_parts(args, spec, device)


if __name__ == "__main__":
    main()
