"""Every trainer and dataset yaml of upstream CoOp, PromptKD and PromptSRC (115 files; each one's keys and values
written here) merges as it is, and the merged config holds the values the file sets."""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import pytest

import train
from engine.errors import ConfigError
from trainers.promptkd import inert_keys_note

CLIP_INPUT = """INPUT:
  SIZE: (224, 224)
  INTERPOLATION: "bicubic"
  PIXEL_MEAN: [0.48145466, 0.4578275, 0.40821073]
  PIXEL_STD: [0.26862954, 0.26130258, 0.27577711]
  TRANSFORMS: ["random_resized_crop", "random_flip", "normalize"]
"""
BEST_VAL = '\nTEST:\n  FINAL_MODEL: "best_val"\n  NO_TEST: False\n'


class Upstream(NamedTuple):
    """One upstream yaml: the trainer it is run with ("" for a dataset yaml), its text, and the values it sets."""

    trainer: str
    text: str
    expected: dict


def _loader(batch: int, test_batch: int = 100) -> str:
    return (f"DATALOADER:\n  TRAIN_X:\n    BATCH_SIZE: {batch}\n  TEST:\n    BATCH_SIZE: {test_batch}\n"
            "  NUM_WORKERS: 8\n")


def _optim(lr: str, epochs: int) -> str:
    return (f'OPTIM:\n  NAME: "sgd"\n  LR: {lr}\n  MAX_EPOCH: {epochs}\n  LR_SCHEDULER: "cosine"\n'
            '  WARMUP_EPOCH: 1\n  WARMUP_TYPE: "constant"\n  WARMUP_CONS_LR: 1e-5\n')


def _value(value) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _yaml(trainer: str, ns: str, batch: int, lr: str, epochs: int, options: dict, backbone: str = "ViT-B/16",
          print_freq: int = 20, best_val: bool = False) -> Upstream:
    """A trainer yaml in upstream's layout: loader, CLIP input, SGD + cosine with a constant warm-up epoch, print
    frequency, backbone, optional best_val, then the trainer's options."""
    text = (_loader(batch) + "\n" + CLIP_INPUT + "\n" + _optim(lr, epochs) + f"\nTRAIN:\n  PRINT_FREQ: {print_freq}\n"
            f'\nMODEL:\n  BACKBONE:\n    NAME: "{backbone}"\n' + (BEST_VAL if best_val else ""))
    if options:
        text += f"\nTRAINER:\n  {ns}:\n" + "".join(f"    {k}: {_value(v)}\n" for k, v in options.items())
    expected = {"DATALOADER.TRAIN_X.BATCH_SIZE": batch, "DATALOADER.TEST.BATCH_SIZE": 100, "OPTIM.LR": float(lr),
                "OPTIM.MAX_EPOCH": epochs, "OPTIM.WARMUP_CONS_LR": 1e-5, "TRAIN.PRINT_FREQ": print_freq,
                "MODEL.BACKBONE.NAME": backbone, "TEST.FINAL_MODEL": "best_val" if best_val else "last_step",
                **{f"TRAINER.{ns}.{k}": v for k, v in options.items()}}
    return Upstream(trainer, text, expected)


def _coop(name: str, print_freq: int = 5) -> Upstream:
    """CoOp's yamls, named <backbone>[_ep<N>][_ctxv1] (200 epochs without _ep)."""
    backbone = {"rn50": "RN50", "rn101": "RN101", "vit_b16": "ViT-B/16", "vit_b32": "ViT-B/32"}[
        name.split("_ep")[0].removesuffix("_ctxv1")]
    epochs = int(name.split("_ep")[1].split("_")[0]) if "_ep" in name else 200
    options = {"CTX_INIT": "a photo of a"} if name.endswith("_ctxv1") else {}
    return _yaml("CoOp", "COOP", 32, "0.002", epochs, options, backbone, print_freq)


RN50_VAL = Upstream("CoOp", _loader(200, 200) + "\n" + CLIP_INPUT + '\nMODEL:\n  BACKBONE:\n    NAME: "RN50"\n',
                    {"DATALOADER.TRAIN_X.BATCH_SIZE": 200, "DATALOADER.TEST.BATCH_SIZE": 200,
                     "MODEL.BACKBONE.NAME": "RN50"})
