"""Deep prompts: encoders against a hand-written reference on open_clip's modules, batching, gradients, errors."""
from __future__ import annotations

import pytest
import torch

import clip
from clip.prompts import DeepPrompts, stack_prompt_sets
from tests.helpers_clip import IMAGE_SIZE, reference_encode_image, reference_encode_text, rel_err

N_CTX = 4
PROMPTED_TEXTS = ["X X X X cat.", "X X X X golden retriever.", "X X X X a very long class name here."]


def _prompt_list(depth: int, width: int, batch: int | None = None, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shape = (N_CTX, width) if batch is None else (batch, N_CTX, width)
    return [torch.randn(shape, generator=g) for _ in range(depth)]


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("per_sample", [False, True], ids=["shared", "per_sample"])
@pytest.mark.parametrize("depth", [1, 3, 9])
@pytest.mark.parametrize("which", ["student", "teacher"])
def test_vision_prompts_match_reference(which, depth, per_sample, tiny_openclip_model, tiny_teacher_openclip_model):
    reference = tiny_openclip_model if which == "student" else tiny_teacher_openclip_model
    model = clip.build_model(reference.state_dict())
    images = _images(3)
    prompts = _prompt_list(depth, model.vision_width, 3 if per_sample else None)
    with torch.no_grad():
        ours = model.encode_image(images, prompts)
        expected = reference_encode_image(reference, images, prompts)
        plain = model.encode_image(images)
    assert rel_err(ours, expected) < 1e-5
    assert rel_err(ours, plain) > 1e-2  # the prompts do change the features


@pytest.mark.parametrize("per_sample", [False, True], ids=["shared", "per_sample"])
@pytest.mark.parametrize("depth", [1, 9])
@pytest.mark.parametrize("which", ["student", "teacher"])
def test_text_prompts_match_reference(which, depth, per_sample, tiny_openclip_model, tiny_teacher_openclip_model):
    reference = tiny_openclip_model if which == "student" else tiny_teacher_openclip_model
    model = clip.build_model(reference.state_dict())
    tokens = clip.tokenize(PROMPTED_TEXTS)
    prompts = _prompt_list(depth, model.text_width, 3 if per_sample else None)
    with torch.no_grad():
        ours = model.encode_text(tokens, prompts)
        expected = reference_encode_text(reference, tokens, prompts)
    assert rel_err(ours, expected) < 1e-5


def test_two_prompt_sets_in_one_forward_equal_two_forwards(tiny_clip):
    images, tokens = _images(5), clip.tokenize(PROMPTED_TEXTS[:2] * 2 + PROMPTED_TEXTS[2:])
    vision_a, vision_b = _prompt_list(9, 64, seed=1), _prompt_list(9, 64, seed=2)
    text_a, text_b = _prompt_list(2, 64, seed=3), _prompt_list(2, 64, batch=3, seed=4)
    with torch.no_grad():
        batched = tiny_clip.encode_image(images, stack_prompt_sets([vision_a, vision_b], [2, 3]))
        separate = torch.cat([tiny_clip.encode_image(images[:2], vision_a),
                              tiny_clip.encode_image(images[2:], vision_b)])
        batched_text = tiny_clip.encode_text(tokens, stack_prompt_sets([text_a, text_b], [2, 3]))
        separate_text = torch.cat([tiny_clip.encode_text(tokens[:2], text_a),
                                   tiny_clip.encode_text(tokens[2:], text_b)])
    assert rel_err(batched, separate) < 1e-5
    assert rel_err(batched_text, separate_text) < 1e-5


def test_stack_prompt_sets_shapes_and_errors():
    a, b = _prompt_list(2, 8, seed=1), _prompt_list(2, 8, batch=3, seed=2)
    stacked = stack_prompt_sets([a, b], [2, 3])
    assert [tuple(p.shape) for p in stacked] == [(5, N_CTX, 8)] * 2
    assert torch.equal(stacked[1][0], a[1]) and torch.equal(stacked[1][1], a[1])
    assert torch.equal(stacked[1][2:], b[1])
    with pytest.raises(ValueError, match="depths"):
        stack_prompt_sets([a, a[:1]], [2, 2])
    with pytest.raises(ValueError, match="batch size is 4"):
        stack_prompt_sets([a, b], [2, 4])
    with pytest.raises(ValueError, match="same n_ctx"):
        stack_prompt_sets([a, [torch.zeros(2, 8)] * 2], [1, 1])


def test_gradients_reach_every_prompt_and_no_clip_parameter(tiny_clip):
    vision = DeepPrompts(N_CTX, tiny_clip.vision_width, depth=9)
    text = DeepPrompts.from_text_init(tiny_clip, "a photo of a", depth=9)
    tokens = clip.tokenize(["a photo of a cat.", "a photo of a dog."])
    image_features = tiny_clip.encode_image(_images(2), vision())
    text_features = tiny_clip.encode_text(tokens, text())
    (image_features @ text_features.t()).square().sum().backward()
    for p in [*vision.parameters(), *text.parameters()]:
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in tiny_clip.parameters())


