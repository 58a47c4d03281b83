"""The unit commands of each method family: ``python -m units METHOD COMMAND ARGS`` (``scripts/<method>/<command>.sh``).

Each command checks its arguments and prerequisites (one ``error:`` line, exit status 2, as train.py for a user error),
then makes its train.py runs through :class:`units.unit.Unit`. The run folders follow docs/ARCHITECTURE.md:
``base2new/{train_base,test_new}/<dataset>/shots_<K>/<TRAINER>/<CFG>/seed<S>``; ``xd/train/<source>/...``,
``xd/test/<target>/...`` and ``dg/{train,test}/<target>/...`` for the transfer runs.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial

from engine.atomic import atomic_write_text
from engine.digests import file_digest
from engine.published import TEACHER_RECORD, read_record, record_differences, record_of_run
from engine.runs import pointed_checkpoint, read_run_json
from trainers.catalog import PETR_X_LEARNERS, Method, find_method
from trainers.catalog import TEACHER as TEACHER_METHOD
from units.facts import (
    BASE2NEW_DATASETS,
    DG_TARGETS,
    EXIT_PREEMPTED,
    REPO,
    UnitError,
    dataset_name,
    dg_targets,
    kd_weight,
    teacher_folder,
)
from units.unit import Unit

Command = Callable[[Unit, list[str]], None]
PLUGIN_SUFFIX = "_plugin"
"""A plug-in run's config folder is ``<config>_plugin`` (``petr_coop plugin``)."""
X_LEARNERS = "|".join(PETR_X_LEARNERS)
"""The prompt learners PETR+X routes on, as its usage lines and wrapper headers name them."""


def usage(u: Unit, args: list[str], counts: tuple[int, ...], text: str) -> None:
    """End with ``usage: TEXT`` unless there are ``counts`` arguments."""
    if len(args) not in counts:
        raise UnitError(f"usage: {text}")


def b2n_config(u: Unit, dataset: str) -> str:
    """CFG, else the method's base-to-novel config on ``dataset``."""
    return u.knob("CFG", u.method.b2n_config(dataset))


def shots(u: Unit) -> str:
    """SHOTS, else the method's base-to-novel shots."""
    return u.knob("SHOTS", str(u.method.shots))


def require_dg_target(u: Unit, script: str, target: str) -> None:
    """End with a usage line naming SOURCE's DG targets unless ``target`` is one of them."""
    targets = dg_targets(u.source)
    if target not in targets:
        raise UnitError(f"usage: SOURCE={u.source} bash {script} <{'|'.join(targets)}> <seed> ('{target}' is not a "
                        "DG target of it)")


# ----- the prompt learners (CoCoOp, MaPLe, IVLP) -------------------------------------------------------------------
def b2n_train(u: Unit, args: list[str], script: str, opts: tuple[str, ...] = ()) -> None:
    """Train on the base classes of DATASET, then test them (``opts``: the method's overrides after the classes)."""
    usage(u, args, (2,), f"bash {script} <dataset> <seed>")
    u.require_data()
    dataset, seed = args
    dataset_name(dataset)
    config = b2n_config(u, dataset)
    out = u.run_dir("base2new/train_base", dataset, shots(u), config, seed)
    u.train(f"Training {u.trainer} on the base classes of {dataset} (seed {seed})", dataset, out,
            ["DATASET.NUM_SHOTS", shots(u), "DATASET.SUBSAMPLE_CLASSES", "base", *opts], config, seed)


def b2n_test(u: Unit, args: list[str], script: str, missing: str, opts: tuple[str, ...] = (), config: str = "",
             last: bool = False) -> None:
    """Evaluate the model of base2new_train (``config``: another run folder's config; ``last``: its last epoch,
    :func:`last_epoch_args`) on the novel classes; without it, ``missing`` (formatted with the model folder, dataset
    and seed) says what to run."""
    usage(u, args, (2,), f"bash {script} <dataset> <seed>")
    u.require_data()
    dataset, seed = args
    dataset_name(dataset)
    config = config or b2n_config(u, dataset)
    model = u.run_dir("base2new/train_base", dataset, shots(u), config, seed)
    u.needs(u.finished(model), missing.format(model=model, dataset=dataset, seed=seed))
    out = u.run_dir("base2new/test_new", dataset, shots(u), config, seed)
    u.train(f"Evaluating {u.trainer} on the novel classes of {dataset} (seed {seed})", dataset, out,
            [*(last_epoch_args(u, model) if last else u.eval_args(model)), "DATASET.NUM_SHOTS", shots(u),
             "DATASET.SUBSAMPLE_CLASSES", "new", *opts], config.removesuffix(PLUGIN_SUFFIX), seed)


