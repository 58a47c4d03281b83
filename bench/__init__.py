"""Benchmarks, upstream parity harnesses, cost measurement and the demo's studies, run as ``python -m bench.<name>``
from the repository root; no package of the product imports them (docs/ARCHITECTURE.md, the import table)."""
