"""CoOp/PromptKD command line: build the config, the trainer, then train and/or evaluate.

Example: python train.py --root DATA --seed 1 --trainer CoOp --dataset-config-file configs/datasets/eurosat.yaml
         --config-file configs/trainers/CoOp/vit_b16_ctxv1.yaml --output-dir output/... DATASET.NUM_SHOTS 16
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import signal
import sys
import traceback

EXIT_USER_ERROR = 2
EXIT_PREEMPTED = 75  # sysexits' EX_TEMPFAIL: SIGTERM / SIGUSR1 / SIGHUP arrived, the state is saved; rerun to continue
EXIT_INTERRUPTED = 130
DEBUG_ENV = "PETR_DEBUG"


def load_epoch(value: str) -> int | str:
    """``--load-epoch``: a positive epoch number or ``last``."""
    if value == "last":
        return value
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected an epoch number >= 1 or 'last', got {value!r}")
    return int(value)


def build_parser() -> argparse.ArgumentParser:
    """The CoOp/PromptKD argument set (plus --env-info and --debug); --help lists the trainers and datasets."""
    from datasets.catalog import DATASETS
    from trainers.catalog import TRAINERS

    epilog = (f"trainers: {', '.join(sorted(TRAINERS))}\n"
              f"datasets: {', '.join(sorted(DATASETS))}\n"
              f"A user error (bad name, value or file) prints one 'error:' line and exits with status "
              f"{EXIT_USER_ERROR}; --debug or {DEBUG_ENV}=1 also prints its traceback.\n"
              f"SIGTERM, SIGUSR1 or SIGHUP (a preemption) finish the current training step, save a step-level resume "
              f"state and exit with status {EXIT_PREEMPTED}: rerun the same command to continue.")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", "--root", dest="root", type=str, default="",
                   help="the datasets folder (DATASET.ROOT; the scripts' DATA; --root: CoOp's name)")
    p.add_argument("--output-dir", type=str, default="", help="this run's folder (OUTPUT_DIR; the scripts compose it "
                   "under OUTPUT_ROOT)")
    p.add_argument("--resume", type=str, default="", help="checkpoint directory to resume from (RESUME)")
    p.add_argument("--seed", type=int, default=-1, help="only a non-negative value sets SEED (0 included)")
    p.add_argument("--source-domains", type=str, nargs="+", help="source domains for DA/DG")
    p.add_argument("--target-domains", type=str, nargs="+", help="target domains for DA/DG")
    p.add_argument("--transforms", type=str, nargs="+", help="data augmentation methods (INPUT.TRANSFORMS)")
    p.add_argument("--config-file", type=str, default="", help="trainer config yaml")
    p.add_argument("--dataset-config-file", type=str, default="", help="dataset config yaml")
    p.add_argument("--trainer", type=str, default="", help="trainer name (TRAINER.NAME)")
    p.add_argument("--backbone", type=str, default="", help="backbone name (MODEL.BACKBONE.NAME)")
    p.add_argument("--head", type=str, default="", help="head name (MODEL.HEAD.NAME)")
    p.add_argument("--eval-only", action="store_true", help="evaluation only")
    p.add_argument("--model-dir", type=str, default="", help="load the model from this directory for eval-only")
    p.add_argument("--load-epoch", type=load_epoch, help="load model.pth.tar-<epoch>, or 'last': the last saved "
                   "checkpoint of each model (default: model-best.pth.tar)")
    p.add_argument("--no-train", action="store_true", help="build the trainer but do not train")
    p.add_argument("--move-aside", action="store_true", help="when --output-dir holds a finished or interrupted run "
                   "of another config, move it to the hidden folder .<name>.old-<N> beside it and start this run "
                   "(nothing is deleted); without it such a run stops with an error naming the differing keys")
    p.add_argument("--env-info", action="store_true", help="also print the environment (torch collect_env)")
    p.add_argument("--debug", action="store_true", help=f"print the traceback of user errors too (or {DEBUG_ENV}=1)")
    p.add_argument("opts", default=None, nargs=argparse.REMAINDER, help="KEY VALUE pairs overriding the config")
    return p


TYPE_MISMATCH = re.compile(r"Type mismatch \(<class '(\w+)'> vs\. <class '(\w+)'>\) with values \((.*) vs\. (.*)\) "
                           r"for config key: (\S+)$")
"""yacs's line for a value of another type than the key's default: (its type, the value's, the default, the value,
the key)."""
WORDS_KEY = "CTX_INIT"
"""The key holding a prompt's initial words, which upstream CoOp-family yamls set to True for "a photo of a"."""


