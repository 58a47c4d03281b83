"""TRAIN.COMPILE: torch.compile (inductor, on CPU) of the frozen CLIP gives the eager losses (rtol 1e-5), prompt and
projector gradients and evaluation features (each tensor: max |compiled - eager| <= 1e-4 * max |eager| + 1e-6,
float32 rounding of fused kernels), and the trainers wire the key."""
from __future__ import annotations

import copy

import pytest
import torch
from torch._dynamo.utils import counters

import clip
import train
from engine.compile import compile_clip
from tests.helpers_clip import OPENCLIP_CFG, make_local_dir, make_tiny_openclip
from tests.helpers_datasets import write_tree
from tests.helpers_run import train_argv
from tests.test_trainer_promptkd import promptkd_argv, write_colour_eurosat
from trainers.distillation.losses import kd_loss
from trainers.distillation.student import VisualPromptStudent, batched_features

TOL, ATOL = 1e-4, 1e-6  # TOL relative to each tensor's largest entry


def step_and_eval(clip_model, students, images, targets):
    """KD loss + prompt gradients of one training step of both students, then their eval-mode batched features."""
    for s in students:
        s.train().zero_grad()
    features = [s(clip_model, images) for s in students]
    loss = sum(kd_loss(100.0 * f @ targets[1].t(), targets[0], 1.0) for f in features)
    loss.backward()
    # the bias of the conv before BatchNorm has a zero gradient in exact arithmetic: both runs give rounding noise
    grads = [p.grad.clone() for s in students for n, p in s.named_parameters() if n != "projector.conv1.0.bias"]
    with torch.no_grad():
        evaluated = batched_features(clip_model, [s.eval() for s in students], images)
    return loss.detach(), grads, evaluated


@pytest.mark.parametrize("activation", ["quick_gelu", pytest.param("gelu", marks=pytest.mark.slow)])
def test_compiled_clip_gives_the_eager_losses_gradients_and_eval_features(tmp_path, activation):
    # a 2-layer CLIP keeps inductor's CPU compilation short; LayerNorms and biases are not at their init values;
    # "gelu": an open_clip CLIP (GELU, heads of 32, MLP 2 x width) read from open_clip's local-dir layout
    if activation == "gelu":
        cfg = {**OPENCLIP_CFG, "vision_cfg": {**OPENCLIP_CFG["vision_cfg"], "layers": 2},
               "text_cfg": {**OPENCLIP_CFG["text_cfg"], "layers": 1}}
        make_local_dir(tmp_path / "gelu", cfg, seed=3)
        clip_model = clip.load_model(f"open_clip:local-dir:{tmp_path / 'gelu'}")
    else:
        openclip = make_tiny_openclip(embed_dim=32, vision_width=64, vision_layers=2, patch_size=8, text_width=64,
                                      text_layers=1, seed=3)
        clip_model = clip.build_model(openclip.state_dict())
    assert clip_model.activation == activation
    torch.manual_seed(0)
    students = [VisualPromptStudent(clip_model, n_ctx=4, depth=2, out_dim=48) for _ in range(2)]
    for prompt in students[1].prompt.prompts:  # prompts of another scale than the first student's
        torch.nn.init.normal_(prompt)
    start = [copy.deepcopy(s.state_dict()) for s in students]
    images = torch.randn(4, 3, 32, 32)
    targets = (torch.randn(4, 6), torch.nn.functional.normalize(torch.randn(6, 48), dim=-1))
    eager = step_and_eval(clip_model, students, images, targets)

    for s, state in zip(students, start):
        s.load_state_dict(state)
    counters.clear()
    compile_clip(clip_model, "compile")
    # inductor's C++ kernels without SIMD: the same graphs and fusions, compiled in about half the time on a cold
    # cache (the vector headers dominate g++'s time); what is checked is how our CLIP and prompts compile, not the
    # vectorisation of inductor's kernels. One compile thread: no pool of compile workers (torch processes of
    # their own) to start for a few kernels
    with torch._inductor.config.patch({"cpp.vec_isa_ok": False, "compile_threads": 1}):
        compiled = step_and_eval(clip_model, students, images, targets)
    assert counters["stats"]["unique_graphs"] >= 1  # torch.compile really ran (dynamo + inductor)

    assert compiled[0].item() == pytest.approx(eager[0].item(), rel=1e-5)
    pairs = list(zip(compiled[1] + compiled[2], eager[1] + eager[2]))
    diffs = [float((got - want).abs().max()) for got, want in pairs]
    print(f"compiled vs eager: loss {compiled[0].item():.7f} vs {eager[0].item():.7f}; max |difference| of "
          f"{len(pairs)} gradient/feature tensors: {max(diffs):.2e}")
    for diff, (_, want) in zip(diffs, pairs):
        assert diff <= TOL * float(want.abs().max()) + ATOL
    assert eager[0] > 0 and all(g.abs().sum() > 0 for g in eager[1])


def test_train_compile_key_compiles_the_frozen_clips(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    write_colour_eurosat(tmp_path / "data")
    trainer = train.main(promptkd_argv(tmp_path / "data", tmp_path / "out", tiny_clip_file, tiny_teacher_clip_file,
                                       "TRAIN.COMPILE", "cudagraphs", flags=("--no-train",)))
    for model in (trainer.clip_model, trainer.teacher.clip_model):
        assert "_eager_encode_image" in model.__dict__ and "encode_image" in model.__dict__
    tree = write_tree("EuroSAT", str(tmp_path / "src_data"))
    teacher = train.main(train_argv("PromptSRC", None, tree.root, tmp_path / "src", "TRAIN.COMPILE", "compile",
                                    seed=-1, flags=("--no-train",), backbone=tiny_teacher_clip_file))
    assert "encode_text" in teacher.clip_model.__dict__  # the PromptSRC teacher trainer compiles its CLIP too
    eager = train.main(promptkd_argv(tmp_path / "data", tmp_path / "eager", tiny_clip_file, tiny_teacher_clip_file,
                                     flags=("--no-train",)))
    assert "encode_image" not in eager.clip_model.__dict__  # the default stays eager
    with pytest.raises(ValueError, match="TRAIN.COMPILE is 'fast'; it must be one of none, compile, cudagraphs"):
        train.main(promptkd_argv(tmp_path / "data", tmp_path / "bad", tiny_clip_file, tiny_teacher_clip_file,
                                 "TRAIN.COMPILE", "fast", flags=("--no-train",)))
