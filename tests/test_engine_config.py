"""Config tree: Dassl defaults, extend_cfg namespaces, CoOp yaml merge, merge order and clear unknown-key errors."""
from __future__ import annotations

import pytest

import train
from engine import get_cfg_default
from engine.errors import ConfigError
from trainers.config import extend_cfg

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Dassl defaults as listed in reference/dassl_api.md §A.5 (written by hand, not read from the code).
DASSL_DEFAULTS = {
    "OUTPUT_DIR": "./output", "RESUME": "", "SEED": -1, "USE_CUDA": True, "VERBOSE": True,
    "INPUT.SIZE": (224, 224), "INPUT.INTERPOLATION": "bilinear", "INPUT.TRANSFORMS": (),
    "INPUT.PIXEL_MEAN": [0.485, 0.456, 0.406], "INPUT.PIXEL_STD": [0.229, 0.224, 0.225],
    "INPUT.RRCROP_SCALE": (0.08, 1.0), "INPUT.NO_TRANSFORM": False, "INPUT.CROP_PADDING": 4,
    "DATASET.ROOT": "", "DATASET.NAME": "", "DATASET.NUM_SHOTS": -1, "DATASET.SOURCE_DOMAINS": (),
    "DATASET.TARGET_DOMAINS": (), "DATALOADER.NUM_WORKERS": 4, "DATALOADER.TRAIN_X.SAMPLER": "RandomSampler",
    "DATALOADER.TRAIN_X.BATCH_SIZE": 32, "DATALOADER.TEST.SAMPLER": "SequentialSampler",
    "DATALOADER.TEST.BATCH_SIZE": 32, "DATALOADER.K_TRANSFORMS": 1, "DATALOADER.RETURN_IMG0": False,
    "DATALOADER.TRAIN_U.SAME_AS_X": True, "MODEL.BACKBONE.NAME": "", "MODEL.INIT_WEIGHTS": "",
    "OPTIM.NAME": "adam", "OPTIM.LR": 0.0003, "OPTIM.WEIGHT_DECAY": 5e-4, "OPTIM.MOMENTUM": 0.9,
    "OPTIM.SGD_DAMPNING": 0, "OPTIM.SGD_NESTEROV": False, "OPTIM.LR_SCHEDULER": "single_step",
    "OPTIM.MAX_EPOCH": 10, "OPTIM.WARMUP_EPOCH": -1, "OPTIM.WARMUP_TYPE": "linear", "OPTIM.WARMUP_CONS_LR": 1e-5,
    "OPTIM.WARMUP_MIN_LR": 1e-5, "OPTIM.WARMUP_RECOUNT": True, "OPTIM.STAGED_LR": False, "OPTIM.NEW_LAYERS": (),
    "OPTIM.BASE_LR_MULT": 0.1, "OPTIM.STEPSIZE": (-1,), "OPTIM.GAMMA": 0.1, "TRAIN.PRINT_FREQ": 10,
    "TRAIN.CHECKPOINT_FREQ": 0, "TRAIN.COUNT_ITER": "train_x", "TEST.EVALUATOR": "Classification",
    "TEST.SPLIT": "test", "TEST.FINAL_MODEL": "last_step", "TEST.NO_TEST": False, "TEST.PER_CLASS_RESULT": False,
    "TEST.COMPUTE_CMAT": False, "TRAINER.NAME": "",
}


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def test_defaults_match_dassl():
    cfg = get_cfg_default()
    for key, expected in DASSL_DEFAULTS.items():
        assert _get(cfg, key) == expected, key
    assert get_cfg_default() is not get_cfg_default()  # a fresh clone each time


def test_extend_cfg_namespaces():
    cfg = extend_cfg(get_cfg_default())
    assert cfg.DATASET.SUBSAMPLE_CLASSES == "all" and cfg.TRAINER.MODAL == "base2novel"
    assert dict(cfg.TRAINER.COOP) == {"N_CTX": 16, "CSC": False, "CTX_INIT": "", "PREC": "fp16",
                                      "CLASS_TOKEN_POSITION": "end"}
    assert cfg.TRAINER.PROMPTKD.TEACHER_NAME == "ViT-L/14" and cfg.TRAINER.PROMPTKD.KD_WEIGHT == 1.0
    assert cfg.TRAINER.PETR.LAMBDA == 1.4 and cfg.TRAINER.PETR.PERCENTILE == 99.0
    assert cfg.TRAINER.PETR.CE_SCOPE == "all" and cfg.TRAINER.PETRCOOP.ROUTER == "mahalanobis"
    assert cfg.TRAINER.PROMPTSRC.TEXT_LOSS_WEIGHT == 25.0 and cfg.TRAINER.ZSCLIP.TEMPLATES == "single"


