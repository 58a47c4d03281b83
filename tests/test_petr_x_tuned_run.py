"""PETR+X reads what its tuned run records: the class prompts of an upstream IVLP run built around the words of its
logged config (upstream's defaults: 2 text tokens of "a photo of a", the rest of the words kept), of an upstream MaPLe
run around the other words it was trained from, an upstream CoOp context with the class token where its run put it,
each scored as the prompt written by hand on open_clip; the settings read from the recorded trainer's namespace and
typed; refusals of a checkpoint that is not the recorded run's; notes in the log, results.json and router.json for an
unfinished tuned run and one that records nothing."""
from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext

import pytest
import torch
import torch.nn.functional as F
from yacs.config import CfgNode

import clip
import train
from engine.errors import InvalidInputError
from tests.helpers_baselines import deep_prompt_reference, maple_reference
from tests.helpers_clip import reference_encode_image, reference_encode_text, rel_err
from tests.helpers_petr import write_eurosat
from tests.helpers_routed import BASE, NEW, check_against_reference, coop_branch, reference_routing, run_argv
from tests.helpers_run import refused_line
from tests.helpers_upstream import (
    UPSTREAM_KILLED_LOG,
    UPSTREAM_TRAIN_LOG,
    cfg_of,
    upstream_coop_run,
    upstream_ivlp_run,
    upstream_maple_run,
    write_dassl_checkpoint,
    write_dassl_log,
)
from trainers.prompting.tuned_run import TunedRun, deep_prompt_words, logged_config, recorded_settings
from trainers.routing.tuned import tuned_trainer

NAMES = ["annual crop land", "forest", "herbaceous vegetation land", "sea or lake"]


def petr_x_cfg(trainer: str, clip_file: str):
    """PETR+X's config routing on a run of ``trainer`` on the CLIP file ``clip_file``."""
    return cfg_of("PETRX", "MODEL.BACKBONE.NAME", clip_file, "TRAINER.PETRX.TUNED_TRAINER", trainer, config="vit_b16")


def test_logged_config_reads_the_config_dump_yacs_prints():
    cfg = CfgNode({"DATASET": CfgNode({"NAME": "EuroSAT", "NUM_SHOTS": 16}),
                   "TRAINER": CfgNode({"NAME": "IVLP", "IVLP": CfgNode({"CTX_INIT": "a photo of a", "N_CTX_TEXT": 2,
                                                                      "PREFIX": ""})}),
                   "INPUT": CfgNode({"SIZE": (224, 224)}), "SEED": 1})
    log = f"Setting fixed seed: 1\nopts: []\n************\n** Config **\n************\n{cfg}\nCollecting env info ...\n"
    assert logged_config(log) == {"DATASET.NAME": "EuroSAT", "DATASET.NUM_SHOTS": "16", "TRAINER.NAME": "IVLP",
                                  "TRAINER.IVLP.CTX_INIT": "a photo of a", "TRAINER.IVLP.N_CTX_TEXT": "2",
                                  "TRAINER.IVLP.PREFIX": "", "INPUT.SIZE": "(224, 224)", "SEED": "1"}
    assert logged_config("Loading trainer: IVLP\n") == {}


def test_a_dassl_folder_run_again_in_place_is_read_from_its_finished_rerun(tmp_path):
    """Dassl keeps the crashed first attempt's log.txt and writes the rerun's log.txt-<timestamp>: the tuned run is
    finished and its config is the rerun's."""
    folder = tmp_path / "coop"
    write_dassl_log(str(folder), cfg_of("CoOp", "MODEL.BACKBONE.NAME", "ViT-B/32"), UPSTREAM_KILLED_LOG)
    rerun = write_dassl_log(str(folder), cfg_of("CoOp", "MODEL.BACKBONE.NAME", "ViT-B/16"),
                            name="log.txt-2024-05-02-10-11-12")
    run = TunedRun.read(str(folder))
    assert (run.state, run.config_source, run.config["MODEL.BACKBONE.NAME"]) == ("finished-upstream", rerun,
                                                                                 "ViT-B/16")


