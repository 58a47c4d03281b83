"""Prompt-aware OpenAI CLIP: OpenAI's architecture and parameter names, deep prompts passed in at call time (ViT).

ResNet CLIPs (RN50, ...; image tower in ``clip/resnet.py``) load too; they take no visual prompts. open_clip's ViT
CLIPs of OpenAI's structure build the same model with their own activation, head counts, MLP widths and image
normalisation (``clip/openclip.py``).
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from engine.errors import ConfigError

from .resnet import ModifiedResNet, resnet_dims
from .weights import OPENAI_MEAN, OPENAI_STD

Prompts = Sequence[torch.Tensor] | None

# Integer entries of OpenAI's JIT archives that are not parameters.
_NON_PARAMETER_KEYS = ("input_resolution", "context_length", "vocab_size")
_SUPPORTED = ("CLIPs in OpenAI's format: ViT (ViT-B/32, ViT-B/16, ViT-L/14, ViT-L/14@336px) or ResNet (RN50, RN101, "
              "RN50x4, RN50x16, RN50x64), of any size")


class LayerNorm(nn.LayerNorm):
    """LayerNorm computed in float32 and cast back to the input dtype (stable under bf16/fp16)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.float() if self.weight is not None else None
        bias = self.bias.float() if self.bias is not None else None
        return F.layer_norm(x.float(), self.normalized_shape, weight, bias, self.eps).to(x.dtype)


class QuickGELU(nn.Module):
    """OpenAI CLIP's activation, x * sigmoid(1.702 x)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {"quick_gelu": QuickGELU, "gelu": nn.GELU}
"""The MLP activations of the supported towers: OpenAI's QuickGELU, and the exact GELU most open_clip CLIPs use."""


class Attention(nn.Module):
    """Multi-head self-attention with nn.MultiheadAttention's parameter names, computed by SDPA on [B, L, D]."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * width, width))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * width))
        self.out_proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        batch, length, width = x.shape
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = qkv.view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.out_proj(out.transpose(1, 2).reshape(batch, length, width))


class ResidualAttentionBlock(nn.Module):
    """Pre-norm transformer block (attention + MLP with ``activation``, :data:`ACTIVATIONS`), as in OpenAI CLIP."""

    def __init__(self, width: int, heads: int, mlp_width: int, activation: str = "quick_gelu"):
        super().__init__()
        self.attn = Attention(width, heads)
        self.ln_1 = LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(width, mlp_width)),
            ("gelu", ACTIVATIONS[activation]()),
            ("c_proj", nn.Linear(mlp_width, width)),
        ]))
        self.ln_2 = LayerNorm(width)

    def forward(self, x: torch.Tensor, causal: bool = False) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), causal)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """Stack of blocks on batch-first tokens; replaces a fixed slot of tokens by deep prompts before blocks 1.."""

    def __init__(self, width: int, layers: int, heads: int, causal: bool = False, mlp_width: int | None = None,
                 activation: str = "quick_gelu"):
        super().__init__()
        self.width = width
        self.layers = layers
        self.causal = causal
        self.resblocks = nn.ModuleList([ResidualAttentionBlock(width, heads, mlp_width or 4 * width, activation)
                                        for _ in range(layers)])

    def forward(self, x: torch.Tensor, deep_prompts: Sequence[torch.Tensor] = (), start: int = 0) -> torch.Tensor:
        """Run the blocks; before block l (1 <= l < len(deep_prompts)) tokens start..start+n_ctx become prompts[l]."""
        for i, block in enumerate(self.resblocks):
            if 1 <= i < len(deep_prompts):
                prompt = deep_prompts[i]
                x = torch.cat([x[:, :start], prompt, x[:, start + prompt.shape[1]:]], dim=1)
            x = block(x, self.causal)
        return x


def _capturing() -> bool:
    """True while a CUDA graph is being captured on the current stream (no host reads of device values then)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _expand_prompts(prompts: Prompts, batch: int, width: int, layers: int, dtype: torch.dtype,
                    tower: str) -> list[torch.Tensor]:
    """Check a prompt sequence and return it as [batch, n_ctx, width] tensors in ``dtype``."""
    if prompts is None:
        return []
    if isinstance(prompts, torch.Tensor):
        raise ValueError(f"{tower} prompts must be a sequence of tensors (one per prompted layer), "
                         f"got one tensor of shape {tuple(prompts.shape)}; wrap it in a list")
    if len(prompts) > layers:
        raise ValueError(f"{len(prompts)} {tower} prompt layers given but the {tower} transformer has only "
                         f"{layers} blocks; pass at most {layers}")
    out = []
    n_ctx = None
    for i, p in enumerate(prompts):
        if p.dim() not in (2, 3) or p.shape[-1] != width:
            raise ValueError(f"{tower} prompts[{i}] has shape {tuple(p.shape)}; expected [n_ctx, {width}] "
                             f"(shared) or [{batch}, n_ctx, {width}] (per sample)")
        if p.dim() == 3 and p.shape[0] != batch:
            raise ValueError(f"{tower} prompts[{i}] is per sample for {p.shape[0]} samples but the batch has "
                             f"{batch}; give [n_ctx, {width}] or [{batch}, n_ctx, {width}]")
        n_ctx = p.shape[-2] if n_ctx is None else n_ctx
        if p.shape[-2] != n_ctx:
            raise ValueError(f"{tower} prompts[{i}] has {p.shape[-2]} tokens but prompts[0] has {n_ctx}; "
                             "every prompted layer needs the same number of tokens")
        p = p.to(dtype)
        out.append(p.expand(batch, -1, -1) if p.dim() == 2 else p)
    return out