def mismatch_line(source: str, trainer: str, msg: str) -> str:
    """The line for yacs's type mismatch ``msg`` (of ``source``, run by ``trainer``) where yacs's says nothing to do:
    a key of another trainer's namespace names the running trainer's key (as the namespace check does), and a True
    for a prompt's words (upstream KgCoOp's yaml) says which words upstream meant. "" otherwise (yacs's line)."""
    from trainers.config import foreign_key_line

    match = TYPE_MISMATCH.match(msg)
    if not match:
        return ""
    wanted, _, _, given, key = match.groups()
    words = ' (upstream\'s CTX_INIT True stands for its words "a photo of a": give the words)' \
        if key.endswith(f".{WORDS_KEY}") and given == "True" else ""
    line = foreign_key_line(trainer, key, source)
    if line:
        return f"{line}{words}"
    return f"{source}: {key} takes the words that start the prompt ({wanted}), not True{words}" if words else ""


def _merge(cfg, source: str, merge, trainer: str = "") -> None:
    """Run one merge step; a bad key or value becomes a ConfigError naming ``source`` (one ``error:`` line);
    ``trainer``: the ``--trainer`` of the run, whose namespace a mistyped key of another trainer is named against."""
    from engine.errors import ConfigError
    from trainers.config import foreign_trainer_message, own_key_hint

    try:
        merge()
    except (KeyError, ValueError, AssertionError) as e:
        msg = str(e.args[0]) if e.args else str(e)
        mismatch = mismatch_line(source, trainer or cfg.TRAINER.NAME, msg)
        if mismatch:
            raise ConfigError(mismatch) from None
        if msg.startswith(("Non-existent config key:", "Non-existent key:")):  # yacs: file / opts wording
            key = msg.split(":", 1)[1].strip()
            message = foreign_trainer_message(key)
            if message:
                raise ConfigError(f"{source}: {message}") from None
            hint = own_key_hint(cfg.TRAINER.NAME, key) or \
                " (declare it with its rule in its trainer's CONFIG_KEYS or fix the typo)"
            raise ConfigError(f"{source}: unknown config key '{key}'{hint}") from None
        raise ConfigError(f"{source}: {msg}") from None


def read_yaml(path: str, what: str) -> dict:
    """The mapping of KEY: value a config file holds; a missing, unreadable, empty or non-mapping file is one
    ``error:`` line naming it (``what``: "trainer config file", ...)."""
    import yaml

    from engine.errors import ConfigError, InputNotFoundError
    from engine.inputs import open_input

    if not os.path.isfile(path):
        raise InputNotFoundError(f"{what} not found: {path}")
    try:
        with open_input(path, "config", text=True) as f:
            data = yaml.safe_load(f)
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is not a text (UTF-8) file; give a YAML config") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}:" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        hint = "indent with spaces, not tabs" if "\\t" in problem else "fix the YAML syntax"
        raise ConfigError(f"{what} {path}:{where} {problem}; {hint}") from None
    if data is None:
        raise ConfigError(f"{what} {path} is empty; give its KEY: value lines (see configs/) or leave it out")
    if not isinstance(data, dict):
        raise ConfigError(f"{what} {path} holds a {type(data).__name__} at the top; a config file is a mapping of "
                          "KEY: value lines")
    return data


