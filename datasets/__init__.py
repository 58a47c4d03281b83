"""The CoOp datasets and the built-in demo datasets, one reader module each. Importing the package registers nothing:
``datasets.catalog`` lists the datasets and registers them on demand (``register_datasets()``).

Readers only read; data roles are in ``datasets/protocols.py``, shared split handling in ``datasets/splits.py`` and
the few-shot JSON cache in ``datasets/fewshot.py``.
"""