def test_upstream_ivlp_with_two_text_tokens_scores_with_its_init_words(tmp_path, tiny_clip, tiny_clip_file,
                                                                        tiny_openclip_model):
    """Upstream's prompt is "a photo of a <class>." with its first 2 tokens learned: "of a" stays, as written here."""
    text, vision, path = upstream_ivlp_run(tmp_path / "ivlp", tiny_clip_file)
    cfg = petr_x_cfg("IVLP", tiny_clip_file)
    model = tuned_trainer("IVLP").tuned_model(tiny_clip, cfg, path, nullcontext)
    names = ["annual crop land", "forest", "herbaceous vegetation land"]
    images = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        logits = model.class_scorer(names)(images)
    expected = deep_prompt_reference(tiny_openclip_model, text, vision)(names, images)
    assert rel_err(logits, expected) < 1e-5
    with torch.no_grad():  # the same prompts on "X X <class>." (placeholders instead of the words) score otherwise
        tokens = clip.tokenize([f"X X {name}." for name in names])
        placeholders = tiny_openclip_model.logit_scale.exp() * (
            F.normalize(reference_encode_image(tiny_openclip_model, images, vision), dim=-1)
            @ F.normalize(reference_encode_text(tiny_openclip_model, tokens, text), dim=-1).t())
    assert rel_err(placeholders, expected) > 1e-2


def test_upstream_maple_trained_from_other_words_scores_with_its_recorded_words(tmp_path, tiny_clip, tiny_clip_file,
                                                                               tiny_openclip_model, capsys):
    """An upstream MaPLe run trained from CTX_INIT "a satellite photo of": its class prompt is "a satellite photo of
    <class>." with its first 2 tokens learned, whatever PETR+X's own TRAINER.MAPLE.CTX_INIT ("a photo of a") says;
    one line names both."""
    text, maps, path = upstream_maple_run(tmp_path / "maple", tiny_clip_file, "a satellite photo of")
    cfg = petr_x_cfg("MaPLe", tiny_clip_file)
    assert cfg.TRAINER.MAPLE.CTX_INIT == "a photo of a"
    model = tuned_trainer("MaPLe").tuned_model(tiny_clip, cfg, path, nullcontext)
    images = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        logits = model.class_scorer(NAMES)(images)
    expected = maple_reference(tiny_openclip_model, text, maps, "a satellite photo of {}.")(NAMES, images)
    assert rel_err(logits, expected) < 1e-5
    assert rel_err(maple_reference(tiny_openclip_model, text, maps)(NAMES, images), expected) > 1e-2  # other words
    out = capsys.readouterr().out
    assert (f"Note: {tmp_path / 'maple'} records TRAINER.MAPLE.CTX_INIT 'a satellite photo of' (this config: 'a photo "
            f"of a') in {tmp_path / 'maple' / 'log.txt'}: its prompts are read with the recorded values") in out
    assert f"{path}: class prompt 'a satellite photo of {{}}.', its first 2 tokens learned" in out


def test_upstream_coop_with_the_class_token_in_the_middle_scores_as_recorded(tmp_path, tiny_clip, tiny_clip_file,
                                                                              tiny_openclip_model, capsys):
    """An upstream CoOp run trained with CLASS_TOKEN_POSITION middle: "ctx[:2] <class> ctx[2:]." whatever PETR+X's own
    TRAINER.COOP.CLASS_TOKEN_POSITION (end) says."""
    ctx, path = upstream_coop_run(tmp_path / "coop", tiny_clip_file, "middle")
    cfg = petr_x_cfg("CoOp", tiny_clip_file)
    model = tuned_trainer("CoOp").tuned_model(tiny_clip, cfg, path, nullcontext)
    images = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        logits = model.class_scorer(NAMES)(images)
    expected = coop_branch(ctx, "middle")(tiny_openclip_model, NAMES, images)
    assert rel_err(logits, expected) < 1e-5
    assert rel_err(coop_branch(ctx)(tiny_openclip_model, NAMES, images), expected) > 1e-2  # the class token at the end
    assert "records TRAINER.COOP.CLASS_TOKEN_POSITION 'middle' (this config: 'end')" in capsys.readouterr().out


def test_settings_are_read_from_the_recorded_trainers_namespace_as_this_configs_types():
    """A run records every trainer's namespace (the others at their defaults): a PromptSRC run read by IVLP gives its
    TRAINER.PROMPTSRC values; a log records text, read as the config's type; a value of another type is one error."""
    run = TunedRun("run", {"TRAINER.NAME": "PromptSRC", "TRAINER.PROMPTSRC.N_CTX_TEXT": "2",
                           "TRAINER.PROMPTSRC.CTX_INIT": "a photo of a", "TRAINER.IVLP.N_CTX_TEXT": "4",
                           "TRAINER.PROMPTSRC.PROMPT_DEPTH_TEXT": "9", "TRAINER.COOP.CSC": "True"}, "run/log.txt")
    values, note = recorded_settings(run, "IVLP", {"N_CTX_TEXT": 4, "CTX_INIT": "", "PROMPT_DEPTH_TEXT": 9})
    assert values == {"N_CTX_TEXT": 2, "CTX_INIT": "a photo of a", "PROMPT_DEPTH_TEXT": 9}
    assert note == ("Note: run records TRAINER.PROMPTSRC.N_CTX_TEXT 2 (this config's TRAINER.IVLP.N_CTX_TEXT: 4); "
                    "TRAINER.PROMPTSRC.CTX_INIT 'a photo of a' (this config's TRAINER.IVLP.CTX_INIT: '') in "
                    "run/log.txt: its prompts are read with the recorded values")
    coop = TunedRun("run", {"TRAINER.NAME": "CoOp", "TRAINER.COOP.CSC": "True", "TRAINER.COOP.N_CTX": "four"},
                    "run/log.txt")
    assert recorded_settings(coop, "COOP", {"CSC": False})[0] == {"CSC": True}
    assert recorded_settings(TunedRun("run"), "COOP", {"CSC": False}) == ({"CSC": False}, "")  # records nothing
    with pytest.raises(InvalidInputError, match=r"^run/log.txt records TRAINER.COOP.N_CTX 'four', which is no int"):
        recorded_settings(coop, "COOP", {"N_CTX": 16})


