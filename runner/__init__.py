"""Protocol runner: a whole table (base-to-novel, cross-dataset, DG) as jobs of unit commands on local GPUs/CPUs or
SLURM (``python -m runner``, docs/RUNNER.md).

Modules: :mod:`runner.protocols` (protocols as jobs; the methods and datasets are :mod:`units`'),
:mod:`runner.jobs` (a job, the states of its run folders and when it is finished),
:mod:`runner.costs` (projected GPU time), :mod:`runner.profiles` (paper / fast),
:mod:`runner.schedule` (dependency order, status line, failures), :mod:`runner.local` and :mod:`runner.slurm`
(executors), :mod:`runner.unit` (a job's call in the executor's process, with its log), :mod:`runner.tables` (the
final table).
"""