def test_deep_prompts_initialisation(tiny_clip, tiny_openclip_model):
    torch.manual_seed(0)
    prompts = DeepPrompts(16, 64, depth=3)
    layers = prompts()
    assert [tuple(p.shape) for p in layers] == [(16, 64)] * 3 and len(list(prompts.parameters())) == 3
    assert all(0.017 < float(p.detach().std()) < 0.023 for p in layers)
    assert not any(p.requires_grad for p in tiny_clip.parameters())

    text = DeepPrompts.from_text_init(tiny_clip, "a_photo of a", depth=2)
    assert text.n_ctx == 4 and text.width == tiny_clip.text_width
    ids = torch.tensor([320, 1125, 539, 320])  # "a photo of a" in OpenAI's BPE
    assert torch.equal(text()[0].detach(), tiny_openclip_model.token_embedding.weight[ids])
    assert 0.01 < float(text()[1].detach().std()) < 0.03
    with pytest.raises(ValueError, match="no tokens"):
        DeepPrompts.from_text_init(tiny_clip, "", depth=1)


def test_bad_prompts_raise_clear_errors(tiny_clip):
    images, tokens = _images(2), clip.tokenize(PROMPTED_TEXTS[:2])
    cases = [
        (lambda: tiny_clip.encode_image(images, [torch.zeros(N_CTX, 32)]), r"expected \[n_ctx, 64\]"),
        (lambda: tiny_clip.encode_image(images, _prompt_list(10, 64)), "only 9 blocks"),
        (lambda: tiny_clip.encode_image(images, torch.zeros(N_CTX, 64)), "sequence of tensors"),
        (lambda: tiny_clip.encode_image(images, [torch.zeros(3, N_CTX, 64)]), "batch has 2"),
        (lambda: tiny_clip.encode_image(images, [torch.zeros(4, 64), torch.zeros(2, 64)]), "same number of tokens"),
        (lambda: tiny_clip.encode_text(tokens, [torch.zeros(N_CTX, 128)]), r"expected \[n_ctx, 64\]"),
        (lambda: tiny_clip.encode_text(clip.tokenize(["cat"]), [torch.zeros(N_CTX, 64)]), "placeholder words"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_prompts_in_other_dtypes_follow_the_activations(tiny_clip):
    images, prompts = _images(2), _prompt_list(3, 64)
    with torch.no_grad():
        expected = tiny_clip.encode_image(images, prompts)
        assert rel_err(tiny_clip.encode_image(images, [p.double() for p in prompts]), expected) < 1e-6
        bf16 = tiny_clip.to(torch.bfloat16).encode_image(images, prompts)
    assert bf16.dtype == torch.bfloat16
    assert torch.nn.functional.cosine_similarity(bf16.float(), expected, dim=-1).min() > 0.99