def test_unrecorded_words_matter_only_below_four_text_tokens(tmp_path):
    """Without a record of CTX_INIT, 4 or more learned text tokens leave no word of upstream's "a photo of a" in the
    prompt (placeholders, as PromptKD's released teachers are read); 3 or fewer are refused (next test)."""
    run = TunedRun.read(str(tmp_path))
    sizes = {"n_ctx_text": 4, "n_ctx_vision": 4, "depth_text": 9, "depth_vision": 9}
    assert deep_prompt_words(run, "PROMPTSRC", sizes, "teacher.pth") == ""
    with pytest.raises(InvalidInputError, match="cannot tell the words"):
        deep_prompt_words(run, "PROMPTSRC", {**sizes, "n_ctx_text": 3}, "teacher.pth")


def test_a_deep_prompt_run_without_recorded_words_or_with_other_sizes_is_refused(tmp_path, tiny_clip, tiny_clip_file):
    cfg = petr_x_cfg("IVLP", tiny_clip_file)
    _, _, path = upstream_ivlp_run(tmp_path / "unlogged", tiny_clip_file, n_ctx_logged=None)
    with pytest.raises(InvalidInputError, match=r"cannot tell the words of the class prompts .* records no "
                                                r"TRAINER\.IVLP\.CTX_INIT"):
        tuned_trainer("IVLP").tuned_model(tiny_clip, cfg, path, nullcontext)
    _, _, path = upstream_ivlp_run(tmp_path / "other", tiny_clip_file, n_ctx_logged=4)
    with pytest.raises(InvalidInputError, match=r"has TRAINER\.IVLP\.N_CTX_TEXT 2 \(read off its prompts\), but "
                                                r".*log\.txt records 4: the checkpoint is not that run's"):
        tuned_trainer("IVLP").tuned_model(tiny_clip, cfg, path, nullcontext)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return write_eurosat(tmp_path_factory.mktemp("tuned_run") / "data")


def test_petr_x_on_an_upstream_ivlp_run_routes_with_its_words(tree, tmp_path, tiny_clip_file, tiny_openclip_model):
    text, vision, path = upstream_ivlp_run(tmp_path / "ivlp", tiny_clip_file)
    out = tmp_path / "petr_x"
    train.main(run_argv(tree.root, out, "PETRX", tiny_clip_file, "base", "TRAINER.PETRX.TUNED_MODEL_DIR",
                        str(tmp_path / "ivlp"), "TRAINER.PETRX.TUNED_TRAINER", "IVLP", config="vit_b16"))
    branch = deep_prompt_reference(tiny_openclip_model, text, vision)
    result = check_against_reference(out, reference_routing(tree, tiny_openclip_model,
                                                            lambda model, names, images: branch(names, images), BASE))
    assert result["tuned_run_state"] == "finished-upstream" and result["tuned_run_notes"] == []
    assert "class prompt 'a photo of a {}.', its first 2 tokens learned" in (out / "log.txt").read_text()


def coop_tuned_run(folder, record: dict | None = None, log: str = "") -> str:
    """A CoOp run folder: a context of 4 tokens (seeded), ``record`` as its run.json config, ``log`` as its log.txt."""
    torch.manual_seed(1)
    write_dassl_checkpoint(str(folder / "prompt_learner"), {"ctx": torch.randn(4, 64) * 0.3}, 1, None,
                           str(folder.parent / "ran"))
    if record is not None:
        (folder / "run.json").write_text(json.dumps({"trainer": "CoOp", "seed": 1, "mode": "train",
                                                     "config": record}))
    if log:
        (folder / "log.txt").write_text(log)
    return str(folder / "prompt_learner" / "model.pth.tar-1")


