"""Logger (tee, never overwrites, restorable), meters' text, precision helpers and the optional Dassl bridge."""
from __future__ import annotations

import os
import sys

import pytest
import torch

from engine import (
    AverageMeter,
    MetricMeter,
    autocast,
    dassl_bridge,
    get_cfg_default,
    make_grad_scaler,
    resolve_precision,
    setup_logger,
)
from engine.dataset_base import build_dataset
from engine.registry import DATASET_REGISTRY, TRAINER_REGISTRY
from tests.helpers_engine import EngineTinyDataset, write_image_tree


def test_logger_tees_appends_and_restores(tmp_path, capsys):
    original = sys.stdout
    (tmp_path / "log.txt").write_text("previous run\n")
    logger = setup_logger(str(tmp_path))
    try:
        assert sys.stdout is logger
        print("hello log")
    finally:
        logger.close()
    assert sys.stdout is original
    lines = (tmp_path / "log.txt").read_text().splitlines()
    assert logger.fpath == str(tmp_path / "log.txt") and os.listdir(tmp_path) == ["log.txt"]
    assert lines[:2] == ["previous run", ""] and lines[2].endswith("new attempt (earlier ones above) =====")
    assert lines[3:] == ["hello log"]
    assert "hello log" in capsys.readouterr().out
    explicit = setup_logger(str(tmp_path / "custom.log"))
    explicit.close()
    assert explicit.fpath == str(tmp_path / "custom.log")


def test_meters_format():
    m = AverageMeter()
    for v in (1.0, torch.tensor(2.0), 6.0):
        m.update(v)
    assert (m.val, m.avg, m.sum, m.count) == (6.0, 3.0, 9.0, 3)
    mm = MetricMeter()
    mm.update({"loss": 1.5, "acc": torch.tensor(50.0)})
    mm.update({"loss": 0.5, "acc": 100.0})
    assert str(mm) == "loss 0.5000 (1.0000) acc 100.0000 (75.0000)"
    with pytest.raises(TypeError, match="expects a dict"):
        mm.update(1.0)


def test_precision_helpers(capsys):
    assert resolve_precision("fp16", "cpu") == "fp32"
    assert "not supported on CPU" in capsys.readouterr().out
    assert resolve_precision("amp", "cpu") == "amp" and resolve_precision("fp32", torch.device("cpu")) == "fp32"
    with pytest.raises(ValueError, match="fp33"):
        resolve_precision("fp33", "cpu")
    a = torch.randn(4, 4)
    with autocast("amp", "cpu"):
        assert (a @ a).dtype == torch.bfloat16
    with autocast("fp32", "cpu"):
        assert (a @ a).dtype == torch.float32
    assert not make_grad_scaler("amp", "cpu").is_enabled()