def last_epoch_args(u: Unit, model: str) -> list[str]:
    """The flags that evaluate the last epoch the run in ``model`` saved (LOAD_EPOCH: that one), as upstream's test
    scripts of CoCoOp, MaPLe and IVLP load theirs (``--load-epoch`` of the config's last epoch), whether or not the
    run kept a model-best.pth.tar."""
    return u.eval_args(model) if u.knob("LOAD_EPOCH") else ["--model-dir", model, "--load-epoch", "last", "--eval-only"]


def learner_b2n_train(u: Unit, args: list[str]) -> None:
    """A prompt learner on the base classes of DATASET."""
    b2n_train(u, args, u.script)


def learner_b2n_test(u: Unit, args: list[str]) -> None:
    """A prompt learner's base-class model on the novel classes."""
    b2n_test(u, args, u.script, "no finished training run in {model}: run bash "
             f"{u.script.removesuffix('test.sh')}train.sh {{dataset}} {{seed}}", last=True)


def learner_xd_train(u: Unit, args: list[str]) -> None:
    """Train on SOURCE, all classes, and test it."""
    usage(u, args, (1,), f"[SOURCE=imagenet] bash {u.script} <seed>")
    u.require_data()
    (seed,) = args
    config = u.knob("CFG", u.method.learner_xd_config)
    out = u.run_dir("xd/train", u.source, shots(u), config, seed)
    u.train(f"Training {u.trainer} on {shots(u)} shots of {dataset_name(u.source)}, all classes (seed {seed})",
            u.source, out, ["DATASET.NUM_SHOTS", shots(u), "DATASET.SUBSAMPLE_CLASSES", "all"], config, seed)


def learner_xd_test(u: Unit, args: list[str], tree: str = "xd") -> None:
    """Evaluate the SOURCE model of xd_train on every class of DATASET (under ``tree``/test)."""
    usage(u, args, (2,), f"[SOURCE=imagenet] bash {u.script} <dataset> <seed>")
    u.require_data()
    dataset, seed = args
    dataset_name(dataset)
    source_name = dataset_name(u.source)
    config = u.knob("CFG", u.method.learner_xd_config)
    model = u.run_dir("xd/train", u.source, shots(u), config, seed)
    u.needs(u.finished(model), f"no finished {source_name} run in {model}: run SOURCE={u.source} bash "
            f"{os.path.dirname(u.script)}/xd_train.sh {seed}")
    out = u.run_dir(f"{tree}/test", dataset, shots(u), config, seed)
    u.train(f"Evaluating the {source_name}-trained {u.trainer} on {dataset} (seed {seed})", dataset, out,
            [*last_epoch_args(u, model), "DATASET.SUBSAMPLE_CLASSES", "all"], config, seed)


def learner_dg_test(u: Unit, args: list[str]) -> None:
    """xd_test on a domain-generalisation target of SOURCE, written under dg/test."""
    require_dg_target(u, u.script, args[0] if args else "")
    learner_xd_test(u, args, tree="dg")


LEARNER = {"base2new_train": learner_b2n_train, "base2new_test": learner_b2n_test, "xd_train": learner_xd_train,
           "xd_test": learner_xd_test, "dg_test": learner_dg_test}


# ----- CoOp --------------------------------------------------------------------------------------------------------
def coop_b2n_train(u: Unit, args: list[str]) -> None:
    """Learn the context on the base classes of DATASET, then evaluate them."""
    b2n_train(u, args, u.sibling("base2new_train"))


def coop_b2n_test(u: Unit, args: list[str]) -> None:
    """Evaluate the context of base2new_train on the novel classes."""
    b2n_test(u, args, u.sibling("base2new_test"), "no finished training run in {model}: run "
             f"{u.sibling('base2new_train')} {{dataset}} {{seed}}")


def coop_opts(u: Unit, nctx: str, csc: str, ctp: str) -> list[str]:
    """The context's size, sharing and class-token position, in the method's namespace."""
    return [u.key("N_CTX"), nctx, u.key("CSC"), csc, u.key("CLASS_TOKEN_POSITION"), ctp]


def coop_main(u: Unit, args: list[str]) -> None:
    """CoOp's main.sh: train on SHOTS images per class of every class, for each seed of SEEDS."""
    usage(u, args, (6,), f"bash {u.sibling('main')} <dataset> <cfg> <ctp: end|middle|front> <nctx> <shots> "
          "<csc: True|False>")
    dataset, config, ctp, nctx, k, csc = args
    u.require_data()
    dataset_name(dataset)
    u.require_config(config)
    for seed in u.seeds():
        out = f"{u.output}/{dataset}/{u.trainer}/{config}_{k}shots/nctx{nctx}_csc{csc}_ctp{ctp}/seed{seed}"
        u.train(f"Training {u.trainer} on {k} shots of {dataset} (seed {seed})", dataset, out,
                [*coop_opts(u, nctx, csc, ctp), "DATASET.NUM_SHOTS", k], config, seed)


