"""python -m clip.download: weight files fetched from a local HTTP server, checked against the SHA-256 in their URL
(hashlib computes the reference), a corrupt download refused, offline lines that say how to place a file by hand."""
from __future__ import annotations

import hashlib
import os

import pytest

from clip import download as clip_download
from tests.helpers_fetch import OFFLINE_URL, serve_folder

PAYLOAD = b"tiny stand-in for a CLIP weight file\n" * 100


def error_lines(stderr: str) -> list[str]:
    """The ``error:`` lines of a captured stderr."""
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.fixture
def served(tmp_path):
    """A file server of ``tmp_path/served`` holding PAYLOAD under its true SHA-256 and under a wrong one."""
    root = tmp_path / "served"
    good, bad = hashlib.sha256(PAYLOAD).hexdigest(), "f" * 64
    for sha in (good, bad):
        (root / sha).mkdir(parents=True)
        (root / sha / "Tiny-1.pt").write_bytes(PAYLOAD)
    with serve_folder(root) as base_url:
        yield base_url, good, bad


def test_download_then_already_there(tmp_path, served, capsys):
    base_url, good, _ = served
    urls = {"Tiny/1": f"{base_url}/{good}/Tiny-1.pt"}
    target = tmp_path / "weights" / "Tiny-1.pt"
    assert clip_download.fetch_all(["Tiny/1"], str(tmp_path / "weights"), urls) == 0
    assert capsys.readouterr().out.splitlines() == [f"Tiny/1: {target} (downloaded from {urls['Tiny/1']}, SHA-256 "
                                                     "checked)"]
    assert hashlib.sha256(target.read_bytes()).hexdigest() == good
    assert os.listdir(tmp_path / "weights") == ["Tiny-1.pt"]  # no temporary file left
    assert clip_download.fetch_all(["Tiny/1"], str(tmp_path / "weights"), urls) == 0
    assert capsys.readouterr().out == f"Tiny/1: {target} (already there, SHA-256 checked)\n"


def test_corrupt_download_is_one_error_line_and_leaves_nothing(tmp_path, served, capsys):
    base_url, good, bad = served
    urls = {"Tiny/1": f"{base_url}/{bad}/Tiny-1.pt"}
    assert clip_download.fetch_all(["Tiny/1"], str(tmp_path / "weights"), urls) == 2
    err = error_lines(capsys.readouterr().err)  # tqdm's progress bar shares stderr
    assert len(err) == 1 and err[0].startswith("error: Tiny/1: SHA-256 mismatch")
    assert f"got {good}, expected {bad}" in err[0]
    assert os.listdir(tmp_path / "weights") == []


def test_a_wrong_file_already_there_is_refused(tmp_path, served, capsys):
    base_url, good, _ = served
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "Tiny-1.pt").write_bytes(PAYLOAD[:-1])
    urls = {"Tiny/1": f"{base_url}/{good}/Tiny-1.pt"}
    assert clip_download.fetch_all(["Tiny/1"], str(tmp_path / "weights"), urls) == 2
    err = capsys.readouterr().err
    assert f"its SHA-256 is {hashlib.sha256(PAYLOAD[:-1]).hexdigest()}, not {good}" in err and "delete it" in err


def test_offline_and_dry_run_say_what_from_where_to_where(tmp_path, capsys):
    sha = "a" * 64
    urls = {"Tiny/1": f"{OFFLINE_URL}/{sha}/Tiny-1.pt", "Tiny/2": f"{OFFLINE_URL}/{sha}/Tiny-2.pt"}
    root = tmp_path / "weights"
    assert clip_download.fetch_all(["Tiny/1", "Tiny/2"], str(root), urls, dry_run=True) == 2  # missing: exit 2
    out = [line.removeprefix("missing: ") for line in capsys.readouterr().out.splitlines()]
    assert out == [f"{name}: {urls[name]} -> {root / f'Tiny-{i}.pt'}; by hand: download it on a machine with internet "
                   f"and copy it to {root / f'Tiny-{i}.pt'} (sha256sum must print {sha})"
                   for i, name in ((1, "Tiny/1"), (2, "Tiny/2"))]
    assert not root.exists()
    (tmp_path / "there").mkdir()
    (tmp_path / "there" / "Tiny-1.pt").write_bytes(PAYLOAD)
    assert clip_download.fetch_all(["Tiny/1"], str(tmp_path / "there"), urls, dry_run=True) == 0
    there = tmp_path / "there" / "Tiny-1.pt"
    assert capsys.readouterr().out == f"there: Tiny/1: {there} (fetching checks its SHA-256)\n"
    assert clip_download.fetch_all(["Tiny/1", "Tiny/2"], str(root), urls) == 2
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 2 and all(line.startswith(f"error: {name}: cannot download (") and line.endswith(out[i])
                                 for i, (line, name) in enumerate(zip(err, ("Tiny/1", "Tiny/2"))))
    assert os.listdir(root) == []


def test_command_line_unknown_name(capsys):
    assert clip_download.main(["ViT-B/16", "ViT-H/99", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown CLIP model(s) ViT-H/99; available: RN50, RN101")


def test_command_line_names_openai_urls(tmp_path, capsys):
    assert clip_download.main(["ViT-B/16", "ViT-L/14", "--dir", str(tmp_path), "--dry-run"]) == 2  # both missing
    out = capsys.readouterr().out
    assert (f"ViT-L/14: https://openaipublic.azureedge.net/clip/models/b8cca3fd41ae0c99ba7e8951adf17d267cdb84cd88be"
            f"6f7c2e0eca1737a03836/ViT-L-14.pt -> {tmp_path / 'ViT-L-14.pt'}") in out
    assert str(tmp_path / "ViT-B-16.pt") in out
