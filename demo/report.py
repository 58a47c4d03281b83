"""The demo's tables from the runs' results.json files: base-to-novel mean ± std over seeds, routing rates, the
paper's effects over seeds, the cross-dataset / domain-generalisation tables and stage times; and the report file.

Statistics: mean and sample standard deviation (ddof = 1, ``analysis.stats`` "sample") over the seeds; an effect
holds when it holds in the seed mean and in more than half of the seeds (2 of 3).
"""
from __future__ import annotations

import glob
import os
from collections.abc import Callable, Mapping, Sequence

from tabulate import tabulate

from analysis import stats
from analysis.report import mean_std
from analysis.stats import harmonic_mean
from analysis.transfer import collect_transfer
from engine.runs import RESULTS_FILE, parse_run_path, seed_of
from engine.utils import read_json
from trainers.catalog import METHODS, method_name

Results = dict[str, dict]
"""``{"base": results.json, "novel": results.json}`` of one method and seed."""
SeedRows = dict[str, Results]
"""``{method: Results}`` of one seed."""


def method_key(results: Mapping) -> str:
    """The method of a run's results.json (``trainers.catalog.method_name``: ``PETR+X`` for a run routing on X's)."""
    return method_name(results["trainer"], results.get("tuned_trainer", ""))


PLUGINS = {m.name: m.plugin_of for m in METHODS.values() if m.plugin_of}
"""PETR's routing on a finished prompt learner (the catalog's plug-ins): the routed method -> the learner alone."""
ROUTED = tuple(m.name for m in METHODS.values() if m.routes)
"""The methods that route (their results record routing rates)."""
PARTS = {"train_base": "base", "test_new": "novel"}
"""Base-to-novel run roles -> the half of the classes they evaluate."""


DISPLAY = {"PromptSRC": "PromptSRC teacher (wider CLIP)"}
"""How the demo names a method where its name says less: the PromptSRC run is the students' teacher on the wider
tiny CLIP."""


def display_name(method: str) -> str:
    """How a method is named in the demo's tables, claims and figure (:data:`DISPLAY`)."""
    return DISPLAY.get(method, method)


def hm_of(res: Results, key: str = "accuracy") -> float:
    """HM of a method's base and novel value of ``key``."""
    return harmonic_mean(res["base"][key], res["novel"][key])


def with_note(table: str, note: str, fmt: str) -> str:
    """``table`` and a note under it (markdown: after a blank line, which ends the table)."""
    gap = "\n\n" if fmt == "github" else "\n"
    return f"{table}{gap}{note}"


def collect_b2n(output: str) -> dict[str, dict[int, Results]]:
    """``{method: {seed: {"base": results.json, "novel": results.json}}}`` of every base-to-novel run under
    ``<output>/base2new`` (``engine.runs`` layout) whose base and novel halves are both finished."""
    found: dict[str, dict[int, Results]] = {}
    pattern = os.path.join(output, "base2new", "*", "*", "*", "*", "*", "seed*", RESULTS_FILE)
    for path in sorted(glob.glob(pattern)):
        run = parse_run_path(os.path.dirname(path))
        if run is None or run.role not in PARTS:
            continue
        results = read_json(path)
        found.setdefault(method_key(results), {}).setdefault(seed_of(run.seed), {})[PARTS[run.role]] = results
    return {m: {s: r for s, r in sorted(seeds.items()) if len(r) == 2} for m, seeds in found.items()}


def ordered(runs: Mapping[str, Mapping], methods: Sequence[str]) -> list[str]:
    """The methods of ``runs`` in the order of ``methods`` (others after them, by name)."""
    rank = {m: i for i, m in enumerate(methods)}
    return sorted(runs, key=lambda m: (rank.get(m, len(rank)), m))


def b2n_table(runs: Mapping[str, Mapping[int, Results]], methods: Sequence[str], fmt: str = "simple") -> str:
    """Base / Novel / HM per method as mean ± sample std over its seeds (HM per seed, then averaged)."""
    rows = []
    for m in ordered(runs, methods):
        seeds = list(runs[m].values())
        rows.append([display_name(m), len(seeds), mean_std([r["base"]["accuracy"] for r in seeds]),
                     mean_std([r["novel"]["accuracy"] for r in seeds]), mean_std([hm_of(r) for r in seeds])])
    return tabulate(rows, headers=["method", "seeds", "Base", "Novel", "HM"], tablefmt=fmt, disable_numparse=True)


