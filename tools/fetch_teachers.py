"""Fetch PromptKD's released ViT-L/14 teachers from the Google Drive folder PromptKD publishes, with ``gdown``.

``python -m tools.fetch_teachers --teacher-dir teachers [NAME ... | all] [--folder ID] [--dry-run]``

The folder is listed, and each teacher's file (an archive or a checkpoint named like the teacher: ``EuroSAT.zip``,
``StandfordCars/...``; case, ``-`` and ``_`` ignored) is downloaded into a temporary folder inside ``--teacher-dir``,
unpacked there, and its checkpoint (``<Teacher>/VLPromptLearner*/model-best.pth.tar`` or ``model.pth.tar-<E>``) is
verified by loading it with the restricted loader (no pickled code runs) and mapping its prompt keys; only then is it
placed as ``<dir>/<Teacher>/VLPromptLearner/<file>`` with the ``checkpoint`` pointer naming it (the layout of a teacher
trained here and published), where the student scripts and the runner find it (``TEACHER_DIR``). A failed, partial or
refused download is one line and leaves nothing in ``--teacher-dir``. Offline (``PETR_OFFLINE=1`` or
``HF_HUB_OFFLINE=1``, or Google Drive does not answer one quick probe), each teacher gets one line: what, from where,
to where, and how to place it by hand. Teachers already in ``--teacher-dir`` are verified the same way.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

if not __package__:  # run as `python tools/fetch_teachers.py`
    from _repo_root import add_to_path

    add_to_path()

import gdown
from gdown.exceptions import DownloadError

from engine.archives import archive_stem, name_key, unpack
from engine.errors import UserError
from engine.offline import unreachable
from engine.runs import POINTER_FILE
from trainers.distillation.teacher import resolve_teacher_file
from trainers.prompting.deep_prompts import MODEL_NAME
from trainers.prompting.prompt_files import read_deep_prompts
from trainers.prompting.upstream_prompts import FOLDER_TO_DATASET

FOLDER_ID = "1OdQ9WauZmYAzVSUTTw7tIKKChyECIS5B"
"""The Google Drive folder of PromptKD's released teachers (it holds some of them; PromptKD's other mirrors need a
browser)."""
TEACHERS = ("Caltech101", "DescribableTextures", "EuroSAT", "FGVCAircraft", "Food101", "ImageNet", "OxfordFlowers",
            "OxfordPets", "StanfordCars", "SUN397", "UCF101", "ImageNet-xd")
"""The teacher folders the student scripts read: DATASET.NAME (base-to-novel) and ImageNet-xd (cross-dataset, DG)."""
EXIT_USER_ERROR = 2


@dataclass(frozen=True)
class RemoteFile:
    """One file of the Drive folder: its path inside the folder and the URL gdown downloads it from."""

    path: str
    url: str


def folder_url(folder_id: str) -> str:
    return f"https://drive.google.com/drive/folders/{folder_id}"


def list_folder(folder_id: str) -> list[RemoteFile]:
    """The files of a public Drive folder (and its subfolders), listed by gdown without downloading them."""
    listed = gdown.download_folder(id=folder_id, skip_download=True, quiet=True)
    return [RemoteFile(f.path.replace(os.sep, "/"), f"https://drive.google.com/uc?id={f.id}") for f in listed]


def teacher_of(path: str) -> str | None:
    """The teacher a file of the folder belongs to, from its first path part (upstream's spellings included)."""
    first = path.split("/", 1)[0]
    stem = archive_stem(first) or first.split(".", 1)[0]
    aliases = {name_key(upstream): ours for upstream, ours in FOLDER_TO_DATASET.items() if not upstream.endswith("-xd")}
    key = name_key(stem)
    return next((t for t in TEACHERS if name_key(t) == key), aliases.get(key))


def verify_teacher(folder: str, name: str) -> str:
    """Load the checkpoint of a teacher folder with the restricted loader and map its keys; returns a summary."""
    path = resolve_teacher_file(folder)
    sizes = read_deep_prompts(path).describe()
    return (f"{os.path.relpath(path, folder)}: {sizes['depth_text']} text x {sizes['n_ctx_text']} and "
            f"{sizes['depth_vision']} vision x {sizes['n_ctx_vision']} prompt tokens (widths {sizes['text_width']} / "
            f"{sizes['vision_width']})")


def teacher_root(unpacked: str) -> str:
    """The folder holding ``VLPromptLearner*/`` among the unpacked files."""
    for dirpath, dirnames, _ in os.walk(unpacked):
        if any(d.startswith(MODEL_NAME) for d in dirnames):
            return dirpath
    raise UserError(f"the downloaded files hold no {MODEL_NAME}*/ folder with a checkpoint (found: "
                    f"{', '.join(sorted(os.listdir(unpacked)))}): the folder's layout is not what this command expects")


def published_layout(checkpoint: str, folder: str) -> str:
    """``folder/VLPromptLearner/<checkpoint's name>`` + the ``checkpoint`` pointer naming it: the layout
    ``units.commands.publish_teacher`` gives a trained teacher, which the students and the runner look for."""
    learner = os.path.join(folder, MODEL_NAME)
    os.makedirs(learner)
    os.replace(checkpoint, os.path.join(learner, os.path.basename(checkpoint)))
    with open(os.path.join(learner, POINTER_FILE), "w") as f:
        f.write(f"{os.path.basename(checkpoint)}\n")
    return folder


def fetch_teacher(name: str, files: list[RemoteFile], teachers_dir: str) -> str:
    """Download, unpack and verify one teacher in a temporary folder of ``teachers_dir``, then rename it into place."""
    tmp = tempfile.mkdtemp(dir=teachers_dir, prefix=f".{name}.fetch-")
    try:
        unpacked = os.path.join(tmp, "unpacked")
        for remote in files:
            local = os.path.join(tmp, "download", *remote.path.split("/"))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            if gdown.download(url=remote.url, output=local, quiet=True) is None:
                raise UserError(f"gdown could not download {remote.url}")
            if archive_stem(remote.path):
                unpack(local, unpacked)
            else:
                placed = os.path.join(unpacked, *remote.path.split("/"))
                os.makedirs(os.path.dirname(placed), exist_ok=True)
                os.replace(local, placed)
        root = teacher_root(unpacked)
        try:
            summary = verify_teacher(root, name)
        except (UserError, OSError, ValueError) as e:  # the loader's line names the temporary path and a run's fix
            reason = str(e).strip().splitlines()[0].split("; ")[0].replace(unpacked + os.sep, "")
            raise UserError(f"{reason}: not a complete PromptKD teacher, so it was not placed (a download cut off: "
                            "run this command again)") from None
        final = os.path.join(teachers_dir, name)
        os.rename(published_layout(resolve_teacher_file(root), os.path.join(tmp, "published")), final)
        print(f"{name}: {final} is in place, verified: {summary}")
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def by_hand(name: str, source: str, teachers_dir: str) -> str:
    """One line: what would be fetched, from where, to where, and how to place it by hand."""
    final = os.path.join(teachers_dir, name)
    checkpoint = (f"{MODEL_NAME}_large/model.pth.tar-20" if name.endswith("-xd") else
                  f"{MODEL_NAME}/model-best.pth.tar")
    return (f"{name}: the file named like '{name}' in {source} -> {final}; by hand: download it on a machine with "
            f"internet, unpack it so that {os.path.join(final, checkpoint)} exists, then run this command again to "
            "verify it")


def fetch_teachers(teachers_dir: str, names: list[str], files: list[RemoteFile] | None, source: str,
                   dry_run: bool = False) -> int:
    """Fetch ``names`` from the listed ``files`` (None: the folder could not be listed) into ``teachers_dir``; one
    line per teacher. Returns the exit status (2 when a teacher is not in place)."""
    status = 0
    pending = []
    for name in names:
        folder = os.path.join(teachers_dir, name)
        if not os.path.exists(folder):
            pending.append(name)
            continue
        try:
            print(f"{name}: {folder} is already there, verified: {verify_teacher(folder, name)}")
        except (UserError, OSError, ValueError) as e:
            print(f"error: {name}: {folder} is there but does not load as a teacher ({str(e).splitlines()[0]}); "
                  "move it away and run this command again", file=sys.stderr)
            status = EXIT_USER_ERROR
    if pending and files is None:
        for name in pending:
            print(by_hand(name, source, teachers_dir), file=sys.stderr)
        return EXIT_USER_ERROR
    for name in pending:
        picked = [f for f in files if teacher_of(f.path) == name]
        if not picked:
            print(f"error: {name}: {source} has no file named like '{name}' (it holds "
                  f"{', '.join(f.path for f in files[:12]) or 'nothing'}{' ...' if len(files) > 12 else ''}); "
                  f"{by_hand(name, source, teachers_dir)}", file=sys.stderr)
            status = EXIT_USER_ERROR
            continue
        print(f"{name}: {', '.join(f.path for f in picked)} from {source} -> {os.path.join(teachers_dir, name)}")
        if dry_run:
            continue
        try:
            os.makedirs(teachers_dir, exist_ok=True)
            fetch_teacher(name, picked, teachers_dir)
        except (DownloadError, UserError, OSError, ValueError) as e:  # cut off, refused, or not a teacher
            reason = str(e).strip().splitlines()[0].rstrip(".") if str(e).strip() else type(e).__name__
            print(f"error: {name}: {reason}; nothing was placed in {teachers_dir}", file=sys.stderr)
            status = EXIT_USER_ERROR
    return status


def select(requested: list[str]) -> list[str]:
    """Teacher names from the command line (any spelling ``name_key`` equates; ``all``: every teacher)."""
    if requested == ["all"]:
        return list(TEACHERS)
    chosen = [next((t for t in TEACHERS if name_key(t) == name_key(r)), "") for r in requested]
    unknown = [r for r, c in zip(requested, chosen) if not c]
    if unknown:
        raise UserError(f"unknown teacher(s) {', '.join(unknown)}; known: {', '.join(TEACHERS)}, or all")
    return list(dict.fromkeys(chosen))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.fetch_teachers", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["all"], metavar="NAME",
                   help=f"teachers: {', '.join(TEACHERS)} (any case; all, the default: every one)")
    p.add_argument("--teacher-dir", "--dir", dest="dir", default=os.environ.get("TEACHER_DIR") or "teachers",
                   help="the teachers folder the students read (default $TEACHER_DIR, else teachers; --dir: the "
                        "former name)")
    p.add_argument("--folder", default=FOLDER_ID, help=f"Google Drive folder id (default {FOLDER_ID})")
    p.add_argument("--dry-run", action="store_true", help="list what would be fetched, from where, to where")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status (2: a user error or a teacher not placed, each one line)."""
    args = build_parser().parse_args(argv)
    teachers_dir, source = os.path.abspath(args.dir), folder_url(args.folder)
    try:
        names = select(args.names)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    files, why = None, unreachable(source)  # an offline node says so at once, without asking Google Drive
    if not why:
        try:
            files = list_folder(args.folder)
        except (DownloadError, OSError) as e:
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160]}"
    if why:
        print(f"error: cannot list {source} ({why})", file=sys.stderr)
    return fetch_teachers(teachers_dir, names, files, source, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
