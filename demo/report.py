"""The demo's tables from the runs' results.json files: base-to-novel mean ± std over seeds, PETR − PromptKD per
seed, routing, the paper's effects over seeds, the cross-dataset / domain-generalisation tables and stage times.

Statistics: mean and sample standard deviation (ddof = 1, ``analysis.stats`` "sample") over the seeds; an effect
holds when it holds in the seed mean and in more than half of the seeds (2 of 3).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tabulate import tabulate

from analysis import stats
from analysis.stats import harmonic_mean

Results = dict[str, dict]
"""``{"base": results.json, "novel": results.json}`` of one method and seed."""
SeedRows = dict[str, Results]
"""``{trainer: Results}`` of one seed."""
CONVENTION = "sample"
PLUGINS = {"PETRCoOp": "CoOp", "PETR+CoCoOp": "CoCoOp", "PETR+MaPLe": "MaPLe", "PETR+IVLP": "IVLP"}
"""PETR's routing on a finished prompt learner: the routed method -> the prompt learner alone."""
ROUTED = ("PETR", *PLUGINS)


def display_name(method: str) -> str:
    """How a method is named in the claims (PETRCoOp is PETR+CoOp)."""
    return "PETR+CoOp" if method == "PETRCoOp" else method


def mean_std(values: Sequence[float]) -> str:
    """``mean ± std`` (sample std; only the mean for one value)."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{stats.mean(values):.2f} ± {stats.std(values, CONVENTION):.2f}"


def hm_of(res: Results, key: str = "accuracy") -> float:
    """HM of a method's base and novel value of ``key``."""
    return harmonic_mean(res["base"][key], res["novel"][key])


def b2n_stats_table(per_seed: Mapping[int, SeedRows], methods: Sequence[str]) -> str:
    """Base / Novel / HM as mean ± std over seeds per method (HM per seed, then averaged)."""
    rows = []
    for m in methods:
        runs = [rows_[m] for rows_ in per_seed.values()]
        rows.append([m, len(runs), mean_std([r["base"]["accuracy"] for r in runs]),
                     mean_std([r["novel"]["accuracy"] for r in runs]), mean_std([hm_of(r) for r in runs])])
    return tabulate(rows, headers=["method", "seeds", "Base", "Novel", "HM"]) + (
        "\nmean ± sample std (ddof 1) over the seeds; HM computed per seed, then averaged.")


def difference_table(per_seed: Mapping[int, SeedRows], a: str = "PETR", b: str = "PromptKD") -> str:
    """Per seed ``a − b`` on Base, Novel and HM, and on the unseen branch alone vs ``b`` on novel."""
    rows = []
    cols: list[list[float]] = [[], [], [], []]
    for seed, r in per_seed.items():
        diff = [r[a]["base"]["accuracy"] - r[b]["base"]["accuracy"],
                r[a]["novel"]["accuracy"] - r[b]["novel"]["accuracy"], hm_of(r[a]) - hm_of(r[b]),
                r[a]["novel"]["acc_unseen_branch"] - r[b]["novel"]["accuracy"]]
        for c, v in zip(cols, diff):
            c.append(v)
        rows.append([f"seed {seed}", *[f"{v:+.2f}" for v in diff]])
    rows.append(["mean ± std", *[mean_std(c) for c in cols]])
    return tabulate(rows, headers=["", "ΔBase", "ΔNovel", "ΔHM", "Δ θ_u novel"]) + (
        f"\nΔ = {a} − {b}; Δ θ_u novel = {a}'s unseen branch alone on the novel test images − {b} on them.")


def routing_table(per_seed: Mapping[int, SeedRows], auroc: Mapping[str, Sequence[float]]) -> str:
    """Per routed method, mean ± std over seeds: routing accuracy on base / novel test images, the AUROC of its
    scores, each branch alone (HM) and the routed HM."""
    table = []
    for m in [m for m in ROUTED if m in auroc]:
        runs = [r[m] for r in per_seed.values()]
        table.append([m, mean_std([r["base"]["route_acc_seen"] for r in runs]),
                      mean_std([r["novel"]["route_acc_unseen"] for r in runs]), mean_std(list(auroc[m])),
                      mean_std([hm_of(r, "acc_seen_branch") for r in runs]),
                      mean_std([hm_of(r, "acc_unseen_branch") for r in runs]), mean_std([hm_of(r) for r in runs])])
    headers = ["method", "route base", "route novel", "AUROC", "θ_s alone HM", "θ_u alone HM", "routed HM"]
    return tabulate(table, headers=headers) + (
        "\nroute base / novel: % of base / novel test images sent to the seen / unseen branch (threshold λ·P99); "
        "AUROC: how well the router's score separates novel from base test images whatever the threshold (100 = "
        "perfectly, 50 = not at all); θ_s / θ_u alone: one branch answering every image. mean ± std over seeds.")


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


def effects_table(per_seed: Mapping[int, SeedRows], chance_novel: float) -> str:
    """:func:`effect_verdicts` as a table: one column per seed, the mean's numbers and the verdict."""
    seeds = list(per_seed)
    rows = [[claim, *["yes" if p else "no" for p in per], numbers, "yes" if holds else "NO"]
            for claim, holds, per, numbers in effect_verdicts(per_seed, chance_novel)]
    return tabulate(rows, headers=["effect", *[f"seed {s}" for s in seeds], "seed mean", "holds"]) + (
        f"\nholds = in the seed mean and in more than half of the {len(seeds)} seeds.")


def transfer_table(title: str, source: str, targets: Sequence[str], values: Mapping[str, Mapping[str, list[float]]]
                   ) -> str:
    """The paper's cross-dataset / DG layout: one row per method, Source, each target and the targets' average,
    each cell mean ± std over seeds (``values[method][dataset]`` = per-seed accuracies)."""
    rows = []
    for method, per_ds in values.items():
        avg = [stats.mean(seed_vals) for seed_vals in zip(*(per_ds[t] for t in targets))]
        rows.append([method, *[mean_std(per_ds[d]) for d in (source, *targets)], mean_std(avg)])
    return tabulate(rows, headers=[title, f"{source} (source)", *targets, "Average"]) + (
        "\nAverage = mean over the targets (not the source), per seed, then mean ± std over seeds.")


def stage_table(rows: Sequence[Sequence]) -> str:
    """Per-stage times (``demo.pipeline.stage_times``)."""
    return tabulate(rows, headers=["stage", "runs", "skipped", "wall s", "run s (summed)"], floatfmt=".0f")
