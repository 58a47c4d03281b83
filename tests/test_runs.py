"""engine/runs.py, run_lock.py, run_identity.py: the run layout, every run state (upstream folders included), the
folder lock against live and dead processes, and what counts as another run; all of it without torch."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import types

import pytest

import engine.digests as digests
from engine.config import get_cfg_default
from engine.errors import ConfigError
from engine.run_identity import IGNORED_KEYS, claim_run, data_digest, identity_differences, run_identity
from engine.run_lock import RunLock, RunLockedError
from engine.runs import logged_value, run_dir, run_log, run_state, saved_model
from tests.helpers_run import HANG_GUARD_S, lock_held_elsewhere
from tests.helpers_upstream import (
    FORK_FINISH_LINES,
    UPSTREAM_EVAL_LOG,
    UPSTREAM_KILLED_LOG,
    UPSTREAM_TRAIN_LOG,
    fork_train_tail,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RERUN = "log.txt-2024-05-02-10-11-12"
"""The log Dassl writes for a rerun in a folder that has a log.txt (its start time in the name)."""


def test_run_dir_builds_the_documented_layout():
    assert run_dir("out", "base2new", "train_base", "eurosat", 16, "CoOp", "vit_b16_ctxv1", 1) == \
        "out/base2new/train_base/eurosat/shots_16/CoOp/vit_b16_ctxv1/seed1"
    assert run_dir("/o", "base2new", "test_new", "dtd", "0", "PETR", "c", "3") == \
        "/o/base2new/test_new/dtd/shots_0/PETR/c/seed3"
    assert run_dir("o", "xd", "test", "democool", 0, "PETR", "demo", 2) == "o/xd/test/democool/shots_0/PETR/demo/seed2"
    assert run_dir("o", "dg", "train", "imagenet_a", 1, "PETR", "c", 1) == "o/dg/train/imagenet_a/shots_1/PETR/c/seed1"
    with pytest.raises(ConfigError, match="unknown role 'train_base' of protocol xd; use one of train, test"):
        run_dir("o", "xd", "train_base", "d", 0, "T", "c", 1)
    with pytest.raises(ConfigError, match="unknown protocol 'b2n'; use one of base2new, xd, dg"):
        run_dir("o", "b2n", "train", "d", 0, "T", "c", 1)


def _runs_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -X importtime -m engine.runs ...`` (stderr lists every module imported)."""
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "engine.runs", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=HANG_GUARD_S)


