"""What CoCoOp costs per image next to CoOp, on a random-weight CLIP of the real shapes (no weight files).

CoOp's class text features depend only on the learned context: an evaluation computes them once and a training step
once per batch. CoCoOp's context depends on the image, so every image needs its own C text sequences. Measured, per
image, for evaluation (inference mode) and for a training step (forward + backward of the cross-entropy):

* CoOp: text features once (per evaluation; per batch in training), image tower per image;
* CoCoOp, batched (ours, ``trainers.cocoop.conditional_logits``): the batch's B·C prompts in one text forward;
* CoCoOp, per image: one text forward of C prompts per image, as upstream's loop does (our trimmed tokens);
* CoCoOp, per image on 77 tokens: upstream's loop as it runs, every prompt padded to the full context.

    python -m bench.benchmark_cocoop                            # ViT-B/16 shapes, C = 10, batch 4
    python -m bench.benchmark_cocoop --classes 50 --batch 8 --threads 2
    python -m bench.benchmark_cocoop --model tiny --iters 1     # seconds (tests)
    python -m bench.benchmark_cocoop --device cuda --classes 100 --batch 32 --iters 10 --warmup 3
"""
from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tabulate import tabulate

import clip
from bench.benchmark_train import _peak_memory
from bench.models import TINY_STUDENT, VIT_B16, benchmark_device, count_flops, random_clip, time_calls
from trainers.cocoop import CoCoOpPromptLearner, conditional_logits
from trainers.coop import CoOpPromptLearner, coop_text_features

SHAPES = {"vit_b16": ("ViT-B/16", VIT_B16), "tiny": ("tiny (tests)", TINY_STUDENT)}
CTX_INIT = "a photo of a"
VARIANTS = {
    "coop": "CoOp (text once per evaluation / batch)",
    "batched": "CoCoOp, batched (ours)",
    "per_image": "CoCoOp, one text forward per image",
    "per_image_77": "CoCoOp, per image on 77 tokens (upstream)",
}


