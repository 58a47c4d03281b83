"""The inputs ledger (engine/inputs.py), and the proof that it is complete: every trainer, trained and evaluated, the
plug-ins and PETR+X on each prompt learner, run under a Python audit hook (``sys.addaudithook``: every ``open``,
``os.mkdir`` and ``os.rename`` / ``os.replace`` of this process). Every file a run opens for reading outside the
repository and the Python installation must be in its ``run.json`` ledger, except the images its dataset lists
(they count through the split file that lists them, which is in the ledger, and the run's data digest); every file
it writes, folder it makes or file it renames into place lies in its run folder or a cache it declared. A new reader
that bypasses ``engine.inputs.open_input`` fails here.

Run with ``-s`` to see, per run, how many files of each role its ledger holds.
"""
from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
import sys
import sysconfig

import pytest
import torch
from tabulate import tabulate

import train
from engine.inputs import active, expand_key, input_changes, open_input, read_input_json, recording, root_key
from engine.run_lock import LOCK_FILE
from tests.helpers_petr import write_eurosat
from tests.helpers_run import REPO, refused_line, train_argv
from trainers.catalog import PETR_X_LEARNERS, ROWS, TRAINERS

_EVENTS: list | None = None
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
SYSTEM = ("/proc/", "/sys/", "/dev/")
"""What the operating system shows as files (CPU counts, memory): no input of a run."""
LOCK_PROBE = "/" + LOCK_FILE
"""Another run folder's lock, opened to ask whether a live process holds it (``engine.runs.run_state``): it names a
holder, not data, so it is no input."""
TABLE: list[list] = []


def _audit(event: str, args: tuple) -> None:
    """The audit hook: while a run is watched, keep (kind, path) of each file opened, folder made or file renamed."""
    if _EVENTS is None:
        return
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        kind = "write" if args[2] & WRITE_FLAGS or (args[1] and set(args[1]) & set("wax+")) else "read"
        _EVENTS.append((kind, os.path.abspath(os.fsdecode(args[0]))))
    elif event == "os.mkdir" and not os.path.isdir(args[0]):
        _EVENTS.append(("write", os.path.abspath(os.fsdecode(args[0]))))
    elif event in ("os.rename", "os.replace"):
        _EVENTS.append(("write", os.path.abspath(os.fsdecode(args[1]))))


sys.addaudithook(_audit)  # for good: an audit hook cannot be removed; it does nothing while no run is watched
PYTHON_FOLDERS = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix,
                                                       *sysconfig.get_paths().values()) if p})


def inside(path: str, folders) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def watched(argv: list[str]):
    """Run train.py ``argv`` under the audit hook: (its trainer, the events)."""
    global _EVENTS
    _EVENTS = []
    try:
        trainer = train.main(argv)
    finally:
        events, _EVENTS = _EVENTS, None
    return trainer, events


def listed_images(trainer) -> set[str]:
    """The images the run's dataset lists (its splits), which count through their split file."""
    data = trainer.dm.dataset
    items = [*(data.train_x or ()), *(data.train_u or ()), *(data.val or ()), *(data.test or ()),
             *(data.splits.router_x or ())]
    return {os.path.abspath(item.impath) for item in items}


def check_complete(name: str, run, argv: list[str], cache_home) -> dict[str, int]:
    """Run ``argv`` into ``run`` under the hook and assert the ledger is complete and the writes contained; returns
    the number of ledger files per role."""
    trainer, events = watched(argv)
    recorded = json.loads((run / "run.json").read_text())
    roots = {"DATASET.ROOT": os.path.abspath(trainer.cfg.DATASET.ROOT)}
    ledger = {os.path.abspath(expand_key(key, roots)) for key in recorded["inputs"]}
    caches = [*recorded["caches"], str(cache_home)]
    own, trusted = [str(run)], [REPO, *PYTHON_FOLDERS]
    images = listed_images(trainer)
    reads = {path for kind, path in events if kind == "read"}
    unrecorded = sorted(p for p in reads if p not in ledger and p not in images and not inside(p, own + trusted)
                        and not inside(os.path.realpath(p), trusted) and not p.startswith(SYSTEM)
                        and not p.endswith(LOCK_PROBE)
                        and not inside(p, caches))
    assert not unrecorded, f"{name}: read outside the inputs ledger: {unrecorded}"
    writes = sorted({p for kind, p in events if kind == "write" and not inside(p, own + caches)})
    assert not writes, f"{name}: wrote outside its run folder and declared caches: {writes}"
    roles = collections.Counter(entry["role"] for entry in recorded["inputs"].values())
    TABLE.append([name, len(reads & images), *(roles.get(role, 0) for role in ROLE_COLUMNS)])
    return roles