def _cfg(argv):
    return train.setup_cfg(train.build_parser().parse_args(argv))


@pytest.mark.parametrize("name,epochs,ctx_init", [
    ("vit_b16", 200, ""), ("vit_b16_ctxv1", 200, "a photo of a"), ("vit_b16_ep50_ctxv1", 50, "a photo of a"),
])
def test_coop_yaml_merges_with_upstream_values(name, epochs, ctx_init):
    cfg = _cfg(["--config-file", f"configs/trainers/CoOp/{name}.yaml", "--trainer", "CoOp"])
    assert cfg.CONFIG_NAME == name
    assert cfg.DATALOADER.TRAIN_X.BATCH_SIZE == 32 and cfg.DATALOADER.TEST.BATCH_SIZE == 100
    assert cfg.DATALOADER.NUM_WORKERS == 8
    assert tuple(cfg.INPUT.SIZE) == (224, 224) and cfg.INPUT.INTERPOLATION == "bicubic"
    assert list(cfg.INPUT.PIXEL_MEAN) == CLIP_MEAN and list(cfg.INPUT.PIXEL_STD) == CLIP_STD
    assert list(cfg.INPUT.TRANSFORMS) == ["random_resized_crop", "random_flip", "normalize"]
    optim = (cfg.OPTIM.NAME, cfg.OPTIM.LR, cfg.OPTIM.MAX_EPOCH, cfg.OPTIM.LR_SCHEDULER)
    assert optim == ("sgd", 0.002, epochs, "cosine")
    assert (cfg.OPTIM.WARMUP_EPOCH, cfg.OPTIM.WARMUP_TYPE, cfg.OPTIM.WARMUP_CONS_LR) == (1, "constant", 1e-5)
    assert cfg.TRAIN.PRINT_FREQ == 5 and cfg.MODEL.BACKBONE.NAME == "ViT-B/16"
    assert cfg.TRAINER.COOP.CTX_INIT == ctx_init and cfg.TEST.FINAL_MODEL == "last_step"
    assert cfg.TRAINER.NAME == "CoOp" and cfg.is_frozen()


def test_merge_order_and_seed_zero(tmp_path):
    ds = tmp_path / "ds.yaml"
    ds.write_text("DATASET:\n  NAME: A\n  NUM_SHOTS: 4\nOPTIM:\n  LR: 0.1\nSEED: 7\n")
    tr = tmp_path / "tr.yaml"
    tr.write_text("OPTIM:\n  LR: 0.2\n  MAX_EPOCH: 3\n")
    cfg = _cfg(["--dataset-config-file", str(ds), "--config-file", str(tr), "--seed", "0", "--root", "/r",
                "OPTIM.MAX_EPOCH", "5", "DATASET.NUM_SHOTS", "16"])
    assert cfg.OPTIM.LR == 0.2  # trainer yaml overrides dataset yaml
    assert cfg.OPTIM.MAX_EPOCH == 5 and cfg.DATASET.NUM_SHOTS == 16  # opts override both
    assert cfg.SEED == 0 and cfg.DATASET.ROOT == "/r" and cfg.DATASET.NAME == "A"
    assert _cfg(["--dataset-config-file", str(ds)]).SEED == 7  # default --seed -1 keeps the yaml's seed


def test_unknown_key_in_yaml_names_key_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("OPTIM:\n  FOO: 1\n")
    with pytest.raises(ConfigError) as e:
        _cfg(["--config-file", str(bad)])
    msg = str(e.value)
    assert msg.startswith(f"{bad}: unknown config key 'OPTIM.FOO'") and "\n" not in msg
    assert "declare it with its rule in its trainer's CONFIG_KEYS" in msg


def test_unknown_key_in_opts_and_bad_values(tmp_path):
    with pytest.raises(ConfigError, match=r"^command-line opts: unknown config key 'TRAINER.PETR.LAMDA'"):
        _cfg(["TRAINER.PETR.LAMDA", "1.5"])
    with pytest.raises(ConfigError, match=r"^command-line opts: .*Type mismatch.*OPTIM.MAX_EPOCH"):
        _cfg(["OPTIM.MAX_EPOCH", "'ten'"])
    with pytest.raises(FileNotFoundError, match=r"^trainer config file not found: .*nope.yaml$"):
        _cfg(["--config-file", str(tmp_path / "nope.yaml")])
