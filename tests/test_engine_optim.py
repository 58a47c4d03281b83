"""Optimiser/scheduler builders: per-epoch LR sequences vs closed-form math, plain-value state and resume."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from engine import build_lr_scheduler, build_optimizer, get_cfg_default


def _optim_cfg(**kw):
    cfg = get_cfg_default()
    for k, v in kw.items():
        cfg.OPTIM[k] = v
    return cfg.OPTIM


def _lr_sequence(optim_cfg, epochs=None, model=None):
    model = model or nn.Linear(2, 2)
    opt = build_optimizer(model, optim_cfg)
    sched = build_lr_scheduler(opt, optim_cfg)
    lrs = []
    for _ in range(epochs or optim_cfg.MAX_EPOCH):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_promptkd_schedule_matches_reference_formula():
    """reference §2.6: e=0 → 1e-5, e≥1 → 0.0025·(1+cos(π(e−1)/20))."""
    cfg = _optim_cfg(NAME="sgd", LR=0.005, MAX_EPOCH=20, LR_SCHEDULER="cosine", WARMUP_EPOCH=1,
                     WARMUP_TYPE="constant", WARMUP_CONS_LR=1e-5)
    expected = [1e-5] + [0.0025 * (1 + math.cos(math.pi * (e - 1) / 20)) for e in range(1, 20)]
    assert _lr_sequence(cfg) == pytest.approx(expected, rel=1e-9)
    assert expected[1] == pytest.approx(0.005) and expected[19] == pytest.approx(1.2e-4, rel=0.03)


@pytest.mark.parametrize("warmup,expected_rounded", [
    ({}, [2e-3, 1.809e-3, 1.309e-3, 6.91e-4, 1.91e-4]),
    ({"WARMUP_EPOCH": 1, "WARMUP_TYPE": "constant"}, [1e-5, 2e-3, 1.809e-3, 1.309e-3, 6.91e-4]),
    ({"WARMUP_EPOCH": 2, "WARMUP_TYPE": "linear"}, [1e-5, 1e-3, 2e-3, 1.809e-3, 1.309e-3]),
])
def test_dassl_tested_sequences(warmup, expected_rounded):
    """dassl_api.md §A.6: LR 0.002, MAX_EPOCH 5, cosine; exact values from the closed form, rounded ones as listed."""
    cfg = _optim_cfg(NAME="sgd", LR=0.002, MAX_EPOCH=5, LR_SCHEDULER="cosine", **warmup)
    w = warmup.get("WARMUP_EPOCH", 0)
    cos = [0.002 * (1 + math.cos(math.pi * t / 5)) / 2 for t in range(5)]
    if w == 0:
        exact = cos
    elif warmup["WARMUP_TYPE"] == "constant":
        exact = [1e-5] + cos[:4]
    else:
        exact = [1e-5, 0.002 * 1 / 2] + cos[:3]
    lrs = _lr_sequence(cfg)
    assert lrs == pytest.approx(exact, rel=1e-9)
    assert lrs == pytest.approx(expected_rounded, rel=2e-3)


def test_step_schedulers():
    single = _optim_cfg(NAME="sgd", LR=1.0, MAX_EPOCH=6, LR_SCHEDULER="single_step", STEPSIZE=(2,), GAMMA=0.5)
    assert _lr_sequence(single) == pytest.approx([1, 1, 0.5, 0.5, 0.25, 0.25])
    multi = _optim_cfg(NAME="sgd", LR=1.0, MAX_EPOCH=5, LR_SCHEDULER="multi_step", STEPSIZE=(1, 3), GAMMA=0.1)
    assert _lr_sequence(multi) == pytest.approx([1, 0.1, 0.1, 0.01, 0.01])


def test_scheduler_state_is_plain_and_resumes_exactly(tmp_path):
    cfg = _optim_cfg(NAME="sgd", LR=0.002, MAX_EPOCH=6, LR_SCHEDULER="cosine", WARMUP_EPOCH=1,
                     WARMUP_TYPE="constant")
    full = _lr_sequence(cfg)
    model = nn.Linear(2, 2)
    opt = build_optimizer(model, cfg)
    sched = build_lr_scheduler(opt, cfg)
    for _ in range(3):
        opt.step()
        sched.step()
    path = tmp_path / "sched.pt"
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, path)
    state = torch.load(path, weights_only=True)
    assert isinstance(state["scheduler"]["successor"], dict)
    opt2 = build_optimizer(model, cfg)
    sched2 = build_lr_scheduler(opt2, cfg)
    opt2.load_state_dict(state["optimizer"])
    sched2.load_state_dict(state["scheduler"])
    resumed = []
    for _ in range(3):
        resumed.append(opt2.param_groups[0]["lr"])
        opt2.step()
        sched2.step()
    assert resumed == pytest.approx(full[3:], rel=1e-12)


@pytest.mark.parametrize("name,cls", [("adam", torch.optim.Adam), ("amsgrad", torch.optim.Adam),
                                      ("sgd", torch.optim.SGD), ("rmsprop", torch.optim.RMSprop),
                                      ("radam", torch.optim.RAdam), ("adamw", torch.optim.AdamW)])
def test_build_optimizer_names_and_arguments(name, cls):
    cfg = _optim_cfg(NAME=name, LR=0.01, WEIGHT_DECAY=0.001)
    opt = build_optimizer(nn.Linear(2, 2), cfg)
    assert type(opt) is cls
    group = opt.param_groups[0]
    assert group["lr"] == 0.01 and group["weight_decay"] == 0.001
    if name == "amsgrad":
        assert group["amsgrad"] is True
    if name == "sgd":
        assert group["momentum"] == 0.9 and group["nesterov"] is False


def test_staged_lr_param_groups_and_iterables():
    model = nn.Sequential()
    model.add_module("backbone", nn.Linear(2, 2))
    model.add_module("head", nn.Linear(2, 1))
    cfg = _optim_cfg(NAME="sgd", LR=0.1, STAGED_LR=True, NEW_LAYERS=("head",), BASE_LR_MULT=0.1)
    opt = build_optimizer(model, cfg)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.01, 0.1])
    assert opt.param_groups[1]["params"][0] is model.head.weight
    opt = build_optimizer(list(model.head.parameters()), _optim_cfg(NAME="sgd", LR=0.3))
    assert len(opt.param_groups[0]["params"]) == 2


def test_unknown_names_raise():
    with pytest.raises(ValueError, match="OPTIM.NAME 'sgdd'"):
        build_optimizer(nn.Linear(2, 2), _optim_cfg(NAME="sgdd"))
    opt = build_optimizer(nn.Linear(2, 2), _optim_cfg(NAME="sgd"))
    with pytest.raises(ValueError, match="OPTIM.LR_SCHEDULER 'cos'"):
        build_lr_scheduler(opt, _optim_cfg(LR_SCHEDULER="cos"))
    with pytest.raises(ValueError, match="OPTIM.WARMUP_TYPE 'exp'"):
        build_lr_scheduler(opt, _optim_cfg(LR_SCHEDULER="cosine", WARMUP_EPOCH=1, WARMUP_TYPE="exp"))


def _reference_updates(name: str, params: list[torch.Tensor], grads: list[list[torch.Tensor]], cfg) -> list:
    """The per-parameter update rules written out (SGD with momentum/weight decay, Adam/AdamW/AMSGrad, RMSprop), in
    float64 from the float32 start, rounded to float32 after each step as torch's per-tensor loop rounds."""
    lr, wd, mom = cfg.LR, cfg.WEIGHT_DECAY, cfg.MOMENTUM
    b1, b2, eps = cfg.ADAM_BETA1, cfg.ADAM_BETA2, 1e-8
    out = []
    for p0, gs in zip(params, zip(*grads)):
        p, state = p0.clone(), {}
        for t, g in enumerate(gs, start=1):
            if name == "sgd":
                d = g + wd * p
                buf = d.clone() if t == 1 else state["buf"] * mom + d
                state["buf"] = buf
                p = p - lr * buf
            elif name == "rmsprop":
                d = g + wd * p
                sq = cfg.RMSPROP_ALPHA * state.get("sq", torch.zeros_like(p)) + (1 - cfg.RMSPROP_ALPHA) * d * d
                buf = mom * state.get("buf", torch.zeros_like(p)) + d / (sq.sqrt() + eps)
                state.update(sq=sq, buf=buf)
                p = p - lr * buf
            else:
                if name == "adamw":
                    p = p * (1 - lr * wd)
                    d = g
                else:
                    d = g + wd * p
                m = b1 * state.get("m", torch.zeros_like(p)) + (1 - b1) * d
                v = b2 * state.get("v", torch.zeros_like(p)) + (1 - b2) * d * d
                state.update(m=m, v=v)
                vmax = torch.maximum(state.get("vmax", v), v) if name == "amsgrad" else v
                state["vmax"] = vmax
                denom = (vmax.sqrt() / math.sqrt(1 - b2 ** t)) + eps
                p = p - (lr / (1 - b1 ** t)) * m / denom
        out.append(p)
    return out


