"""Fetch CLIP weight files ahead of time, where there is internet, for the compute nodes that have none.

``python -m clip.download ViT-B/16 open_clip:ViT-B-16/laion2b_s34b_b88k [--dir DIR]``

Run it on a machine with internet (a login node); compute nodes without internet then read the files from the same
folder (``CLIP_WEIGHTS_DIR=DIR``, or ~/.cache/clip, where ``clip.load_model`` looks). Each OpenAI file is checked
against the SHA-256 its OpenAI URL carries, whether it is downloaded now or was there already. open_clip's pretrained
tags are fetched by open_clip into the Hugging Face hub cache (``HF_HUB_CACHE=DIR`` with ``--dir``) and checked
against the SHA-256 the hub names their file by.
"""
from __future__ import annotations

import argparse
import os
import sys
import urllib.error

from engine.digests import sha256_of
from engine.errors import ConfigError, CorruptFileError, InputNotFoundError

from . import openclip
from .clip import download
from .weights import (
    MODELS,
    OpenClipName,
    default_dir,
    find_weights,
    hub_folder,
    open_clip_by_hand,
    open_clip_name,
    url_sha256,
)

EXIT_USER_ERROR = 2


def by_hand(name: str, url: str, target: str) -> str:
    """One line: what would be fetched, from where, to where, and how to place it by hand."""
    return (f"{name}: {url} -> {target}; by hand: download it on a machine with internet and copy it to {target} "
            f"(sha256sum must print {url_sha256(url)})")


def fetch_weights(name: str, url: str, root: str) -> str:
    """The verified weight file of ``url`` in ``root``: checked if present, else downloaded (SHA-256 checked)."""
    target = os.path.join(root, os.path.basename(url))
    if os.path.isfile(target):
        actual = sha256_of(target)
        if actual != url_sha256(url):
            raise CorruptFileError(f"{target} is there but its SHA-256 is {actual}, not {url_sha256(url)} as "
                                   f"{url} says: delete it and run this command again")
        print(f"{name}: {target} (already there, SHA-256 checked)")
        return target
    path = download(url, root)
    print(f"{name}: {path} (downloaded from {url}, SHA-256 checked)")
    return path


def fetch_open_clip(spec: OpenClipName, hub_root: str | None, dry_run: bool = False) -> int:
    """Fetch an open_clip name's weights through open_clip into the hub cache ``hub_root`` (None: the hub's default),
    or check the file already there; one line. Returns the exit status (2: missing or bad)."""
    path = find_weights(spec.name, hub_root)
    try:
        if dry_run or spec.pretrained is None:
            if not path:
                where = f"{spec.pretrained.url()} -> {hub_folder(spec.pretrained.hub, hub_root)}; " \
                    if spec.pretrained else ""
                print(f"missing: {spec.name}: {where}by hand: {open_clip_by_hand(spec)}")
                return EXIT_USER_ERROR
            print(f"there: {spec.name}: {path}" + (" (fetching checks its SHA-256)" if spec.pretrained else ""))
            return 0
        if path:
            checked = openclip.check_blob(path)
            print(f"{spec.name}: {path} (already there, {'SHA-256 checked' if checked else 'placed by hand'})")
            return 0
        path = openclip.download(spec, hub_root)
        print(f"{spec.name}: {path} (downloaded by open_clip from {spec.pretrained.hub}, SHA-256 checked)")
    except (CorruptFileError, InputNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


def fetch_all(names: list[str], root: str, urls: dict[str, str], dry_run: bool = False,
              hub_root: str | None = None) -> int:
    """Fetch every name into ``root`` (OpenAI's, from ``urls``) or the hub cache ``hub_root`` (open_clip's); one line
    per file. Returns the exit status (2: a file is missing or bad, with a line saying how to place it by hand)."""
    try:
        specs = {name: open_clip_name(name) for name in names}
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    unknown = [n for n in names if n not in urls and specs[n] is None]
    if unknown:
        print(f"error: unknown CLIP model(s) {', '.join(unknown)}; available: {', '.join(urls)}, or "
              "open_clip:MODEL/TAG (`python -m clip.openclip` lists them)", file=sys.stderr)
        return EXIT_USER_ERROR
    status = 0
    for name in names:
        if specs[name] is not None:
            status = max(status, fetch_open_clip(specs[name], hub_root, dry_run))
            continue
        url, target = urls[name], os.path.join(root, os.path.basename(urls[name]))
        if dry_run:  # what is there is named; what is not, with how to place it by hand (exit status 2)
            if os.path.isfile(target):
                print(f"there: {name}: {target} (fetching checks its SHA-256)")
            else:
                print(f"missing: {by_hand(name, url, target)}")
                status = EXIT_USER_ERROR
            continue
        try:
            fetch_weights(name, url, root)
        except CorruptFileError as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            status = EXIT_USER_ERROR
        except (urllib.error.URLError, OSError) as e:
            print(f"error: {name}: cannot download ({getattr(e, 'reason', None) or e}); {by_hand(name, url, target)}",
                  file=sys.stderr)
            status = EXIT_USER_ERROR
    return status


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m clip.download", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="+", metavar="NAME", help=f"CLIP models: {', '.join(MODELS)}, or open_clip:MODEL/TAG "
                   "(`python -m clip.openclip` lists them)")
    p.add_argument("--dir", default="", help="folder for the files (default: $CLIP_WEIGHTS_DIR, else ~/.cache/clip; "
                                             "open_clip's: the Hugging Face hub cache)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be fetched, from where, to where")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status."""
    args = build_parser().parse_args(argv)
    root = os.path.abspath(args.dir or default_dir())
    status = fetch_all(args.names, root, MODELS, args.dry_run, os.path.abspath(args.dir) if args.dir else None)
    if status == 0 and not args.dry_run and root != os.path.abspath(default_dir()):
        knobs = [f"{knob}={root}" for knob, kind in (("CLIP_WEIGHTS_DIR", False), ("HF_HUB_CACHE", True))
                 if any(n.startswith("open_clip:") == kind for n in args.names)]
        print(f"Compute nodes read these files with {' '.join(knobs)}")
    return status


if __name__ == "__main__":
    sys.exit(main())
