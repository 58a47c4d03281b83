"""Runs that read another run through a folder key (PETR+CoOp's COOP_MODEL_DIR, PETR+X's TUNED_MODEL_DIR, a teacher
folder in TEACHER_CKPT) record the files they reached in their inputs ledger: once those files hold other bytes
(the CoOp context, the tuned prompts, every teacher tensor changed), the finished run is no longer skipped but stops
naming the file. A published teacher records what it was trained on (``teacher.json``): a student whose teacher CLIP
is another, the teacher script publishing over another setting's teacher, and a plan finding a teacher of another
backbone or config all refuse it."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
import torch

import train
from engine.errors import CorruptFileError, InvalidInputError
from engine.published import TEACHER_RECORD, read_record, record_of_run
from runner.jobs import job_states, publication_differences
from runner.preflight import run_preflight
from runner.protocols import Planner, Sweep
from tests.helpers_petr import write_eurosat
from tests.helpers_run import train_argv
from trainers.catalog import METHODS
from units.commands import publish_teacher
from units.facts import UnitError
from units.unit import Unit


def sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def tiny(trainer: str, config: str, data, out, clip_file: str, *opts: str, flags: tuple = ()) -> list[str]:
    return train_argv(trainer, config, data, out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4", "DATALOADER.TEST.BATCH_SIZE",
                      "8", "OPTIM.MAX_EPOCH", "1", "DATASET.NUM_SHOTS", "2", "DATASET.SUBSAMPLE_CLASSES", "base", *opts,
                      flags=flags, backbone=clip_file)


def change_tensors(path) -> None:
    """Every floating tensor of the checkpoint's state_dict plus 0.5, saved over the same path."""
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"] = {k: v + 0.5 if torch.is_tensor(v) and v.is_floating_point() else v
                                for k, v in checkpoint["state_dict"].items()}
    torch.save(checkpoint, path)


def rerun_names_the_change(argv: list[str], out, changed: str, role: str, capsys) -> None:
    """The finished run in ``out`` is refused on its rerun, naming the ``role`` file ``changed``, and left as it was."""
    before = sorted(os.listdir(out))
    capsys.readouterr()
    assert train.cli(argv) == train.EXIT_USER_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {out} holds a finished run that differs from this one: ")
    assert f"{role} {changed} content sha256 " in err[0]
    assert sorted(os.listdir(out)) == before


@pytest.fixture
def data(tmp_path):
    write_eurosat(tmp_path / "data")
    return tmp_path / "data"


def test_petr_coop_on_a_changed_coop_context(tmp_path, data, tiny_clip_file, capsys):
    coop = tmp_path / "coop"
    assert train.cli(tiny("CoOp", "demo", data, coop, tiny_clip_file)) == 0
    plugin = tmp_path / "plugin"
    argv = tiny("PETRCoOp", "demo", data, plugin, tiny_clip_file, "TRAINER.PETRCOOP.COOP_MODEL_DIR", str(coop))
    assert train.cli(argv) == 0
    capsys.readouterr()
    assert train.main(argv) is None and "Run finished, skipping" in capsys.readouterr().out  # same inputs: skipped
    ckpt = coop / "prompt_learner" / "model.pth.tar-1"
    change_tensors(ckpt)
    rerun_names_the_change(argv, plugin, str(ckpt), "checkpoint", capsys)


def test_petr_x_on_changed_tuned_prompts(tmp_path, data, tiny_clip_file, capsys):
    ivlp = tmp_path / "ivlp"
    assert train.cli(tiny("IVLP", "demo", data, ivlp, tiny_clip_file)) == 0
    routed = tmp_path / "petrx"
    argv = tiny("PETRX", "demo", data, routed, tiny_clip_file, "TRAINER.PETRX.TUNED_MODEL_DIR", str(ivlp),
                "TRAINER.PETRX.TUNED_TRAINER", "IVLP")
    assert train.cli(argv) == 0
    ckpt = ivlp / "VLPromptLearner" / "model.pth.tar-1"
    change_tensors(ckpt)
    rerun_names_the_change(argv, routed, str(ckpt), "checkpoint", capsys)