def _merge_file(cfg, path: str, what: str, trainer: str = "") -> None:
    """Merge the config file ``path`` into ``cfg`` (``trainer``: the run's ``--trainer``, for its errors)."""
    data = read_yaml(path, what)
    _merge(cfg, path, lambda: cfg.merge_from_other_cfg(type(cfg)(data)), trainer)


ARGUMENT_KEYS = {"root": "DATASET.ROOT", "output_dir": "OUTPUT_DIR", "resume": "RESUME", "seed": "SEED",
                 "source_domains": "DATASET.SOURCE_DOMAINS", "target_domains": "DATASET.TARGET_DOMAINS",
                 "transforms": "INPUT.TRANSFORMS", "trainer": "TRAINER.NAME", "backbone": "MODEL.BACKBONE.NAME",
                 "head": "MODEL.HEAD.NAME"}
"""The arguments that set a config key (``--data``, or ``--root``, sets DATASET.ROOT, ...)."""


def argument_values(args: argparse.Namespace) -> dict[str, object]:
    """The config keys the command-line arguments set, with their values: those given (``--seed`` when 0 or more)."""
    values = {key: getattr(args, name) for name, key in ARGUMENT_KEYS.items()}
    return {key: value for key, value in values.items()
            if (value is not None and value >= 0 if key == "SEED" else value)}


def reset_cfg(cfg, args: argparse.Namespace) -> None:
    """Copy the command-line arguments into the config (only those given)."""
    for key, value in argument_values(args).items():
        *parents, leaf = key.split(".")
        node = cfg
        for name in parents:
            node = getattr(node, name)
        setattr(node, leaf, value)


