"""``python -m runner PROTOCOL ...``: a whole table (base-to-novel, cross-dataset or DG) with one command.

Examples:
  python -m runner base2new --methods PETR PromptKD CoOp --datasets all --seeds 1 2 3 --data /data --dry-run
  python -m runner base2new --data /data --executor local --jobs-per-gpu 2
  python -m runner xd --data /data --executor slurm --partition gpu --time 1440 --profile fast
  python -m runner report output   # report.md and report.png of an existing output tree (each sweep writes them)
Exit status: 0 when every job finished and the table was written, 1 when a job failed or was refused (the others
went on; the table holds only the runs this sweep verified), 2 for bad arguments (one ``error:`` line, nothing
started) or missing inputs (the preflight, one line each: docs/RUNNER.md), 128 + the signal when stopped: 130
(Ctrl-C, SIGINT), 143 (SIGTERM) or 129 (SIGHUP); the local executor's jobs get the same signal and are killed when
they have not ended after 30 s, SLURM jobs stay queued (rerun the same command to continue).
"""
from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Sequence

from tabulate import tabulate

from runner.arguments import check_folders, check_logs, check_opts_keys, check_pairs, check_writable
from runner.costs import (
    CPUS_PER_GPU,
    EVAL_SOURCE,
    JOB_OVERHEAD_SOURCE,
    LOADER_SOURCE,
    PROJECTED_PROFILES,
    STEP_MS,
    method_table,
    missing_numbers,
    projected_hours,
    projected_seconds,
)
from runner.jobs import KINDS, Job, command_line, job_states
from runner.preflight import add_arguments, check_slurm, preflight
from runner.profiles import PROFILES
from runner.protocols import PASSED_KNOBS, Planner, Sweep
from runner.report import REPORT_DESCRIPTION, add_report_arguments, write_reports
from trainers.catalog import METHODS, find_method
from units.facts import BASE2NEW_DATASETS, XD_TARGETS, dataset_name, dg_targets


def default_methods(protocol: str) -> list[str]:
    """The catalog's default methods (``Method.default_sweep``, in its order) that ``protocol`` has scripts for."""
    rows = sorted((m for m in METHODS.values() if m.default_sweep), key=lambda m: m.default_sweep)
    return [m.name for m in rows if protocol == "base2new" or m.xd_config]
COMMON_ENV = ("DATA", "OUTPUT_ROOT", "TEACHER_DIR", "PYTHON", *PASSED_KNOBS, "NPROC")
"""Environment the plan prints once instead of on every command (the same for every job)."""
EXIT_FAILED, EXIT_USAGE = 1, 2
"""Exit statuses: a job failed, bad arguments (a signal: 128 + it, ``runner.schedule.stopped``)."""
SUMMARY_TAIL = 5
"""Log lines of each failed job in the final summary (the full tail was printed when it failed)."""


def xd_targets(source: str) -> tuple[str, ...]:
    """The cross-dataset targets of ``source`` (ImageNet's ten); other sources name theirs on the command line."""
    if source != "imagenet":
        raise ValueError(f"no default cross-dataset targets for source '{source}': name them with --datasets")
    return XD_TARGETS


PROTOCOL_HELP = {"base2new": "base-to-novel: train on the base classes, test on the novel ones",
                 "xd": "cross-dataset: from one source (ImageNet) to other datasets",
                 "dg": "domain generalisation: from one source (ImageNet) to its shifted variants"}