def coop_eval(u: Unit, args: list[str]) -> None:
    """Evaluate the 16-shot ImageNet contexts of main.sh (each seed of SEEDS) on DATASET."""
    usage(u, args, (2,), f"bash {u.sibling('eval')} <dataset> <cfg>")
    dataset, config = args
    nctx, csc, ctp = u.knob("NCTX", "16"), u.knob("CSC", "False"), u.knob("CTP", "end")
    tail = f"{config}_16shots/nctx{nctx}_csc{csc}_ctp{ctp}"
    u.require_data()
    dataset_name(dataset)
    for seed in u.seeds():
        model = f"{u.output}/imagenet/{u.trainer}/{tail}/seed{seed}"
        out = f"{u.output}/evaluation/{u.trainer}/{tail}/{dataset}/seed{seed}"
        u.needs(u.finished(model), f"no finished ImageNet run in {model}: run {u.sibling('main')} imagenet {config} "
                f"{ctp} {nctx} 16 {csc}")
        u.train(f"Evaluating the ImageNet context of {model} on {dataset}", dataset, out,
                [*u.eval_args(model), *coop_opts(u, nctx, csc, ctp)], config, seed)


COOP = {"base2new_train": coop_b2n_train, "base2new_test": coop_b2n_test, "main": coop_main, "eval": coop_eval}


# ----- the distilled students (PromptKD, PETR) ---------------------------------------------------------------------
def distilled_b2n(u: Unit, args: list[str], test: bool) -> None:
    """PromptKD / PETR base-to-novel: distil on every train image of DATASET (SHOTS per class when set) and evaluate
    the base classes, or (``test``) evaluate that run on the novel classes."""
    script = u.sibling(f"base2new_{'test' if test else 'train'}")
    usage(u, args, (2,), f"bash {script} <dataset> <seed>")
    dataset, seed = args
    config, k = u.knob("CFG", u.method.config), shots(u)
    u.require_data()
    teacher = student_teacher(u, dataset, seed)
    alpha = kd_weight(dataset, u.env)
    both = u.method.kd_at_test
    kd = [u.key("KD_WEIGHT"), alpha] if both or not test else []
    temperature = [] if both or test else [u.key("TEMPERATURE"), "1.0"]
    model = u.run_dir("base2new/train_base", dataset, k, config, seed)
    if not test:
        ckpt = u.teacher_ckpt(*teacher)
        u.train(f"Training {u.trainer} on {dataset} (seed {seed}, α={alpha})", dataset, model,
                ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "base", "TRAINER.MODAL", "base2novel", *kd,
                 *temperature, u.key("TEACHER_CKPT"), ckpt], config, seed)
        return
    out = u.run_dir("base2new/test_new", dataset, k, config, seed)
    u.needs(u.finished(model), f"no finished training run in {model}: run {u.sibling('base2new_train')} "
            f"{dataset} {seed}")
    u.train(f"Evaluating {u.trainer} on the novel classes of {dataset} (seed {seed})", dataset, out,
            [*u.eval_args(model), "DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "new", "TRAINER.MODAL",
             "base2novel", *kd, *distilled_from(u, model, teacher)], config, seed)


def student_teacher(u: Unit, dataset: str, seed: str) -> tuple[str, str]:
    """The teacher a student distils from (its folder under TEACHER_DIR, and the teacher command that publishes it):
    base-to-novel ``dataset``'s, or the SOURCE's for the cross-dataset and DG protocols (``dataset`` "")."""
    scripts = f"scripts/{TEACHER_METHOD.scripts}"
    if dataset:
        return teacher_folder(dataset, "base2new"), f"bash {scripts}/base2new_train.sh {dataset} {seed}"
    return teacher_folder(u.source, "xd", u.source), f"SOURCE={u.source} bash {scripts}/xd_train.sh {seed}"


