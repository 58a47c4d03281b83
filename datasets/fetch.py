"""Fetch the benchmark datasets from the Hugging Face copy PromptKD publishes, into CoOp's layout under a data root.

``python -m datasets.fetch --data $DATA [NAME ... | all] [--repo ID] [--repo-type T] [--revision REV] [--dry-run]``

The repository's files are listed through the hub's API and picked per dataset by name (``eurosat.zip`` or a folder
``eurosat/`` for EuroSAT, whose folder is ``eurosat/``; case, ``-`` and ``_`` are ignored). Each file is downloaded
with ``huggingface_hub`` (resumable, into ``$DATA/.downloads``), checked against the checksum the hub lists for it,
unpacked into a temporary folder beside the dataset's and renamed into place, so a failed fetch leaves no dataset
folder behind. ImageNet is not in the copy: its manual steps are printed. Offline (``PETR_OFFLINE=1`` or
``HF_HUB_OFFLINE=1``, or the hub does not answer one quick probe), one ``error:`` line says so and each dataset gets
one line: what, from where, to where and how to place it by hand (exit status 2).
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

from engine.archives import archive_stem, name_key, safe_parts, unpack
from engine.digests import sha256_of
from engine.errors import CorruptFileError, InvalidInputError, UserError
from engine.offline import unreachable

from . import check
from .layouts import LAYOUTS, PAPER_DATASETS

REPO_ID = "zhengli97/prompt_learning_dataset"
REPO_TYPE = "model"  # PromptKD links https://huggingface.co/zhengli97/prompt_learning_dataset: a model repository
MANUAL = {"ImageNet"}  # not in the copy (its licence asks for a download from image-net.org)
DOWNLOADS = ".downloads"
EXIT_USER_ERROR = 2
IGNORED_FILES = {".gitattributes", "README.md"}


@dataclass(frozen=True)
class Target:
    """One dataset to fetch: its ``DATASET.NAME`` and its folder below the data root."""

    name: str
    folder: str
    short: str
    """Its config name (``configs/datasets/<short>.yaml``), what the data-root check takes."""

    def keys(self) -> set[str]:
        return {name_key(self.name), name_key(self.folder), name_key(self.short)}


def benchmark_targets() -> list[Target]:
    """Every benchmark dataset (demo datasets are generated, not fetched) with its folder (datasets/layouts.py)."""
    return [Target(LAYOUTS[short].name, LAYOUTS[short].folder, short) for short in PAPER_DATASETS]


def select_targets(requested: list[str], targets: list[Target]) -> list[Target]:
    """The targets named in ``requested`` (DATASET.NAME, folder or config name; ``all``: every fetchable one)."""
    if requested == ["all"]:
        return [t for t in targets if t.name not in MANUAL]
    chosen, unknown = [], []
    for text in requested:
        match = next((t for t in targets if name_key(text) in t.keys()), None)
        if match is None:
            unknown.append(text)
        elif match not in chosen:
            chosen.append(match)
    if unknown:
        names = ", ".join(f"{t.folder} ({t.name})" for t in targets)
        raise UserError(f"unknown dataset(s) {', '.join(unknown)}; known: {names}, or all")
    return chosen


def files_of(target: Target, paths: list[str]) -> list[str]:
    """The repository paths that belong to ``target``: a top-level archive or folder named like the dataset."""
    picked = []
    for path in paths:
        first = path.split("/", 1)[0]
        if path not in IGNORED_FILES and name_key(archive_stem(first) or first) in target.keys():
            picked.append(path)
    return picked


def git_blob_sha1(path: str) -> str:
    """The git object id of a file (what the hub lists for files not stored in LFS)."""
    digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: str, entry) -> str:
    """Check a downloaded file against the hub's listing (``RepoFile``): the LFS SHA-256, else the git blob id."""
    if entry.lfs is not None:
        algorithm, expected, actual = "SHA-256", entry.lfs["sha256"], sha256_of(path)
    else:
        algorithm, expected, actual = "git blob id", entry.blob_id, git_blob_sha1(path)
    if actual != expected:
        os.remove(path)
        raise CorruptFileError(f"{entry.path}: {algorithm} {actual} differs from the hub's {expected}; the "
                               "download was deleted: run the command again")
    return f"{algorithm} {expected[:12]}"