COOP_ALL = ["rn101", "rn101_ep50", "rn50", "rn50_ctxv1", "rn50_ep100", "rn50_ep50", "rn50_ep50_ctxv1", "vit_b16",
            "vit_b16_ctxv1", "vit_b16_ep100", "vit_b16_ep100_ctxv1", "vit_b16_ep50", "vit_b16_ep50_ctxv1", "vit_b32",
            "vit_b32_ep50"]
COOP_FORKS = [n for n in COOP_ALL if n not in ("vit_b16_ctxv1", "vit_b16_ep100_ctxv1", "vit_b16_ep50_ctxv1")]


def _cocoop(n_ctx: int, ctx_init: str = "", batch: int = 1) -> Upstream:
    return _yaml("CoCoOp", "COCOOP", batch, "0.002", 10, {"N_CTX": n_ctx, "CTX_INIT": ctx_init, "PREC": "fp16"})


def _maple(batch: int, lr: str, epochs: int, depth: int = 9, best_val: bool = False) -> Upstream:
    return _yaml("MaPLe", "MAPLE", batch, lr, epochs, {"N_CTX": 2, "CTX_INIT": "a photo of a", "PREC": "fp16",
                                                       "PROMPT_DEPTH": depth}, best_val=best_val)


def _ivlp(batch: int, lr: str) -> Upstream:
    return _yaml("IVLP", "IVLP", batch, lr, 20, {"N_CTX_VISION": 4, "N_CTX_TEXT": 4, "CTX_INIT": "a photo of a",
                                                 "PREC": "fp16", "PROMPT_DEPTH_VISION": 9, "PROMPT_DEPTH_TEXT": 9})


def _promptkd(depth: int) -> Upstream:
    return _yaml("PromptKD", "PROMPTKD", 8, "0.005", 20, {
        "N_CTX_VISION": 4, "N_CTX_TEXT": 4, "CTX_INIT": "a photo of a", "PREC": "fp16", "PROMPT_DEPTH_VISION": depth,
        "PROMPT_DEPTH_TEXT": depth, "TEACHER_NAME": "ViT-L/14", "PROJECT_LAYER": 2, "CE_WEIGHT": 0.0,
        "KD_WEIGHT": 1.0}, best_val=True)


def _promptsrc(batch: int, lr: str, epochs: int, depth: int, gpa: tuple[int, int], backbone: str = "ViT-B/16",
               best_val: bool = False) -> Upstream:
    return _yaml("PromptSRC", "PROMPTSRC", batch, lr, epochs, {
        "N_CTX_VISION": 4, "N_CTX_TEXT": 4, "CTX_INIT": "a photo of a", "PREC": "fp16", "PROMPT_DEPTH_VISION": depth,
        "PROMPT_DEPTH_TEXT": depth, "TEXT_LOSS_WEIGHT": 25, "IMAGE_LOSS_WEIGHT": 10, "GPA_MEAN": gpa[0],
        "GPA_STD": gpa[1]}, backbone, best_val=best_val)


DATASETS = {"caltech101": "Caltech101", "dtd": "DescribableTextures", "eurosat": "EuroSAT",
            "fgvc_aircraft": "FGVCAircraft", "food101": "Food101", "imagenet": "ImageNet", "imagenet_a": "ImageNetA",
            "imagenet_r": "ImageNetR", "imagenet_sketch": "ImageNetSketch", "imagenetv2": "ImageNetV2",
            "oxford_flowers": "OxfordFlowers", "oxford_pets": "OxfordPets", "stanford_cars": "StanfordCars",
            "sun397": "SUN397", "ucf101": "UCF101"}
"""configs/datasets/<short>.yaml of all three repositories: DATASET.NAME only (identical files)."""


def _repository(trainers: dict[str, Upstream]) -> dict[str, Upstream]:
    datasets = {f"datasets/{short}": Upstream("", f'DATASET:\n  NAME: "{name}"\n', {"DATASET.NAME": name})
                for short, name in DATASETS.items()}
    return {**{f"trainers/{k}": v for k, v in trainers.items()}, **datasets}


