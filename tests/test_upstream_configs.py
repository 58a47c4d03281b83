"""Upstream CoOp / PromptKD / PromptSRC trainer yamls (every key and value, written here) merge as they are."""
from __future__ import annotations

import pytest

import train
from engine.errors import ConfigError
from trainers.config import inert_keys_note

CLIP_INPUT = """INPUT:
  SIZE: (224, 224)
  INTERPOLATION: "bicubic"
  PIXEL_MEAN: [0.48145466, 0.4578275, 0.40821073]
  PIXEL_STD: [0.26862954, 0.26130258, 0.27577711]
  TRANSFORMS: ["random_resized_crop", "random_flip", "normalize"]
"""


def _loader(batch: int, test_batch: int = 100) -> str:
    return (f"DATALOADER:\n  TRAIN_X:\n    BATCH_SIZE: {batch}\n  TEST:\n    BATCH_SIZE: {test_batch}\n"
            "  NUM_WORKERS: 8\n")


def _optim(lr: str, epochs: int) -> str:
    return (f'OPTIM:\n  NAME: "sgd"\n  LR: {lr}\n  MAX_EPOCH: {epochs}\n  LR_SCHEDULER: "cosine"\n'
            '  WARMUP_EPOCH: 1\n  WARMUP_TYPE: "constant"\n  WARMUP_CONS_LR: 1e-5\n')


def _common(batch: int, lr: str, epochs: int, print_freq: int, backbone: str) -> str:
    return (_loader(batch) + "\n" + CLIP_INPUT + "\n" + _optim(lr, epochs) + f"\nTRAIN:\n  PRINT_FREQ: {print_freq}\n"
            f'\nMODEL:\n  BACKBONE:\n    NAME: "{backbone}"\n')


BEST_VAL = '\nTEST:\n  FINAL_MODEL: "best_val"\n  NO_TEST: False\n'


def _promptkd(depth: int) -> str:
    return (_common(8, "0.005", 20, 20, "ViT-B/16") + BEST_VAL
            + '\nTRAINER:\n  PROMPTKD:\n    N_CTX_VISION: 4\n    N_CTX_TEXT: 4\n    CTX_INIT: "a photo of a"\n'
              f'    PREC: "fp16"\n    PROMPT_DEPTH_VISION: {depth}\n    PROMPT_DEPTH_TEXT: {depth}\n'
              '    TEACHER_NAME: "ViT-L/14"\n    PROJECT_LAYER: 2\n    CE_WEIGHT: 0.0\n    KD_WEIGHT: 1.0\n')


def _promptsrc(batch: int, lr: str, epochs: int, backbone: str, depth: int, gpa: tuple[int, int],
               best_val: bool = False) -> str:
    return (_common(batch, lr, epochs, 20, backbone) + (BEST_VAL if best_val else "")
            + '\nTRAINER:\n  PROMPTSRC:\n    N_CTX_VISION: 4\n    N_CTX_TEXT: 4\n    CTX_INIT: "a photo of a"\n'
              f'    PREC: "fp16"\n    PROMPT_DEPTH_VISION: {depth}\n    PROMPT_DEPTH_TEXT: {depth}\n'
              f"    TEXT_LOSS_WEIGHT: 25\n    IMAGE_LOSS_WEIGHT: 10\n    GPA_MEAN: {gpa[0]}\n    GPA_STD: {gpa[1]}\n")


def _coop(epochs: int, backbone: str, ctxv1: bool) -> str:
    return (_common(32, "0.002", epochs, 5, backbone)
            + ('\nTRAINER:\n  COOP:\n    CTX_INIT: "a photo of a"\n' if ctxv1 else ""))


