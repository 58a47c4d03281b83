"""Fetch OpenAI CLIP weight files ahead of time: ``python -m clip.download ViT-B/16 ViT-L/14 [--dir DIR]``.

Run it on a machine with internet (a login node); compute nodes without internet then read the files from the same
folder (``CLIP_WEIGHTS_DIR=DIR``, or ~/.cache/clip, where ``clip.load_model`` looks). Each file is checked against
the SHA-256 its OpenAI URL carries, whether it is downloaded now or was there already.
"""
from __future__ import annotations

import argparse
import os
import sys
import urllib.error

from engine.digests import sha256_of
from engine.errors import CorruptFileError

from .clip import download
from .weights import MODELS, cache_dir, url_sha256

EXIT_USER_ERROR = 2


def default_dir() -> str:
    """Where ``clip.load_model`` looks for named weights besides ./clip/: $CLIP_WEIGHTS_DIR, else ~/.cache/clip."""
    return os.environ.get("CLIP_WEIGHTS_DIR") or cache_dir()


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


def fetch_all(names: list[str], root: str, urls: dict[str, str], dry_run: bool = False) -> int:
    """Fetch every name of ``urls`` into ``root``; one line per file. Returns the exit status (2: a file is
    missing or bad, with a line saying how to place it by hand)."""
    unknown = [n for n in names if n not in urls]
    if unknown:
        print(f"error: unknown CLIP model(s) {', '.join(unknown)}; available: {', '.join(urls)}", file=sys.stderr)
        return EXIT_USER_ERROR
    status = 0
    for name in names:
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
    p.add_argument("names", nargs="+", metavar="NAME", help=f"CLIP models: {', '.join(MODELS)}")
    p.add_argument("--dir", default="", help="folder for the files (default: $CLIP_WEIGHTS_DIR, else ~/.cache/clip)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be fetched, from where, to where")
    return p


def main(argv: list[str] | None = None) -> int:
    """Command-line entry; returns the exit status."""
    args = build_parser().parse_args(argv)
    root = os.path.abspath(args.dir or default_dir())
    status = fetch_all(args.names, root, MODELS, args.dry_run)
    if status == 0 and not args.dry_run and root != os.path.abspath(default_dir()):
        print(f"Compute nodes read these files with CLIP_WEIGHTS_DIR={root}")
    return status


if __name__ == "__main__":
    sys.exit(main())