def seed_means(runs: Mapping[str, Mapping[int, Results]], methods: Sequence[str]) -> dict[str, tuple[float, ...]]:
    """Per method (display name, in ``methods`` order): the seed means of its base, novel and per-seed HM."""
    return {display_name(m): tuple(stats.mean([value(r) for r in runs[m].values()]) for value in (
        lambda r: r["base"]["accuracy"], lambda r: r["novel"]["accuracy"], hm_of)) for m in ordered(runs, methods)}


def routing_table(runs: Mapping[str, Mapping[int, Results]], fmt: str = "simple") -> str:
    """Per routed method, mean ± std over seeds: the % of base test images its router sends to the seen branch and
    of novel test images to the unseen branch."""
    rows = [[display_name(m), mean_std([r["base"]["route_acc_seen"] for r in runs[m].values()]),
             mean_std([r["novel"]["route_acc_unseen"] for r in runs[m].values()])]
            for m in ROUTED if m in runs]
    return tabulate(rows, headers=["routed method", "base → θ_s %", "novel → θ_u %"], tablefmt=fmt,
                    disable_numparse=True)


def per_seed_rows(runs: Mapping[str, Mapping[int, Results]]) -> dict[int, SeedRows]:
    """``{seed: {method: Results}}`` over the seeds of the methods that ran several; a method that ran once (zero-shot
    CLIP, the shared teacher) gives its one run to every seed."""
    seeds = sorted({s for r in runs.values() for s in r})
    return {s: {m: r[s] if s in r else next(iter(r.values())) for m, r in runs.items() if r} for s in seeds}


Effect = tuple[str, Callable[[SeedRows], tuple[bool, str]]]


def plugin_gains(plugin: str, learner: str) -> Effect:
    """PETR's routing on a finished prompt learner lifts its HM: (claim, check)."""
    def check(r: SeedRows) -> tuple[bool, str]:
        p, c = hm_of(r[plugin]), hm_of(r[learner])
        return p > c, f"{display_name(plugin)} {p:.2f} vs {learner} {c:.2f}"

    return f"{display_name(plugin)}'s HM above {learner}'s", check


def _effects(chance_novel: float, methods: Sequence[str]) -> list[Effect]:
    """The effects the PETR paper describes, each as (claim, rows -> (holds, the numbers behind it)); one per
    PETR+X of ``methods`` (the methods of the rows)."""
    def zs_above_chance(r: SeedRows) -> tuple[bool, str]:
        v = r["ZeroshotCLIP"]["novel"]["accuracy"]
        return v > 3 * chance_novel, f"{v:.2f} vs chance {chance_novel:.2f}"

    def seen_gains(r: SeedRows) -> tuple[bool, str]:
        s, z = r["PETR"]["base"]["acc_seen_branch"], r["ZeroshotCLIP"]["base"]["accuracy"]
        return s > z, f"θ_s {s:.2f} vs zero-shot {z:.2f}"

    def coop_loses(r: SeedRows) -> tuple[bool, str]:
        c, z = r["CoOp"]["novel"]["accuracy"], r["ZeroshotCLIP"]["novel"]["accuracy"]
        return c < z, f"CoOp {c:.2f} vs zero-shot {z:.2f}"

    def routes_right(r: SeedRows) -> tuple[bool, str]:
        b, n = r["PETR"]["base"]["route_acc_seen"], r["PETR"]["novel"]["route_acc_unseen"]
        return min(b, n) >= 80.0, f"base {b:.2f}, novel {n:.2f}"

    def beats_branches(r: SeedRows) -> tuple[bool, str]:
        p = hm_of(r["PETR"])
        best = max(hm_of(r["PETR"], "acc_seen_branch"), hm_of(r["PETR"], "acc_unseen_branch"))
        return p >= best, f"PETR {p:.2f} vs best branch {best:.2f}"

    def beats_promptkd(r: SeedRows) -> tuple[bool, str]:
        p, k = hm_of(r["PETR"]), hm_of(r["PromptKD"])
        return p >= k, f"PETR {p:.2f} vs PromptKD {k:.2f}"

    return [
        ("zero-shot novel accuracy well above chance", zs_above_chance),
        ("the seen branch gains on base over zero-shot", seen_gains),
        ("a base-tuned prompt (CoOp) loses on novel", coop_loses),
        ("PETR routes most base and novel images right", routes_right),
        ("PETR's HM at least that of its better branch", beats_branches),
        *[plugin_gains(plugin, learner) for plugin, learner in PLUGINS.items() if plugin in methods],
        ("PETR's HM at least PromptKD's (the headline)", beats_promptkd),
    ]