COCOOP = {"CoCoOp/vit_b16_c16_ep10_batch1": _cocoop(16), "CoCoOp/vit_b16_c4_ep10_batch1": _cocoop(4),
          "CoCoOp/vit_b16_c8_ep10_batch1": _cocoop(8),
          "CoCoOp/vit_b16_c4_ep10_batch1_ctxv1": _cocoop(4, "a photo of a")}
UPSTREAM = {  # repository (commit read) -> configs/<file> -> its yaml
    "KaiyangZhou/CoOp@ff61507": _repository({
        **COCOOP, "CoOp/rn50_val": RN50_VAL, **{f"CoOp/{n}": _coop(n) for n in COOP_ALL}}),
    "zhengli97/PromptKD@ec244f7": _repository({
        **COCOOP, "CoCoOp/vit_b16_c4_ep10_batch1_ctxv1": _cocoop(4, "a photo of a", batch=8),
        "CoOp/rn50_val": RN50_VAL, **{f"CoOp/{n}": _coop(n) for n in COOP_FORKS}, "CoOp/vit_b16": _coop("vit_b16", 50),
        "IVLP/vit_b16_c2_ep20_batch8_4+4ctx": _ivlp(8, "0.005"),
        "MaPLe/vit_b16_c2_ep20_batch8_2ctx": _maple(8, "0.005", 20),
        "MaPLe/vit_b16_c2_ep5_batch4_2ctx": _maple(4, "0.0035", 5, best_val=True),
        "MaPLe/vit_b16_c2_ep5_batch4_2ctx_cross_datasets": _maple(4, "0.0026", 2, depth=3),
        "PromptKD/vit_b16_c2_ep20_batch8_4+4ctx": _promptkd(9),
        "PromptKD/vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets": _promptkd(3),
        "PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx": _promptsrc(4, "0.0025", 20, 9, (15, 1)),
        "PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx_cross_datasets": _promptsrc(8, "0.005", 20, 3, (6, 10)),
        "PromptSRC/vit_b16_c2_ep50_batch4_4+4ctx_few_shot": _promptsrc(8, "0.005", 50, 9, (30, 30), best_val=True),
        "PromptSRC/vit_l14_c2_ep20_batch8_4+4ctx": _promptsrc(8, "0.005", 20, 9, (15, 1), "ViT-L/14")}),
    "muzairkhattak/PromptSRC@bb95c77": _repository({
        **COCOOP, "CoOp/rn50_val": RN50_VAL, **{f"CoOp/{n}": _coop(n) for n in COOP_FORKS},
        "IVLP/vit_b16_c2_ep20_batch4_4+4ctx": _ivlp(4, "0.0025"),
        "MaPLe/vit_b16_c2_ep5_batch4_2ctx": _maple(4, "0.0035", 2),
        "MaPLe/vit_b16_c2_ep5_batch4_2ctx_cross_datasets": _maple(4, "0.0026", 2, depth=3),
        "PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx": _promptsrc(4, "0.0025", 20, 9, (15, 1)),
        "PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx_cross_datasets": _promptsrc(4, "0.0025", 20, 3, (6, 10)),
        "PromptSRC/vit_b16_c2_ep50_batch4_4+4ctx_few_shot": _promptsrc(4, "0.0025", 50, 9, (30, 30))}),
}
FILES = {f"{repo}:configs/{path}.yaml": spec for repo, files in UPSTREAM.items() for path, spec in files.items()}


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def _setup(tmp_path, spec: Upstream, *opts: str):
    path = tmp_path / "upstream.yaml"
    path.write_text(spec.text)
    flags = ["--config-file", str(path), "--trainer", spec.trainer] if spec.trainer else [
        "--dataset-config-file", str(path)]
    return train.setup_cfg(train.build_parser().parse_args([*flags, *opts]))


def test_the_inventory_is_upstreams_115_files():
    assert len(FILES) == 115
    per_repo = Counter(name.split("@")[0] for name in FILES)
    assert per_repo == {"KaiyangZhou/CoOp": 35, "zhengli97/PromptKD": 42, "muzairkhattak/PromptSRC": 38}
    per_trainer = Counter(spec.trainer or "dataset" for spec in FILES.values())
    assert per_trainer == {"dataset": 45, "CoOp": 42, "CoCoOp": 12, "MaPLe": 5, "IVLP": 2, "PromptKD": 2,
                           "PromptSRC": 7}


