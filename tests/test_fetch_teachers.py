"""python -m tools.fetch_teachers: PromptKD-format teachers (built here from known prompts) downloaded with gdown from
a local file server, verified with the restricted loader (their pickled code never runs) and moved into the teacher
folder; a cut-off archive, a truncated checkpoint and a missing teacher are one line each and leave nothing there."""
from __future__ import annotations

import hashlib
import http.server
import io
import os
import re
import zipfile

import pytest
import torch

from engine.offline import OFFLINE_KNOBS
from tests.helpers_fetch import serve, serve_folder, tree_files
from tests.helpers_upstream import fp16_prompts, promptkd_checkpoint
from tools import fetch_teachers as ft
from trainers.distillation.teacher import resolve_teacher_file
from trainers.prompting.prompt_files import read_deep_prompts

CHECKPOINT = "VLPromptLearner/model-best.pth.tar"


@pytest.fixture
def drive(tmp_path, tiny_teacher_clip, monkeypatch):
    """A served folder standing in for the Drive folder: EuroSAT as an archive, upstream's StandfordCars as a plain
    checkpoint, OxfordPets as an archive of a truncated checkpoint, Food101 as an archive cut off in transfer."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # gdown keeps its cookies there
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    learner = fp16_prompts(tiny_teacher_clip)
    marker = str(tmp_path / "pickled_code_ran")
    buffer = io.BytesIO()
    torch.save(promptkd_checkpoint(learner, tiny_teacher_clip, marker), buffer)
    data = buffer.getvalue()
    served = tmp_path / "served"
    (served / "StandfordCars" / "VLPromptLearner").mkdir(parents=True)
    (served / "StandfordCars" / CHECKPOINT).write_bytes(data)
    for name, payload in (("EuroSAT", data), ("OxfordPets", data[: len(data) // 2])):
        with zipfile.ZipFile(served / f"{name}.zip", "w") as zf:
            zf.writestr(f"{name}/{CHECKPOINT}", payload)
    (served / "Food101.zip").write_bytes((served / "EuroSAT.zip").read_bytes()[:-100])
    not_a_teacher = io.BytesIO()  # a prompt learner's checkpoint without the teacher's vision prompts
    torch.save({"state_dict": {"prompt_learner.ctx": torch.zeros(4, 128)}, "epoch": 5}, not_a_teacher)
    with zipfile.ZipFile(served / "Caltech101.zip", "w") as zf:
        zf.writestr(f"Caltech101/{CHECKPOINT}", not_a_teacher.getvalue())
    with serve_folder(served) as base_url:
        files = [ft.RemoteFile(path, f"{base_url}/{path}") for path in
                 ("EuroSAT.zip", f"StandfordCars/{CHECKPOINT}", "OxfordPets.zip", "Food101.zip", "Caltech101.zip",
                  "notes.txt")]
        yield files, learner, hashlib.sha256(data).hexdigest(), marker


def test_fetch_verify_and_place(tmp_path, drive, capsys):
    files, learner, sha, marker = drive
    teachers = tmp_path / "teachers"
    names = ["EuroSAT", "StanfordCars", "OxfordPets", "Food101", "Caltech101", "UCF101"]
    assert ft.fetch_teachers(str(teachers), names, files, "the-folder") == 2
    captured = capsys.readouterr()
    assert f"EuroSAT: EuroSAT.zip from the-folder -> {teachers / 'EuroSAT'}" in captured.out
    assert f"EuroSAT: {teachers / 'EuroSAT'} is in place, verified: {CHECKPOINT}: 3 text x 4 and 4 vision x 4 " \
           "prompt tokens" in captured.out
    assert f"StanfordCars: StandfordCars/{CHECKPOINT} from the-folder -> {teachers / 'StanfordCars'}" in captured.out
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 4
    assert errors[0].startswith(f"error: OxfordPets: OxfordPets/{CHECKPOINT} is truncated or corrupt (")
    assert "): not a complete PromptKD teacher, so it was not placed" in errors[0]
    assert errors[1].startswith("error: Food101: ") and "cannot be unpacked" in errors[1]
    assert errors[2].startswith(f"error: Caltech101: Caltech101/{CHECKPOINT} lacks required key(s) "
                                "['image_encoder.VPT']: not a PromptSRC/PromptKD teacher checkpoint")
    assert all(line.endswith(f"nothing was placed in {teachers}") for line in errors[:3])
    assert errors[3].startswith("error: UCF101: the-folder has no file named like 'UCF101' (it holds EuroSAT.zip, "
                                f"StandfordCars/{CHECKPOINT}, OxfordPets.zip, Food101.zip, Caltech101.zip, notes.txt); "
                                "UCF101: ")
    assert sorted(os.listdir(teachers)) == ["EuroSAT", "StanfordCars"]  # no partial download, no temporary folder
    for name in ("EuroSAT", "StanfordCars"):
        assert sorted(tree_files(teachers / name)) == ["VLPromptLearner/checkpoint", CHECKPOINT]
        assert (teachers / name / "VLPromptLearner" / "checkpoint").read_text() == "model-best.pth.tar\n"
        path = resolve_teacher_file(str(teachers / name))
        assert path == str(teachers / name / CHECKPOINT)
        assert hashlib.sha256(open(path, "rb").read()).hexdigest() == sha
        prompts = read_deep_prompts(path)
        for ours, reference in zip(prompts.text_prompts() + prompts.vision_prompts(),
                                   learner.text_prompts() + learner.vision_prompts()):
            assert torch.equal(ours, reference)
    assert not os.path.exists(marker)  # the pickled code in the checkpoints never ran

    assert ft.fetch_teachers(str(teachers), ["EuroSAT"], files, "the-folder") == 0
    last = capsys.readouterr().out.splitlines()[-1]  # after the loader's notes on the upstream file
    assert last.startswith(f"EuroSAT: {teachers / 'EuroSAT'} is already there, verified: {CHECKPOINT}: 3 text x 4")


class CutOffHandler(http.server.BaseHTTPRequestHandler):
    """Announces 100000 bytes, sends 1000 and closes the connection: a transfer cut off."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b"x" * 1000)
        self.close_connection = True