ROLE_COLUMNS = ("config", "clip", "teacher", "split", "fewshot", "checkpoint", "run-record", "router", "cache")


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_clip_file, tiny_teacher_clip_file):
    """A EuroSAT tree, the digest cache in the test's folder, and a function running one watched run."""
    root = tmp_path_factory.mktemp("ledger")
    write_eurosat(root / "data")
    cache_home = root / "cache"
    saved = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(cache_home)

    def run(name: str, trainer: str, config: str, *opts: str, flags: tuple = (), shots: str = "2"):
        out = root / name
        argv = train_argv(trainer, config, root / "data", out, "DATALOADER.TRAIN_X.BATCH_SIZE", "4",
                          "DATALOADER.TEST.BATCH_SIZE", "8", "OPTIM.MAX_EPOCH", "1", "DATASET.NUM_SHOTS", shots,
                          "DATASET.SUBSAMPLE_CLASSES", "base", *opts, flags=flags, backbone=tiny_clip_file)
        return out, check_complete(name, out, argv, cache_home)

    yield root, run
    if saved is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = saved


LEARNERS = [m.trainer for m in ROWS if m.commands in ("learner", "coop", "zsclip")]
"""The methods that learn (or score) from labelled images alone, on the student CLIP."""





def test_every_trainer_reads_only_through_the_ledger(world, tiny_teacher_clip_file, capsys):
    root, run = world
    evaluated = ("--eval-only", "--model-dir")
    for trainer in LEARNERS:
        out, roles = run(trainer, trainer, "demo")
        assert roles["clip"] == 1 and roles["split"] == 1 and roles["fewshot"] == 1 and roles["config"] == 2
        _, roles = run(f"{trainer} eval-only", trainer, "demo", flags=(*evaluated, str(out), "--load-epoch", "last"))
        assert roles["checkpoint"] == (0 if trainer == "ZeroshotCLIP" else 2)  # the pointer and the file it names
    teacher, roles = run("PromptSRC", "PromptSRC", "demo", "MODEL.BACKBONE.NAME", tiny_teacher_clip_file)
    run("PromptSRC eval-only", "PromptSRC", "demo", "MODEL.BACKBONE.NAME", tiny_teacher_clip_file,
        flags=(*evaluated, str(teacher), "--load-epoch", "last"))
    published = root / "published"  # a published teacher folder (TEACHER_DIR/<Dataset>): its record is read too
    shutil.copytree(teacher / "VLPromptLearner", published / "VLPromptLearner")
    (published / "teacher.json").write_text(json.dumps({"backbone": tiny_teacher_clip_file}))
    for student, ckpt in (("PromptKD", teacher), ("PETR", published)):
        ns = student.upper()
        opts = (f"TRAINER.{ns}.TEACHER_NAME", tiny_teacher_clip_file, f"TRAINER.{ns}.TEACHER_CKPT", str(ckpt))
        out, roles = run(student, student, "demo", *opts, shots="0")
        assert roles["teacher"] >= 2 and roles["clip"] == 2  # pointer + checkpoint (+ record); student + teacher
        _, roles = run(f"{student} eval-only", student, "demo", *opts, shots="0",
                       flags=(*evaluated, str(out), "--load-epoch", "last"))
        # a pointer and a file per model: PromptKD's prompt learner, PETR's two students
        assert roles["checkpoint"] in (2, 4) and (student != "PETR" or roles["router"] >= 1)
    for name in ("PETR cache built", "PETR cache read"):  # a shared teacher cache outside the run: declared, read
        opts = ("TRAINER.PETR.TEACHER_NAME", tiny_teacher_clip_file, "TRAINER.PETR.TEACHER_CKPT", str(published),
                "TRAINER.PETR.TEACHER_CACHE", "views", "TRAINER.PETR.TEACHER_CACHE_DIR", str(root / "shared_cache"))
        _, roles = run(name, "PETR", "demo", *opts, shots="0")
    assert roles["cache"] == 4  # the .json and .pt of train_x and of train_u
    for name in ("PETR decoded views built", "PETR decoded views read"):  # + the decoded views, tensor decoder
        opts = ("TRAINER.PETR.TEACHER_NAME", tiny_teacher_clip_file, "TRAINER.PETR.TEACHER_CKPT", str(published),
                "TRAINER.PETR.TEACHER_CACHE", "views", "TRAINER.PETR.TEACHER_CACHE_DIR", str(root / "pixel_cache"),
                "TRAINER.PETR.TEACHER_CACHE_IMAGES", "True", "INPUT.DECODER", "tensor")
        _, roles = run(name, "PETR", "demo", *opts, shots="0")
    assert roles["cache"] == 6  # the .json, .pt and .pixels of train_x and of train_u
    _, roles = run("CoOp decoded images", "CoOp", "demo", "DATALOADER.IMAGE_CACHE_SIDE", "8",
                   "DATALOADER.IMAGE_CACHE_DIR", str(root / "image_cache"))
    assert roles["cache"] == 1  # the decoded training images, outside the run folder: declared, read back
    run("PETRCoOp plug-in", "PETRCoOp", "demo", "TRAINER.PETRCOOP.COOP_MODEL_DIR", str(root / "CoOp"))
    for x, learner in PETR_X_LEARNERS.items():
        opts = ("TRAINER.PETRX.TUNED_MODEL_DIR", str(root / learner.trainer), "TRAINER.PETRX.TUNED_TRAINER",
                learner.trainer)
        if learner.trainer == "PromptSRC":  # the teacher run above, on the teacher CLIP
            opts += ("MODEL.BACKBONE.NAME", tiny_teacher_clip_file)
        out, roles = run(f"PETR+X {x}", "PETRX", "demo", *opts)
        assert roles["checkpoint"] == 2 and roles["run-record"] >= 1  # X's pointer and file; what X's run records
        run(f"PETR+X {x} eval-only", "PETRX", "demo", *opts, flags=(*evaluated, str(out)))
    with capsys.disabled():
        print("\n" + tabulate(TABLE, headers=["run", "images", *ROLE_COLUMNS]))
    assert {row[0].split(" ")[0] for row in TABLE} >= set(TRAINERS) - {"PETRX"} and len(TABLE) == 2 * (
        len(LEARNERS) + 1 + 2 + len(PETR_X_LEARNERS)) + 6


