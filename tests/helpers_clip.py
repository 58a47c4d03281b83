"""Tiny open_clip CLIPs with OpenAI key names, and straightforward reference forwards for prompted encoders."""
from __future__ import annotations

import open_clip
import torch

IMAGE_SIZE = 32

# Student: ViT-B/16-like roles at toy size; teacher: wider and deeper, like ViT-L/14 next to ViT-B/16.
STUDENT_CFG = dict(embed_dim=32, vision_width=64, vision_layers=9, patch_size=8, text_width=64, text_layers=9)
TEACHER_CFG = dict(embed_dim=64, vision_width=128, vision_layers=10, patch_size=16, text_width=128, text_layers=9)
OPENCLIP_CFG = {"embed_dim": 48, "quick_gelu": False,
                "vision_cfg": {"image_size": IMAGE_SIZE, "patch_size": 8, "width": 96, "layers": 9, "head_width": 32,
                               "mlp_ratio": 2.0},
                "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 9}}
"""An open_clip model config of a tiny GELU CLIP whose sizes are not OpenAI's rules (heads of 32, MLP 2 x width)."""


def make_tiny_openclip(embed_dim: int, vision_width: int, vision_layers: int, patch_size: int, text_width: int,
                       text_layers: int, seed: int = 0) -> open_clip.CLIP:
    """Seeded open_clip CLIP (quick_gelu, heads = width // 64) with non-trivial LayerNorm and bias values."""
    torch.manual_seed(seed)
    model = open_clip.CLIP(
        embed_dim=embed_dim,
        quick_gelu=True,
        vision_cfg=dict(image_size=IMAGE_SIZE, patch_size=patch_size, width=vision_width, layers=vision_layers,
                        head_width=64),
        text_cfg=dict(context_length=77, vocab_size=49408, width=text_width, heads=text_width // 64,
                      layers=text_layers),
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def make_resnet_openclip(layers: tuple[int, ...], width: int, image_size: int, embed_dim: int,
                         seed: int = 0) -> open_clip.CLIP:
    """Seeded open_clip ResNet CLIP (RN50-quickgelu style; tiny text tower) with random BatchNorm statistics."""
    torch.manual_seed(seed)
    model = open_clip.CLIP(embed_dim=embed_dim, quick_gelu=True,
                           vision_cfg=dict(image_size=image_size, layers=layers, width=width, head_width=64),
                           text_cfg=dict(context_length=77, vocab_size=49408, width=64, heads=1, layers=2))
    with torch.no_grad():
        for module in model.visual.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0, 0.1)
                module.running_mean.normal_(0, 0.1)
                module.running_var.uniform_(0.5, 1.5)
        model.visual.attnpool.positional_embedding.normal_(0, 0.5)
    return model.eval()


def per_sample(prompt: torch.Tensor, batch: int) -> torch.Tensor:
    """[n_ctx, w] -> [batch, n_ctx, w]; per-sample tensors pass through."""
    return prompt.unsqueeze(0).repeat(batch, 1, 1) if prompt.dim() == 2 else prompt


def reference_encode_image(model: open_clip.CLIP, images: torch.Tensor, prompts: list[torch.Tensor]) -> torch.Tensor:
    """Deep visual prompts done by hand on open_clip's own modules (append after pos-emb, overwrite tail)."""
    v = model.visual
    batch = images.shape[0]
    x = v.conv1(images).flatten(2).transpose(1, 2)
    x = torch.cat([v.class_embedding.reshape(1, 1, -1).repeat(batch, 1, 1), x], dim=1) + v.positional_embedding
    n_ctx = prompts[0].shape[-2]
    x = torch.cat([x, per_sample(prompts[0], batch)], dim=1)
    x = v.ln_pre(x)
    for i, block in enumerate(v.transformer.resblocks):
        if 1 <= i < len(prompts):
            x = x.clone()
            x[:, x.shape[1] - n_ctx:] = per_sample(prompts[i], batch)
        x = block(x)
    return v.ln_post(x[:, 0]) @ v.proj


def reference_encode_text(model: open_clip.CLIP, tokens: torch.Tensor, prompts: list[torch.Tensor]) -> torch.Tensor:
    """Deep text prompts done by hand on open_clip's own modules (overwrite positions 1..n_ctx)."""
    batch = tokens.shape[0]
    n_ctx = prompts[0].shape[-2]
    x = model.token_embedding(tokens).clone()
    x[:, 1 : 1 + n_ctx] = per_sample(prompts[0], batch)
    x = x + model.positional_embedding
    for i, block in enumerate(model.transformer.resblocks):
        if 1 <= i < len(prompts):
            x = x.clone()
            x[:, 1 : 1 + n_ctx] = per_sample(prompts[i], batch)
        x = block(x, attn_mask=model.attn_mask)
    x = model.ln_final(x)
    return x[torch.arange(batch), tokens.argmax(dim=-1)] @ model.text_projection


def assert_matches_open_clip(model, reference, images: torch.Tensor, tokens: torch.Tensor) -> None:
    """Image and text features and the image-text logits of ``model`` equal open_clip's (relative error < 1e-5)."""
    with torch.no_grad():
        assert rel_err(model.encode_image(images), reference.encode_image(images)) < 1e-5
        assert rel_err(model.encode_text(tokens), reference.encode_text(tokens)) < 1e-5
        logits_per_image, logits_per_text = model(images, tokens)
        expected, _ = reference.get_logits(images, tokens)
    assert rel_err(logits_per_image, expected) < 1e-5
    assert torch.equal(logits_per_text, logits_per_image.t())


def rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |a - e| / max |e|."""
    return float((actual - expected).abs().max() / expected.abs().max())


def tiny_config(architecture: str, layers: int = 2, head_width: int = 8, embed_dim: int = 32) -> dict:
    """open_clip's model config of the built-in ``architecture`` shrunk to ``layers`` blocks per tower and heads of
    ``head_width`` (its head counts, MLP ratios, patch and image size, context length and activation kept)."""
    cfg = open_clip.get_model_config(architecture)
    vision, text = dict(cfg["vision_cfg"]), dict(cfg["text_cfg"])
    vision_heads = vision["width"] // vision.get("head_width", 64)
    vision.update(layers=layers, width=vision_heads * head_width, head_width=head_width)
    text.update(layers=layers, width=text.get("heads", 8) * head_width)
    return {**cfg, "embed_dim": embed_dim, "vision_cfg": vision, "text_cfg": text}


def make_local_dir(folder, cfg: dict, seed: int = 0, mean=None, std=None) -> open_clip.CLIP:
    """Write a seeded open_clip CLIP of model config ``cfg`` (LayerNorms and biases moved off their initial values)
    in open_clip's local-dir layout (``open_clip_config.json`` + ``open_clip_model.safetensors``) into ``folder``;
    returns the model as open_clip itself loads the folder (``create_model('local-dir:...')``)."""
    import json
    import os

    from safetensors.torch import save_file

    torch.manual_seed(seed)
    model = open_clip.CLIP(**cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    os.makedirs(folder, exist_ok=True)
    preprocess = {"mean": list(mean), "std": list(std)} if mean else {}
    with open(os.path.join(folder, "open_clip_config.json"), "w") as f:
        json.dump({"model_cfg": cfg, "preprocess_cfg": preprocess}, f)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              os.path.join(folder, "open_clip_model.safetensors"))
    return open_clip.create_model(f"local-dir:{folder}").eval()