def distilled_from(u: Unit, model: str, teacher: tuple[str, str]) -> list[str]:
    """The teacher options of a test of the distilled student in ``model``: the teacher it was distilled from, as its
    run.json records it (TEACHER_NAME, TEACHER_CKPT), so a test needs no teacher knob of its own. The student's logits
    are scored against its teacher's text features of the tested classes, so the teacher is read again, and another
    teacher would score another classifier: a TEACHER_CKPT or TEACHER_NAME naming another one is refused. A run that
    records none (upstream's, or one a plan names before it exists) takes the teacher as its training does
    (``Unit.teacher_ckpt`` of ``teacher``: :func:`student_teacher`)."""
    ns = f"TRAINER.{u.method.ns}"
    try:
        identity = read_run_json(model)
    except (OSError, ValueError):  # train.py says what is wrong with the folder; the teacher is then the knobs'
        identity = None
    config = identity.get("config") if isinstance(identity, dict) else None
    config = config if isinstance(config, dict) else {}
    name, ckpt = config.get(f"{ns}.TEACHER_NAME"), config.get(f"{ns}.TEACHER_CKPT")
    if not (isinstance(name, str) and name and isinstance(ckpt, str)):
        return [f"{ns}.TEACHER_CKPT", u.teacher_ckpt(*teacher)]
    recorded = os.path.realpath(os.path.join(REPO, ckpt)) if ckpt else "none"  # train.py runs from the repository
    given = u.env.get("TEACHER_CKPT", "")
    asked = "none" if given == "none" else os.path.realpath(u.path("TEACHER_CKPT")) if given else ""
    if asked not in ("", recorded) or u.knob("TEACHER_NAME") not in ("", name):
        knob = f"TEACHER_CKPT={given}" if asked not in ("", recorded) else f"TEACHER_NAME={u.knob('TEACHER_NAME')}"
        raise UnitError(f"{model} was distilled from the teacher {ckpt or 'none (a plain CLIP)'} (TEACHER_NAME "
                        f"{name}), whose text features score its student; {knob} would score another classifier: "
                        "unset it (the test takes the run's teacher)")
    u.needs(recorded == "none" or os.path.exists(recorded), f"{model} was distilled from the teacher {ckpt}, which is "
            "gone: its text features score the student, so restore it there")
    return [f"{ns}.TEACHER_NAME", name, f"{ns}.TEACHER_CKPT", ckpt]


def student_transfer(u: Unit, args: list[str], script: str) -> tuple[str, str, str, str, str]:
    """The checked arguments of a cross-dataset / DG student command: dataset, seed, CFG (the method's xd config),
    SHOTS (default 0) and the source's DATASET.NAME."""
    usage(u, args, (2,), f"[SOURCE=imagenet] bash {script}")
    dataset, seed = args
    config, k = u.knob("CFG", u.method.xd_config), u.knob("SHOTS", "0")
    u.require_data()
    dataset_name(dataset)
    return dataset, seed, config, k, dataset_name(u.source)


def promptkd_xd_train(u: Unit, args: list[str]) -> None:
    """PromptKD cross-dataset: distil on DATASET's train split from the SOURCE teacher, evaluate on its test set."""
    dataset, seed, config, k, source_name = student_transfer(u, args, f"{u.sibling('xd_train')} <dataset> <seed>")
    alpha = u.knob("KD_WEIGHT", "1000.0")
    out = u.run_dir("xd/train", dataset, k, config, seed)
    ckpt = u.teacher_ckpt(*student_teacher(u, "", seed))
    u.train(f"Training {u.trainer} (cross, {source_name} teacher) on {dataset} (seed {seed}, {k} shots, α={alpha})",
            dataset, out, ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "all", "TRAINER.MODAL", "cross",
                           u.key("KD_WEIGHT"), alpha, u.key("TEMPERATURE"), "1.0", u.key("TEACHER_CKPT"), ckpt],
            config, seed)


def promptkd_xd_test(u: Unit, args: list[str]) -> None:
    """Evaluate the SOURCE-distilled student on DATASET (TRAINER.MODAL dg on a DG target of SOURCE)."""
    dataset, seed, config, k, source_name = student_transfer(u, args, f"{u.sibling('xd_test')} <dataset> <seed>")
    modal = "dg" if dataset in DG_TARGETS.get(u.source, ()) else "cross"
    model = u.run_dir("xd/train", u.source, k, config, seed)
    out = u.run_dir("xd/test", dataset, k, config, seed)
    u.needs(u.finished(model), f"no {source_name}-distilled student in {model}: run SOURCE={u.source} "
            f"{u.sibling('xd_train')} {u.source} {seed}")
    u.train(f"Evaluating the {source_name}-distilled {u.trainer} on {dataset} ({modal}, seed {seed})", dataset, out,
            [*u.eval_args(model), "DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "all", "TRAINER.MODAL", modal,
             *distilled_from(u, model, student_teacher(u, "", seed))], config, seed)