def test_an_open_clip_student_reads_only_through_the_ledger(world, tiny_openclip_name, tiny_teacher_clip_file):
    """An ``open_clip:local-dir:`` student: its config file and weight file are read through the ledger (role clip),
    beside the OpenAI-format teacher CLIP; nothing else of the folder is opened."""
    _, run = world
    folder = tiny_openclip_name.removeprefix("open_clip:local-dir:")
    out, roles = run("PETR open_clip", "PETR", "demo", "MODEL.BACKBONE.NAME", tiny_openclip_name,
                     "TRAINER.PETR.TEACHER_NAME", tiny_teacher_clip_file, "TRAINER.PETR.TEACHER_CKPT", "", shots="0")
    inputs = json.loads((out / "run.json").read_text())["inputs"]
    assert sorted(path for path, entry in inputs.items() if entry["role"] == "clip") == sorted(
        [os.path.join(folder, "open_clip_config.json"), os.path.join(folder, "open_clip_model.safetensors"),
         tiny_teacher_clip_file])


def test_the_audit_sees_a_reader_that_bypasses_the_ledger(tmp_path):
    """The check itself can fail: a plain ``open`` of a file outside the repository during a run is caught."""
    stray = tmp_path / "stray.txt"
    stray.write_text("x")
    global _EVENTS
    _EVENTS = []
    try:
        with open(stray) as f:
            f.read()
        with open(tmp_path / "out.txt", "w") as f:
            f.write("y")
    finally:
        events, _EVENTS = _EVENTS, None
    assert ("read", str(stray)) in events and ("write", str(tmp_path / "out.txt")) in events


