"""Checkpoints: Dassl layout, atomic writes, weights_only loads, restricted loads of pickled objects, RNG states."""
from __future__ import annotations

import io
import os
import random
import signal
import stat
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from torch import nn

from engine import load_checkpoint, load_pretrained_weights, save_checkpoint, write_json
from engine.checkpoint import atomic_torch_save, get_rng_state, load_model_state, resume_from_checkpoint, set_rng_state
from engine.errors import CorruptFileError, InvalidInputError
from engine.run_files import make_folder, writing_in
from tests.helpers_run import HANG_GUARD_S, REPO


def _state(epoch: int, value: float) -> dict:
    return {"state_dict": {"module.w": torch.full((2,), value)}, "epoch": epoch, "optimizer": None,
            "scheduler": {"last_epoch": epoch, "successor": {"T_max": 5.0}}, "val_result": None}


def test_layout_and_weights_only_load(tmp_path, capsys):
    path = save_checkpoint(_state(3, 1.5), str(tmp_path / "prompt_learner"))
    assert path == str(tmp_path / "prompt_learner" / "model.pth.tar-3")
    assert f"Checkpoint saved to {path}" in capsys.readouterr().out
    assert (tmp_path / "prompt_learner" / "checkpoint").read_text().strip() == "model.pth.tar-3"
    raw = torch.load(path, weights_only=True)  # loads without any allow-list
    assert list(raw["state_dict"]) == ["w"] and torch.equal(raw["state_dict"]["w"], torch.full((2,), 1.5))
    ckpt = load_checkpoint(path)
    assert ckpt["epoch"] == 3 and ckpt["scheduler"]["successor"] == {"T_max": 5.0}
    save_checkpoint(_state(3, 2.0), str(tmp_path / "prompt_learner"), is_best=True, model_name="model-best.pth.tar")
    best = torch.load(tmp_path / "prompt_learner" / "model-best.pth.tar", weights_only=True)
    assert best["state_dict"]["w"][0].item() == 2.0


def test_failed_writes_leave_old_checkpoint_and_no_temp_files(tmp_path):
    d = tmp_path / "m"
    save_checkpoint(_state(1, 1.0), str(d))
    bad = _state(2, 2.0)
    bad["scheduler"] = torch.optim.lr_scheduler.StepLR(torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1), 1)
    with pytest.raises(TypeError, match=r"checkpoint\.scheduler is a torch\.optim\.lr_scheduler\.StepLR object"):
        save_checkpoint(bad, str(d))
    os.mkdir(d / "model.pth.tar-2")  # the final rename onto a directory fails after the data was written
    with pytest.raises(OSError):
        save_checkpoint(_state(2, 2.0), str(d))
    assert sorted(os.listdir(d)) == ["checkpoint", "model.pth.tar-1", "model.pth.tar-2"]
    assert (d / "checkpoint").read_text().strip() == "model.pth.tar-1"
    assert torch.equal(load_checkpoint(str(d / "model.pth.tar-1"))["state_dict"]["w"], torch.ones(2))


class _CtrlC:
    """Pickled as an empty list, sending this process SIGINT while ``torch.save`` pickles it: Ctrl-C in mid-write."""

    def __reduce__(self):
        os.kill(os.getpid(), signal.SIGINT)
        return list, ()


def test_ctrl_c_during_a_checkpoint_write_comes_after_the_write(tmp_path):
    """Ctrl-C (as a preemption signal) waits for the checkpoint being written: the file is complete and in place,
    then the interrupt is raised; raised inside torch's zip writer it had left the writer half-done, whose close then
    failed with a RuntimeError instead of the interrupt."""
    path = tmp_path / "resume.pth.tar"
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # pytest-xdist's workers ignore it
    try:
        with pytest.raises(KeyboardInterrupt):
            atomic_torch_save({"w": torch.arange(4.0), "hook": _CtrlC()}, str(path))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert os.listdir(tmp_path) == ["resume.pth.tar"]  # no temporary file left
    assert torch.equal(torch.load(path, weights_only=False)["w"], torch.arange(4.0))  # this test's own file