def config_files(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The config files ``args`` name, in merge order, each with what it is (for its errors)."""
    named = ((args.dataset_config_file, "dataset config file"), (args.config_file, "trainer config file"))
    return [(path, what) for path, what in named if path]


def command_settings(args: argparse.Namespace) -> dict[str, tuple[object, str]]:
    """Every config key the command line ``args`` sets, with its value and the last source that sets it, in train.py's
    merge order: a config file (its path; its CONFIG_NAME too), the arguments that name a key (``command-line
    arguments``), the opts (``command-line opts``, values as written). Read without building the config (the protocol
    runner asks it of its jobs' command lines)."""
    from engine.schema import config_leaves

    given: dict[str, tuple[object, str]] = {}
    for path, what in config_files(args):
        given.update((key, (value, path)) for key, value in config_leaves(read_yaml(path, what)))
    if args.config_file:
        given["CONFIG_NAME"] = (os.path.splitext(os.path.basename(args.config_file))[0], args.config_file)
    given.update((key, (value, "command-line arguments")) for key, value in argument_values(args).items())
    opts = args.opts or []
    given.update((key, (value, "command-line opts")) for key, value in zip(opts[0::2], opts[1::2]))
    return given


def command_keys(args: argparse.Namespace) -> dict[str, str]:
    """Every config key the command line ``args`` sets, with the last source that sets it (:func:`command_settings`)."""
    return {key: source for key, (_, source) in command_settings(args).items()}


def register_project() -> None:
    """Register every trainer and dataset of the catalogs (imports torch, so not done for --help)."""
    from datasets.catalog import register_datasets
    from trainers.catalog import register_trainers

    register_datasets()
    register_trainers()


def setup_cfg(args: argparse.Namespace):
    """default → extend_cfg → dataset yaml → trainer yaml → CLI → opts → the backbone's image normalisation
    (``trainers.config.follow_backbone``) → freeze; then a key of another trainer's
    namespace that a file or the opts set and the running trainer would ignore is refused
    (``trainers.config.check_namespaces``)."""
    from engine import get_cfg_default
    from trainers.config import check_namespaces, extend_cfg, follow_backbone

    cfg = get_cfg_default()
    extend_cfg(cfg)
    for path, what in config_files(args):
        _merge_file(cfg, path, what, args.trainer or "")
    if args.config_file:
        cfg.CONFIG_NAME = os.path.splitext(os.path.basename(args.config_file))[0]
    reset_cfg(cfg, args)
    opts = args.opts or []
    _merge(cfg, "command-line opts", lambda: cfg.merge_from_list(opts))
    given = command_keys(args)
    note = follow_backbone(cfg, given)
    if note:
        print(note)
    cfg.freeze()
    check_namespaces(cfg, given)
    return cfg


def log_args(args: argparse.Namespace, cfg, logger) -> None:
    """The arguments and the merged config, as Dassl dumps them, into the run's log only (where upstream's readers
    and ``engine.runs.logged_config`` find them); the terminal gets one line naming the log, so that an error that
    follows is not 250 lines further down."""
    if logger is None:  # not rank 0
        return
    lines = ["***************", "** Arguments **", "***************",
             *(f"{key}: {getattr(args, key)}" for key in sorted(vars(args))),
             "************", "** Config **", "************", str(cfg)]
    logger.write_file("\n".join(lines) + "\n")
    print(f"Arguments and config: {logger.fpath}")


def dataset_digest(cfg, dataset=None) -> dict[str, str]:
    """The run's data digest (``engine.run_identity.data_digest``) of ``dataset``, or of the dataset alone built for the
    trainer's data role (seeded as the run is; its output muted; no few-shot file written, a stale one passed over:
    ``datasets.fewshot.comparing``) when none is given."""
    from engine.run_identity import data_digest

    if dataset is None:
        register_project()
        from datasets.fewshot import comparing
        from engine import TRAINER_REGISTRY, build_dataset, set_random_seed

        if cfg.SEED >= 0:
            set_random_seed(cfg.SEED)
        with contextlib.redirect_stdout(io.StringIO()), comparing():
            dataset = build_dataset(cfg, TRAINER_REGISTRY.get(cfg.TRAINER.NAME).DATA_ROLE)
    return data_digest(dataset, cfg.DATASET.ROOT)


def input_roots(cfg) -> dict[str, str]:
    """The folders the inputs ledger names inputs relative to: the data root, which is no part of a run's identity
    (a moved data root keeps finished runs valid)."""
    return {"DATASET.ROOT": os.path.abspath(os.path.expanduser(cfg.DATASET.ROOT))} if cfg.DATASET.ROOT else {}


def _claim(args: argparse.Namespace, cfg, command: str):
    """Lock OUTPUT_DIR and compare the run there with this one: config first, then (for a finished or interrupted
    run) the data. A finished run whose data cannot be read any more is skipped on its config alone, with a note. The
    CLIP files it found by a name are compared with those the name finds now (``clip.weights.find_weights``)."""
    from clip.weights import find_weights
    from engine.errors import UserError, first_line
    from engine.run_identity import claim_run, run_identity

    identity = None if args.no_train else run_identity(cfg, args.eval_only, args.model_dir, args.load_epoch)
    claim = claim_run(cfg.OUTPUT_DIR, identity, command, args.move_aside, cfg.RESUME, input_roots(cfg),
                      cfg.TRAINER.NAME, find_weights)
    try:
        if claim.check_data:
            try:
                digest = dataset_digest(cfg)
            except UserError as e:
                if claim.state != "finished":
                    raise
                claim.notes.append(f"note: the data could not be read to compare it ({first_line(e)}); the run was "
                                   "compared on its config alone")
            else:
                claim.verify_data(digest)
    except BaseException:
        claim.release()
        raise
    return claim


def claim_output_dir(args: argparse.Namespace, cfg, command: str):
    """Rank 0 claims OUTPUT_DIR for this run (``engine.run_identity.claim_run``: lock, identity, data); returns the
    claim (None on other ranks) and the line to print when the same run already finished (then nothing else happens).

    Under torchrun every process joins the group here and follows rank 0: all skip, or all stop (rank 0 reports
    the error; the others exit with the same status).
    """
    from engine.errors import UserError
    from engine.run_lock import launched_rank, launched_world_size

    claim, error = None, None
    if launched_rank() == 0:
        try:
            claim = _claim(args, cfg, command)
        except UserError as e:
            error = e
    skip = claim.skip if claim is not None else ""
    if launched_world_size() > 1:
        from engine.distributed import init_distributed, share_from_main, shutdown_distributed

        init_distributed(cfg.USE_CUDA)
        failed, skip = share_from_main((error is not None, skip))
        if failed or skip:
            shutdown_distributed()
        if failed and error is None:
            raise SystemExit(EXIT_USER_ERROR)
    if error is not None:
        raise error
    return claim, skip


def record_inputs(claim, data: dict[str, str]) -> None:
    """Write the run's identity with its data digest and inputs ledger now, and again whenever the engine commits
    the ledger (before results.json is written: ``engine.inputs.commit``)."""
    from engine.inputs import active

    ledger = active()
    ledger.on_commit = lambda: claim.record(data, ledger)
    ledger.on_commit()


def require_model_dir(args: argparse.Namespace, trainer) -> None:
    """``--eval-only`` of a trainer with learned weights needs the run that learned them (``--model-dir``)."""
    from engine.errors import ConfigError

    names = trainer.get_model_names()
    if args.eval_only and not args.model_dir and names:
        raise ConfigError(f"--eval-only without --model-dir would evaluate the untrained {', '.join(names)} of "
                          f"{trainer.cfg.TRAINER.NAME}: pass --model-dir <its training run folder> (and --load-epoch "
                          "N or last when that run kept no model-best.pth.tar)")


def main(argv: list[str] | None = None):
    """Run train.py with ``argv`` (default sys.argv[1:]) and return the trainer (None when the same run already
    finished in OUTPUT_DIR: it is skipped); stdout is restored afterwards.

    Errors propagate (``cli`` turns user errors into one line); once the run's log.txt is open, the error (or the
    interruption, or the preemption) is written there too. The output folder is locked for the whole run (rank 0);
    preemption signals are handled while it runs (engine/preemption.py); no folder inside it is entered through a
    link (``engine.run_files.writing_in``).
    """
    from engine.inputs import recording
    from engine.run_files import writing_in

    args = build_parser().parse_args(argv)
    command = "train.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    with recording("") as ledger:
        cfg = setup_cfg(args)
        ledger.run_dir, ledger.roots = os.path.abspath(cfg.OUTPUT_DIR), input_roots(cfg)
        cfg, notes = recorded_config(args, cfg)
        with writing_in(ledger.run_dir):
            return _claim_and_run(args, cfg, command, notes)


def recorded_config(args: argparse.Namespace, cfg) -> tuple[object, list[str]]:
    """The config of a run that reads the model of finished runs (an ``--eval-only`` run's ``--model-dir``, a plug-in's
    seen branch): the keys that shaped it (the ``RECORDED_KEYS`` of the trainer that made it) as that run records them
    (``trainers.prompting.tuned_run.recorded_config``), and the lines to log when they differ from the merged
    config's. Taken before the run's identity is made: a changed record is a changed run."""
    from trainers.prompting.tuned_run import recorded_config as taken

    return taken(cfg, args.model_dir if args.eval_only else "")


def _claim_and_run(args: argparse.Namespace, cfg, command: str, notes: list[str]):
    """Claim OUTPUT_DIR, then skip the run or make it (see :func:`main`); ``notes`` go to its log first."""
    claim = None
    try:
        claim, skip = claim_output_dir(args, cfg, command)
        if claim is not None:
            claim.notes.extend(notes)
        if skip:
            if claim is not None:  # rank 0 says it
                print("\n".join([skip, *claim.notes]))
            return None
        return _run(args, cfg, claim)
    except Exception as e:
        from engine.errors import disk_full, disk_full_error, is_user_error

        full = disk_full(e)
        if full is None or is_user_error(e):
            raise
        folder = os.path.dirname(full.filename) if isinstance(full.filename, str) else cfg.OUTPUT_DIR
        raise disk_full_error(folder, full) from e
    finally:
        if claim is not None:
            claim.release()


def _run(args: argparse.Namespace, cfg, claim):
    """Train and/or evaluate in the claimed OUTPUT_DIR, logging to its log.txt, with preemption signals handled."""
    register_project()
    from engine.preemption import handle_signals

    with handle_signals():
        return _train_or_evaluate(args, cfg, claim)


def _train_or_evaluate(args: argparse.Namespace, cfg, claim):
    import torch

    from engine import build_trainer, collect_env_info, set_random_seed, setup_logger
    from engine.config import check_workers
    from engine.data_manager import close_loaders
    from engine.distributed import barrier, init_distributed, is_main, shutdown_distributed
    from engine.errors import first_line, is_user_error
    from engine.preemption import Preempted
    from engine.schema import check_config
    from trainers.config import config_schema

    init_distributed(cfg.USE_CUDA)  # under torchrun with several processes; rank 0 alone logs and writes
    logger = setup_logger(cfg.OUTPUT_DIR if is_main() else None)
    try:
        for note in claim.notes if claim is not None else ():
            print(note)
        check_config(cfg, config_schema())
        check_workers(cfg)
        if cfg.SEED >= 0:
            print(f"Setting fixed seed: {cfg.SEED}")
            set_random_seed(cfg.SEED)
        if torch.cuda.is_available() and cfg.USE_CUDA:
            torch.backends.cudnn.benchmark = True
        log_args(args, cfg, logger)
        if args.env_info:
            print("Collecting env info ...")
            print(f"** System info **\n{collect_env_info()}\n")
        trainer = build_trainer(cfg)
        require_model_dir(args, trainer)
        if claim is not None and claim.identity is not None:
            record_inputs(claim, dataset_digest(cfg, trainer.dm.dataset))
        barrier()  # no process goes on (and clears cut-off writes) while rank 0 writes run.json
        if args.eval_only:
            trainer.load_model(args.model_dir, epoch=args.load_epoch)
            trainer.test()
            return trainer
        if not args.no_train:
            trainer.train()
        return trainer
    except KeyboardInterrupt:
        if logger is not None:
            logger.write_file("\ninterrupted: rerun the same command to resume from the last saved epoch\n")
        raise
    except Preempted as e:
        if logger is not None:
            logger.write_file(f"\n{e}\n")
        raise
    except Exception as e:
        if logger is not None:
            logger.write_file(f"\nerror: {first_line(e)}\n" if is_user_error(e) else f"\n{traceback.format_exc()}")
        raise
    finally:
        close_loaders()  # the run's loader workers end with it, whoever still holds its trainer
        sys.stdout.flush()
        if logger is not None:
            logger.close()
        shutdown_distributed(synchronise=sys.exc_info()[0] is None)  # a failed process may have left the others


def cli(argv: list[str] | None = None) -> int:
    """train.py's exit status: 0, 2 after one ``error:`` line for a user error, 75 when preempted (the state is
    saved; rerun to continue), 130 when interrupted (Ctrl-C)."""
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    try:
        main(argv)
    except KeyboardInterrupt:
        print("interrupted: rerun the same command to resume from the last saved epoch", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:
        from engine.errors import first_line, is_user_error

        if not is_user_error(e):
            raise
        if debug:
            traceback.print_exc()
        print(f"error: {first_line(e)}", file=sys.stderr)
        return EXIT_USER_ERROR
    except BaseException as e:
        preemption = sys.modules.get("engine.preemption")  # loaded by main() before any preemption can happen
        if preemption is None or not isinstance(e, preemption.Preempted):
            raise
        with contextlib.suppress(OSError):  # after SIGHUP the terminal may be gone
            print(e, file=sys.stderr)
        return EXIT_PREEMPTED
    return 0


if __name__ == "__main__":
    from engine.preemption import ignore_repeats_until_exit

    ignore_repeats_until_exit()  # a repeated preemption signal must not turn the exit status 75 into death by signal
    status = cli()
    if status == EXIT_INTERRUPTED:  # end by SIGINT itself, so a calling shell script (a loop of runs) stops too
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(status)