def mean_rows(per_seed: Mapping[int, SeedRows]) -> SeedRows:
    """The seed mean of every numeric result field present in all seeds (same nesting as one seed's rows)."""
    seeds = list(per_seed.values())
    out: SeedRows = {}
    for m in seeds[0]:
        out[m] = {}
        for part in ("base", "novel"):
            keys = [k for k, v in seeds[0][m][part].items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                    and all(isinstance(s[m][part].get(k), (int, float)) for s in seeds)]
            out[m][part] = {k: stats.mean([s[m][part][k] for s in seeds]) for k in keys}
    return out


def effect_verdicts(per_seed: Mapping[int, SeedRows], chance_novel: float) -> list[tuple[str, bool, list[bool], str]]:
    """Per effect: (claim, holds overall, holds per seed, the numbers of the seed mean)."""
    mean = mean_rows(per_seed)
    out = []
    for claim, check in _effects(chance_novel, list(mean)):
        per = [check(r)[0] for r in per_seed.values()]
        in_mean, numbers = check(mean)
        out.append((claim, in_mean and sum(per) * 2 > len(per), per, numbers))
    return out


def effects_table(per_seed: Mapping[int, SeedRows], chance_novel: float, fmt: str = "simple") -> str:
    """:func:`effect_verdicts` as a table: one column per seed, the mean's numbers and the verdict."""
    seeds = list(per_seed)
    rows = [[claim, *["yes" if p else "no" for p in per], numbers, "yes" if holds else "NO"]
            for claim, holds, per, numbers in effect_verdicts(per_seed, chance_novel)]
    table = tabulate(rows, headers=["effect", *[f"seed {s}" for s in seeds], "seed mean", "holds"], tablefmt=fmt)
    return with_note(table, f"holds = in the seed mean and in more than half of the {len(seeds)} seeds.", fmt)


def transfer_table(title: str, source: str, targets: Sequence[str], values: Mapping[str, Mapping[str, list[float]]],
                   fmt: str = "simple") -> str:
    """The paper's cross-dataset / DG layout: one row per method, Source, each target and the targets' average,
    each cell mean ± std over seeds (``values[method][dataset]`` = per-seed accuracies)."""
    rows = []
    for method, per_ds in values.items():
        avg = [stats.mean(seed_vals) for seed_vals in zip(*(per_ds[t] for t in targets))]
        rows.append([method, *[mean_std(per_ds[d]) for d in (source, *targets)], mean_std(avg)])
    table = tabulate(rows, headers=[title, f"{source} (source)", *targets, "Average"], tablefmt=fmt,
                     disable_numparse=True)
    return with_note(table, "Average = mean over the targets (not the source), per seed, then mean ± std over seeds.",
                     fmt)


def transfer_values(output: str, protocol: str, source: str, targets: Sequence[str],
                    methods: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    """``{trainer: {dataset: per-seed accuracies}}`` of ``methods`` (trainers, in that order) in the cross-dataset
    (``xd``) or DG (``dg``) runs under ``output`` (``analysis.transfer.collect_transfer``: the source column and each
    target's cell)."""
    values = {key[0]: per_ds for key, per_ds in collect_transfer(output, protocol, source, targets, methods=methods)
              .items()}
    return {m: {ds: [v for _, v in sorted(values[m].get(ds, {}).items())] for ds in (source, *targets)}
            for m in methods if m in values}


def stage_table(rows: Sequence[Sequence], fmt: str = "simple") -> str:
    """Per-stage times (``demo.pipeline.stage_times``)."""
    return tabulate(rows, headers=["stage", "runs", "skipped", "wall s", "run s (summed)"], floatfmt=".0f",
                    tablefmt=fmt)