UPSTREAM = {  # file name -> (trainer, yaml text, expected trainer-namespace values)
    "PromptKD/vit_b16_c2_ep20_batch8_4+4ctx": ("PromptKD", _promptkd(9), {
        "PROMPTKD.PROMPT_DEPTH_VISION": 9, "PROMPTKD.PROJECT_LAYER": 2, "PROMPTKD.CE_WEIGHT": 0.0}),
    "PromptKD/vit_b16_c2_ep20_batch8_4+4ctx_cross_datasets": ("PromptKD", _promptkd(3), {
        "PROMPTKD.PROMPT_DEPTH_TEXT": 3, "PROMPTKD.KD_WEIGHT": 1.0}),
    "PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx": ("PromptSRC", _promptsrc(4, "0.0025", 20, "ViT-B/16", 9, (15, 1)), {
        "PROMPTSRC.TEXT_LOSS_WEIGHT": 25.0, "PROMPTSRC.GPA_MEAN": 15.0, "PROMPTSRC.GPA_STD": 1.0}),
    "PromptSRC/vit_b16_c2_ep20_batch4_4+4ctx_cross_datasets": (
        "PromptSRC", _promptsrc(8, "0.005", 20, "ViT-B/16", 3, (6, 10)), {
            "PROMPTSRC.IMAGE_LOSS_WEIGHT": 10.0, "PROMPTSRC.GPA_MEAN": 6.0, "PROMPTSRC.GPA_STD": 10.0}),
    "PromptSRC/vit_b16_c2_ep50_batch4_4+4ctx_few_shot": (
        "PromptSRC", _promptsrc(8, "0.005", 50, "ViT-B/16", 9, (30, 30), best_val=True), {
            "PROMPTSRC.GPA_MEAN": 30.0, "PROMPTSRC.GPA_STD": 30.0}),
    "PromptSRC/vit_l14_c2_ep20_batch8_4+4ctx": ("PromptSRC", _promptsrc(8, "0.005", 20, "ViT-L/14", 9, (15, 1)), {
        "PROMPTSRC.PROMPT_DEPTH_VISION": 9, "PROMPTSRC.TEXT_LOSS_WEIGHT": 25.0}),
    "CoOp/vit_b16_ctxv1": ("CoOp", _coop(200, "ViT-B/16", True), {"COOP.CTX_INIT": "a photo of a"}),
    "CoOp/vit_b16_ep50": ("CoOp", _coop(50, "ViT-B/16", False), {"COOP.CTX_INIT": ""}),
    "CoOp/rn50": ("CoOp", _coop(200, "RN50", False), {"COOP.N_CTX": 16}),
    "CoOp/rn50_ep50_ctxv1": ("CoOp", _coop(50, "RN50", True), {"COOP.CTX_INIT": "a photo of a"}),
    "CoOp/rn50_val": ("CoOp", _loader(200, 200) + "\n" + CLIP_INPUT + '\nMODEL:\n  BACKBONE:\n    NAME: "RN50"\n', {}),
}


def _get(cfg, dotted: str):
    for part in dotted.split("."):
        cfg = cfg[part]
    return cfg


def _setup(tmp_path, name: str, text: str, trainer: str, *opts: str):
    path = tmp_path / (name.split("/")[1] + ".yaml")
    path.write_text(text)
    return train.setup_cfg(train.build_parser().parse_args(["--config-file", str(path), "--trainer", trainer,
                                                            *opts]))


@pytest.mark.parametrize("name", sorted(UPSTREAM))
def test_upstream_yaml_merges_with_its_values(tmp_path, name):
    trainer, text, expected = UPSTREAM[name]
    cfg = _setup(tmp_path, name, text, trainer)
    assert list(cfg.INPUT.PIXEL_STD) == [0.26862954, 0.26130258, 0.27577711]
    assert list(cfg.INPUT.TRANSFORMS) == ["random_resized_crop", "random_flip", "normalize"]
    assert cfg.DATALOADER.NUM_WORKERS == 8 and cfg.INPUT.INTERPOLATION == "bicubic"
    if "OPTIM" in text:
        assert cfg.OPTIM.NAME == "sgd" and cfg.OPTIM.WARMUP_CONS_LR == 1e-5 and cfg.OPTIM.WARMUP_TYPE == "constant"
        epochs = int(name.split("_ep")[1].split("_")[0]) if "_ep" in name else 200
        assert cfg.OPTIM.MAX_EPOCH == epochs
    for key, value in expected.items():
        got = _get(cfg.TRAINER, key)
        assert got == value and type(got) is type(value), key
    if "best_val" in text:
        assert cfg.TEST.FINAL_MODEL == "best_val" and cfg.TEST.NO_TEST is False