class VisionTransformer(nn.Module):
    """CLIP's image tower: patch embedding, class token, transformer, projection of the class token."""

    def __init__(self, input_resolution: int, patch_size: int, width: int, layers: int, heads: int,
                 output_dim: int, mlp_width: int | None = None, activation: str = "quick_gelu"):
        super().__init__()
        self.input_resolution = input_resolution
        self.patch_size = patch_size
        self.output_dim = output_dim
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch_size, stride=patch_size, bias=False)
        grid = input_resolution // patch_size
        self.class_embedding = nn.Parameter(torch.empty(width))
        self.positional_embedding = nn.Parameter(torch.empty(grid * grid + 1, width))
        self.ln_pre = LayerNorm(width)
        self.transformer = Transformer(width, layers, heads, mlp_width=mlp_width, activation=activation)
        self.ln_post = LayerNorm(width)
        self.proj = nn.Parameter(torch.empty(width, output_dim))

    def forward(self, images: torch.Tensor, prompts: Prompts = None) -> torch.Tensor:
        x = self.conv1(images.to(self.conv1.weight.dtype))
        x = x.flatten(2).transpose(1, 2)
        if x.shape[1] + 1 != self.positional_embedding.shape[0]:
            size = self.input_resolution
            raise ConfigError(f"images of size {tuple(images.shape[-2:])} give {x.shape[1]} patches; this CLIP "
                              f"expects {size}x{size} inputs: set INPUT.SIZE ({size}, {size})")
        batch, _, width = x.shape
        cls = self.class_embedding.to(x.dtype).expand(batch, 1, -1)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        deep = _expand_prompts(prompts, batch, width, self.transformer.layers, x.dtype, "vision")
        if deep:
            x = torch.cat([x, deep[0]], dim=1)
        x = self.ln_pre(x)
        x = self.transformer(x, deep, start=x.shape[1] - (deep[0].shape[1] if deep else 0))
        return self.ln_post(x[:, 0]) @ self.proj.to(x.dtype)