@pytest.fixture
def stand_in_dassl(tmp_path, monkeypatch):
    """A minimal package named ``dassl`` exposing Dassl's two registries (built from our Registry class)."""
    pkg = tmp_path / "dassl"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "data" / "datasets").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "data" / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text(
        "from engine.registry import Registry\nTRAINER_REGISTRY = Registry('TRAINER')\n")
    (pkg / "data" / "datasets" / "__init__.py").write_text(
        "from engine.registry import Registry\nDATASET_REGISTRY = Registry('DATASET')\n"
        "@DATASET_REGISTRY.register()\nclass DasslOnlySet:\n    def __init__(self, cfg):\n        self.cfg = cfg\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m == "dassl" or m.startswith("dassl.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(dassl_bridge, "_dassl_checked", False)
    monkeypatch.setattr(dassl_bridge, "_dassl_registries", None)
    yield
    for name in [m for m in sys.modules if m == "dassl" or m.startswith("dassl.")]:
        del sys.modules[name]


def test_bridge_with_a_dassl_package(stand_in_dassl, tmp_path):
    """With Dassl importable, a class registered in our registries (what importing its module does) is in Dassl's
    at once, and a dataset name only Dassl has is built from Dassl's registry."""
    from dassl.data.datasets import DATASET_REGISTRY as theirs_ds
    from dassl.engine import TRAINER_REGISTRY as theirs_tr

    trainer, dataset = type("EngineSharedTrainer", (), {}), type("EngineSharedDataset", (), {})
    try:
        TRAINER_REGISTRY.register(trainer)
        DATASET_REGISTRY.register(dataset)
        assert theirs_tr.get("EngineSharedTrainer") is trainer and theirs_ds.get("EngineSharedDataset") is dataset
        assert "EngineSharedTrainer" not in theirs_ds.registered_names()  # each kind into its own registry
    finally:
        TRAINER_REGISTRY._obj_map.pop("EngineSharedTrainer")
        DATASET_REGISTRY._obj_map.pop("EngineSharedDataset")
    cls = dassl_bridge.dassl_dataset_class("DasslOnlySet")
    assert cls is theirs_ds.get("DasslOnlySet") and dassl_bridge.dassl_dataset_class("NoSuchSet") is None
    cfg = get_cfg_default()
    cfg.DATASET.NAME = "DasslOnlySet"
    assert isinstance(build_dataset(cfg), cls)
    write_image_tree(str(tmp_path))
    cfg.DATASET.NAME, cfg.DATASET.ROOT = "EngineTinyDataset", str(tmp_path)
    theirs_ds.register(type("EngineTinyDataset", (), {}))  # a name we hold is ours, whatever Dassl holds
    assert isinstance(build_dataset(cfg, "standard"), EngineTinyDataset)


def test_a_name_dassl_holds_keeps_dassls_object_with_a_warning(stand_in_dassl):
    from dassl.engine import TRAINER_REGISTRY as theirs

    shared, clash, dassl_own = (type(name, (), {}) for name in ("EngineShared", "EngineClash", "EngineClash"))
    theirs.register(dassl_own)
    try:
        TRAINER_REGISTRY.register(shared)
        assert theirs.get("EngineShared") is shared
        with pytest.warns(UserWarning, match=r"Dassl's TRAINER registry already holds another object named "
                                             r"'EngineClash'; kept Dassl's"):
            TRAINER_REGISTRY.register(clash)
        assert theirs.get("EngineClash") is dassl_own and TRAINER_REGISTRY.get("EngineClash") is clash
    finally:
        for name in ("EngineShared", "EngineClash"):
            TRAINER_REGISTRY._obj_map.pop(name, None)


def test_bridge_without_dassl(monkeypatch, recwarn):
    for name in ["dassl", *[m for m in sys.modules if m.startswith("dassl.")]]:
        monkeypatch.setitem(sys.modules, name, None)  # makes `import dassl...` fail as if it were not installed
    monkeypatch.setattr(dassl_bridge, "_dassl_checked", False)
    monkeypatch.setattr(dassl_bridge, "_dassl_registries", None)
    assert dassl_bridge.dassl_dataset_class("PACS") is None
    try:
        TRAINER_REGISTRY.register(type("EngineAlone", (), {}))
        assert "EngineAlone" in TRAINER_REGISTRY and len(recwarn) == 0
    finally:
        TRAINER_REGISTRY._obj_map.pop("EngineAlone")


@pytest.mark.dassl
def test_bridge_with_real_dassl():
    pytest.importorskip("dassl")
    from dassl.engine import TRAINER_REGISTRY as theirs

    probe = type("EngineRealDasslProbe", (), {})
    try:
        TRAINER_REGISTRY.register(probe)
        assert theirs.get("EngineRealDasslProbe") is probe
    finally:
        TRAINER_REGISTRY._obj_map.pop("EngineRealDasslProbe")


def test_meters_read_tensors_late_with_the_values_of_item():
    """A step's summary kept as tensors (float32 and bf16, read in one transfer by sync()) gives the meters, the
    printed line and the synced rows exactly what per-step .item() calls gave."""
    gen = torch.Generator().manual_seed(0)
    rows = [{"loss": torch.rand((), generator=gen) * 7, "acc": (torch.rand(1, generator=gen) * 100).bfloat16()}
            for _ in range(9)]
    late, early = MetricMeter(), MetricMeter()
    for i, row in enumerate(rows):
        late.update(row, tag=i)
        early.update({k: v.item() for k, v in row.items()})
    synced = late.sync()
    assert [tag for tag, _ in synced] == list(range(9))
    assert all(values == {k: v.item() for k, v in row.items()} for (_, values), row in zip(synced, rows))
    assert str(late) == str(early)
    assert all(late.meters[k].avg == early.meters[k].avg and late.meters[k].sum == early.meters[k].sum
               for k in ("loss", "acc"))