def test_no_folder_inside_a_run_folder_is_entered_through_a_link(tmp_path):
    """While a run writes in its folder (``writing_in``, as train.py does), a link, a FIFO or a file where one of its
    folders is expected (at any depth) is one error naming it, and nothing is written through it; the run folder
    itself may lie behind a link (an output root on another disk), and outside a run folder links are followed as
    ``os.makedirs`` follows them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "disk").mkdir()
    os.symlink(tmp_path / "disk", tmp_path / "output")
    run = tmp_path / "output" / "run"
    (run / "split_fewshot").mkdir(parents=True)
    os.symlink(outside, run / "prompt_learner")
    os.symlink(outside, run / "split_fewshot" / "eurosat")
    os.mkfifo(run / "teacher_cache")
    (run / "tensorboard").write_text("a file\n")

    def refused(path, kind: str) -> str:
        return (f"{path} is {kind}, not a folder; a run writes only inside its own folder (a link there is not "
                f"followed): remove it (rm {path}) and rerun")

    with writing_in(str(run)):
        assert save_checkpoint(_state(1, 1.0), str(run / "VLPromptLearner")) == \
            str(run / "VLPromptLearner" / "model.pth.tar-1")
        write_json({"a": 1}, str(run / "results.json"))
        for write, path, kind in (
                (lambda: save_checkpoint(_state(1, 1.0), str(run / "prompt_learner")), run / "prompt_learner",
                 "a symbolic link"),
                (lambda: write_json({}, str(run / "split_fewshot" / "eurosat" / "shot_2-seed_1.json")),
                 run / "split_fewshot" / "eurosat", "a symbolic link"),
                (lambda: write_json({}, str(run / "teacher_cache" / "train_x.json")), run / "teacher_cache", "a FIFO"),
                (lambda: make_folder(str(run / "tensorboard")), run / "tensorboard", "a regular file")):
            with pytest.raises(CorruptFileError) as caught:
                write()
            assert str(caught.value) == refused(path, kind)
    assert os.listdir(outside) == [] and sorted(os.listdir(tmp_path / "disk" / "run")) == [
        "VLPromptLearner", "prompt_learner", "results.json", "split_fewshot", "teacher_cache", "tensorboard"]
    save_checkpoint(_state(1, 1.0), str(run / "prompt_learner"))  # no run being written: the link is followed
    assert sorted(os.listdir(outside)) == ["checkpoint", "model.pth.tar-1"]


def test_pickled_objects_are_never_run_unless_trusted(tmp_path, capsys):
    path = tmp_path / "upstream.pth.tar"
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1)
    torch.save({"epoch": 5, "scheduler": {"successor": torch.optim.lr_scheduler.CosineAnnealingLR(opt, 5)}}, path)
    assert load_checkpoint(str(path)) == {"epoch": 5}  # restricted load: the object's entry is dropped and named
    assert "ignored scheduler (torch.optim.lr_scheduler.CosineAnnealingLR" in capsys.readouterr().out
    trusted = load_checkpoint(str(path), trust_pickle=True)
    assert trusted["scheduler"]["successor"].T_max == 5
    torch.save(nn.Linear(2, 2), path)  # a whole pickled object is not a checkpoint
    with pytest.raises(InvalidInputError, match=r"pickled torch\.nn\.modules\.linear\.Linear object"):
        load_checkpoint(str(path))
    with pytest.raises(FileNotFoundError, match="missing.pth"):
        load_checkpoint(str(tmp_path / "missing.pth"))


def test_load_pretrained_weights_keeps_matching_entries(tmp_path, capsys):
    src = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    dst = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 5))
    before = dst[1].weight.detach().clone()
    save_checkpoint({"state_dict": nn.DataParallel(src).state_dict(), "epoch": 1}, str(tmp_path))
    src.cpu()  # DataParallel moves ``src`` to cuda:0 when a GPU is visible; compare on the CPU
    load_pretrained_weights(dst, str(tmp_path / "model.pth.tar-1"))
    assert torch.equal(dst[0].weight, src[0].weight) and torch.equal(dst[0].bias, src[0].bias)
    assert torch.equal(dst[1].weight, before)
    assert "['1.weight', '1.bias']" in capsys.readouterr().out


def test_rng_state_round_trip(tmp_path):
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    torch.save(get_rng_state(), tmp_path / "rng.pt")
    first = (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())
    set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    assert (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist()) == first


def test_resume_without_scheduler_state_continues_the_cosine_schedule(tmp_path):
    """An upstream checkpoint keeps the optimizer state but not the scheduler's: the resumed learning rates equal an
    uninterrupted cosine schedule's, epoch by epoch (no decay applied twice)."""
    def fresh():
        param = nn.Parameter(torch.zeros(3))
        optimizer = torch.optim.SGD([param], lr=0.002, momentum=0.9)
        return param, optimizer, torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=50)

    param, optimizer, scheduler = fresh()
    reference = []
    for _ in range(20):
        optimizer.step()
        scheduler.step()
        reference.append(optimizer.param_groups[0]["lr"])
    model = nn.Linear(2, 2)
    folder = tmp_path / "prompt_learner"
    folder.mkdir()
    _, saved_optimizer, saved_scheduler = fresh()
    for _ in range(10):
        saved_optimizer.step()
        saved_scheduler.step()
    torch.save({"state_dict": model.state_dict(), "epoch": 10, "optimizer": saved_optimizer.state_dict()},
               folder / "model.pth.tar-10")
    (folder / "checkpoint").write_text("model.pth.tar-10\n")

    _, optimizer, scheduler = fresh()
    assert resume_from_checkpoint(str(folder), nn.Linear(2, 2), optimizer, scheduler) == 10
    resumed = [optimizer.param_groups[0]["lr"]]
    for _ in range(10):
        optimizer.step()
        scheduler.step()
        resumed.append(optimizer.param_groups[0]["lr"])
    assert resumed == pytest.approx(reference[9:], rel=1e-12)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_files_get_the_mode_open_gives(tmp_path, umask):
    """Results, checkpoints (and the pointer file) and JSON files such as few-shot files: 0666 minus the umask."""
    previous = os.umask(umask)
    try:
        write_json({"accuracy": 1.0}, str(tmp_path / "results.json"))
        save_checkpoint(_state(1, 1.0), str(tmp_path / "prompt_learner"), is_best=True)
        with open(tmp_path / "by_open.txt", "w"):
            pass
    finally:
        os.umask(previous)
    files = ["results.json", "prompt_learner/model.pth.tar-1", "prompt_learner/checkpoint",
             "prompt_learner/model-best.pth.tar", "by_open.txt"]
    modes = {name: oct(stat.S_IMODE(os.stat(tmp_path / name).st_mode)) for name in files}
    assert modes == {name: oct(0o666 & ~umask) for name in files}