class CLIP(nn.Module):
    """OpenAI CLIP whose encoders take optional deep prompts (see encode_image / encode_text); a tuple of
    ``vision_layers`` (blocks per stage) builds OpenAI's modified ResNet image tower instead of a ViT.

    OpenAI's sizes by default (heads = width // 64, MLP 4 x width, QuickGELU); open_clip's ViTs give their own
    ``vision_heads``, MLP widths and ``activation``. ``image_mean`` / ``image_std`` are the normalisation the images
    it was trained on had (a fact of the weights, not used in the forward: the data pipeline normalises).
    """

    def __init__(self, embed_dim: int, image_resolution: int, vision_layers: int | tuple[int, ...],
                 vision_width: int, vision_patch_size: int | None, context_length: int, vocab_size: int,
                 transformer_width: int, transformer_heads: int, transformer_layers: int,
                 vision_heads: int | None = None, vision_mlp_width: int | None = None,
                 text_mlp_width: int | None = None, activation: str = "quick_gelu",
                 image_mean: tuple[float, ...] = OPENAI_MEAN, image_std: tuple[float, ...] = OPENAI_STD):
        super().__init__()
        self.activation = activation
        self.image_mean, self.image_std = tuple(image_mean), tuple(image_std)
        self.embed_dim = embed_dim
        self.image_resolution = image_resolution
        self.vision_layers = vision_layers
        self.vision_width = vision_width
        self.patch_size = vision_patch_size
        self.context_length = context_length
        self.vocab_size = vocab_size
        self.text_width = transformer_width
        self.text_layers = transformer_layers
        if isinstance(vision_layers, (tuple, list)):
            self.visual = ModifiedResNet(tuple(vision_layers), embed_dim, vision_width * 32 // 64, image_resolution,
                                         vision_width)
        else:
            self.visual = VisionTransformer(image_resolution, vision_patch_size, vision_width, vision_layers,
                                            vision_heads or vision_width // 64, embed_dim, vision_mlp_width,
                                            activation)
        self.transformer = Transformer(transformer_width, transformer_layers, transformer_heads, causal=True,
                                       mlp_width=text_mlp_width, activation=activation)
        self.token_embedding = nn.Embedding(vocab_size, transformer_width)
        self.positional_embedding = nn.Parameter(torch.empty(context_length, transformer_width))
        self.ln_final = LayerNorm(transformer_width)
        self.text_projection = nn.Parameter(torch.empty(transformer_width, embed_dim))
        self.logit_scale = nn.Parameter(torch.empty(()))

    @property
    def is_vit(self) -> bool:
        """True for a ViT image tower (deep visual prompts possible), False for a ResNet one."""
        return isinstance(self.visual, VisionTransformer)

    @property
    def dtype(self) -> torch.dtype:
        """Parameter dtype of the model (float32 unless converted with .to)."""
        return self.visual.conv1.weight.dtype

    def encode_image(self, images: torch.Tensor, prompts: Prompts = None) -> torch.Tensor:
        """Image features [B, embed_dim] (not normalised).

        ``prompts[0]`` ([n_ctx, width] or [B, n_ctx, width]) is appended after the positional embedding; before
        block l (1 <= l < len(prompts)) the last n_ctx tokens are replaced by ``prompts[l]``.
        """
        return self.visual(images, prompts)

    def encode_text(self, tokens: torch.Tensor, prompts: Prompts = None) -> torch.Tensor:
        """Text features [N, embed_dim] (not normalised), read at the EOT token (``tokens.argmax(-1)``).

        ``prompts[0]`` replaces the token embeddings at positions 1..n_ctx (before the positional embedding);
        before block l >= 1 positions 1..n_ctx are replaced by ``prompts[l]``.
        """
        if tokens.dim() != 2 or tokens.shape[1] > self.context_length:
            raise ValueError(f"tokens must be [N, L] with L <= {self.context_length} (clip.tokenize output), "
                             f"got shape {tuple(tokens.shape)}")
        eot = tokens.argmax(dim=-1)
        x = self.token_embedding(tokens)
        deep = _expand_prompts(prompts, x.shape[0], self.text_width, self.text_layers, x.dtype, "text")
        if deep:
            n_ctx = deep[0].shape[1]
            if not (torch.compiler.is_compiling() or _capturing()) and bool((eot <= n_ctx).any()):  # eager only
                row = int((eot <= n_ctx).nonzero()[0, 0])
                raise ValueError(f"text prompts replace token positions 1..{n_ctx} but row {row} ends (EOT) at "
                                 f"position {int(eot[row])}; tokenize texts that start with {n_ctx} placeholder "
                                 f"words, e.g. '{' '.join(['X'] * n_ctx)} <class name>.'")
            x = torch.cat([x[:, :1], deep[0], x[:, 1 + n_ctx:]], dim=1)
        x = x + self.positional_embedding[: x.shape[1]].to(x.dtype)
        x = self.transformer(x, deep, start=1)
        x = self.ln_final(x[torch.arange(x.shape[0], device=x.device), eot])
        return x @ self.text_projection.to(x.dtype)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """OpenAI's (logits_per_image, logits_per_text) for plain (unprompted) inputs."""
        image_features = F.normalize(self.encode_image(images), dim=-1)
        text_features = F.normalize(self.encode_text(tokens), dim=-1)
        logits_per_image = self.logit_scale.exp() * image_features @ text_features.t()
        return logits_per_image, logits_per_image.t()