def test_open_input_records_role_path_and_digest_relative_to_the_data_root(tmp_path):
    import hashlib

    data = tmp_path / "data"
    (data / "eurosat").mkdir(parents=True)
    split = data / "eurosat" / "split.json"
    split.write_text('{"train": []}')
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"weights")
    own = tmp_path / "run"
    own.mkdir()
    (own / "resume.pth.tar").write_bytes(b"state")
    assert active() is None
    with open_input(str(weights), "clip") as f:  # no run: opened, recorded nowhere
        assert f.read() == b"weights"
    with recording(str(own)) as ledger:
        ledger.roots = {"DATASET.ROOT": str(data)}
        assert read_input_json(str(split), "split") == {"train": []}
        with open_input(str(weights), "clip") as f:
            assert f.read() == b"weights"  # the digest is taken from the file being read, left at its start
        open_input(str(own / "resume.pth.tar"), "checkpoint").close()  # the run's own output: no input
        with pytest.raises(ValueError, match="unknown input role"):
            open_input(str(weights), "weights")
    assert ledger.inputs == {"${DATASET.ROOT}/eurosat/split.json":
                             {"role": "split", "sha256": hashlib.sha256(b'{"train": []}').hexdigest()},
                             str(weights): {"role": "clip", "sha256": hashlib.sha256(b"weights").hexdigest()}}
    assert root_key(str(split), ledger.roots) == "${DATASET.ROOT}/eurosat/split.json"
    moved = tmp_path / "moved"
    shutil.copytree(data, moved)
    assert input_changes(ledger.inputs, {"DATASET.ROOT": str(moved)}) == ([], [])  # a moved data root
    (moved / "eurosat" / "split.json").write_text('{"train": [1]}')
    changes, gone = input_changes(ledger.inputs, {"DATASET.ROOT": str(moved)})
    assert len(changes) == 1 and changes[0].startswith(f"split {moved / 'eurosat' / 'split.json'} content sha256 ")
    weights.unlink()
    assert input_changes(ledger.inputs, {"DATASET.ROOT": str(data)}) == ([], [f"clip {weights}"])


def test_a_fifo_as_an_input_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "split.json"
    os.mkfifo(fifo)
    with recording(str(tmp_path / "run")), pytest.raises(OSError, match="is a FIFO, not a regular file; give a "
                                                                     "dataset's split or class-list file as"):
        open_input(str(fifo), "split")


def test_regenerable_and_by_value_inputs(tmp_path):
    """A few-shot file or a cache that is gone is drawn or built again the same: not a change; a config file or
    another run's records are compared by the values the run took from them, not by their bytes."""
    files = {name: tmp_path / name for name in ("shots.json", "cache.pt", "cfg.yaml", "log.txt")}
    for path in files.values():
        path.write_text("v1")
    with recording(str(tmp_path / "run")) as ledger:
        for path, role in zip(files.values(), ("fewshot", "cache", "config", "run-record")):
            open_input(str(path), role).close()
    files["shots.json"].unlink()
    files["cache.pt"].unlink()
    files["cfg.yaml"].write_text("v1 # a comment")
    files["log.txt"].write_text("v1, then a rerun's attempt")
    assert input_changes(ledger.inputs, {}) == ([], [])



