"""Images/s of our CLIP image encoder next to open_clip's on the same random weights (CPU, no downloads).

    python -m bench.benchmark_clip --model ViT-B-16 --batch 8 --iters 3 --threads 2
"""
from __future__ import annotations

import argparse
import time

import torch
from tabulate import tabulate

import clip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="ViT-B-16", help="open_clip architecture (the -quickgelu variant is used)")
    parser.add_argument("--batch", type=int, default=8, help="images per forward")
    parser.add_argument("--iters", type=int, default=5, help="timed runs per implementation (the minimum is kept)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per implementation first")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Time encode_image of both implementations, alternating runs so machine load hits both alike.

    Wall time gives images/s; process CPU time is shown too, as it is less disturbed by other processes.
    """
    import open_clip

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    name = args.model if args.model.endswith("-quickgelu") else f"{args.model}-quickgelu"
    reference = open_clip.create_model(name, pretrained=None).eval()
    ours = clip.build_model(reference.state_dict())
    images = torch.randn(args.batch, 3, ours.image_resolution, ours.image_resolution)
    models = {"ours (clip.CLIP, SDPA)": ours, "open_clip": reference}
    times = {label: [] for label in models}
    cpu_times = {label: [] for label in models}
    with torch.inference_mode():
        diff = float((ours.encode_image(images) - reference.encode_image(images)).abs().max())
        for _ in range(args.warmup):
            for model in models.values():
                model.encode_image(images)
        for _ in range(args.iters):
            for label, model in models.items():
                start, cpu_start = time.perf_counter(), time.process_time()
                model.encode_image(images)
                times[label].append(time.perf_counter() - start)
                cpu_times[label].append(time.process_time() - cpu_start)
    base = min(times["open_clip"])
    rows = []
    for label, t in times.items():
        rows.append([label, f"{min(t):.3f}", f"{args.batch / min(t):.2f}", f"{base / min(t):.2f}x",
                     f"{min(cpu_times[label]):.3f}"])
    print(f"{name}, encode_image, batch {args.batch}, {ours.image_resolution}px, fp32 CPU, "
          f"{torch.get_num_threads()} threads, min of {args.iters} runs after {args.warmup} warm-up; "
          f"max |ours - open_clip| = {diff:.2e}")
    headers = ["implementation", "s / batch", "images/s", "speed vs open_clip", "CPU s / batch"]
    print(tabulate(rows, headers=headers))


if __name__ == "__main__":
    main()
