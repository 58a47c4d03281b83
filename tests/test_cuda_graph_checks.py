"""engine/cuda_graph.py without a GPU: which runs TRAIN.CUDA_GRAPH accepts, and the Adam family made capturable
exactly as torch builds a capturable optimiser (the capture itself needs CUDA: bench/gpu_step.sh)."""
from __future__ import annotations

import pytest
import torch
from yacs.config import CfgNode

from engine.cuda_graph import check_cuda_graph, make_capturable
from engine.errors import ConfigError


class Stepper:
    def train_step(self, inputs):
        return inputs


def graph_cfg(optim: str) -> CfgNode:
    return CfgNode({"TRAIN": {"CUDA_GRAPH": True, "COMPILE": "none"}, "OPTIM": {"NAME": optim}})


@pytest.mark.parametrize("optim", ["sgd", "adam", "amsgrad", "adamw"])
def test_sgd_and_the_adam_family_are_captured(optim):
    check_cuda_graph(graph_cfg(optim), torch.device("cuda"), "bf16", Stepper(), distributed=False)


@pytest.mark.parametrize("optim", ["rmsprop", "radam"])
def test_other_optimisers_are_refused_naming_the_key_and_the_choices(optim):
    with pytest.raises(ConfigError) as e:
        check_cuda_graph(graph_cfg(optim), torch.device("cuda"), "bf16", Stepper(), distributed=False)
    assert str(e.value) == (f"TRAIN.CUDA_GRAPH True: OPTIM.NAME {optim} keeps its step count on the host; use one of "
                            "sgd, adam, amsgrad, adamw")


@pytest.mark.parametrize("cls,kwargs", [(torch.optim.Adam, {}), (torch.optim.Adam, {"amsgrad": True}),
                                        (torch.optim.AdamW, {})])
def test_made_capturable_equals_torchs_own_capturable_optimiser(cls, kwargs):
    params = [torch.nn.Parameter(torch.zeros(3))]
    plain = cls(params, lr=0.01, foreach=True, **kwargs)
    built = cls(params, lr=0.01, foreach=True, capturable=True, **kwargs)
    assert not plain.defaults["capturable"]
    make_capturable([plain])
    assert plain.defaults == built.defaults
    assert [{k: v for k, v in g.items() if k != "params"} for g in plain.param_groups] == \
        [{k: v for k, v in g.items() if k != "params"} for g in built.param_groups]


def test_sgd_is_left_as_built():
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.01, momentum=0.9)
    before = dict(sgd.defaults), [dict(g) for g in sgd.param_groups]
    make_capturable([sgd])
    assert (sgd.defaults, sgd.param_groups) == before
