"""With the real Dassl importable, importing ``trainers.petr`` puts PETR in Dassl's registry (``register_datasets()``
our datasets), and ``dassl.engine.build_trainer(cfg)`` on a Dassl config tree trains the same run as ``train.py``."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import train
from tests.helpers_petr import petr_argv, write_eurosat
from tests.helpers_run import HANG_GUARD_S

pytestmark = pytest.mark.dassl
pytest.importorskip("dassl.engine")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import json, sys
from trainers.petr import PETR
from dassl.engine import TRAINER_REGISTRY, build_trainer
assert TRAINER_REGISTRY.get("PETR") is PETR, "importing trainers.petr did not register PETR into Dassl"
from datasets.catalog import register_datasets
register_datasets()
import train
from dassl.config import get_cfg_default
from dassl.data.datasets import DATASET_REGISTRY
from datasets.eurosat import EuroSAT
from engine import set_random_seed
from trainers.config import extend_cfg
assert DATASET_REGISTRY.get("EuroSAT") is EuroSAT, "register_datasets() did not register our datasets into Dassl"
argv = json.loads(sys.argv[1])
args = train.build_parser().parse_args(argv)
cfg = extend_cfg(get_cfg_default())  # Dassl's own config tree
cfg.merge_from_file(args.dataset_config_file)
cfg.merge_from_file(args.config_file)
train.reset_cfg(cfg, args)
cfg.merge_from_list(args.opts)
cfg.freeze()
set_random_seed(cfg.SEED)
trainer = build_trainer(cfg)
print("built", type(trainer).__module__, type(trainer).__name__)
trainer.train()
"""


def test_dassl_build_trainer_runs_petr_like_train_py(tmp_path, tiny_clip_file, tiny_teacher_clip_file):
    write_eurosat(tmp_path / "data")
    results = {}
    for how in ("dassl", "train_py"):
        out = tmp_path / how
        argv = petr_argv(tmp_path / "data", out, tiny_clip_file, tiny_teacher_clip_file,
                         "DATASET.SUBSAMPLE_CLASSES", "base", "OPTIM.MAX_EPOCH", "1")
        if how == "dassl":
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, *sys.path])}
            done = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(argv)], cwd=REPO, env=env,
                                  capture_output=True, text=True, timeout=HANG_GUARD_S)
            assert done.returncode == 0, done.stderr[-3000:]
            assert "built trainers.petr PETR" in done.stdout
        else:
            train.main(argv)
        results[how] = json.loads((out / "results.json").read_text())
    for key in ("accuracy", "acc_seen_branch", "acc_unseen_branch", "route_acc"):
        assert results["dassl"][key] == pytest.approx(results["train_py"][key], abs=1e-9), key
    assert results["dassl"]["trainer"] == "PETR"
