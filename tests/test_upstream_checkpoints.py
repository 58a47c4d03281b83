"""Upstream Dassl checkpoints (pickled scheduler objects, one with a side effect) load without running pickled code;
resuming from one restores weights, optimiser and epoch and replays the scheduler's epochs."""
from __future__ import annotations

import os

import torch
from torch import nn

from engine.checkpoint import load_checkpoint, resume_from_checkpoint
from tests.helpers_upstream import write_dassl_checkpoint


def _trained(seed: int) -> tuple[nn.Linear, torch.optim.SGD]:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    optim.step()
    return model, optim


def test_side_effect_happens_with_plain_unpickling_only(tmp_path, capsys):
    model, optim = _trained(0)
    marker = tmp_path / "side_effect"
    path = write_dassl_checkpoint(str(tmp_path / "prompt_learner"), model.state_dict(), 7, optim.state_dict(),
                                  str(marker))
    checkpoint = load_checkpoint(path)
    assert not marker.exists(), "loading ran the pickled code"
    assert sorted(checkpoint) == ["epoch", "optimizer", "state_dict", "val_result"] and checkpoint["epoch"] == 7
    for key, value in model.state_dict().items():
        assert torch.equal(checkpoint["state_dict"][key], value)
    note = capsys.readouterr().out
    assert f"ignored scheduler ({os.mkdir.__module__}.mkdir, torch.optim.lr_scheduler.CosineAnnealingLR" in note
    torch.load(path, weights_only=False)  # what an unrestricted load does: the check above can fail
    assert marker.is_dir()


def test_resume_from_an_upstream_checkpoint(tmp_path, capsys):
    model, optim = _trained(0)
    marker = tmp_path / "side_effect"
    write_dassl_checkpoint(str(tmp_path / "prompt_learner"), model.state_dict(), 3, optim.state_dict(), str(marker))
    fresh, fresh_optim = _trained(1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(fresh_optim, T_max=10)
    start = resume_from_checkpoint(str(tmp_path / "prompt_learner"), fresh, fresh_optim, sched)
    assert start == 3 and not marker.exists()
    assert torch.equal(fresh.weight, model.weight)
    momentum = optim.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(fresh_optim.state_dict()["state"][0]["momentum_buffer"], momentum)
    expected_lr = 0.05 * (1 + torch.cos(torch.tensor(torch.pi * 3 / 10))).item()  # cosine at epoch 3 of 10
    assert abs(fresh_optim.param_groups[0]["lr"] - expected_lr) < 1e-9
    assert "advanced the scheduler by 3 epoch(s)" in capsys.readouterr().out