def petr_transfer(u: Unit, args: list[str], tree: str, test: bool) -> None:
    """PETR cross-dataset (``tree`` xd) or DG (dg): θ_s on SOURCE, θ_u on TARGET's images, router fitted on SOURCE
    scored over TARGET's classes; or (``test``) re-evaluate that run with its saved router."""
    modal = "cross" if tree == "xd" else "dg"
    script = u.sibling(f"{tree}_{'test' if test else 'train'}")
    if tree == "dg":
        require_dg_target(u, script, args[0] if args else "")
    dataset, seed, config, k, source_name = student_transfer(
        u, args, f"{u.sibling('xd_' + ('test' if test else 'train'))} <target dataset> <seed>")
    alpha = u.knob("KD_WEIGHT", "1000.0")
    model = u.run_dir(f"{tree}/train", dataset, k, config, seed)
    opts = ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "all", "DATASET.SOURCE_DATASET", source_name,
            "TRAINER.MODAL", modal, u.key("KD_WEIGHT"), alpha]
    if not test:
        ckpt = u.teacher_ckpt(*student_teacher(u, "", seed))
        u.train(f"Training {u.trainer} ({modal}: {source_name} -> {dataset}, seed {seed}, {k} shots, α={alpha})",
                dataset, model, [*opts, u.key("TEACHER_CKPT"), ckpt], config, seed)
        return
    out = u.run_dir(f"{tree}/test", dataset, k, config, seed)
    u.needs(u.finished(model), f"no finished training run in {model}: run {u.sibling(tree + '_train')} {dataset} "
            f"{seed}")
    u.train(f"Evaluating {u.trainer} ({modal}: {source_name} -> {dataset}) on {dataset} (seed {seed})", dataset, out,
            [*u.eval_args(model), *opts, *distilled_from(u, model, student_teacher(u, "", seed))], config, seed)


def petr_reproduce(u: Unit, args: list[str]) -> None:
    """PETR's base-to-novel table: train and test every dataset of DATASETS x SEEDS (each unit a child process,
    failures reported at the end, a preemption ends the loop with 75), then the Base / Novel / HM table."""
    config = u.knob("CFG", u.method.config)
    datasets, seeds = u.knob("DATASETS", " ".join(BASE2NEW_DATASETS)).split(), u.seeds()
    u.require_data()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):  # sent to the child too: wait for
        signal.signal(signum, lambda *_: None)  # its status (75: preempted, its state saved; SIGINT: interrupted)
    env = {**os.environ, **u.env, "CFG": config, "UNITS_CALLER_DIR": REPO,
           **{k: u.path(k) for k in ("DATA", "OUTPUT_ROOT", "TEACHER_DIR") if u.path(k)}}
    if u.env.get("TEACHER_CKPT", "") not in ("", "none"):
        env["TEACHER_CKPT"] = u.path("TEACHER_CKPT")
    failed, dry = [], [("--check-argv" if u.check else "--print-argv")] if u.dry else []
    for dataset in datasets:
        dataset_name(dataset)
        for seed in seeds:
            for command in ("base2new_train", "base2new_test"):
                argv = [sys.executable, "-m", "units", *dry, u.method.scripts, command, dataset, seed]
                env["UNITS_SCRIPT"] = u.sibling(command)
                status = subprocess.run(argv, cwd=REPO, env=env).returncode
                if status in (-signal.SIGINT, 128 + signal.SIGINT):  # Ctrl-C: the loop ends as the child did
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    os.kill(os.getpid(), signal.SIGINT)
                if status == EXIT_PREEMPTED:
                    print(f"preempted during {command}.sh {dataset} seed {seed}: rerun this script to continue",
                          file=sys.stderr)
                    raise SystemExit(EXIT_PREEMPTED)
                if status:
                    failed.append(f"{command.removeprefix('base2new_')} {dataset} seed {seed}")
                    break
    table = ["parse_test_res.py", "b2n", f"{u.output}/base2new", "--methods", f"PETR/{config}", "--paper"]
    if u.dry:
        print(json.dumps({"dir": "", "argv": table}))
    else:
        subprocess.run([sys.executable, *table], cwd=REPO)
    if failed:
        raise UnitError(f"{len(failed)} run(s) failed (see their log.txt): {','.join(failed)}")


PROMPTKD = {"base2new_train": partial(distilled_b2n, test=False), "base2new_test": partial(distilled_b2n, test=True),
            "xd_train": promptkd_xd_train, "xd_test": promptkd_xd_test}
PETR = {"base2new_train": PROMPTKD["base2new_train"], "base2new_test": PROMPTKD["base2new_test"],
        "xd_train": partial(petr_transfer, tree="xd", test=False),
        "xd_test": partial(petr_transfer, tree="xd", test=True),
        "dg_train": partial(petr_transfer, tree="dg", test=False),
        "dg_test": partial(petr_transfer, tree="dg", test=True),
        "reproduce_base2new": petr_reproduce}