def teacher_run(tmp_path, data, teacher_clip: str):
    """A finished PromptSRC run on the teacher CLIP, and a copy of its checkpoint folder published with its record."""
    teacher = tmp_path / "teacher"
    assert train.cli(tiny("PromptSRC", "demo", data, teacher, teacher_clip)) == 0
    published = tmp_path / "teachers" / "EuroSAT"
    shutil.copytree(teacher / "VLPromptLearner", published / "VLPromptLearner")
    (published / TEACHER_RECORD).write_text(json.dumps(record_of_run(str(teacher))))
    return teacher, published


def student_argv(data, out, clip_file: str, teacher_clip: str, teacher) -> list[str]:
    return tiny("PETR", "demo", data, out, clip_file, "TRAINER.PETR.TEACHER_NAME", teacher_clip,
                "TRAINER.PETR.TEACHER_CKPT", str(teacher), "DATASET.NUM_SHOTS", "0")


def test_a_student_on_a_changed_teacher_folder(tmp_path, data, tiny_clip_file, tiny_teacher_clip_file, capsys):
    _, published = teacher_run(tmp_path, data, tiny_teacher_clip_file)
    out = tmp_path / "petr"
    argv = student_argv(data, out, tiny_clip_file, tiny_teacher_clip_file, published)
    assert train.cli(argv) == 0
    recorded = json.loads((out / "run.json").read_text())["inputs"]
    ckpt = published / "VLPromptLearner" / "model.pth.tar-1"
    assert recorded[str(ckpt)] == {"role": "teacher", "sha256": sha256(ckpt)}
    assert recorded[str(published / TEACHER_RECORD)]["role"] == "teacher"
    change_tensors(ckpt)
    rerun_names_the_change(argv, out, str(ckpt), "teacher", capsys)


