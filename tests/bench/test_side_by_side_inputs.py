"""bench/side_by_side_inputs.py: the files both sides of the upstream comparison read, in upstream's layout."""
from __future__ import annotations

import torch

from bench.models import SPECS
from bench.side_by_side_inputs import write_inputs
from trainers.prompting.prompt_files import read_deep_prompts

SPEC = SPECS["tiny"]  # teacher: text width 128, vision width 128, prompt depth 2, 4 tokens


def test_the_teacher_checkpoint_has_upstream_keys_and_reads_back_as_our_prompts(tmp_path):
    paths = write_inputs(str(tmp_path), SPEC)
    assert paths["teacher_ckpt"] == str(tmp_path / "teacher_model/EuroSAT/VLPromptLearner/model-best.pth.tar")
    assert paths["student"] == str(tmp_path / "clip/ViT-B-16.pt")
    state = torch.load(paths["teacher_ckpt"], weights_only=True)["state_dict"]
    # upstream PromptSRC/PromptKD names (clip/model.py's IVLP blocks), written out by hand for depth 2
    assert {k: tuple(v.shape) for k, v in state.items()} == {
        "prompt_learner.ctx": (4, 128), "text_encoder.transformer.resblocks.1.VPT_shallow": (4, 128),
        "image_encoder.VPT": (4, 128), "image_encoder.transformer.resblocks.1.VPT_shallow": (4, 128)}
    assert all(v.dtype == torch.float16 for v in state.values())
    prompts = read_deep_prompts(paths["teacher_ckpt"])
    assert torch.equal(prompts.text_prompts()[1], state["text_encoder.transformer.resblocks.1.VPT_shallow"].float())
    assert torch.equal(prompts.vision_prompts()[0], state["image_encoder.VPT"].float())


def test_the_clip_files_have_openai_keys_of_the_spec_shapes(tmp_path):
    paths = write_inputs(str(tmp_path), SPEC)
    student = torch.load(paths["student"], weights_only=True)
    teacher = torch.load(paths["teacher"], weights_only=True)
    assert student["visual.conv1.weight"].shape == (64, 3, 16, 16)
    assert teacher["text_projection"].shape == (128, 48)