def build_parser() -> argparse.ArgumentParser:
    """``python -m runner {base2new,xd,dg,report} ...``: one subcommand per protocol (the sweep's options) and the
    report of an existing output tree, each with its own ``--help``."""
    p = argparse.ArgumentParser(prog="python -m runner", description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = p.add_subparsers(dest="protocol", required=True, metavar="{base2new,xd,dg,report}",
                                title="protocols (python -m runner PROTOCOL --help for its options)")
    for protocol, what in PROTOCOL_HELP.items():
        sweep = commands.add_parser(protocol, help=what, description=f"{what}: the table of its methods, datasets "
                                    "and seeds, as jobs of the unit commands (docs/RUNNER.md)",
                                    epilog="\n".join(__doc__.splitlines()[2:]),
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        add_sweep_arguments(sweep, protocol)
    report = commands.add_parser("report", help="report.md and report.png of an existing output tree",
                                 description=REPORT_DESCRIPTION)
    add_report_arguments(report)
    return p


def add_sweep_arguments(p: argparse.ArgumentParser, protocol: str) -> None:
    """The options of a sweep of ``protocol``."""
    p.add_argument("--methods", nargs="+",
                   help=f"methods in table order (the first is the Δ baseline), from {', '.join(METHODS)} (or a "
                        "method's trainer or scripts folder); default: every method the protocol has")
    p.add_argument("--datasets", nargs="+", default=["all"],
                   help="base-to-novel datasets, or the xd/dg targets (short names; 'all': the paper's)")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="the seeds of every run (default 1 2 3)")
    if protocol == "base2new":
        p.set_defaults(source="imagenet")
    else:
        p.add_argument("--source", default="imagenet", help="the source dataset (default imagenet)")
    p.add_argument("--shots", type=int, default=0,
                   help="PromptKD's and PETR's train images per class (0: all; the few-shot methods keep theirs)")
    p.add_argument("--data", "--root", dest="data", default=os.environ.get("DATA"),
                   help="the datasets folder (default $DATA; --root: CoOp's name)")
    p.add_argument("--output-root", "--output", dest="output", metavar="DIR",
                   help="the output root, under which the run folders, logs and tables go (OUTPUT_ROOT; default: "
                        "the profile's, output or output-fast)")
    p.add_argument("--teacher-dir", help="the teachers folder (default $TEACHER_DIR, else the profile's)")
    p.add_argument("--config", default="", help="one config name for every method (e.g. demo); default: each "
                                                "method's paper config")
    p.add_argument("--backbone", default=os.environ.get("BACKBONE", ""), metavar="NAME|FILE",
                   help="the students' CLIP for every run (MODEL.BACKBONE.NAME; a model name such as ViT-B/16 or a "
                        "weight file; default $BACKBONE, else each config's; the demo configs name none)")
    p.add_argument("--teacher-name", default=os.environ.get("TEACHER_NAME", ""), metavar="NAME|FILE",
                   help="the teacher's CLIP (the PromptSRC teacher's backbone and the distilled students' "
                        "TEACHER_NAME; default $TEACHER_NAME, else each config's)")
    p.add_argument("--extra-opts", default=os.environ.get("EXTRA_OPTS", ""),
                   help="'KEY VALUE ...' config overrides for every run (default $EXTRA_OPTS)")
    p.add_argument("--profile", choices=list(PROFILES), default="paper",
                   help="paper: the shipped configs (fp16, online teacher); fast: bf16 on bf16 cards, compile, "
                        "teacher cache views, persistent workers (docs/RUNNER.md)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="local (default): this machine's GPUs, or CPU slots without one; slurm: one SLURM job per "
                        "unit command, through submitit")
    p.add_argument("--dry-run", action="store_true",
                   help="print the plan (jobs, commands, GPU-hours) and the preflight, and stop; exit 2 when an input "
                        "is missing (without --skip-missing), so scripts can use it as a check")
    p.add_argument("--verbose", action="store_true",
                   help="also print every job's command line in the plan (each job's log starts with it anyway)")
    p.add_argument("--log-dir", help="per-job logs (default <output root>/logs/<protocol>)")
    p.add_argument("--gpus-per-job", type=int, default=1,
                   help="GPUs per run (NPROC: torchrun when > 1; 0: CPU jobs, as on a CPU-only SLURM partition)")
    p.add_argument("--procs-per-job", type=int,
                   help="CPU processes per run with --gpus-per-job 0 (NPROC: torchrun, gloo, when > 1; default 1)")
    p.add_argument("--threads", type=int, help="torch CPU threads per job (OMP_NUM_THREADS)")
    p.add_argument("--cpus-per-gpu", type=int, default=CPUS_PER_GPU,
                   help=f"loader processes feeding each GPU, for the projected GPU-hours: a step takes the longer of "
                        f"the GPU step and its images' loading (default {CPUS_PER_GPU}; docs/RUNNER.md)")
    local = p.add_argument_group("local executor")
    local.add_argument("--jobs-per-gpu", type=int, default=1, help="jobs sharing one GPU")
    local.add_argument("--cpu-jobs", type=int, default=1, help="jobs at once without a GPU")
    slurm = p.add_argument_group("slurm executor (submitit)")
    slurm.add_argument("--partition", help="the partition the jobs are queued on (default: the cluster's)")
    slurm.add_argument("--account", help="the account the jobs are charged to (default: yours)")
    slurm.add_argument("--time", type=int, default=1440, help="time limit per job in minutes (default 1440)")
    slurm.add_argument("--cpus-per-job", type=int, help="CPUs per job (default: the cluster's)")
    slurm.add_argument("--max-jobs", type=int, default=256, help="jobs queued at once")
    slurm.add_argument("--poll", type=float, default=5.0, help="seconds between two looks at the queue")
    slurm.add_argument("--slurm-opt", nargs="+", default=[], metavar="KEY=VALUE",
                       help="more sbatch options, e.g. qos=high constraint=a100")
    add_arguments(p)


def positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1")


def make_sweep(args: argparse.Namespace) -> Sweep:
    """The sweep the arguments describe (ValueError with a one-line message when they do not fit)."""
    if args.gpus_per_job < 0:
        raise ValueError("--gpus-per-job must be 0 (CPU) or more")
    positive(args, "threads", "jobs_per_gpu", "cpu_jobs", "time", "cpus_per_job", "max_jobs", "procs_per_job",
             "cpus_per_gpu")
    if args.procs_per_job and args.gpus_per_job:
        raise ValueError(f"--procs-per-job {args.procs_per_job} is for CPU jobs (--gpus-per-job 0): a GPU job runs "
                         f"one process per GPU (--gpus-per-job {args.gpus_per_job})")
    if args.shots < 0:
        raise ValueError(f"--shots {args.shots}: give 0 (every train image) or a number of images per class")
    check_pairs(args.extra_opts)
    if not args.data:
        raise ValueError("no datasets folder: pass --data DIR or set DATA (see DATASETS.md)")
    profile = PROFILES[args.profile]
    methods = tuple(dict.fromkeys(find_method(m) for m in args.methods or default_methods(args.protocol)))
    if args.datasets == ["all"]:
        datasets = {"base2new": lambda: BASE2NEW_DATASETS, "xd": lambda: xd_targets(args.source),
                    "dg": lambda: dg_targets(args.source)}[args.protocol]()
    else:
        datasets = args.datasets
    for name in (*datasets, *([args.source] if args.protocol != "base2new" else [])):
        dataset_name(name)  # ValueError naming the datasets there are (configs/datasets/<name>.yaml)
    output = args.output or profile.output
    if profile.fast and any(c.isspace() for c in os.path.abspath(output)):
        raise ValueError(f"--output-root {output!r}: the fast profile passes its teacher cache folder in EXTRA_OPTS, "
                         "which cannot hold spaces; choose a path without spaces")
    knobs = {k: os.environ[k] for k in PASSED_KNOBS if os.environ.get(k)}
    knobs.update((knob, value) for knob, value in (("BACKBONE", args.backbone), ("TEACHER_NAME", args.teacher_name))
                 if value)
    return Sweep(protocol=args.protocol, methods=methods, datasets=tuple(datasets), seeds=tuple(args.seeds),
                 data=os.path.abspath(args.data), output=os.path.abspath(output),
                 teacher_dir=os.path.abspath(args.teacher_dir or os.environ.get("TEACHER_DIR") or profile.teachers),
                 source=args.source, config=args.config, shots=args.shots, profile=profile,
                 extra_opts=args.extra_opts, knobs=knobs,
                 procs_per_job=args.procs_per_job or max(args.gpus_per_job, 1))


def print_plan(sweep: Sweep, jobs: Sequence[Job], show_commands: bool = False, cpus: int = CPUS_PER_GPU) -> None:
    """Jobs per kind with their states and projected GPU-hours (paper, fast and upstream) at ``cpus`` loader
    processes per GPU, per method with what bounds it, the step times used, and (``show_commands``, --verbose) every
    command."""
    states = job_states(jobs)
    profile = sweep.profile.name
    print(f"Plan: {sweep.protocol}, {len(sweep.datasets)} dataset(s) ({' '.join(sweep.datasets)}), seeds "
          f"{' '.join(map(str, sweep.seeds))}, methods {' '.join(m.name for m in sweep.methods)}; profile {profile}"
          + (f", source {sweep.source}" if sweep.protocol != "base2new" else ""))
    to_run = [j for j in jobs if states[j.name] not in ("finished", "check")]
    rows, unknown = [], set()
    for kind in KINDS:
        of_kind = [j for j in jobs if j.kind == kind]
        if not of_kind:
            continue
        count = Counter(states[j.name] for j in of_kind)
        unknown |= {missing_numbers(j, p) for j in of_kind for p in PROJECTED_PROFILES} - {""}
        rows.append([kind, len(of_kind), count["new"], count["resume"], count["retry"], count["check"],
                     count["finished"], *projected_hours([j for j in to_run if j.kind == kind], sweep.protocol, cpus)])
    rows.append(["tables", 1, 1, 0, 0, 0, 0, *[0.0] * len(PROJECTED_PROFILES)])
    total = ["total", *[sum(r[i] for r in rows) for i in range(1, 7 + len(PROJECTED_PROFILES))]]
    print(tabulate([*rows, total], headers=["jobs", "count", "new", "resume", "retry", "check", "finished (skipped)",
                                            *(f"GPU-h {p}" for p in PROJECTED_PROFILES)], floatfmt=".1f"))
    by_method = Counter()
    for job in to_run:
        seconds = projected_seconds(job, sweep.protocol, profile, cpus)
        if seconds is not None:
            by_method[job.method] += seconds / 3600
    if by_method:
        print(f"GPU-hours (H100) to run in this sweep's profile ({profile}), per method: "
              + ", ".join(f"{m} {h:.1f}" for m, h in by_method.items()))
    if unknown:
        print(f"No projection for {', '.join(sorted(unknown))}: counted as 0 h.")
    if to_run:
        print(f"Per method, with {cpus} loader processes per GPU (--cpus-per-gpu; bound: the GPU step, or the loader "
              "and how many times the step it needs):")
        print(method_table(to_run, sweep.protocol, cpus))
    trainers = sorted({j.trainer for j in jobs if j.kind in ("train", "teacher")})
    print("Projection (one H100): steps from the dataset sizes and each config's epochs and batch, times per step:")
    for trainer in trainers:
        for key in [(trainer, p) for p in PROJECTED_PROFILES if (trainer, p) in STEP_MS]:
            print(f"  {key[0]} {key[1]}: {STEP_MS[key].describe()}")
    print(f"  + evaluation ({EVAL_SOURCE}), start-up ({JOB_OVERHEAD_SOURCE}) and (fast) compilation and "
          "teacher-cache times: runner/costs.py")
    print(f"  each step and evaluated image at least its loading time: {LOADER_SOURCE} (runner/costs.py LOADER_RATES)")
    if not show_commands:
        print("(--verbose lists every job's command; each job's log starts with it)")
        return
    common = {k: v for k, v in jobs[0].knobs.items() if k in COMMON_ENV} if jobs else {}
    print("\nEvery job runs in the repository root with " + " ".join(f"{k}={v}" for k, v in common.items()))
    for job in jobs:
        after = f" (after {', '.join(job.deps)})" if job.deps else ""
        print(f"  [{states[job.name]}] {job.name}{after}\n      {command_line(job, hidden=common)}")
        if job.bf16_ns:
            print(f"      + TRAINER.{job.bf16_ns}.PREC bf16 on a card with bf16 (compute capability 8.0+)")


def print_summary(sweep: Sweep, jobs: Sequence[Job], verb: str, cpus: int = CPUS_PER_GPU) -> None:
    """One line of what the plan does with its jobs (per state) and the GPU-hours of those it runs, per profile (at
    ``cpus`` loader processes per GPU)."""
    states = job_states(jobs)
    count = Counter(states.values())
    to_run = [j for j in jobs if states[j.name] not in ("finished", "check")]
    hours = projected_hours(to_run, sweep.protocol, cpus)
    print(f"\nSummary: {len(jobs)} jobs (" + ", ".join(f"{count[s]} {s}" for s in
                                                    ("new", "resume", "retry", "check", "finished") if count[s])
          + f"); {len(to_run)} {verb}, projected GPU-hours (H100): "
          + ", ".join(f"{p} {h:.1f}" for p, h in zip(PROJECTED_PROFILES, hours)))


def close(lines: Sequence[str], status: int) -> None:
    """The closing lines of the output (problems last): ``error:`` lines to stderr when the sweep stops."""
    sys.stdout.flush()
    for line in lines:
        print(line, file=sys.stderr if status and line.startswith("error:") else sys.stdout)


def make_executor(args: argparse.Namespace, log_dir: str):
    if args.executor == "slurm":
        from runner.slurm import SlurmExecutor

        extra = dict(o.split("=", 1) for o in args.slurm_opt if "=" in o)
        if len(extra) != len(args.slurm_opt):
            raise ValueError("--slurm-opt takes KEY=VALUE pairs, e.g. --slurm-opt qos=high")
        return SlurmExecutor(os.path.join(log_dir, "slurm"), args.partition, args.account, args.time,
                             args.gpus_per_job, args.cpus_per_job, args.threads or args.cpus_per_job, args.max_jobs,
                             extra=extra, poll_s=args.poll)
    from runner.local import LocalExecutor, visible_gpus

    gpus = visible_gpus() if args.gpus_per_job else []
    return LocalExecutor(gpus, args.jobs_per_gpu, args.gpus_per_job, args.cpu_jobs, args.threads)


def print_report(report, jobs: Sequence[Job]) -> None:
    """Counts by outcome; each failure with its reason and its log's last lines; the jobs it kept from running."""
    print(f"\nJobs: {len(report.done)} done, {len(report.finished_before)} finished before (skipped), "
          f"{len(report.failed)} failed, {len(report.skipped)} not run because a job they need failed")
    for name, why in report.failed.items():
        blocked = [s for s, cause in report.skipped.items() if cause == name]
        reason, *tail = why.rstrip().splitlines()
        print(f"FAILED {name}: {reason}" + "".join(f"\n    | {line}" for line in tail[-SUMMARY_TAIL:]))
        if blocked:
            print(f"  not run because of it: {', '.join(blocked)}")


def error_line(why: str) -> str:
    """The last ``error:`` line of a failure's log tail (train.py's reason: a refused run names its differences),
    else the failure's first line."""
    errors = [line.strip() for line in why.splitlines() if line.strip().startswith("error:")]
    return errors[-1] if errors else why.splitlines()[0]


def print_left_out(report) -> None:
    """Under the table: the jobs whose runs it leaves out (refused or failed, with why, or not run)."""
    left = {**{name: error_line(why) for name, why in report.failed.items()},
            **{name: f"not run: it needs {cause}, which failed" for name, cause in report.skipped.items()}}
    if left:
        print(f"Left out of the table: the runs of {len(left)} job(s) this sweep refused, failed or did not run "
              "(runs they left from earlier commands are not shown):")
        for name, why in left.items():
            print(f"  {name}: {why}")


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    if args.protocol == "report":
        return write_reports(args)
    local = None  # the local executor, made before the checks: its first warm worker runs the --extra-opts check
    try:
        sweep = make_sweep(args)
        jobs = Planner(sweep).plan()
        log_dir = os.path.abspath(args.log_dir or os.path.join(sweep.output, "logs", sweep.protocol))
        if not args.dry_run and args.executor == "local":
            local = make_executor(args, log_dir)
        check_opts_keys(sweep.extra_opts, jobs, local.call if local else None)
        if args.executor == "slurm":
            check_slurm()
        if not args.dry_run:
            check_writable(sweep.output)
            check_folders(sweep.output, [os.path.join(sweep.output, sweep.protocol)])  # the table's
            check_folders(os.path.abspath(args.log_dir) if args.log_dir else sweep.output,
                          [log_dir, *([os.path.join(log_dir, "slurm")] if args.executor == "slurm" else [])])
            check_logs(log_dir, jobs)
    except ValueError as e:
        if local is not None:
            local.close()
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run:
        verdict = preflight(args, sweep, jobs)
        shown = verdict.jobs or jobs  # what would run; the whole plan when nothing can
        print_plan(sweep, shown, args.verbose, args.cpus_per_gpu)
        print(f"\n{verdict.table}")
        print_summary(sweep, shown, "to run", args.cpus_per_gpu)
        close(verdict.closing, verdict.status)
        return verdict.status
    from runner.schedule import run_plan, stopped
    from runner.tables import table_path, write_tables

    try:
        executor = local or make_executor(args, log_dir)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    verdict = preflight(args, sweep, jobs)
    print(verdict.table)
    if verdict.status:
        executor.close()
        close(verdict.closing, verdict.status)
        return verdict.status
    jobs = verdict.jobs
    print()
    print_plan(sweep, jobs, args.verbose, args.cpus_per_gpu)
    close(verdict.closing, 0)
    print(f"Executor: {executor.describe()}; logs in {log_dir}")
    try:
        report = run_plan(jobs, executor, log_dir,
                          lambda job: projected_seconds(job, sweep.protocol, sweep.profile.name, args.cpus_per_gpu))
        verified = {*report.done, *report.finished_before}
        status, text, written = write_tables(sweep, [run for job in jobs if job.name in verified for run in job.runs],
                                             local.call if local else None)
    except KeyboardInterrupt as e:
        line, status = stopped(e)
        print(line, file=sys.stderr)
        return status
    finally:
        executor.close()
    if text:
        print(f"\n{text.rstrip()}")
    if status == 0:
        print(f"Table written to {table_path(sweep, 'txt')} and {table_path(sweep, 'csv')}\n{written}")
    else:
        why = "no run of this sweep was verified" if not text else "its runs could not be read (above)"
        print(f"\nNo table written: {why}; {table_path(sweep, 'txt')} and .csv are left as they were")
    print_report(report, jobs)
    print_left_out(report)
    return 0 if report.ok and status == 0 else EXIT_FAILED
