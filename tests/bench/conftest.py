"""The tests of bench/ form the bench tier: every test collected under this folder is marked ``bench``, so that
``make test`` (``-m "not slow and not bench"``) leaves them out and ``make test-bench`` (``-m bench``) runs them."""
from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the items of this folder before ``-m`` selects (pytest's mark plugin deselects in this same hook)."""
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.bench)