def test_a_teacher_of_another_clip_is_refused(tmp_path, data, tiny_clip_file, tiny_teacher_clip_file, capsys):
    """The published record names the teacher CLIP by content: a student whose TEACHER_NAME is another CLIP (here the
    teacher's weights shifted by 0.01, which fit the prompts' widths) is refused before it trains."""
    _, published = teacher_run(tmp_path, data, tiny_teacher_clip_file)
    other = tmp_path / "other-teacher.pt"
    state = torch.load(tiny_teacher_clip_file, weights_only=True)
    torch.save({k: v + 0.01 if torch.is_tensor(v) and v.is_floating_point() else v for k, v in state.items()}, other)
    capsys.readouterr()
    assert train.cli(student_argv(data, tmp_path / "petr", tiny_clip_file, str(other), published)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: teacher {published} was trained on the CLIP {tiny_teacher_clip_file} (sha256 "
                   f"{sha256(tiny_teacher_clip_file)[:12]}), but TEACHER_NAME={other} is another CLIP (sha256 "
                   f"{sha256(other)[:12]}): set TEACHER_NAME to the teacher's CLIP, or train a teacher on {other}"]


def test_publishing_over_a_teacher_of_another_setting_is_refused(tmp_path, data, tiny_teacher_clip_file):
    teacher, published = teacher_run(tmp_path, data, tiny_teacher_clip_file)
    unit = Unit(METHODS["PromptSRC"], "scripts/teacher/base2new_train.sh",
                {"TEACHER_DIR": str(tmp_path / "teachers")}, str(tmp_path))
    publish_teacher(unit, str(teacher), "Fresh")  # a new folder: built aside, renamed into place, with its record
    record = read_record(str(tmp_path / "teachers" / "Fresh"))
    assert record["backbone"] == tiny_teacher_clip_file and record["backbone_sha256"] == sha256(tiny_teacher_clip_file)
    assert record["checkpoint"] == "VLPromptLearner/model.pth.tar-1" and record["config"] == "demo"
    assert sorted(os.listdir(tmp_path / "teachers")) == ["EuroSAT", "Fresh"]  # no temporary folder left
    publish_teacher(unit, str(teacher), "EuroSAT")  # the same setting already there: kept, with a note
    record = json.loads((published / TEACHER_RECORD).read_text())
    (published / TEACHER_RECORD).write_text(json.dumps({**record, "backbone": "ViT-L/14", "config": "vit_l14"}))
    with pytest.raises(UnitError, match=r"EuroSAT holds a teacher trained on another setting \(config vit_l14 \("
                                        r"expected demo\); backbone ViT-L/14 \(expected "):
        publish_teacher(unit, str(teacher), "EuroSAT")


def test_a_plan_never_takes_a_teacher_of_another_setting_as_its_own(tmp_path, tiny_teacher_clip_file):
    """A teacher published by a demo-config sweep on tiny CLIPs: a paper-profile plan of PETR alone (which reads the
    teacher and does not train it) reports it as another teacher and does not count its job finished; so does one
    whose record cannot be read (nesting too deep), in one problem line."""
    teachers = tmp_path / "teachers"
    published = teachers / "EuroSAT" / "VLPromptLearner"
    published.mkdir(parents=True)
    (published / "checkpoint").write_text("model.pth.tar-2\n")
    (published / "model.pth.tar-2").write_bytes(b"prompts")
    record = {"trainer": "PromptSRC", "dataset": "EuroSAT", "subsample": "base", "seed": 1, "config": "demo",
              "backbone": tiny_teacher_clip_file, "backbone_sha256": sha256(tiny_teacher_clip_file)}
    (teachers / "EuroSAT" / TEACHER_RECORD).write_text(json.dumps(record))
    sweep = Sweep(protocol="base2new", methods=(METHODS["PETR"],), datasets=("eurosat",), seeds=(1,),
                  data=str(tmp_path / "data"), output=str(tmp_path / "out"), teacher_dir=str(teachers))
    jobs = Planner(sweep).plan()
    teacher = next(job for job in jobs if job.kind == "teacher")
    assert teacher.publishes == {"trainer": "PromptSRC", "dataset": "EuroSAT", "subsample": "base", "seed": 1,
                                 "config": METHODS["PromptSRC"].config, "backbone": "ViT-L/14"}
    assert publication_differences(teacher) == [f"config demo (expected {METHODS['PromptSRC'].config})",
                                                f"backbone {tiny_teacher_clip_file} (expected ViT-L/14)"]
    assert job_states(jobs)[teacher.name] == "new"
    item = run_preflight(sweep, jobs).inputs[("teacher", "eurosat")]
    assert item.status == "found, another teacher" and len(item.problems) == 1
    assert item.problems[0].startswith(f"{teachers / 'EuroSAT'} holds a teacher trained on another setting (config "
                                       "demo (expected ")
    (teachers / "EuroSAT" / TEACHER_RECORD).write_text(json.dumps({**record, **teacher.publishes}))
    assert job_states(jobs)[teacher.name] == "finished"  # its own: published with this job's setting
    (teachers / "EuroSAT" / TEACHER_RECORD).write_text("[" * 100_000 + "]" * 100_000)  # unreadable: not its own
    assert job_states(jobs)[teacher.name] == "new"
    item = run_preflight(sweep, jobs).inputs[("teacher", "eurosat")]
    assert item.status == "found, another teacher" and item.problems[0].startswith(
        f"{teachers / 'EuroSAT'} holds a teacher trained on another setting (an unreadable record: Malformed JSON in "
        f"{teachers / 'EuroSAT' / TEACHER_RECORD} (its arrays or objects nest deeper than ")


def test_a_teacher_check_needs_no_record(tmp_path):
    """Upstream's released teachers record nothing: no record, nothing compared (their prompts' widths still are)."""
    assert read_record(str(tmp_path)) == {}
    (tmp_path / TEACHER_RECORD).write_text("[1]")
    with pytest.raises(InvalidInputError, match="holds no teacher record"):
        read_record(str(tmp_path))
    (tmp_path / TEACHER_RECORD).write_text("[" * 100_000 + "]" * 100_000)  # deeper than the JSON parser recurses
    with pytest.raises(CorruptFileError, match=f"^Malformed JSON in {tmp_path / TEACHER_RECORD} \\(its arrays or "
                       "objects nest deeper than"):
        read_record(str(tmp_path))