# ----- the PromptSRC teacher ---------------------------------------------------------------------------------------
def publish_teacher(u: Unit, run: str, folder: str) -> None:
    """Copy ``run``'s last checkpoint (VLPromptLearner/checkpoint + the file it names) and teacher_text_features.pt
    to ``<TEACHER_DIR>/<folder>``, where the students look for teachers, with ``teacher.json``: what the teacher was
    trained on (``engine.published``). The folder is built beside its place and renamed into it; an existing one is
    kept (a student then refuses it if it records another backbone than the student's teacher CLIP)."""
    if u.dry:
        return
    teachers = u.path("TEACHER_DIR") or "teachers"
    dest = f"{teachers}/{folder}"
    pointer = os.path.join(run, "VLPromptLearner", "checkpoint")
    if not os.path.isfile(pointer):
        raise UnitError(f"no checkpoint in {run}/VLPromptLearner: the teacher run did not finish")
    file = pointed_checkpoint(os.path.join(run, "VLPromptLearner"))
    record = {**record_of_run(run), "checkpoint": os.path.relpath(file, run), "checkpoint_sha256": file_digest(file)}
    if os.path.exists(dest):
        other = record_differences(read_record(dest), record)
        if other:
            raise UnitError(f"{dest} holds a teacher trained on another setting ({'; '.join(other)}): move it away "
                            f"or set TEACHER_DIR to another folder, then rerun to publish this one ({run})")
        print(f"note: {dest} exists and is kept; to use this run instead, set TEACHER_CKPT={run}")
        return
    os.makedirs(teachers, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".tmp-{folder}-", dir=teachers)
    try:
        os.makedirs(os.path.join(tmp, "VLPromptLearner"))
        for path in (pointer, file):
            shutil.copy(path, os.path.join(tmp, "VLPromptLearner"))
        if os.path.isfile(os.path.join(run, "teacher_text_features.pt")):
            shutil.copy(os.path.join(run, "teacher_text_features.pt"), tmp)
        atomic_write_text(json.dumps(record, indent=1), os.path.join(tmp, TEACHER_RECORD))
        os.rename(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"Teacher published to {dest} (students read it with TEACHER_DIR={teachers}; {TEACHER_RECORD} records its "
          f"backbone {record.get('backbone') or '?'} and config {record.get('config') or '?'})")


def teacher_b2n_train(u: Unit, args: list[str]) -> None:
    """Train the teacher on the base classes of DATASET, evaluate them and publish it to TEACHER_DIR."""
    usage(u, args, (2,), f"bash {u.sibling('base2new_train')} <dataset> <seed>")
    dataset, seed = args
    config, k = u.knob("CFG", u.method.config), shots(u)
    u.require_data()
    name = dataset_name(dataset)
    out = u.run_dir("base2new/train_base", dataset, k, config, seed)
    u.train(f"Training the {u.trainer} teacher on the base classes of {dataset} (seed {seed})", dataset, out,
            ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "base", "TRAINER.MODAL", "base2novel"], config,
            seed)
    publish_teacher(u, out, name)


def teacher_b2n_test(u: Unit, args: list[str]) -> None:
    """Evaluate the base-trained teacher on the novel classes of DATASET."""
    usage(u, args, (2,), f"bash {u.sibling('base2new_test')} <dataset> <seed>")
    dataset, seed = args
    config, k = u.knob("CFG", u.method.config), shots(u)
    u.require_data()
    dataset_name(dataset)
    model = u.run_dir("base2new/train_base", dataset, k, config, seed)
    out = u.run_dir("base2new/test_new", dataset, k, config, seed)
    u.needs(os.path.isfile(os.path.join(model, "VLPromptLearner", "checkpoint")),
            f"no teacher run at {model}: run {u.sibling('base2new_train')} {dataset} {seed} first")
    u.train(f"Evaluating the {u.trainer} teacher of {model} on the novel classes of {dataset}", dataset, out,
            [*u.eval_args(model), "DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "new", "TRAINER.MODAL",
             "base2novel"], config, seed)


def teacher_xd_train(u: Unit, args: list[str]) -> None:
    """Train the cross-dataset teacher on SOURCE, all classes, and publish it as ``<source DATASET.NAME>-xd``."""
    usage(u, args, (1,), f"[SOURCE=imagenet] bash {u.sibling('xd_train')} <seed>")
    (seed,) = args
    config, k = u.knob("CFG", u.method.xd_config), shots(u)
    u.require_data()
    folder = teacher_folder(u.source, "xd", u.source)
    out = u.run_dir("xd/train", u.source, k, config, seed)
    u.train(f"Training the {u.trainer} cross-dataset teacher on {u.source} (all classes, seed {seed})", u.source, out,
            ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "all", "TRAINER.MODAL", "cross"], config, seed)
    publish_teacher(u, out, folder)


TEACHER = {"base2new_train": teacher_b2n_train, "base2new_test": teacher_b2n_test, "xd_train": teacher_xd_train}


# ----- PETR+CoOp ---------------------------------------------------------------------------------------------------
MODAL_B2N = ("TRAINER.MODAL", "base2novel")


def petr_coop_b2n_train(u: Unit, args: list[str]) -> None:
    """Learn the CoOp context on the base classes, fit the router and evaluate the base classes."""
    b2n_train(u, args, u.sibling("base2new_train"), MODAL_B2N)


def petr_coop_b2n_test(u: Unit, args: list[str], config: str = "") -> None:
    """Evaluate the run of base2new_train (or, ``config`` ``<cfg>_plugin``, of plugin) on the novel classes."""
    b2n_test(u, args, u.sibling("base2new_test"), "no finished run in {model}: run "
             f"{u.sibling('base2new_train')} {{dataset}} {{seed}} (or plugin.sh for a {u.method.plugin_of} run)",
             MODAL_B2N, config)