def test_load_model_state_names_the_file_and_the_first_difference():
    model = nn.Linear(3, 2)
    with pytest.raises(InvalidInputError, match=r"^run/m\.pth does not fit this Linear \(size mismatch for weight: "
                                                r"copying a param with shape torch\.Size\(\[2, 4\]\) from checkpoint.*"
                                                r"\): it was saved by another trainer, backbone or prompt size"):
        load_model_state(model, {"state_dict": {"weight": torch.zeros(2, 4), "bias": torch.zeros(2)}}, "run/m.pth")
    with pytest.raises(InvalidInputError, match=r"^run/m\.pth does not fit this Linear \(Missing key\(s\) in "
                                                r"state_dict: \"bias\"\."):
        load_model_state(model, {"state_dict": {"weight": torch.zeros(2, 3)}}, "run/m.pth")
    with pytest.raises(InvalidInputError, match=r"^run/m\.pth holds no state_dict"):
        load_model_state(model, {"epoch": 1}, "run/m.pth")
    load_model_state(model, {"state_dict": {"weight": torch.ones(2, 3), "bias": torch.ones(2)}}, "run/m.pth")
    assert torch.equal(model.weight, torch.ones(2, 3))



def write_zip_bomb(path, megabytes: int) -> None:
    """A zip in torch's checkpoint layout (archive/version, archive/data.pkl) whose data.pkl is ``megabytes`` MiB of
    zeros, deflated to a few hundred KiB."""
    record = zipfile.ZipInfo("archive/data.pkl")
    record.compress_type = zipfile.ZIP_DEFLATED
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/version", "3\n")
        with z.open(record, "w", force_zip64=True) as f:
            for _ in range(megabytes):
                f.write(bytes(1 << 20))


