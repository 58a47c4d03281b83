"""Command-line tools on saved results and PETR logits dumps, run as ``python -m tools.<name>`` (or
``python tools/<name>.py``) from the repository root; their reusable parts live in ``analysis/``."""