def petr_coop_plugin(u: Unit, args: list[str]) -> None:
    """PETR+CoOp as a training-free plug-in on an existing CoOp run: router fit and base classes, then the novel
    classes."""
    usage(u, args, (2, 3), f"bash {u.sibling('plugin')} <dataset> <seed> [{u.method.plugin_of.lower()}_run_dir]")
    dataset, seed = args[:2]
    config = b2n_config(u, dataset)
    tuned = find_method(u.method.plugin_of)
    run = args[2] if len(args) == 3 and args[2] else u.run_dir("base2new/train_base", dataset, shots(u), config,
                                                                  seed, trainer=tuned.trainer)
    u.require_data()
    dataset_name(dataset)
    u.needs(os.path.isdir(run), f"no {tuned.name} run at {run}: train one with scripts/{tuned.scripts}/"
            f"base2new_train.sh {dataset} {seed} or pass its folder as the third argument")
    out = u.run_dir("base2new/train_base", dataset, shots(u), config + PLUGIN_SUFFIX, seed)
    u.train(f"{u.method.name} plug-in on {run}: routing and base-class evaluation of {dataset} (seed {seed})",
            dataset, out, ["DATASET.NUM_SHOTS", shots(u), "DATASET.SUBSAMPLE_CLASSES", "base", "TRAINER.MODAL",
                           "base2novel", u.key("COOP_MODEL_DIR"), run, u.key("COOP_LOAD_EPOCH"),
                           u.knob("COOP_LOAD_EPOCH", "0")], config, seed)
    petr_coop_b2n_test(u, [dataset, seed], config + PLUGIN_SUFFIX)


PETR_COOP = {"base2new_train": petr_coop_b2n_train, "base2new_test": petr_coop_b2n_test, "plugin": petr_coop_plugin}


# ----- PETR+X ------------------------------------------------------------------------------------------------------
def routed_learner(u: Unit, tuned: str) -> Method:
    """The catalog row of the prompt learner ``tuned`` names (a key of ``PETR_X_LEARNERS``)."""
    if tuned not in PETR_X_LEARNERS:
        *others, last = PETR_X_LEARNERS
        raise UnitError(f"unknown prompt learner '{tuned}'; use {', '.join(others)} or {last} (the routable rows of "
                        "trainers/catalog.py)")
    return PETR_X_LEARNERS[tuned]


def x_opts(u: Unit, learner: Method, x_dir: str) -> list[str]:
    """The routed learner's trainer and run (PETRX's TUNED_* keys)."""
    return [u.key("TUNED_TRAINER"), learner.trainer, u.key("TUNED_MODEL_DIR"), x_dir, u.key("TUNED_LOAD_EPOCH"),
            u.knob("TUNED_LOAD_EPOCH", "0")]


def petr_x_b2n(u: Unit, args: list[str]) -> None:
    """PETR's training-free routing on a finished base-to-novel run of prompt learner X: router fit and base
    classes, then the novel classes with that router. One config (CFG) serves every X; the run folders are
    ``<CFG>_<x>``."""
    usage(u, args, (3, 4), f"bash {u.sibling('base2new')} <{X_LEARNERS}> <dataset> <seed> [x_run_dir]")
    tuned, dataset, seed = args[:3]
    learner = routed_learner(u, tuned)
    x_config = u.knob("X_CFG", learner.x_config(dataset))
    config, k = u.knob("CFG", u.method.config), shots(u)
    u.require_data()
    dataset_name(dataset)
    x_dir = args[3] if len(args) == 4 and args[3] else x_run_folder(u, learner.trainer, dataset, k, x_config, seed)
    base = u.run_dir("base2new/train_base", dataset, k, f"{config}_{tuned}", seed)
    new = u.run_dir("base2new/test_new", dataset, k, f"{config}_{tuned}", seed)
    routed = x_opts(u, learner, x_dir)
    classes = ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES"]
    u.train(f"PETR+X on {learner.trainer} run {x_dir}: router fit and base-class evaluation of {dataset} (seed "
            f"{seed})", dataset, base, [*classes, "base", "TRAINER.MODAL", "base2novel", *routed], config, seed)
    u.train(f"PETR+X on {learner.trainer} run {x_dir}: novel-class evaluation of {dataset} (seed {seed}) with the "
            f"router of {base}", dataset, new,
            ["--model-dir", base, "--eval-only", *classes, "new", "TRAINER.MODAL", "base2novel", *routed], config,
            seed)