_MEASURE = """import resource, sys
from engine.checkpoint import load_checkpoint
from engine.errors import CorruptFileError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    load_checkpoint(sys.argv[1])
except CorruptFileError as e:
    print(e)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_zip_bomb_is_refused_before_it_is_inflated(tmp_path):
    """512 MiB of zeros deflated into a checkpoint-shaped zip: one CorruptFileError naming the file, and the loading
    process's peak memory grows by far less than the record (getrusage in a fresh process)."""
    path = tmp_path / "bomb.pth.tar"
    write_zip_bomb(path, 512)
    assert os.path.getsize(path) < (1 << 20)
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(path)], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    message, grown_mib = done.stdout.splitlines()
    assert message == (f"{path} is a zip archive whose records unpack to 536870914 bytes from a "
                       f"{os.path.getsize(path)}-byte file (compressed: archive/data.pkl); torch writes checkpoints "
                       "uncompressed, so it was refused before reading: restore a good copy or point to another file")
    assert int(grown_mib) < 128, done.stderr


def nested_pickle(depth: int, container: str = "tuple", top: bool = False) -> bytes:
    """A checkpoint in torch's zip layout whose data.pkl is ``{"state_dict": ((((),),),)}`` nested ``depth`` deep
    (``container`` list: ``[[[[]]]]``; ``top``: that nest alone, no dict around it), pickle opcodes written directly:
    pickling such an object would itself recurse."""
    nest = b")" + b"\x85" * depth if container == "tuple" else b"]" * (depth + 1) + b"a" * depth
    key = b"state_dict"
    data = b"\x80\x02" + (nest if top else b"}X" + len(key).to_bytes(4, "little") + key + nest + b"s") + b"."
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("archive/data.pkl", data)
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
    return buffer.getvalue()


@pytest.mark.parametrize("container", ["tuple", "list"])
@pytest.mark.parametrize("top", [False, True], ids=["in the state_dict", "the whole pickle"])
def test_a_checkpoint_nesting_100000_containers_is_one_error(tmp_path, container, top):
    path = tmp_path / "nested.pth.tar"
    path.write_bytes(nested_pickle(100_000, container, top))
    with pytest.raises(CorruptFileError) as caught:
        load_checkpoint(str(path))
    assert str(caught.value) == (f"{path} nests its containers deeper than Python's recursion limit (a checkpoint "
                                 "holds flat dicts of tensors); refused, nothing was run: restore a good copy or "
                                 "point to another file")
    path.write_bytes(nested_pickle(3, container, top))
    nest = ((((),),),) if container == "tuple" else [[[[]]]]
    if not top:
        assert load_checkpoint(str(path)) == {"state_dict": nest}
        return
    with pytest.raises(InvalidInputError) as caught:
        load_checkpoint(str(path))
    assert str(caught.value) == (f"{path} holds a pickled {container} object, not a checkpoint dict (Dassl layout: "
                                 "state_dict, epoch, ...); nothing was run")
