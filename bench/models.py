"""Random-weight CLIPs of the real shapes and the timing helper shared by bench/benchmark.py and
bench/benchmark_train.py (no weight files needed, CPU or CUDA)."""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils import flop_counter

from clip.model import CLIP

# clip.model.CLIP constructor arguments of OpenAI's checkpoints, and a toy pair for tests and smoke runs.
VIT_B16 = dict(embed_dim=512, image_resolution=224, vision_layers=12, vision_width=768, vision_patch_size=16,
               context_length=77, vocab_size=49408, transformer_width=512, transformer_heads=8, transformer_layers=12)
VIT_L14 = dict(embed_dim=768, image_resolution=224, vision_layers=24, vision_width=1024, vision_patch_size=14,
               context_length=77, vocab_size=49408, transformer_width=768, transformer_heads=12, transformer_layers=12)
TINY_STUDENT = dict(embed_dim=32, image_resolution=32, vision_layers=3, vision_width=64, vision_patch_size=16,
                    context_length=77, vocab_size=49408, transformer_width=64, transformer_heads=1,
                    transformer_layers=2)
TINY_TEACHER = dict(embed_dim=48, image_resolution=32, vision_layers=2, vision_width=128, vision_patch_size=16,
                    context_length=77, vocab_size=49408, transformer_width=128, transformer_heads=2,
                    transformer_layers=2)


@dataclass(frozen=True)
class ModelSpec:
    """Student and teacher CLIP shapes with the prompt settings (PromptKD/PETR base-to-novel: 4 tokens, depth 9)."""

    label: str
    student: dict
    teacher: dict
    n_ctx: int = 4
    depth: int = 9


SPECS = {
    "vit_b16": ModelSpec("ViT-B/16 student, ViT-L/14 teacher", VIT_B16, VIT_L14),
    "tiny": ModelSpec("tiny student/teacher (tests, smoke runs)", TINY_STUDENT, TINY_TEACHER, depth=2),
    # tiny widths on 224 px images (patch 32): a train.py epoch whose cost is mostly data loading
    # tiny widths with the real output widths (512 student, 768 teacher), which upstream PromptKD's student projector
    # hard-codes: the CPU dry run of the comparison with upstream (bench/side_by_side.py)
    "tiny_upstream": ModelSpec("tiny student/teacher with ViT-B/16 and ViT-L/14 output widths",
                               dict(TINY_STUDENT, embed_dim=512),
                               dict(TINY_TEACHER, embed_dim=768, vision_layers=3, transformer_layers=3), depth=3),
    "tiny224": ModelSpec("tiny student/teacher on 224 px images", dict(TINY_STUDENT, image_resolution=224,
                                                                      vision_patch_size=32),
                         dict(TINY_TEACHER, image_resolution=224, vision_patch_size=32), depth=2),
}
def random_clip(sizes: dict, device: torch.device | str, seed: int = 0, dtype: torch.dtype | None = None) -> CLIP:
    """A frozen CLIP of the given shape with random weights (N(0, 0.02), LayerNorms at identity, scale 100), built
    and initialised directly on ``device`` (a ViT-L/14 is not made on the CPU first); ``dtype`` converts it."""
    torch.manual_seed(seed)
    with torch.device(device):
        model = CLIP(**sizes)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if isinstance(module, torch.nn.LayerNorm):
                    p.fill_(1.0 if name == "weight" else 0.0)
                elif name.endswith("bias"):
                    p.zero_()
                else:
                    p.normal_(std=0.02)
        model.logit_scale.fill_(math.log(100.0))
    return model.requires_grad_(False).eval().to(dtype=dtype)


def _cpu_sdpa_flops(query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query, key, value)


def _cpu_sdpa_backward_flops(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)


# torch's counter knows the CUDA attention kernels only; CPU attention gets the same formulas here.
_CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa_flops,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_sdpa_backward_flops,
}


def count_flops(fn: Callable, *args) -> int:
    """FLOPs of ``fn(*args)`` (matmuls, convolutions, attention; 2 per multiply-add), forward and any backward."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION) as counter:
        fn(*args)
    return counter.get_total_flops()


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fns: dict[str, Callable[[], object]], iters: int, warmup: int,
               device: torch.device) -> dict[str, float]:
    """Median seconds per call of each function; calls alternate between functions so machine load hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def benchmark_device(name: str, threads: int | None) -> tuple[torch.device, str]:
    """The device ``name`` (CPU threads set first when given) and its description; one line and exit without CUDA."""
    if threads:
        torch.set_num_threads(threads)
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda but CUDA is not available; use --device cpu")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    return device, where