def test_cli_and_imports_do_not_load_torch(tmp_path):
    done = _runs_cli("dir", "out", "xd", "train", "democool", "0", "PETR", "demo", "1")
    assert done.returncode == 0 and done.stdout == "out/xd/train/democool/shots_0/PETR/demo/seed1\n"
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "engine.run_lock" in imported and not {m for m in imported if m.split(".")[0] in ("torch", "numpy")}
    done = _runs_cli("state", str(tmp_path))
    assert done.returncode == 0 and done.stdout == "new\n"
    done = _runs_cli("saved-model", str(tmp_path))
    assert done.returncode == 2 and done.stdout == "" and done.stderr.rstrip().splitlines()[-1] == (
        f"error: no checkpoint in {tmp_path} (no <model>/checkpoint file): train the model first")
    light = subprocess.run([sys.executable, "-c", "import sys, engine, engine.runs, engine.run_identity, "
                            "engine.run_lock; from engine import pointed_checkpoint; "
                            "print(sorted(m for m in ('torch', 'numpy') if m in sys.modules))"],
                           cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert light.stdout.strip() == "[]", light.stderr
    heavy = subprocess.run([sys.executable, "-c", "import sys; from engine import TRAINER_REGISTRY, TrainerX, "
                            "build_trainer, DataManager; print(TrainerX.__module__, 'torch' in sys.modules)"],
                           cwd=REPO, capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert heavy.stdout.strip() == "engine.trainer True", heavy.stderr


def _folder(root, name: str, files: dict[str, str]) -> str:
    path = root / name
    path.mkdir()
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return str(path)


@pytest.mark.parametrize("files,state", [
    ({}, "new"),
    ({"log.txt": "error: Unknown trainer (TRAINER.NAME / --trainer) 'PETRR'.\n"}, "failed"),
    ({"log.txt": "...\n", "run.json": "{}"}, "failed"),
    ({"log.txt": "epoch [1/2] ...\n", "resume.pth.tar": ""}, "resumable"),
    ({"log.txt": "...\n", "prompt_learner/checkpoint": "model.pth.tar-1\n"}, "resumable"),
    ({"log.txt": "...\n", "run.json": "{}", "results.json": "{}"}, "finished"),
    ({"log.txt": UPSTREAM_TRAIN_LOG, "prompt_learner/checkpoint": "model.pth.tar-5\n"}, "finished-upstream"),
    ({"log.txt": UPSTREAM_EVAL_LOG}, "finished-upstream"),  # upstream --eval-only (test_new) folder
    ({"log.txt": UPSTREAM_KILLED_LOG, "VLPromptLearner/checkpoint": "model-best.pth.tar\n"}, "resumable"),
    ({"log.txt": UPSTREAM_KILLED_LOG}, "failed"),  # validation blocks are no final result
    ({"log.txt": UPSTREAM_EVAL_LOG, "run.json": "{}"}, "failed"),  # ours, killed before results.json
    # Dassl run again in place: log.txt is the first attempt, log.txt-<timestamp> the rerun's
    ({"log.txt": UPSTREAM_KILLED_LOG, RERUN: UPSTREAM_TRAIN_LOG, "VLPromptLearner/checkpoint": "model-best.pth.tar\n"},
     "finished-upstream"),
    ({"log.txt": UPSTREAM_KILLED_LOG, RERUN: UPSTREAM_EVAL_LOG}, "finished-upstream"),
    ({RERUN: UPSTREAM_KILLED_LOG}, "failed"),  # log.txt removed, the rerun's log left
], ids=["new", "failed", "failed with run.json", "resume state", "checkpoint", "finished", "upstream training",
        "upstream eval-only", "upstream killed with checkpoint", "upstream killed", "ours killed in its evaluation",
        "upstream rerun finished", "upstream eval-only rerun", "upstream rerun log alone"])
def test_run_state(tmp_path, files, state):
    assert run_state(_folder(tmp_path, "run", files)) == state
    assert run_state(str(tmp_path / "missing")) == "new"


def test_run_log_is_the_newest_finished_log(tmp_path):
    """Of log.txt and Dassl's log.txt-<timestamp> files: the newest holding the final accuracy block (by the timestamp
    in the name, log.txt the oldest), else the newest; other names are no logs of the run."""
    logs = {"log.txt": UPSTREAM_TRAIN_LOG, "log.txt-2024-05-02-09-00-00": UPSTREAM_KILLED_LOG,
            RERUN: UPSTREAM_TRAIN_LOG, "log.txt-2024-11-30-08-00-00": UPSTREAM_KILLED_LOG,
            "log.txt-2025-01-01": UPSTREAM_TRAIN_LOG, "log.txt.bak": UPSTREAM_TRAIN_LOG}
    folder = _folder(tmp_path, "reruns", logs)
    assert run_log(folder) == os.path.join(folder, RERUN)
    unfinished = _folder(tmp_path, "unfinished", {"log.txt-2024-01-01-00-00-00": UPSTREAM_KILLED_LOG,
                                                  "log.txt": UPSTREAM_KILLED_LOG})
    assert run_log(unfinished) == os.path.join(unfinished, "log.txt-2024-01-01-00-00-00")
    assert run_log(_folder(tmp_path, "first", {"log.txt": UPSTREAM_KILLED_LOG})) == str(tmp_path / "first" / "log.txt")
    assert run_log(_folder(tmp_path, "none", {"log.txt.bak": UPSTREAM_TRAIN_LOG})) is None
    assert run_log(str(tmp_path / "missing")) is None


def test_saved_model(tmp_path):
    assert saved_model(_folder(tmp_path, "a", {"m/checkpoint": "model.pth.tar-2\n"})) == "last"
    assert saved_model(_folder(tmp_path, "b", {"m/checkpoint": "model.pth.tar-2\n", "m/model-best.pth.tar": ""})) \
        == "best"
    assert saved_model(_folder(tmp_path, "c", {"log.txt": ""})) is None


def test_lock_held_by_a_live_process_and_released_when_it_dies(tmp_path):
    run = _folder(tmp_path, "run", {"log.txt": "epoch [1/2] ...\n", "resume.pth.tar": ""})
    with lock_held_elsewhere(run) as pid:
        assert run_state(run) == "running"
        assert _runs_cli("holder", run).stdout == f"pid {pid} on h, started s: train.py x\n"
        with pytest.raises(RunLockedError) as e:
            RunLock(run).acquire("train.py y")
        assert str(e.value) == (f"{run} is in use by another run (pid {pid} on h, started s: train.py x); "
                                "wait for it to end or stop it, or give this run another --output-dir")
    assert os.path.exists(os.path.join(run, "run.lock"))  # a killed holder leaves its file, but not its lock
    assert run_state(run) == "resumable"
    lock = RunLock(run).acquire("train.py y")
    try:
        with open(os.path.join(run, "run.lock")) as f:
            record = json.load(f)
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", record.pop("started"))
        assert record == {"pid": os.getpid(), "host": socket.gethostname(), "command": "train.py y"}
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()} "):  # flock is per open file: a second
            RunLock(run).acquire("train.py z")  # claim in the same process is refused too
    finally:
        lock.release()
    assert not os.path.exists(os.path.join(run, "run.lock")) and run_state(run) == "resumable"


def _config(*changes):
    """Dassl's default config (the real yacs tree) of a CoOp run, with ``KEY VALUE`` changes as on a command line."""
    cfg = get_cfg_default()
    cfg.merge_from_list(["OUTPUT_DIR", "out/a", "SEED", 1, "DATASET.ROOT", "/data", "DATASET.NAME", "EuroSAT",
                         "OPTIM.LR", 0.002, "OPTIM.MAX_EPOCH", 4, "INPUT.SIZE", (32, 32), "TRAINER.NAME", "CoOp",
                         *changes])
    return cfg


def test_identity_keeps_what_changes_the_result():
    identity = run_identity(_config())
    assert (identity["trainer"], identity["seed"], identity["mode"]) == ("CoOp", 1, "train")
    config = identity["config"]
    assert (config["OPTIM.LR"], config["OPTIM.MAX_EPOCH"], config["INPUT.SIZE"]) == (0.002, 4, [32, 32])
    assert {"OUTPUT_DIR", "DATASET.ROOT", "TRAIN.PRINT_FREQ"} <= IGNORED_KEYS and not IGNORED_KEYS & set(config)
    assert json.loads(json.dumps(identity)) == identity  # what run.json holds
    same = run_identity(_config("OUTPUT_DIR", "elsewhere", "DATASET.ROOT", "/mnt/data", "TRAIN.PRINT_FREQ", 1))
    assert identity_differences(identity, same) == []
    other = run_identity(_config("OPTIM.MAX_EPOCH", 2, "OPTIM.LR", 0.01, "SEED", 2))
    assert identity_differences(identity, other) == ["OPTIM.LR 0.002 → 0.01", "OPTIM.MAX_EPOCH 4 → 2", "SEED 1 → 2"]
    newer = json.loads(json.dumps(identity))
    newer["config"]["TRAIN.COMPILE"] = "none"  # a key this run's code did not have: not compared
    assert identity_differences(identity, newer) == []
    assert identity_differences(identity, run_identity(_config(), eval_only=True)) == ["mode train → eval-only"]


def _datum(impath: str, label: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(impath=impath, label=label, domain=0, classname=f"class{label}")


def _dataset(root, labels: list[int]) -> types.SimpleNamespace:
    """Images ``img<i>.jpg`` under ``root`` (written with bytes of their index, unless there), labelled ``labels``."""
    os.makedirs(root, exist_ok=True)
    train = [_datum(os.path.join(root, f"img{i}.jpg"), lab) for i, lab in enumerate(labels)]
    for i, item in enumerate(train):
        if not os.path.exists(item.impath):
            with open(item.impath, "wb") as f:
                f.write(bytes([i]) * 100)
    return types.SimpleNamespace(train_x=train, train_u=None, val=None, test=train[:1], lab2cname={0: "a", 1: "b"},
                                 splits=types.SimpleNamespace(router_x=train))


def test_data_digest_follows_images_labels_and_bytes_not_the_root(tmp_path, monkeypatch):
    """Per split, one digest of the listed paths, labels and classes and one of the images' bytes: a moved root with
    the same images changes neither; relabelling changes the lists; other pixels under the same names (replaced in
    place, or another root holding other images) change the bytes of the splits that list them."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    digest = data_digest(_dataset(tmp_path / "data", [0, 1, 1]), str(tmp_path / "data"))
    assert sorted(digest) == ["classes", "router_x", "router_x bytes", "test", "test bytes", "train_x",
                              "train_x bytes"]
    assert digest["test bytes"] == hashlib.sha256(hashlib.sha256(bytes([0]) * 100).hexdigest().encode()).hexdigest()
    shutil.copytree(tmp_path / "data", tmp_path / "moved")
    assert data_digest(_dataset(tmp_path / "moved", [0, 1, 1]), str(tmp_path / "moved")) == digest
    relabelled = data_digest(_dataset(tmp_path / "data", [0, 1, 0]), str(tmp_path / "data"))
    assert {k for k in digest if digest[k] != relabelled[k]} == {"train_x", "router_x"}
    recorded, current = {"data": digest}, {"data": relabelled}
    assert identity_differences(recorded, current) == [
        "data (router_x, train_x: other images, labels or classes)"]
    assert identity_differences(recorded, current, with_data=False) == []
    (tmp_path / "moved" / "img2.jpg").write_bytes(b"other pixels")
    replaced = data_digest(_dataset(tmp_path / "moved", [0, 1, 1]), str(tmp_path / "moved"))
    assert {k for k in digest if digest[k] != replaced[k]} == {"train_x bytes", "router_x bytes"}
    assert identity_differences(recorded, {"data": replaced}) == [
        "image bytes (router_x, train_x: the images these splits list hold other bytes now)"]
    older = {"data": {k: v for k, v in digest.items() if not k.endswith(" bytes")}}  # made before bytes were recorded
    assert identity_differences(older, {"data": replaced}) == []


def test_eval_identity_names_the_model_folder_and_epoch(tmp_path):
    """What an evaluation loads is its inputs ledger; the identity holds which folder and epoch it was asked for."""
    model = _folder(tmp_path, "model", {"prompt_learner/checkpoint": "model.pth.tar-2\n"})
    last = run_identity(_config(), eval_only=True, model_dir=model, load_epoch="last")
    assert last["model"] == {"dir": model, "load_epoch": "last"}
    assert identity_differences(last, run_identity(_config(), True, model, 2)) == ['model load_epoch "last" → 2']
    other = identity_differences(last, run_identity(_config(), True, str(tmp_path), "last"))
    assert len(other) == 1 and other[0].startswith("model dir ")


def test_claim_skips_resumes_refuses_or_moves_aside(tmp_path):
    """What a claim decides for each state of the folder and identity; moving aside renames, never deletes."""
    recorded = {**run_identity(_config()), "data": {"train_x": "d"}, "inputs": {}}
    finished = _folder(tmp_path, "seed1", {"log.txt": "attempt 1\n", "results.json": "{}",
                                           "run.json": json.dumps(recorded)})
    claim = claim_run(finished, run_identity(_config("OUTPUT_DIR", "x")), "train.py a")
    assert claim.skip == f"Run finished, skipping: {finished}" and claim.check_data
    claim.verify_data({"train_x": "d"})
    assert claim.skip and run_state(finished) == "running"
    claim.release()
    claim = claim_run(finished, run_identity(_config()), "train.py a")
    with pytest.raises(Exception, match=r"holds a finished run that differs from this one: data \(train_x: "):
        claim.verify_data({"train_x": "other"})
    claim.release()

    with pytest.raises(Exception, match=r"^" + f"{finished} holds a finished run that differs from this one: "
                       r"OPTIM.MAX_EPOCH 4 → 2\. Nothing was changed"):
        claim_run(finished, run_identity(_config("OPTIM.MAX_EPOCH", 2)), "train.py b")
    assert run_state(finished) == "finished" and not os.path.exists(os.path.join(finished, "run.lock"))

    claim = claim_run(finished, run_identity(_config("OPTIM.MAX_EPOCH", 2)), "train.py b", move_aside=True)
    aside = tmp_path / ".seed1.old-1"
    assert claim.state == "new" and not claim.skip and sorted(os.listdir(finished)) == ["run.lock"]
    assert claim.notes == [f"Moved a finished run that differed from this one (OPTIM.MAX_EPOCH 4 → 2) to {aside}"]
    assert sorted(os.listdir(aside)) == ["log.txt", "results.json", "run.json"]
    claim.release()

    upstream = _folder(tmp_path, "upstream", {"log.txt": UPSTREAM_EVAL_LOG})
    claim = claim_run(upstream, run_identity(_config()), "train.py c")
    assert claim.skip == f"Run finished (upstream log.txt, no results.json), skipping: {upstream}"
    claim.release()
    interrupted = _folder(tmp_path, "interrupted", {"log.txt": "x\n", "resume.pth.tar": "",
                                                    "run.json": json.dumps(recorded)})
    claim = claim_run(interrupted, run_identity(_config()), "train.py d")
    assert claim.notes == [f"Resuming the interrupted run in {interrupted}"] and claim.check_data
    claim.release()
    with pytest.raises(Exception, match=f"^{interrupted} holds an interrupted run that differs from this one: SEED"):
        claim_run(interrupted, run_identity(_config("SEED", 2)), "train.py e")
    with pytest.raises(Exception, match=f"^RESUME {interrupted} holds a run with another config: SEED 1 → 2; "):
        claim_run(str(tmp_path / "new"), run_identity(_config("SEED", 2)), "train.py g", resume_from=interrupted)
    assert not os.path.exists(tmp_path / "new" / "run.lock")
    failed = _folder(tmp_path, "failed", {"log.txt": "error: x\n", "run.json": json.dumps(recorded)})
    claim = claim_run(failed, run_identity(_config("SEED", 2)), "train.py f")  # nothing to lose: runs, with a note
    assert not claim.skip and claim.notes[0].endswith("running it again from the start; its config differed "
                                                      "(SEED 1 → 2)")
    claim.release()


def _folder_cache(tmp_path, folder) -> str:
    """Where the machine's digest cache keeps the files of ``folder`` (XDG_CACHE_HOME = ``tmp_path``/cache)."""
    name = hashlib.sha256(os.path.realpath(folder).encode()).hexdigest()[:32] + ".json"
    return str(tmp_path / "cache" / "petr" / "digests" / name)


def test_file_digest_is_cached_by_what_a_user_cannot_set_back(tmp_path, monkeypatch):
    """A file of 2 MiB: its SHA-256 (hashlib) goes to the machine's cache of its folder under its device, inode, size,
    mtime and ctime, and is used while all five stay; other bytes of the same size with the mtime set back (touch -r)
    change the ctime, so the file is hashed again and a forged entry for the old key is never the answer; a file
    changed within RACY_S seconds is not cached; a cache folder that cannot be made only skips the cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digests, "_MEMO", {})
    path = tmp_path / "weights.pt"
    path.write_bytes(os.urandom(2 << 20))
    real = hashlib.sha256(path.read_bytes()).hexdigest()
    cache = _folder_cache(tmp_path, tmp_path)
    assert digests.file_digest(str(path)) == real and not os.path.exists(cache)  # just written: racy, not cached
    monkeypatch.setattr(digests, "RACY_S", -1.0)  # from here on the file counts as settled
    assert digests.file_digest(str(path)) == real
    st = os.stat(path)
    key = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    assert json.load(open(cache)) == {"folder": str(tmp_path), "files": {"weights.pt": [*key, real]}}
    forged = "0" * 64
    with open(cache, "w") as f:
        json.dump({"folder": str(tmp_path), "files": {"weights.pt": [*key, forged]}}, f)
    monkeypatch.setattr(digests, "_MEMO", {})
    assert digests.file_digest(str(path)) == forged  # the same version of the file: read from the cache
    other = os.urandom(2 << 20)
    with open(path, "r+b") as f:  # other bytes, same size, same inode, the old mtime restored (touch -r)
        f.write(other)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size
    assert digests.file_digest(str(path)) == hashlib.sha256(other).hexdigest()
    replaced = tmp_path / "replaced.pt"  # cp -p: a new inode with the same size and mtime
    replaced.write_bytes(path.read_bytes())
    shutil.copystat(path, replaced)
    os.replace(replaced, path)
    with open(cache, "w") as f:
        json.dump({"folder": str(tmp_path), "files": {"weights.pt": [*key, forged]}}, f)
    assert digests.file_digest(str(path)) == hashlib.sha256(other).hexdigest()
    monkeypatch.setenv("XDG_CACHE_HOME", str(path))  # "cache folder" under a file: nothing can be written there
    monkeypatch.setattr(digests, "_MEMO", {})
    assert digests.file_digest(str(path)) == hashlib.sha256(other).hexdigest()


def test_image_digests_are_read_once_per_file_version(tmp_path, monkeypatch):
    """Images looked up together (a split's): every one is cached, one cache file per folder, each answering only for
    the file version it was hashed from; a cache entry is what a rerun reads (a forged one shows it), an image with
    other bytes under its old size and mtime is hashed again; the folders hashed least recently are dropped beyond
    MAX_FOLDERS; a FIFO listed as an image is refused without waiting on it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(digests, "RACY_S", -1.0)
    images = {tmp_path / "a" / "1.jpg": b"one", tmp_path / "a" / "2.jpg": b"two", tmp_path / "b" / "3.jpg": b"three"}
    for path, content in images.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content)
    paths = [str(p) for p in images]
    expected = {str(p): hashlib.sha256(content).hexdigest() for p, content in images.items()}
    assert digests.file_digests(paths + paths[:1]) == expected
    assert digests.files_digest(paths) == hashlib.sha256("\n".join(expected[p] for p in paths).encode()).hexdigest()
    stored = json.load(open(_folder_cache(tmp_path, tmp_path / "a")))
    st = os.stat(paths[0])
    assert stored["folder"] == str(tmp_path / "a") and sorted(stored["files"]) == ["1.jpg", "2.jpg"]
    assert stored["files"]["1.jpg"] == [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                        expected[paths[0]]]
    stored["files"]["1.jpg"][5] = "f" * 64
    with open(_folder_cache(tmp_path, tmp_path / "a"), "w") as f:
        json.dump(stored, f)
    assert digests.file_digests(paths)[paths[0]] == "f" * 64  # the cached entry answers: the file was not read
    st = os.stat(paths[1])
    with open(paths[1], "r+b") as f:
        f.write(b"TWO")
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert digests.file_digests(paths)[paths[1]] == hashlib.sha256(b"TWO").hexdigest()
    monkeypatch.setattr(digests, "MAX_FOLDERS", 1)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "4.jpg").write_bytes(b"four")
    digests.file_digests([str(tmp_path / "c" / "4.jpg")])
    kept = os.listdir(tmp_path / "cache" / "petr" / "digests")
    assert kept == [os.path.basename(_folder_cache(tmp_path, tmp_path / "c"))]
    os.mkfifo(tmp_path / "c" / "5.jpg")
    with pytest.raises(OSError, match="5.jpg is a FIFO, not a regular file; give images as regular files"):
        digests.file_digests([str(tmp_path / "c" / "5.jpg")])


@pytest.mark.parametrize("fork", sorted(FORK_FINISH_LINES))
def test_every_upstream_forks_finished_run_is_finished(tmp_path, fork):
    """The end of a finished training run of each upstream's Dassl (``Finish training`` or ``Finished training``, the
    final test, ``Elapsed:``) is a finished upstream run with its accuracy; cut before that line, it is resumable."""
    tail = fork_train_tail(fork, 47.28)
    pointer = {"prompt_learner/checkpoint": "model.pth.tar-100\n"}
    assert run_state(_folder(tmp_path, "run", {"log.txt": tail, **pointer})) == "finished-upstream"
    assert logged_value(tail) == 47.28 and logged_value(tail, "macro_f1") == 46.88
    cut = tail[:tail.index(FORK_FINISH_LINES[fork])]
    assert run_state(_folder(tmp_path, "cut", {"log.txt": cut, **pointer})) == "resumable"