@pytest.mark.parametrize("case", ["unfinished", "unrecorded"])
def test_petr_x_notes_an_unfinished_or_unrecorded_tuned_run(case, tree, tmp_path, tiny_clip_file,
                                                             tiny_openclip_model):
    tuned = tmp_path / "coop"
    if case == "unfinished":  # our run, interrupted: run.json and a checkpoint, no results.json
        path = coop_tuned_run(tuned, {"TRAINER.NAME": "CoOp", "DATASET.NAME": "EuroSAT",
                                      "MODEL.BACKBONE.NAME": tiny_clip_file})
        expected = [f"TRAINER.PETRX.TUNED_MODEL_DIR {tuned} is unfinished (resumable: a checkpoint, no results.json); "
                    "θ_s is its last saved checkpoint, not its final model"]
    else:  # an upstream run finished, its log without the config dump
        path = coop_tuned_run(tuned, log=UPSTREAM_TRAIN_LOG)
        expected = [f"TRAINER.PETRX.TUNED_MODEL_DIR {tuned} records no dataset and no CLIP (results.json, run.json "
                    "or the config dump of log.txt): it cannot be checked against EuroSAT and "
                    f"{tiny_clip_file}"]
    out = tmp_path / "petr_x"
    train.main(run_argv(tree.root, out, "PETRX", tiny_clip_file, "base", "TRAINER.PETRX.TUNED_MODEL_DIR", str(tuned),
                        config="vit_b16"))
    ctx = torch.load(path, weights_only=False)["state_dict"]["ctx"]
    result = check_against_reference(out, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), BASE))
    router = json.loads((out / "router.json").read_text())
    state = "resumable" if case == "unfinished" else "finished-upstream"
    for record in (result, router):
        assert record["tuned_run_state"] == state and record["tuned_run_notes"] == expected
    assert f"Note: {expected[0]}" in (out / "log.txt").read_text().splitlines()
    novel = tmp_path / "novel"  # the notes are not compared: the novel evaluation reads the base run's router
    train.main(run_argv(tree.root, novel, "PETRX", tiny_clip_file, "new", "TRAINER.PETRX.TUNED_MODEL_DIR", str(tuned),
                        config="vit_b16", flags=("--eval-only", "--model-dir", str(out))))
    check_against_reference(novel, reference_routing(tree, tiny_openclip_model, coop_branch(ctx), NEW))



def test_a_rerun_after_the_tuned_runs_record_changed_is_refused(tree, tmp_path, tiny_clip_file, capsys):
    """The prompt settings PETR+X takes from its tuned run's record are in its identity: the record naming another
    class-token position after PETR+X finished makes the rerun a changed run (one error line), not a skip."""
    tuned = tmp_path / "coop"
    record = {"TRAINER.NAME": "CoOp", "DATASET.NAME": "EuroSAT", "MODEL.BACKBONE.NAME": tiny_clip_file,
              "TRAINER.COOP.CLASS_TOKEN_POSITION": "middle"}
    coop_tuned_run(tuned, record)
    out = tmp_path / "petr_x"
    argv = run_argv(tree.root, out, "PETRX", tiny_clip_file, "base", "TRAINER.PETRX.TUNED_MODEL_DIR", str(tuned),
                    config="vit_b16")
    assert train.cli(argv) == 0
    assert json.loads((out / "run.json").read_text())["config"]["TRAINER.COOP.CLASS_TOKEN_POSITION"] == "middle"
    (tuned / "run.json").write_text(json.dumps({"trainer": "CoOp", "seed": 1, "mode": "train", "config": {
        **record, "TRAINER.COOP.CLASS_TOKEN_POSITION": "end"}}))
    capsys.readouterr()
    assert train.cli(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        refused_line(out, 'TRAINER.COOP.CLASS_TOKEN_POSITION "middle" → "end"')]


def test_backbones_are_the_same_by_weights_when_both_are_files(tmp_path, tiny_clip_file):
    copy, other = tmp_path / "copy.pt", tmp_path / "other.pt"
    weights = open(tiny_clip_file, "rb").read()
    copy.write_bytes(weights)
    other.write_bytes(weights + b"more")
    upstream = TunedRun(str(tmp_path))  # records no inputs ledger: names, or files by content
    assert upstream.same_backbone(str(copy), tiny_clip_file) and not upstream.same_backbone(str(other), tiny_clip_file)
    assert upstream.same_backbone("ViT-B/16", "ViT-B/16") and not upstream.same_backbone("ViT-B/16", "ViT-B/32")
    ours = TunedRun(str(tmp_path), clips=(hashlib.sha256(weights + b"more").hexdigest(),))  # its ledger's CLIP
    assert ours.same_backbone("any name it recorded", str(other)) and not ours.same_backbone(str(other), str(copy))
