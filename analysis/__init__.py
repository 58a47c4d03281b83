"""Results library: run-folder layout, readers of results.json and log.txt, statistics, tables, published numbers
and PETR logits dumps. The command lines (``parse_test_res.py``, ``tools/``) and the demo sit on top of it.

Modules: :mod:`analysis.layout` (where runs live), :mod:`analysis.readers` (what a run folder says),
:mod:`analysis.stats` (mean, spread, HM), :mod:`analysis.tables` (plain / GitHub / CSV output),
:mod:`analysis.paper` (published numbers), :mod:`analysis.b2n` (base-to-novel tables),
:mod:`analysis.transfer` (cross-dataset and domain-generalisation tables),
:mod:`analysis.dumps` (PETR logits dumps grouped per method / dataset / seed).
"""