def _zeroshot(data, out, backbone: str) -> list[str]:
    """A tiny zero-shot evaluation (no training), its config files named from the repository root (so the run may
    start from another working folder)."""
    argv = train_argv("ZeroshotCLIP", "vit_b16", data, out, "DATALOADER.TEST.BATCH_SIZE", "8", flags=("--eval-only",),
                      backbone=backbone)
    return [os.path.join(REPO, arg) if arg.startswith("configs/") else arg for arg in argv]


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_images_are_read_by_content_though_not_through_the_ledger(tmp_path, tiny_clip_file, monkeypatch, capsys):
    """The images a run lists are hashed for its identity (the audit sees them read, the digest cache is the engine's
    own): another image copied over one its test split lists, or another data root holding other pixels under the
    same names and split file, makes the finished run a changed one, not a skip."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tree = write_eurosat(tmp_path / "data")
    out = tmp_path / "zeroshot"
    argv = _zeroshot(tmp_path / "data", out, tiny_clip_file)
    check_complete("ZeroshotCLIP on images", out, argv, tmp_path / "cache")
    assert train.main(argv) is None  # the same images: skipped
    with open(tree.split_file) as f:
        first, second = [os.path.join(tree.dataset_dir, "2750", rel) for rel, _, _ in json.load(f)["test"][:2]]
    shutil.copytree(tmp_path / "data", tmp_path / "other")
    shutil.copyfile(second, first.replace(str(tmp_path / "data"), str(tmp_path / "other")))
    changed = refused_line(out, "image bytes (test: the images these splits list hold other bytes now)")
    for root in (tmp_path / "other", tmp_path / "data"):
        if root == tmp_path / "data":
            shutil.copyfile(second, first)
        capsys.readouterr()
        assert train.cli([*argv[:1], str(root), *argv[2:]]) == 2
        assert capsys.readouterr().err.splitlines() == [changed]


def test_a_clip_name_is_compared_by_the_file_it_resolves_to_now(tmp_path, tiny_clip_file, monkeypatch, capsys):
    """A CLIP given by name (ViT-B/16) is recorded with the name: a rerun compares the file the name resolves to now.
    Another $CLIP_WEIGHTS_DIR, or a ./clip/ViT-B-16.pt placed later in the working folder (searched first), holding
    other weights is a changed run; the same bytes found elsewhere are the same run."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.cache/clip
    write_eurosat(tmp_path / "data")
    folders = {name: tmp_path / name for name in ("first", "copy", "other", "cwd/clip")}
    for folder in folders.values():
        folder.mkdir(parents=True)
    for name in ("first", "copy"):
        shutil.copyfile(tiny_clip_file, folders[name] / "ViT-B-16.pt")
    state = torch.load(tiny_clip_file, weights_only=True)
    state["text_projection"] = state["text_projection"] + 1.0
    for name in ("other", "cwd/clip"):
        torch.save(state, folders[name] / "ViT-B-16.pt")
    first, other, placed = (str(folders[name] / "ViT-B-16.pt") for name in ("first", "other", "cwd/clip"))
    monkeypatch.setenv("CLIP_WEIGHTS_DIR", str(folders["first"]))
    out = tmp_path / "zeroshot"
    argv = _zeroshot(tmp_path / "data", out, "ViT-B/16")
    check_complete("ZeroshotCLIP on ViT-B/16", out, argv, tmp_path / "cache")
    recorded = json.loads((out / "run.json").read_text())["inputs"]
    assert recorded[first] == {"role": "clip", "sha256": _sha256(first), "name": "ViT-B/16"}
    monkeypatch.setenv("CLIP_WEIGHTS_DIR", str(folders["copy"]))
    assert train.main(argv) is None  # the same bytes in another folder: skipped
    for weights_dir, cwd, found in ((folders["other"], REPO, other), (folders["first"], tmp_path / "cwd", placed)):
        monkeypatch.setenv("CLIP_WEIGHTS_DIR", str(weights_dir))
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        assert train.cli(argv) == 2
        assert capsys.readouterr().err.splitlines() == [refused_line(out, (
            f"clip ViT-B/16 now resolves to {found}, not {first}: content sha256 {_sha256(first)[:12]} → "
            f"{_sha256(found)[:12]}"))]