@pytest.mark.parametrize("name", sorted(FILES))
def test_upstream_yaml_merges_with_its_values(tmp_path, name):
    spec = FILES[name]
    cfg = _setup(tmp_path, spec)
    for key, value in spec.expected.items():
        assert _get(cfg, key) == value, key
    if "INPUT" in spec.text:
        assert list(cfg.INPUT.PIXEL_STD) == [0.26862954, 0.26130258, 0.27577711]
        assert list(cfg.INPUT.TRANSFORMS) == ["random_resized_crop", "random_flip", "normalize"]
        assert cfg.DATALOADER.NUM_WORKERS == 8 and cfg.INPUT.INTERPOLATION == "bicubic"
    if "OPTIM" in spec.text:
        assert cfg.OPTIM.NAME == "sgd" and cfg.OPTIM.WARMUP_TYPE == "constant" and cfg.OPTIM.WARMUP_EPOCH == 1


def test_int_for_float_also_from_command_line_and_types_still_checked(tmp_path):
    spec = FILES["zhengli97/PromptKD@ec244f7:configs/trainers/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx.yaml"]
    cfg = _setup(tmp_path, spec, "TRAINER.PROMPTKD.KD_WEIGHT", "200", "TRAINER.PROMPTKD.TEMPERATURE", "2")
    assert cfg.TRAINER.PROMPTKD.KD_WEIGHT == 200.0 and type(cfg.TRAINER.PROMPTKD.KD_WEIGHT) is float
    assert type(cfg.TRAINER.PROMPTKD.TEMPERATURE) is float
    src = _setup(tmp_path, FILES["muzairkhattak/PromptSRC@bb95c77:configs/trainers/PromptSRC/"
                                 "vit_b16_c2_ep20_batch4_4+4ctx.yaml"])
    assert type(src.TRAINER.PROMPTSRC.TEXT_LOSS_WEIGHT) is float  # the yaml's 25 is read as the float key's 25.0
    with pytest.raises(ConfigError, match=r"Type mismatch"):  # a string is still refused for a float key
        _setup(tmp_path, spec, "TRAINER.PROMPTKD.KD_WEIGHT", "'high'")
    with pytest.raises(ConfigError, match=r"Type mismatch"):  # and a float for an int key
        _setup(tmp_path, spec, "OPTIM.MAX_EPOCH", "2.5")


def test_inert_promptkd_keys_are_named_once_with_the_reason(tmp_path):
    spec = FILES["zhengli97/PromptKD@ec244f7:configs/trainers/PromptKD/vit_b16_c2_ep20_batch8_4+4ctx.yaml"]
    note = inert_keys_note(_setup(tmp_path, spec))
    assert "\n" not in note and "PROJECT_LAYER=2" in note and "CE_WEIGHT=0.0" in note and "label-free" in note


def test_yaml_of_a_trainer_we_lack_gives_one_line_naming_ours(tmp_path, capsys):
    path = tmp_path / "VPT.yaml"  # MaPLe's repository also has a vision-only prompting trainer, VPT
    path.write_text(_optim("0.0025", 5) + '\nTRAINER:\n  VPT:\n    N_CTX_VISION: 8\n    CTX_INIT: "a photo of a"\n'
                    '    PREC: "fp16"\n    PROMPT_DEPTH_VISION: 12\n')
    assert train.cli(["--config-file", str(path), "--trainer", "VPT"]) == 2
    msg = capsys.readouterr().err
    assert msg.count("\n") == 1 and msg.startswith(f"error: {path}: ") and "upstream's VPT trainer" in msg
    listed = msg.strip().split("trainers here: ")[1].split(", ")
    assert {"CoCoOp", "CoOp", "IVLP", "MaPLe", "PETR", "PETRCoOp", "PromptKD", "PromptSRC", "ZeroshotCLIP"} <= set(
        listed) and "VPT" not in listed