def test_cut_off_transfer_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    teachers = tmp_path / "teachers"
    with serve(CutOffHandler) as base_url:
        files = [ft.RemoteFile("UCF101.zip", f"{base_url}/UCF101.zip")]
        assert ft.fetch_teachers(str(teachers), ["UCF101"], files, "the-folder") == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    expected = (r"error: UCF101: Download is incomplete: received \d+ bytes but the server announced 100000 bytes; "
                f"nothing was placed in {re.escape(str(teachers))}")
    assert len(errors) == 1 and re.fullmatch(expected, errors[0])
    assert os.listdir(teachers) == []  # gdown's partial file went with the temporary folder


def test_dry_run_downloads_nothing(tmp_path, drive, capsys):
    files = drive[0]
    assert ft.fetch_teachers(str(tmp_path / "teachers"), ["EuroSAT"], files, "the-folder", dry_run=True) == 0
    assert capsys.readouterr().out == f"EuroSAT: EuroSAT.zip from the-folder -> {tmp_path / 'teachers' / 'EuroSAT'}\n"
    assert not (tmp_path / "teachers").exists()


@pytest.mark.parametrize("knob", ["PETR_OFFLINE", ""])
def test_offline_lines_say_how_to_place_by_hand(tmp_path, monkeypatch, capsys, knob):
    """An offline knob, or a Drive that does not answer one probe (no knob): one error line naming why, then one
    line per teacher."""
    for var in ("no_proxy", "NO_PROXY", *OFFLINE_KNOBS):
        monkeypatch.delenv(var, raising=False)
    for var in ("https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # nothing listens there: the folder cannot be listed
    if knob:
        monkeypatch.setenv(knob, "1")
    teachers = tmp_path / "teachers"
    assert ft.main(["--dir", str(teachers), "eurosat", "imagenet-xd", "--folder", "FOLDER"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    source = "https://drive.google.com/drive/folders/FOLDER"
    why = f"{knob}=1 is set: this node does not download" if knob else f"{source} does not answer: "
    assert lines[0].startswith(f"error: cannot list {source} ({why}")
    assert lines[1:] == [
        f"{name}: the file named like '{name}' in {source} -> {teachers / name}; by hand: download it on a machine "
        f"with internet, unpack it so that {teachers / name / checkpoint} exists, then run this command again to "
        "verify it" for name, checkpoint in (("EuroSAT", CHECKPOINT),
                                             ("ImageNet-xd", "VLPromptLearner_large/model.pth.tar-20"))]
    assert not teachers.exists()


def test_unknown_teacher_is_one_line(capsys):
    assert ft.main(["--dir", "unused", "EuroSAT", "MNIST"]) == 2
    assert capsys.readouterr().err == ("error: unknown teacher(s) MNIST; known: " + ", ".join(ft.TEACHERS) +
                                       ", or all\n")
