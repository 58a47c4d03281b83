"""CoOp/PromptKD command line: build the config, the trainer, then train and/or evaluate.

Example: python train.py --root DATA --seed 1 --trainer CoOp --dataset-config-file configs/datasets/eurosat.yaml
         --config-file configs/trainers/CoOp/vit_b16_ctxv1.yaml --output-dir output/... DATASET.NUM_SHOTS 16
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import traceback

EXIT_USER_ERROR = 2
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
              f"{EXIT_USER_ERROR}; --debug or {DEBUG_ENV}=1 also prints its traceback.")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=epilog,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", type=str, default="", help="path to the datasets folder (DATASET.ROOT)")
    p.add_argument("--output-dir", type=str, default="", help="output directory (OUTPUT_DIR)")
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
    p.add_argument("--env-info", action="store_true", help="also print the environment (torch collect_env)")
    p.add_argument("--debug", action="store_true", help=f"print the traceback of user errors too (or {DEBUG_ENV}=1)")
    p.add_argument("opts", default=None, nargs=argparse.REMAINDER, help="KEY VALUE pairs overriding the config")
    return p


def _merge(cfg, source: str, merge) -> None:
    """Run one merge step; a bad key or value becomes a ConfigError naming ``source`` (one ``error:`` line)."""
    from engine.errors import ConfigError
    from trainers.config import foreign_trainer_message

    try:
        merge()
    except (KeyError, ValueError, AssertionError) as e:
        msg = str(e.args[0]) if e.args else str(e)
        if msg.startswith(("Non-existent config key:", "Non-existent key:")):  # yacs: file / opts wording
            key = msg.split(":", 1)[1].strip()
            message = foreign_trainer_message(key)
            if message:
                raise ConfigError(f"{source}: {message}") from None
            raise ConfigError(f"{source}: unknown config key '{key}' "
                              "(declare it in trainers/config.py extend_cfg or fix the typo)") from None
        raise ConfigError(f"{source}: {msg}") from None


def _merge_file(cfg, path: str, what: str) -> None:
    from engine.errors import InputNotFoundError

    if not os.path.isfile(path):
        raise InputNotFoundError(f"{what} not found: {path}")
    _merge(cfg, path, lambda: cfg.merge_from_file(path))


def reset_cfg(cfg, args: argparse.Namespace) -> None:
    """Copy the command-line arguments into the config (only those given)."""
    if args.root:
        cfg.DATASET.ROOT = args.root
    if args.output_dir:
        cfg.OUTPUT_DIR = args.output_dir
    if args.resume:
        cfg.RESUME = args.resume
    if args.seed is not None and args.seed >= 0:
        cfg.SEED = args.seed
    if args.source_domains:
        cfg.DATASET.SOURCE_DOMAINS = args.source_domains
    if args.target_domains:
        cfg.DATASET.TARGET_DOMAINS = args.target_domains
    if args.transforms:
        cfg.INPUT.TRANSFORMS = args.transforms
    if args.trainer:
        cfg.TRAINER.NAME = args.trainer
    if args.backbone:
        cfg.MODEL.BACKBONE.NAME = args.backbone
    if args.head:
        cfg.MODEL.HEAD.NAME = args.head


def register_project() -> None:
    """Register every trainer and dataset of the catalogs (imports torch, so not done for --help)."""
    from datasets.catalog import register_datasets
    from trainers.catalog import register_trainers

    register_datasets()
    register_trainers()


def setup_cfg(args: argparse.Namespace):
    """default → extend_cfg → dataset yaml → trainer yaml → CLI → opts → freeze."""
    from engine import get_cfg_default
    from trainers.config import extend_cfg

    cfg = get_cfg_default()
    extend_cfg(cfg)
    if args.dataset_config_file:
        _merge_file(cfg, args.dataset_config_file, "dataset config file")
    if args.config_file:
        _merge_file(cfg, args.config_file, "trainer config file")
        cfg.CONFIG_NAME = os.path.splitext(os.path.basename(args.config_file))[0]
    reset_cfg(cfg, args)
    _merge(cfg, "command-line opts", lambda: cfg.merge_from_list(args.opts or []))
    cfg.freeze()
    return cfg


def print_args(args: argparse.Namespace, cfg) -> None:
    print("***************\n** Arguments **\n***************")
    for key in sorted(vars(args)):
        print(f"{key}: {getattr(args, key)}")
    print("************\n** Config **\n************")
    print(cfg)


def main(argv: list[str] | None = None):
    """Run train.py with ``argv`` (default sys.argv[1:]) and return the trainer; stdout is restored afterwards.

    Errors propagate (``cli`` turns user errors into one line); once the run's log.txt is open, the error (or the
    interruption) is written there too.
    """
    args = build_parser().parse_args(argv)
    register_project()
    import torch

    from engine import build_trainer, collect_env_info, set_random_seed, setup_logger
    from engine.distributed import init_distributed, is_main, shutdown_distributed
    from engine.errors import first_line, is_user_error
    from engine.validation import check_config_values

    cfg = setup_cfg(args)
    init_distributed(cfg.USE_CUDA)  # under torchrun with several processes; rank 0 alone logs and writes
    logger = setup_logger(cfg.OUTPUT_DIR if is_main() else None)
    try:
        check_config_values(cfg)
        if cfg.SEED >= 0:
            print(f"Setting fixed seed: {cfg.SEED}")
            set_random_seed(cfg.SEED)
        if torch.cuda.is_available() and cfg.USE_CUDA:
            torch.backends.cudnn.benchmark = True
        print_args(args, cfg)
        if args.env_info:
            print("Collecting env info ...")
            print(f"** System info **\n{collect_env_info()}\n")
        trainer = build_trainer(cfg)
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
    except Exception as e:
        if logger is not None:
            logger.write_file(f"\nerror: {first_line(e)}\n" if is_user_error(e) else f"\n{traceback.format_exc()}")
        raise
    finally:
        sys.stdout.flush()
        if logger is not None:
            logger.close()
        shutdown_distributed()


def cli(argv: list[str] | None = None) -> int:
    """train.py's exit status: 0, 2 after one ``error:`` line for a user error, 130 when interrupted (Ctrl-C)."""
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
    return 0


if __name__ == "__main__":
    status = cli()
    if status == EXIT_INTERRUPTED:  # end by SIGINT itself, so a calling shell script (a loop of runs) stops too
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(status)