def test_int_for_float_also_from_command_line_and_types_still_checked(tmp_path):
    trainer, text, _ = UPSTREAM["PromptKD/vit_b16_c2_ep20_batch8_4+4ctx"]
    cfg = _setup(tmp_path, "PromptKD/x", text, trainer, "TRAINER.PROMPTKD.KD_WEIGHT", "200",
                 "TRAINER.PROMPTKD.TEMPERATURE", "2")
    assert cfg.TRAINER.PROMPTKD.KD_WEIGHT == 200.0 and type(cfg.TRAINER.PROMPTKD.KD_WEIGHT) is float
    assert type(cfg.TRAINER.PROMPTKD.TEMPERATURE) is float
    with pytest.raises(ConfigError, match=r"Type mismatch"):  # a string is still refused for a float key
        _setup(tmp_path, "PromptKD/x", text, trainer, "TRAINER.PROMPTKD.KD_WEIGHT", "'high'")
    with pytest.raises(ConfigError, match=r"Type mismatch"):  # and a float for an int key
        _setup(tmp_path, "PromptKD/x", text, trainer, "OPTIM.MAX_EPOCH", "2.5")


def test_inert_promptkd_keys_are_named_once_with_the_reason(tmp_path):
    trainer, text, _ = UPSTREAM["PromptKD/vit_b16_c2_ep20_batch8_4+4ctx"]
    note = inert_keys_note(_setup(tmp_path, "PromptKD/x", text, trainer), "PROMPTKD")
    assert "\n" not in note and "PROJECT_LAYER=2" in note and "CE_WEIGHT=0.0" in note and "label-free" in note
    assert inert_keys_note(_setup(tmp_path, "PromptKD/x", text, trainer), "PETR") == ""


@pytest.mark.parametrize("namespace,trainer,body", [
    ("MAPLE", "MaPLe", '    N_CTX: 2\n    CTX_INIT: "a photo of a"\n    PREC: "fp16"\n    PROMPT_DEPTH: 9\n'),
    ("IVLP", "IVLP", '    N_CTX_VISION: 4\n    N_CTX_TEXT: 4\n    CTX_INIT: "a photo of a"\n    PREC: "fp16"\n'
                     "    PROMPT_DEPTH_VISION: 9\n    PROMPT_DEPTH_TEXT: 9\n"),
    ("COCOOP", "CoCoOp", '    N_CTX: 4\n    CTX_INIT: "a photo of a"\n    PREC: "fp16"\n'),
])
def test_yaml_of_a_trainer_we_lack_gives_one_line_naming_ours(tmp_path, capsys, namespace, trainer, body):
    path = tmp_path / f"{trainer}.yaml"
    path.write_text(_optim("0.005", 20) + f"\nTRAINER:\n  {namespace}:\n" + body)
    assert train.cli(["--config-file", str(path), "--trainer", trainer]) == 2
    msg = capsys.readouterr().err
    assert msg.count("\n") == 1 and msg.startswith(f"error: {path}: ") and f"upstream's {trainer} trainer" in msg
    msg = msg.strip()
    listed = msg.split("trainers here: ")[1].split(", ")
    assert {"CoOp", "PETR", "PETRCoOp", "PromptKD", "PromptSRC", "ZeroshotCLIP"} <= set(listed)
    assert trainer not in listed
