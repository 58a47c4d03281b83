"""Lets ``python tools/<name>.py`` import the repository's packages: Python puts tools/, not the root, on the path."""
import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])


def add_to_path() -> None:
    """Put the repository root first on ``sys.path`` (once)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