def dataset_content(unpacked: str, target: Target) -> str:
    """The folder to rename into place: the one top-level folder named like the dataset, else ``unpacked`` itself."""
    entries = [e for e in os.listdir(unpacked) if e != "__MACOSX"]
    if len(entries) == 1 and os.path.isdir(os.path.join(unpacked, entries[0])) and \
            name_key(entries[0]) in target.keys():
        return os.path.join(unpacked, entries[0])
    return unpacked


class HubSource:
    """One hub repository at one revision: its file listing and verified downloads into ``<root>/.downloads``."""

    def __init__(self, repo_id: str, repo_type: str, revision: str | None):
        from huggingface_hub import HfApi, constants

        self.repo_id, self.repo_type, self.revision = repo_id, repo_type, revision
        self.api = HfApi()
        prefix = "" if repo_type == "model" else f"{repo_type}s/"
        self.endpoint = constants.ENDPOINT
        self.url = f"{self.endpoint}/{prefix}{repo_id}/tree/{revision or 'main'}"
        self.entries: dict = {}

    def list_files(self) -> list[str]:
        """Every file path of the repository (``RepoFile`` entries kept for the checksums)."""
        from huggingface_hub.hf_api import RepoFile

        tree = self.api.list_repo_tree(self.repo_id, recursive=True, repo_type=self.repo_type, revision=self.revision)
        self.entries = {e.path: e for e in tree if isinstance(e, RepoFile)}
        return sorted(self.entries)

    def download(self, path: str, root: str) -> tuple[str, str]:
        """The verified local copy of ``path`` and what was checked."""
        from huggingface_hub import hf_hub_download

        local = hf_hub_download(self.repo_id, path, repo_type=self.repo_type, revision=self.revision,
                                local_dir=os.path.join(root, DOWNLOADS))
        return local, verify(local, self.entries[path])


def fetch_target(source: HubSource, target: Target, paths: list[str], root: str) -> str:
    """Download, verify and unpack ``paths`` into ``<root>/<folder>`` (atomically: a temporary folder beside it,
    then a rename); returns the dataset folder."""
    tmp = tempfile.mkdtemp(dir=root, prefix=f".{target.folder}.fetch-")
    try:
        for path in paths:
            local, checked = source.download(path, root)
            where = os.path.join(tmp, *path.split("/")[:-1])
            if archive_stem(path):
                count = unpack(local, where)
                print(f"{target.name}: {path} ({checked} verified): {count} files unpacked")
            else:
                os.makedirs(where, exist_ok=True)
                shutil.copyfile(local, os.path.join(where, os.path.basename(path)))
                print(f"{target.name}: {path} ({checked} verified)")
        final = os.path.join(root, target.folder)
        os.rename(dataset_content(tmp, target), final)
        for path in paths:  # the unpacked copy is in place: the downloads are no longer needed
            os.remove(os.path.join(root, DOWNLOADS, *path.split("/")))
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def by_hand(target: Target, source: HubSource, root: str) -> str:
    """One line: what would be fetched, from where, to where and how to place it by hand."""
    final = os.path.join(root, target.folder)
    return (f"{target.name}: the files named like '{target.folder}' in {source.url} -> {final}; by hand: download "
            f"them on a machine with internet and unpack them so that {final} has the layout of "
            f"DATASETS.md#{target.name.lower()}")


def cannot_list(source: HubSource, pending: list[Target], root: str, why: str) -> int:
    """The repository cannot be listed (offline, no answer): one ``error:`` line, then what each dataset would
    fetch, from where, to where and how to place it by hand; the exit status."""
    print(f"error: cannot list {source.url} ({why}); what each dataset would fetch, and how to place it by hand:",
          file=sys.stderr)
    for target in pending:
        print(by_hand(target, source, root), file=sys.stderr)
    return EXIT_USER_ERROR


def imagenet_steps(root: str) -> list[str]:
    """The manual steps for ImageNet, one line each."""
    folder = os.path.join(root, "imagenet")
    return [f"ImageNet is not in the Hugging Face copy; place it by hand in {folder} (DATASETS.md#imagenet):",
            "  1. download ILSVRC2012_img_train.tar and ILSVRC2012_img_val.tar from https://image-net.org/download.php",
            f"  2. unpack the training images into {folder}/images/train/<wnid>/ (one folder per class)",
            f"  3. unpack the validation images into {folder}/images/val/<wnid>/ (sorted into the same 1000 folders)",
            f"  4. put CoOp's classnames.txt into {folder}/",
            f"  5. check it: python -m datasets.check --data {root} imagenet"]


