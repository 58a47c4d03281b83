"""python -m datasets.fetch against a local stand-in of the Hugging Face hub (HF_ENDPOINT on 127.0.0.1): the
repository's files listed through the hub's API, picked per dataset, checked against the listed checksums (hashlib
computes them in the test), unpacked into CoOp's layout and read by the dataset readers; a corrupt download, a
repository of another layout and the offline case each leave no dataset folder and say what to do."""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest

from datasets.catalog import register_datasets
from engine.archives import unpack
from engine.dataset_base import build_dataset
from engine.errors import CorruptFileError, InvalidInputError
from engine.offline import OFFLINE_KNOBS
from tests.helpers_datasets import make_cfg, write_tree
from tests.helpers_fetch import OFFLINE_URL, HubRepo, serve, tree_files
from tests.helpers_run import HANG_GUARD_S, REPO

REPO_ID = "someone/prompt_learning_dataset"


def zipped(files: dict[str, bytes], prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for path, data in files.items():
            zf.writestr(prefix + path, data)
    return buffer.getvalue()


def run_fetch(root, hub_url: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m datasets.fetch --root ROOT --repo REPO_ID ARGS`` with the hub at ``hub_url`` and its own HF_HOME,
    online (no offline knob) unless ``env`` sets one."""
    online = {k: v for k, v in os.environ.items() if k not in OFFLINE_KNOBS}
    environment = {**online, "HF_ENDPOINT": hub_url, "HF_HOME": str(root) + "-hf-home", "NO_PROXY": "127.0.0.1",
                   "no_proxy": "127.0.0.1", "HF_HUB_DISABLE_TELEMETRY": "1", **env}
    return subprocess.run([sys.executable, "-m", "datasets.fetch", "--root", str(root), "--repo", REPO_ID, *args],
                          cwd=REPO, env=environment, capture_output=True, text=True, timeout=HANG_GUARD_S)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """Tiny EuroSAT, Food101 and DescribableTextures trees (split JSON included) and their files."""
    src = tmp_path_factory.mktemp("src")
    trees = {name: write_tree(name, str(src), mode="json") for name in ("EuroSAT", "Food101", "DescribableTextures")}
    return {name: (tree, tree_files(tree.dataset_dir)) for name, tree in trees.items()}


def test_fetch_three_layouts_then_the_readers_read_them(tmp_path, sources):
    eurosat, food, dtd = (sources[n][1] for n in ("EuroSAT", "Food101", "DescribableTextures"))
    files = {"README.md": b"datasets\n", ".gitattributes": b"*.zip filter=lfs\n",
             "eurosat.zip": zipped(eurosat, "eurosat/"),  # one archive holding the dataset folder
             "food101.zip": zipped(food),  # one archive holding the folder's content
             **{f"dtd/{path}": data for path, data in dtd.items()}}  # the folder itself, file by file
    repo = HubRepo(REPO_ID, files, lfs={"eurosat.zip", "food101.zip", "dtd/split_zhou_DescribableTextures.json"})
    data = tmp_path / "data"
    with serve(repo.handler()) as hub_url:
        result = run_fetch(data, hub_url, "eurosat", "food101", "dtd", "--other-splits")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Checking what was placed (python -m datasets.check):" in out and "All 3 dataset(s) match." in out
    assert f"EuroSAT: eurosat.zip from {hub_url}/{REPO_ID}/tree/main -> {data / 'eurosat'}" in out
    sha = hashlib.sha256(files["eurosat.zip"]).hexdigest()
    assert f"EuroSAT: eurosat.zip (SHA-256 {sha[:12]} verified): {len(eurosat)} files unpacked" in out
    assert "Food101: food101.zip (SHA-256 " in out and f"Food101: {data / 'food-101'} is in place" in out
    assert "DescribableTextures: dtd/split_zhou_DescribableTextures.json (SHA-256 " in out
    assert "DescribableTextures: dtd/images/" in out and "(git blob id " in out
    assert "GET /api/models/someone/prompt_learning_dataset/tree/main" in repo.requests
    # The placed files are byte for byte the sources, in the readers' folders; nothing else is left behind.
    assert tree_files(data / "eurosat") == eurosat
    assert tree_files(data / "food-101") == food
    assert tree_files(data / "dtd") == dtd
    assert sorted(os.listdir(data)) == [".downloads", "dtd", "eurosat", "food-101"]
    assert [f for f in tree_files(data / ".downloads") if not f.startswith(".cache/")] == []
    register_datasets()
    for name, folder in (("EuroSAT", "eurosat"), ("Food101", "food-101"), ("DescribableTextures", "dtd")):
        tree = sources[name][0]
        dataset = build_dataset(make_cfg(str(data), name))
        assert dataset.classnames == tree.classnames
        assert {os.path.relpath(d.impath, data / folder) for d in dataset.test} == \
            {os.path.relpath(p, tree.dataset_dir) for p, (_, tag) in tree.truth.items() if tag == "test"}

    with serve(repo.handler()) as hub_url:  # a second fetch leaves the placed folders alone
        again = run_fetch(data, hub_url, "eurosat")
    assert again.returncode == 0 and f"EuroSAT: {data / 'eurosat'} is already there" in again.stdout


def test_corrupt_download_places_nothing(tmp_path, sources):
    eurosat = sources["EuroSAT"][1]
    repo = HubRepo(REPO_ID, {"eurosat.zip": zipped(eurosat, "eurosat/")}, lfs={"eurosat.zip"}, corrupt={"eurosat.zip"})
    data = tmp_path / "data"
    with serve(repo.handler()) as hub_url:
        result = run_fetch(data, hub_url, "eurosat")
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: EuroSAT: eurosat.zip: SHA-256 ")
    assert "differs from the hub's" in errors[0] and f"nothing was placed in {data / 'eurosat'}" in errors[0]
    assert sorted(os.listdir(data)) == [".downloads"]
    assert [f for f in tree_files(data / ".downloads") if not f.startswith(".cache/")] == []


def by_hand_lines(data, url: str, *datasets: tuple[str, str]) -> list[str]:
    """The lines saying what each (DATASET.NAME, folder) would fetch from ``url``, to where, and how by hand."""
    return [f"{name}: the files named like '{folder}' in {url} -> {data / folder}; by hand: download them on a "
            f"machine with internet and unpack them so that {data / folder} has the layout of "
            f"DATASETS.md#{name.lower()}" for name, folder in datasets]


def test_unexpected_layout_and_dry_run_say_what_to_do(tmp_path):
    repo = HubRepo(REPO_ID, {"part1.tar": b"x" * 10, "README.md": b"hi\n", "oxford_pets.zip": zipped({"a": b"b"})})
    data = tmp_path / "data"
    with serve(repo.handler()) as hub_url:
        result = run_fetch(data, hub_url, "eurosat", "oxford_pets", "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"error: EuroSAT: {hub_url}/{REPO_ID}/tree/main has no file named like 'eurosat' (an archive eurosat.zip or a "
        "folder eurosat/; it holds README.md, oxford_pets.zip, part1.tar): the repository's layout is not what this "
        f"command expects; download the dataset by hand into {data / 'eurosat'} (DATASETS.md#eurosat) or pass --repo "
        "/ --revision")
    pets = data / "oxford_pets"
    assert result.stdout == f"OxfordPets: oxford_pets.zip from {hub_url}/{REPO_ID}/tree/main -> {pets}\n"
    assert not [r for r in repo.requests if "/resolve/" in r]  # a dry run downloads nothing


@pytest.mark.parametrize("knob", OFFLINE_KNOBS)
def test_an_offline_knob_asks_no_server_and_says_what_to_do(tmp_path, knob):
    """``PETR_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``: no request reaches the hub; one error line, then one line per
    dataset (what, from where, to where, by hand), dry run or not."""
    repo = HubRepo(REPO_ID, {"eurosat.zip": b"x"})
    data = tmp_path / "data"
    with serve(repo.handler()) as hub_url:
        runs = [run_fetch(data, hub_url, "eurosat", "ucf101", *dry, **{knob: "1"}) for dry in ((), ("--dry-run",))]
    url = f"{hub_url}/{REPO_ID}/tree/main"
    for result in runs:
        assert result.returncode == 2 and result.stdout == "" and not data.exists()
        assert result.stderr.splitlines() == [
            f"error: cannot list {url} ({knob}=1 is set: this node does not download); what each dataset would "
            "fetch, and how to place it by hand:",
            *by_hand_lines(data, url, ("EuroSAT", "eurosat"), ("UCF101", "ucf101"))]
    assert repo.requests == []


def test_a_hub_that_does_not_answer_is_said_at_once(tmp_path):
    """No offline knob and nothing listening at the hub's address: one probe, no retries of the hub client (it
    retried for about 24 s before naming anything), then the same lines as offline."""
    data = tmp_path / "data"
    result = run_fetch(data, OFFLINE_URL, "eurosat", "--dry-run")
    url = f"{OFFLINE_URL}/{REPO_ID}/tree/main"
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and result.stdout == "" and not data.exists()
    assert lines[0].startswith(f"error: cannot list {url} ({OFFLINE_URL} does not answer: ")
    assert lines[0].endswith("); what each dataset would fetch, and how to place it by hand:")
    assert lines[1:] == by_hand_lines(data, url, ("EuroSAT", "eurosat"))


def test_imagenet_is_manual_and_unknown_names_are_one_line(tmp_path):
    result = run_fetch(tmp_path / "data", OFFLINE_URL, "imagenet")
    assert result.returncode == 2 and "ImageNet is not in the Hugging Face copy" in result.stdout
    assert f"{tmp_path / 'data' / 'imagenet'}/images/val/<wnid>/" in result.stdout
    unknown = run_fetch(tmp_path / "data", OFFLINE_URL, "eurosat", "mnist")
    assert unknown.returncode == 2 and unknown.stderr.startswith(
        "error: unknown dataset(s) mnist; known: imagenet (ImageNet), caltech-101 (Caltech101), oxford_pets ")


def test_unpack_refuses_members_outside_the_folder_and_links(tmp_path):
    evil = tmp_path / "evil.zip"
    evil.write_bytes(zipped({"../outside.txt": b"x"}))
    with pytest.raises(InvalidInputError, match="'../outside.txt', which would be written outside"):
        unpack(str(evil), str(tmp_path / "out"))
    absolute = tmp_path / "absolute.tar"
    with tarfile.open(absolute, "w") as tf:
        info = tarfile.TarInfo("/etc/owned")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(InvalidInputError, match="'/etc/owned', which would be written outside"):
        unpack(str(absolute), str(tmp_path / "out"))
    link = tmp_path / "link.tar.gz"
    with tarfile.open(link, "w:gz") as tf:
        info = tarfile.TarInfo("data/link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(InvalidInputError, match="'data/link', a link or special file"):
        unpack(str(link), str(tmp_path / "out"))
    assert not (tmp_path / "outside.txt").exists() and not (tmp_path / "out" / "data" / "link").exists()
    cut = tmp_path / "cut.zip"
    cut.write_bytes(zipped({"a.txt": b"a" * 1000})[:-30])
    with pytest.raises(CorruptFileError, match=f"{cut} cannot be unpacked"):
        unpack(str(cut), str(tmp_path / "out"))


def test_dataset_repositories_are_listed_under_datasets(tmp_path):
    repo = HubRepo(REPO_ID, {"eurosat.zip": zipped({"a": b"b"})}, repo_type="dataset")
    with serve(repo.handler()) as hub_url:
        result = run_fetch(tmp_path / "data", hub_url, "eurosat", "--repo-type", "dataset", "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"EuroSAT: eurosat.zip from {hub_url}/datasets/{REPO_ID}/tree/main -> " \
                            f"{tmp_path / 'data' / 'eurosat'}\n"
    assert repo.requests == ["HEAD /", f"GET /api/datasets/{REPO_ID}/tree/main"]  # one probe, then the listing


def test_a_listed_file_name_leaving_the_data_root_is_one_line(tmp_path, sources):
    """A hub listing whose file of a dataset climbs out with '..': that dataset gets one line and nothing is
    downloaded or placed for it (a dry run says the same); the other datasets are fetched."""
    files = {"eurosat/../../escaped.txt": b"outside\n", "eurosat/split_zhou_EuroSAT.json": b"{}",
             "food101.zip": zipped(sources["Food101"][1])}
    repo = HubRepo(REPO_ID, files, lfs={"food101.zip"})
    data = tmp_path / "data"
    with serve(repo.handler()) as hub_url:
        dry = run_fetch(data, hub_url, "eurosat", "--dry-run")
        result = run_fetch(data, hub_url, "eurosat", "food101", "--other-splits")
    line = (f"error: EuroSAT: {hub_url}/{REPO_ID}/tree/main holds the file 'eurosat/../../escaped.txt', which would be "
            "written outside the folder it is placed in; refused (the repository is not the expected one); nothing "
            f"was placed in {data / 'eurosat'}")
    assert (dry.returncode, dry.stderr, dry.stdout) == (2, line + "\n", "")
    assert result.returncode == 2 and result.stderr == line + "\n", result.stderr
    assert f"Food101: {data / 'food-101'} is in place" in result.stdout and "eurosat" not in os.listdir(data)
    assert not [r for r in repo.requests if "/resolve/" in r and "eurosat" in r]
    assert not os.path.exists(tmp_path / "escaped.txt") and not os.path.exists(data / "escaped.txt")