@pytest.mark.parametrize("name", ["sgd", "adam", "amsgrad", "adamw", "rmsprop"])
def test_foreach_optimisers_equal_the_per_parameter_loop(name):
    """build_optimizer's foreach optimisers give the per-parameter loop's (foreach=False) weights bit for bit, and
    both follow the update rule written out in the test."""
    cfg = _optim_cfg(NAME=name, LR=0.05 if name == "sgd" else 1e-2, WEIGHT_DECAY=5e-4)
    torch.manual_seed(0)
    start = [torch.randn(shape) for shape in ((4, 6), (6,), (2, 3, 5))]
    gen = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=gen) for p in start] for _ in range(10)]
    finals = {}
    for impl in ("built", "loop"):
        params = [nn.Parameter(p.clone()) for p in start]
        opt = build_optimizer(params, cfg)
        assert opt.defaults["foreach"] is True
        if impl == "loop":  # the same optimiser on torch's per-parameter code path
            for group in opt.param_groups:
                group["foreach"] = False
        for step in grads:
            for p, g in zip(params, step):
                p.grad = g.clone()
            opt.step()
        finals[impl] = [p.detach() for p in params]
    assert all(torch.equal(a, b) for a, b in zip(finals["built"], finals["loop"]))
    reference = _reference_updates(name, [p.double() for p in start], [[g.double() for g in s] for s in grads], cfg)
    for got, want in zip(finals["built"], reference):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