def x_run_folder(u: Unit, trainer: str, dataset: str, k: str, x_config: str, seed: str) -> str:
    """The folder of X's base-to-novel run: its script's (``shots_<K>``), else the one upstream run beside it whose
    shots folder carries a suffix (upstream KgCoOp's script writes ``shots_16_<W>``, W its loss weight); one line
    naming the folders looked for and how to give one otherwise."""
    ours = u.run_dir("base2new/train_base", dataset, k, x_config, seed, trainer=trainer)
    if os.path.isdir(ours):
        return ours
    pattern = u.run_dir("base2new/train_base", dataset, f"{k}_*", x_config, seed, trainer=trainer)
    upstream = sorted(path for path in glob.glob(pattern) if os.path.isdir(path))
    if len(upstream) == 1:
        print(f"note: X's run is upstream's {upstream[0]} (no {ours})", flush=True)
        return upstream[0]
    found = f"; upstream's {', '.join(upstream)} are several" if upstream else f" nor upstream's {pattern}"
    raise UnitError(f"no {trainer} run at {ours}{found}: train one with its base-to-novel script (same dataset, "
                    "seed and SHOTS), or give its folder as the fourth argument (X_RUN_DIR)")


def petr_x_transfer(u: Unit, args: list[str], tree: str) -> None:
    """PETR's training-free routing on X's source run, evaluated on a cross-dataset (``tree`` xd) or DG target."""
    if tree == "dg":
        require_dg_target(u, u.sibling("dg"), args[1] if len(args) > 1 else "")
    usage(u, args, (4,), f"[SOURCE=imagenet] bash {u.sibling('xd')} <{X_LEARNERS}> <target dataset> <seed> "
          "<x_run_dir>")
    tuned, dataset, seed, x_dir = args
    learner = routed_learner(u, tuned)
    modal = "cross" if tree == "xd" else "dg"
    config, k = u.knob("CFG", u.method.config), shots(u)
    u.require_data()
    dataset_name(dataset)
    u.require_config(config)
    u.needs(os.path.isdir(x_dir), f"no run at {x_dir}: give the folder of X's run on the source dataset")
    source_name = dataset_name(u.source)
    out = u.run_dir(f"{tree}/train", dataset, k, f"{config}_{tuned}", seed)
    u.train(f"PETR+X on {x_dir} ({modal}: {source_name} -> {dataset}): router fit and evaluation (seed {seed})",
            dataset, out, ["DATASET.NUM_SHOTS", k, "DATASET.SUBSAMPLE_CLASSES", "all", "DATASET.SOURCE_DATASET",
                           source_name, "TRAINER.MODAL", modal, *x_opts(u, learner, x_dir)], config, seed)


PETR_X = {"base2new": petr_x_b2n, "xd": partial(petr_x_transfer, tree="xd"), "dg": partial(petr_x_transfer, tree="dg")}


# ----- zero-shot CLIP ----------------------------------------------------------------------------------------------
def zsclip_b2n(u: Unit, args: list[str]) -> None:
    """Zero-shot CLIP on the base and the novel classes of DATASET (the base-to-novel trees, shots_0)."""
    usage(u, args, (1, 2), f"bash {u.sibling('base2new_test')} <dataset> [seed]")
    dataset, seed = args[0], (args[1:] or ["1"])[0] or "1"
    config = u.knob("CFG", u.method.config)
    u.require_data()
    dataset_name(dataset)
    u.require_config(config)
    for part, role in (("base", "train_base"), ("new", "test_new")):
        out = u.run_dir(f"base2new/{role}", dataset, "0", config, seed)
        u.train(f"Zero-shot CLIP ({config}) on the {part} classes of {dataset}", dataset, out,
                ["--eval-only", "DATASET.SUBSAMPLE_CLASSES", part], config, seed)


def zsclip_zeroshot(u: Unit, args: list[str]) -> None:
    """Zero-shot CLIP on every class of DATASET (CoOp's zeroshot.sh), with train.py's default seed."""
    usage(u, args, (1, 2), f"bash {u.sibling('zeroshot')} <dataset> [cfg]")
    dataset, config = args[0], (args[1:] or [""])[0] or u.method.config
    u.require_data()
    dataset_name(dataset)
    u.require_config(config)
    out = f"{u.output}/{u.trainer}/{config}/{dataset}"
    u.train(f"Zero-shot CLIP ({config}) on {dataset}", dataset, out, ["--eval-only"], config, "")


ZSCLIP = {"base2new_test": zsclip_b2n, "zeroshot": zsclip_zeroshot}

COMMANDS: dict[str, dict[str, Command]] = {
    "learner": LEARNER, "coop": COOP, "promptkd": PROMPTKD, "petr": PETR, "teacher": TEACHER, "petr_coop": PETR_COOP,
    "petr_x": PETR_X, "zsclip": ZSCLIP}
"""Each family's commands (``Method.commands`` → command name → the command): ``scripts/<method>/<command>.sh`` runs
``COMMANDS[<its method's family>][<command>]``."""