def require_vit(model: CLIP, name: str, setting: str, user: str) -> None:
    """Raise one clear ValueError when ``user`` (a trainer needing deep visual prompts) got a ResNet CLIP."""
    if not model.is_vit:
        raise ValueError(f"{user} needs a ViT CLIP (deep visual prompts), but {setting} {name} is a ResNet CLIP; set "
                         f"{setting} to a ViT such as ViT-B/16 (ResNet CLIPs run ZeroshotCLIP, CoOp and PETRCoOp)")


def _count_blocks(state_dict: dict, prefix: str) -> int:
    """Number of distinct ``<prefix>.N`` transformer blocks in a state dict."""
    return len({k[len(prefix):].split(".")[0] for k in state_dict if k.startswith(prefix)})


def _vit_dims(sd: dict) -> dict:
    """Sizes of an OpenAI-format ViT image tower read off its state dict."""
    vision_width, _, patch_size, _ = sd["visual.conv1.weight"].shape
    grid = round((sd["visual.positional_embedding"].shape[0] - 1) ** 0.5)
    if vision_width % 64:
        raise ValueError(f"transformer widths must be multiples of 64 (heads = width // 64, as OpenAI); got vision "
                         f"{vision_width}")
    return {"image_resolution": patch_size * grid, "vision_layers": _count_blocks(sd, "visual.transformer.resblocks."),
            "vision_width": vision_width, "vision_patch_size": patch_size}


def build_model(state_dict: dict) -> CLIP:
    """Build a frozen float32 CLIP from an OpenAI-format ViT or ResNet state dict of any size (sizes read off
    the shapes)."""
    if "visual.proj" in state_dict:
        vision_dims = _vit_dims
    elif "visual.attnpool.positional_embedding" in state_dict:
        vision_dims = resnet_dims
    else:
        raise ValueError(f"not an OpenAI-format CLIP state dict (no 'visual.proj' or 'visual.attnpool.*' key); "
                         f"expected {_SUPPORTED}")
    sd = {k: v for k, v in state_dict.items() if k not in _NON_PARAMETER_KEYS}
    try:
        context_length, text_width = sd["positional_embedding"].shape
        dims = dict(
            embed_dim=sd["text_projection"].shape[1],
            context_length=context_length,
            vocab_size=sd["token_embedding.weight"].shape[0],
            transformer_width=text_width,
            transformer_heads=text_width // 64,
            transformer_layers=_count_blocks(sd, "transformer.resblocks."),
            **vision_dims(sd),
        )
    except KeyError as e:
        raise ValueError(f"OpenAI-format CLIP state dict lacks key {e}; expected {_SUPPORTED}") from None
    if text_width % 64:
        raise ValueError(f"transformer widths must be multiples of 64 (heads = width // 64, as OpenAI); "
                         f"got text {text_width}")
    return build_sized(dims, sd, "an OpenAI CLIP of the inferred size")


def build_sized(dims: dict, state_dict: dict, what: str) -> CLIP:
    """A frozen float32 ``CLIP(**dims)`` holding ``state_dict``, whose keys and shapes must be exactly the model's
    (ValueError naming the first that differ; ``what`` names the expected model in it)."""
    with torch.device("meta"):
        model = CLIP(**dims)
    model.to_empty(device="cpu")
    expected = model.state_dict()
    for key, tensor in expected.items():
        if key in state_dict and tuple(state_dict[key].shape) != tuple(tensor.shape):
            raise ValueError(f"state dict does not match {what}: {key} has shape {list(state_dict[key].shape)}, "
                             f"the model's is {list(tensor.shape)}")
    missing, unexpected = sorted(set(expected) - set(state_dict)), sorted(set(state_dict) - set(expected))
    if missing or unexpected:
        raise ValueError(f"state dict does not match {what}: missing keys {missing[:8]}, unexpected keys "
                         f"{unexpected[:8]}")
    model.load_state_dict(state_dict, strict=True)
    model.requires_grad_(False)
    return model.eval()
