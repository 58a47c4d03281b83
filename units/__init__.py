"""The unit commands: one place that turns (method, command, arguments, environment knobs) into train.py runs.

``python -m units METHOD COMMAND ARGS`` is what ``scripts/<method>/<command>.sh`` runs; ``--print-argv`` prints each
run's folder and train.py argument list instead of running it. :mod:`units.facts` holds the dataset lists, names,
distillation weights and teacher folders, :mod:`units.commands` each method family's commands (the methods' defaults
are ``trainers/catalog.py``'s rows). Importing it does not import torch (train.py is imported when a run starts).
"""
