"""OpenAI's ResNet CLIPs (modified ResNet + attention pooling): parity with open_clip's ResNet CLIP (quick_gelu,
random weights, non-trivial BatchNorm statistics), sizes read off the weights, no visual prompts."""
from __future__ import annotations

import pytest
import torch

import clip
from tests.helpers_clip import assert_matches_open_clip, make_resnet_openclip

TEXTS = ["a photo of a cat.", "a diagram", "", "an ÉCLAIR on a plate!!"]


@pytest.mark.parametrize("layers,width,image_size", [((1, 2, 1, 1), 8, 64), ((3, 4, 6, 3), 64, 64)],
                         ids=["tiny", "rn50-blocks"])
def test_resnet_clip_matches_open_clip(layers, width, image_size):
    reference = make_resnet_openclip(layers, width, image_size, embed_dim=32)
    state_dict = dict(reference.state_dict(), input_resolution=image_size, context_length=77, vocab_size=49408)
    model = clip.build_model(state_dict)
    assert not model.is_vit and model.visual.input_resolution == image_size
    assert (model.vision_layers, model.vision_width, model.embed_dim) == (layers, width, 32)
    images = torch.randn(3, 3, image_size, image_size, generator=torch.Generator().manual_seed(1))
    assert_matches_open_clip(model, reference, images, clip.tokenize(TEXTS))


def test_resnet_clip_file_loads_and_refuses_visual_prompts(tmp_path):
    reference = make_resnet_openclip((1, 1, 1, 1), 8, 32, embed_dim=32)
    path = tmp_path / "RN50.pt"
    torch.save(reference.state_dict(), path)
    model, preprocess = clip.load(str(path))
    assert model.visual.input_resolution == 32 and preprocess.transforms[1].size == (32, 32)
    frozen = clip.load_model(str(path))
    with pytest.raises(ValueError, match="ResNet CLIP takes no visual prompts"):
        frozen.encode_image(torch.zeros(1, 3, 32, 32), prompts=[torch.zeros(4, 8)])
    with pytest.raises(ValueError, match="feature map has 4 positions; this attention pool expects 1"):
        frozen.encode_image(torch.zeros(1, 3, 64, 64))