def fetch(root: str, requested: list[str], source: HubSource, dry_run: bool = False, other_splits: bool = False) -> int:
    """Fetch the requested datasets into ``root``, then check what was placed (``other_splits``: without comparing
    the counts with the published ones); one line per file and dataset. Returns the exit status."""
    targets = select_targets(requested, benchmark_targets())
    status = 0
    pending = []
    for target in targets:
        folder = os.path.join(root, target.folder)
        if os.path.exists(folder):
            print(f"{target.name}: {folder} is already there (move it away to fetch it again)")
        elif target.name in MANUAL:
            print("\n".join(imagenet_steps(root)))
            status = EXIT_USER_ERROR
        else:
            pending.append(target)
    if not pending:
        return status
    from huggingface_hub.errors import HTTPError, RepositoryNotFoundError, RevisionNotFoundError

    why = unreachable(source.endpoint)  # an offline node says so at once, not after the hub client's retries
    if why:
        return cannot_list(source, pending, root, why)
    try:
        paths = source.list_files()
    except (RepositoryNotFoundError, RevisionNotFoundError) as e:
        raise UserError(f"{source.url} not found ({type(e).__name__}); check --repo {source.repo_id}, "
                        f"--repo-type {source.repo_type} and --revision") from None
    except (OSError, HTTPError) as e:
        return cannot_list(source, pending, root, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}")
    placed = []
    for target in pending:
        picked = files_of(target, paths)
        final = os.path.join(root, target.folder)
        if not picked:
            print(f"error: {target.name}: {source.url} has no file named like '{target.folder}' (an archive "
                  f"{target.folder}.zip or a folder {target.folder}/; it holds {', '.join(paths[:12]) or 'nothing'}"
                  f"{' ...' if len(paths) > 12 else ''}): the repository's layout is not what this command expects; "
                  f"download the dataset by hand into {final} (DATASETS.md#{target.name.lower()}) or pass --repo / "
                  "--revision", file=sys.stderr)
            status = EXIT_USER_ERROR
            continue
        try:
            for path in picked:  # a listed name with '..' or a leading '/' would be placed outside the data root
                safe_parts(path, source.url, "repository")
        except InvalidInputError as e:
            print(f"error: {target.name}: {e}; nothing was placed in {final}", file=sys.stderr)
            status = EXIT_USER_ERROR
            continue
        print(f"{target.name}: {', '.join(picked)} from {source.url} -> {final}")
        if dry_run:
            continue
        try:
            os.makedirs(root, exist_ok=True)
            print(f"{target.name}: {fetch_target(source, target, picked, root)} is in place")
            placed.append(target.short)
        except (UserError, OSError, HTTPError) as e:
            print(f"error: {target.name}: {str(e).splitlines()[0]}; nothing was placed in {final} (finished "
                  f"downloads stay in {os.path.join(root, DOWNLOADS)} and a rerun resumes)", file=sys.stderr)
            status = EXIT_USER_ERROR
    if placed:
        print("Checking what was placed (python -m datasets.check):")
        if check.main(["--data", root, *placed, *(["--other-splits"] if other_splits else [])]) != 0:
            status = EXIT_USER_ERROR
    return status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m datasets.fetch", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["all"], metavar="NAME",
                   help="datasets by folder, DATASET.NAME or config name (eurosat, oxford_pets, ...); all (default): "
                        "every dataset of the copy (all but ImageNet)")
    p.add_argument("--data", "--root", dest="root", required=True,
                   help="the datasets folder (DATA): one folder per dataset (--root: the former name)")
    p.add_argument("--repo", default=REPO_ID, help=f"hub repository (default {REPO_ID})")
    p.add_argument("--repo-type", default=REPO_TYPE, choices=("model", "dataset"),
                   help=f"kind of hub repository (default {REPO_TYPE}, as PromptKD links it)")
    p.add_argument("--revision", default=None, help="branch, tag or commit of the repository (default main)")
    p.add_argument("--dry-run", action="store_true", help="list what would be fetched, from where, to where")
    p.add_argument("--other-splits", action="store_true",
                   help="check the fetched datasets without comparing their counts with the published ones")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status (2: a user error or a dataset not placed, each one line)."""
    args = build_parser().parse_args(argv)
    try:
        return fetch(os.path.abspath(args.root), args.names, HubSource(args.repo, args.repo_type, args.revision),
                     args.dry_run, args.other_splits)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR


if __name__ == "__main__":
    sys.exit(main())
