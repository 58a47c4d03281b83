"""clip.build_model / CLIP without prompts: sizes read off the weights, parity with open_clip, precision paths."""
from __future__ import annotations

import pytest
import torch

import clip
from tests.helpers_clip import IMAGE_SIZE, assert_matches_open_clip, rel_err

TEXTS = ["a photo of a cat.", "a diagram", "", "an ÉCLAIR on a plate!!", "x " * 30]


def _images(n: int = 3, size: int = IMAGE_SIZE, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("which", ["student", "teacher"])
def test_unprompted_features_match_open_clip(which, tiny_openclip_model, tiny_teacher_openclip_model):
    reference = tiny_openclip_model if which == "student" else tiny_teacher_openclip_model
    model = clip.build_model(reference.state_dict())
    assert_matches_open_clip(model, reference, _images(), clip.tokenize(TEXTS))


@pytest.mark.slow
def test_vit_b16_shaped_random_weights_match_open_clip():
    import open_clip

    torch.manual_seed(0)
    reference = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()
    model = clip.build_model(reference.state_dict())
    assert (model.vision_width, model.vision_layers, model.patch_size, model.image_resolution) == (768, 12, 16, 224)
    assert (model.text_width, model.text_layers, model.embed_dim) == (512, 12, 512)
    images, tokens = _images(2, 224), clip.tokenize(TEXTS[:3])
    with torch.inference_mode():
        assert rel_err(model.encode_image(images), reference.encode_image(images)) < 1e-5
        assert rel_err(model.encode_text(tokens), reference.encode_text(tokens)) < 1e-5


def test_build_model_reads_sizes_and_freezes(tiny_teacher_clip_file, tiny_teacher_openclip_model):
    state_dict = torch.load(tiny_teacher_clip_file, weights_only=True)
    assert state_dict["input_resolution"] == 32  # OpenAI's integer keys are present and must be dropped
    model = clip.build_model(state_dict)
    assert (model.embed_dim, model.vision_width, model.text_width) == (64, 128, 128)
    assert (model.vision_layers, model.text_layers, model.patch_size, model.image_resolution) == (10, 9, 16, 32)
    assert (model.context_length, model.vocab_size) == (77, 49408)
    assert model.token_embedding.weight.shape == (49408, 128)
    assert isinstance(model.logit_scale, torch.nn.Parameter)
    assert not model.training and model.dtype == torch.float32
    assert all(not p.requires_grad and p.dtype == torch.float32 for p in model.parameters())
    expected = tiny_teacher_openclip_model.state_dict()
    assert set(model.state_dict()) == set(expected)
    assert all(torch.equal(v, expected[k]) for k, v in model.state_dict().items())


def test_fp16_state_dict_is_loaded_as_float32(tiny_openclip_model):
    half = {k: v.half() for k, v in tiny_openclip_model.state_dict().items()}
    model = clip.build_model(half)
    assert model.dtype == torch.float32
    assert torch.equal(model.visual.proj, half["visual.proj"].float())


def test_bad_state_dicts_raise_clear_errors(tiny_openclip_model):
    resnet_like = {"visual.attnpool.positional_embedding": torch.zeros(5, 64), "text_projection": torch.zeros(8, 8)}
    with pytest.raises(ValueError, match="lacks key 'positional_embedding'"):
        clip.build_model(resnet_like)
    with pytest.raises(ValueError, match="visual.proj.*RN50"):
        clip.build_model({"foo": torch.zeros(1)})
    state_dict = dict(tiny_openclip_model.state_dict())
    del state_dict["visual.ln_post.weight"]
    with pytest.raises(ValueError, match="missing keys.*visual.ln_post.weight"):
        clip.build_model(state_dict)
    state_dict = dict(tiny_openclip_model.state_dict(), extra_prompt=torch.zeros(4, 64))
    with pytest.raises(ValueError, match="unexpected keys.*extra_prompt"):
        clip.build_model(state_dict)


def test_input_dtype_and_size_checks(tiny_clip):
    images = _images()
    with torch.no_grad():
        expected = tiny_clip.encode_image(images)
        assert rel_err(tiny_clip.encode_image(images.double()), expected) < 1e-6
        with pytest.raises(ValueError, match="32x32"):
            tiny_clip.encode_image(_images(size=48))
        with pytest.raises(ValueError, match=r"tokens must be \[N, L\]"):
            tiny_clip.encode_text(torch.zeros(2, 78, dtype=torch.long))


def test_bfloat16_and_autocast_are_close_to_fp32(tiny_clip):
    images, tokens = _images(), clip.tokenize(TEXTS)
    with torch.no_grad():
        image_fp32, text_fp32 = tiny_clip.encode_image(images), tiny_clip.encode_text(tokens)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            image_amp, text_amp = tiny_clip.encode_image(images), tiny_clip.encode_text(tokens)
        model = tiny_clip.to(torch.bfloat16)
        assert model.dtype == torch.bfloat16
        image_bf16, text_bf16 = model.encode_image(images), model.encode_text(tokens)
    assert image_bf16.dtype == text_bf16.dtype == torch.bfloat16
    for low, high in [(image_amp, image_fp32), (text_amp, text_fp32), (image_bf16, image_fp32),
                      (text_bf16, text_fp32)]:
        assert torch.isfinite(low).all()
        cosine = torch.nn.functional.cosine_similarity(low.float(), high, dim=-1)
        assert cosine.min() > 0.99
        assert rel_err(low.float(), high) < 0.1
