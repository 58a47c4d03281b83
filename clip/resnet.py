"""OpenAI's modified ResNet image tower (RN50, RN101, RN50x4, RN50x16, RN50x64), with OpenAI's parameter names.

Differences from torchvision's ResNet, as in OpenAI CLIP: a three-convolution stem with an average pool instead of
a max pool; strided blocks downsample with an average pool before the last 1x1 convolution (and in the shortcut);
the final global pool is a single-query multi-head attention over the feature map plus its mean ("attention pool").
"""
from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

EXPANSION = 4


class Bottleneck(nn.Module):
    """1x1 → 3x3 → (avg-pool when strided) → 1x1 (x4 channels) bottleneck with ReLUs and an average-pool shortcut."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.avgpool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
        self.conv3 = nn.Conv2d(planes, planes * EXPANSION, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * EXPANSION)
        self.downsample = None
        if stride > 1 or inplanes != planes * EXPANSION:
            self.downsample = nn.Sequential(OrderedDict([
                ("-1", nn.AvgPool2d(stride)),
                ("0", nn.Conv2d(inplanes, planes * EXPANSION, 1, stride=1, bias=False)),
                ("1", nn.BatchNorm2d(planes * EXPANSION)),
            ]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(self.avgpool(out)))
        shortcut = x if self.downsample is None else self.downsample(x)
        return F.relu(out + shortcut)


class AttentionPool2d(nn.Module):
    """Pool a [B, C, H, W] map to [B, output_dim]: the mean token (plus positions) attends over all tokens."""

    def __init__(self, spacial_dim: int, embed_dim: int, heads: int, output_dim: int):
        super().__init__()
        self.heads = heads
        self.positional_embedding = nn.Parameter(torch.empty(spacial_dim * spacial_dim + 1, embed_dim))
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.c_proj = nn.Linear(embed_dim, output_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.flatten(2).transpose(1, 2)  # [B, HW, C]
        if tokens.shape[1] + 1 != self.positional_embedding.shape[0]:
            raise ValueError(f"the feature map has {tokens.shape[1]} positions; this attention pool expects "
                             f"{self.positional_embedding.shape[0] - 1} (input images of the model's resolution)")
        tokens = torch.cat([tokens.mean(dim=1, keepdim=True), tokens], dim=1)
        tokens = tokens + self.positional_embedding.to(tokens.dtype)
        batch, length, width = tokens.shape
        head_dim = width // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, -1, self.heads, head_dim).transpose(1, 2)

        query = split(self.q_proj(tokens[:, :1]))
        key, value = split(self.k_proj(tokens)), split(self.v_proj(tokens))
        pooled = F.scaled_dot_product_attention(query, key, value)  # [B, heads, 1, head_dim]
        return self.c_proj(pooled.transpose(1, 2).reshape(batch, width))


class ModifiedResNet(nn.Module):
    """OpenAI CLIP's ResNet: 3-conv stem, four bottleneck stages (``layers`` blocks each), attention pooling."""

    def __init__(self, layers: tuple[int, int, int, int], output_dim: int, heads: int, input_resolution: int,
                 width: int):
        super().__init__()
        self.input_resolution = input_resolution
        self.output_dim = output_dim
        self.conv1 = nn.Conv2d(3, width // 2, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width // 2)
        self.conv2 = nn.Conv2d(width // 2, width // 2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width // 2)
        self.conv3 = nn.Conv2d(width // 2, width, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(width)
        self.avgpool = nn.AvgPool2d(2)
        inplanes = width
        stages = []
        for i, blocks in enumerate(layers):
            planes, stride = width * 2 ** i, 1 if i == 0 else 2
            stage = [Bottleneck(inplanes, planes, stride)]
            inplanes = planes * EXPANSION
            stage += [Bottleneck(inplanes, planes) for _ in range(1, blocks)]
            stages.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.attnpool = AttentionPool2d(input_resolution // 32, width * 32, heads, output_dim)

    def forward(self, images: torch.Tensor, prompts=None) -> torch.Tensor:
        if prompts is not None:
            raise ValueError("a ResNet CLIP takes no visual prompts; deep visual prompts need a ViT CLIP")
        x = images.to(self.conv1.weight.dtype)
        for conv, bn in ((self.conv1, self.bn1), (self.conv2, self.bn2), (self.conv3, self.bn3)):
            x = F.relu(bn(conv(x)))
        x = self.avgpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.attnpool(x)


def resnet_dims(state_dict: dict) -> dict:
    """Sizes of an OpenAI-format ResNet image tower read off its state dict (``visual.*`` keys)."""
    layers = tuple(len({k.split(".")[2] for k in state_dict if k.startswith(f"visual.layer{i}.")})
                   for i in range(1, 5))
    grid = round((state_dict["visual.attnpool.positional_embedding"].shape[0] - 1) ** 0.5)
    return {"vision_layers": layers, "vision_width": state_dict["visual.layer1.0.conv1.weight"].shape[0],
            "image_resolution": grid * 32, "vision_patch_size": None}