class CostModels:
    """A random CLIP, C class names, CoOp's and CoCoOp's learners, and the logits of every variant."""

    def __init__(self, shapes: dict, classes: int, device: torch.device, seed: int = 0):
        self.clip_model = random_clip(shapes, device, seed)
        self.device = device
        names = [f"class {i}" for i in range(classes)]
        self.coop = CoOpPromptLearner(self.clip_model, names, ctx_init=CTX_INIT).to(device)
        self.cocoop = CoCoOpPromptLearner(self.clip_model, ctx_init=CTX_INIT).to(device)
        self.tokens = self.cocoop.prompt_tokens(names).to(device)
        self.tokens_77 = clip.tokenize([f"{CTX_INIT} {n}." for n in names]).to(device)
        self.scale = self.clip_model.logit_scale.exp()
        self.images_shape = (3, shapes["image_resolution"], shapes["image_resolution"])

    def images(self, batch: int) -> torch.Tensor:
        return torch.randn(batch, *self.images_shape, device=self.device)

    def image_features(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.clip_model.encode_image(images), dim=-1)

    def coop_logits(self, images: torch.Tensor, text: torch.Tensor | None = None) -> torch.Tensor:
        """CoOp; ``text`` = features computed earlier (an evaluation), else computed here (a training step)."""
        text = coop_text_features(self.clip_model, self.coop) if text is None else text
        return self.scale * self.image_features(images) @ text.t()

    def cocoop_batched(self, images: torch.Tensor) -> torch.Tensor:
        return conditional_logits(self.clip_model, self.cocoop, self.tokens, self.image_features(images))

    def cocoop_per_image(self, images: torch.Tensor, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Upstream's loop: for each image, its context on every class, one text forward of C prompts."""
        tokens = self.tokens if tokens is None else tokens
        image = self.image_features(images)
        rows = []
        for f, ctx in zip(image, self.cocoop(image)):
            prompts = ctx.unsqueeze(0).expand(tokens.shape[0], -1, -1)
            text = F.normalize(self.clip_model.encode_text(tokens, prompts=[prompts]), dim=-1)
            rows.append(self.scale * f @ text.t())
        return torch.stack(rows)

    def logits_fns(self, text: torch.Tensor | None) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
        """Every variant as images → logits (CoOp with ``text`` fixed when given)."""
        return {"coop": lambda x: self.coop_logits(x, text), "batched": self.cocoop_batched,
                "per_image": self.cocoop_per_image, "per_image_77": lambda x: self.cocoop_per_image(x, self.tokens_77)}


def train_step(logits_fn: Callable[[torch.Tensor], torch.Tensor], images: torch.Tensor,
               labels: torch.Tensor) -> None:
    """Forward and backward of the cross-entropy (the optimiser's step costs the same for every variant)."""
    F.cross_entropy(logits_fn(images), labels).backward()


def cost_table(models: CostModels, batch: int, iters: int, warmup: int, variants: list[str]) -> list[list]:
    """Per variant: ms per image (evaluation, training step), GFLOPs per image (both), peak memory of a training step,
    and the evaluation / training time as a multiple of CoOp's."""
    images = models.images(batch)
    labels = torch.randint(0, models.tokens.shape[0], (batch,), device=models.device)
    with torch.inference_mode():
        text = coop_text_features(models.clip_model, models.coop)
        evaluate = {k: fn for k, fn in models.logits_fns(text).items() if k in variants}
        eval_s = time_calls({k: (lambda f=f: f(images)) for k, f in evaluate.items()}, iters, warmup, models.device)
        eval_flops = {k: count_flops(f, images) for k, f in evaluate.items()}
    training = {k: fn for k, fn in models.logits_fns(None).items() if k in variants}
    train_s = time_calls({k: (lambda f=f: train_step(f, images, labels)) for k, f in training.items()}, iters, warmup,
                         models.device)
    train_flops = {k: count_flops(train_step, f, images, labels) for k, f in training.items()}
    memory = {k: _peak_memory(models.device, lambda f=f: train_step(f, images, labels)) if models.device.type == "cuda"
              else "-" for k, f in training.items()}
    rows = []
    for key in variants:
        rows.append([VARIANTS[key], 1e3 * eval_s[key] / batch, 1e3 * train_s[key] / batch,
                     eval_flops[key] / batch / 1e9, train_flops[key] / batch / 1e9, memory[key],
                     eval_s[key] / eval_s["coop"], train_s[key] / train_s["coop"]])
    return rows


def format_costs(rows: list[list]) -> str:
    return tabulate(rows, headers=["variant", "eval ms/img", "train ms/img", "eval GFLOPs/img", "train GFLOPs/img",
                                   "train peak GiB", "eval x CoOp", "train x CoOp"], floatfmt=".2f")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="vit_b16", choices=sorted(SHAPES), help="CLIP shapes (tiny: seconds, tests)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--classes", type=int, default=10, help="C, classes scored per image (10 = EuroSAT)")
    p.add_argument("--batch", type=int, default=4, help="images per evaluation call / training step")
    p.add_argument("--iters", type=int, default=3, help="timed runs per variant (median)")
    p.add_argument("--warmup", type=int, default=1, help="untimed runs per variant first")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS),
                   help="what to measure (CoOp, the reference of the multiples, is always measured)")
    p.add_argument("--seed", type=int, default=0, help="the seed of the random weights and images")
    args = p.parse_args(argv)
    for name in ("classes", "batch", "iters"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    args.variants = ["coop", *[v for v in args.variants if v != "coop"]]
    return args


def main(argv: list[str] | None = None) -> None:
    """Measure and print the per-image cost table."""
    args = parse_args(argv)
    device, where = benchmark_device(args.device, args.threads)
    label, shapes = SHAPES[args.model]
    print(f"{label}; {where}; fp32; torch {torch.__version__}; random weights; C = {args.classes}, batch "
          f"{args.batch}; context {CTX_INIT!r} (4 tokens); median of {args.iters} runs after {args.warmup} warm-up")
    models = CostModels(shapes, args.classes, device, args.seed)
    print(format_costs(cost_table(models, args.batch, args.iters, args.warmup, args.variants)))


if __name__ == "__main__":
    main()
