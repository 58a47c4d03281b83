"""parse_test_res.py and the analysis library on fabricated output trees (our results.json and upstream CoOp /
PromptKD logs)."""
import csv
import io
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers_results import (
    coop_test_log,
    coop_train_log,
    make_b2n_tree,
    make_promptkd_tree,
    make_seed_runs,
    promptkd_log,
    run_dir,
    upstream_cfg,
    write_results_json,
)
from helpers_upstream import UPSTREAM_KILLED_LOG, fork_train_tail, write_dassl_log
from scipy import stats

import parse_test_res as ptr
from analysis import stats as st
from analysis.b2n import collect_b2n, order_methods, summarize_b2n, wilcoxon_test
from analysis.paper import load_paper, paper_rows
from analysis.readers import val_values_from_log, value_from_log
from tests.helpers_run import HANG_GUARD_S

PETR = {  # dataset: (base per seed, novel per seed)
    "imagenet": ([77.12, 77.50, 76.98], [70.31, 70.02, 70.66]),
    "caltech101": ([98.40, 98.71, 98.52], [95.10, 94.88, 95.37]),
    "oxford_pets": ([95.84, 95.90, 96.12], [97.90, 98.01, 97.75]),
    "dtd": ([85.30, 84.97, 85.66], [72.10, 71.54, 73.02]),
    "eurosat": ([97.91, 98.10, 97.60], [85.30, 84.40, 86.10]),
    "ucf101": ([89.20, 88.75, 89.61], [82.40, 83.12, 81.90]),
}
COOP = {  # upstream logs print one decimal
    "imagenet": ([76.5, 76.4, 76.7], [67.9, 68.1, 67.5]),
    "caltech101": ([98.0, 98.2, 97.9], [89.8, 90.1, 89.5]),
    "oxford_pets": ([93.7, 94.1, 93.5], [95.3, 95.8, 94.9]),
    "dtd": ([79.4, 80.1, 79.9], [41.2, 43.5, 42.0]),
    "eurosat": ([92.2, 91.5, 93.0], [54.7, 56.0, 53.9]),
    "ucf101": ([84.7, 84.2, 85.1], [56.1, 57.3, 55.8]),
}


def ref_hm(b, n):
    return 2 * b * n / (b + n)


def md_rows(out: str) -> list[list[str]]:
    """Cells of every GitHub-markdown table row printed in ``out``."""
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in out.splitlines() if ln.startswith("|")]


@pytest.fixture
def b2n_root(tmp_path):
    root = str(tmp_path / "output" / "base2new")
    make_b2n_tree(root, "PETR", "vit_b16_petr", PETR, fmt="json")
    make_b2n_tree(root, "CoOp", "vit_b16_ctxv1", COOP, fmt="log")
    return root


# Hand-computed: 75, 50, 50 -> mean 58.333; population std sqrt(((50/3)^2 + 2 (25/3)^2) / 3) = 11.785; sample std
# sqrt(1250/3 / 2) = 14.434; upstream CI 1.96 * 11.785 / sqrt(3) = 13.336; t CI 4.3027 * 14.434 / sqrt(3) = 35.856.
# 80, 90 -> mean 85; population std 5; sample std 7.0711; upstream CI 1.96 * 5 / sqrt(2) = 6.9296;
# t CI 12.7062 * 7.0711 / sqrt(2) = 12.7062 * 5 = 63.531.
HAND = [  # values, mean, (population std, upstream ci95), (sample std, t ci95)
    ([75.0, 50.0, 50.0], 58.3333, (11.7851, 13.3361), (14.4338, 35.8555)),
    ([80.0, 90.0], 85.0, (5.0, 6.9296), (7.0711, 63.5310)),
]


@pytest.mark.parametrize("values, mean, upstream, sample", HAND)
def test_statistics_both_conventions_hand_computed(values, mean, upstream, sample):
    assert st.mean(values) == pytest.approx(mean, abs=1e-3)
    for convention, (std, ci) in (("upstream", upstream), ("sample", sample)):
        assert st.std(values, convention) == pytest.approx(std, abs=1e-3)
        assert st.ci95_halfwidth(values, convention) == pytest.approx(ci, abs=1e-3)
        assert st.spread(values, convention, ci95=True) == pytest.approx(ci, abs=1e-3)
    assert st.std(values) == pytest.approx(upstream[0], abs=1e-3)  # upstream is the default


def test_statistics_match_numpy_and_scipy():
    values = [92.1, 91.5, 92.9, 90.7]
    assert st.std(values, "upstream") == pytest.approx(np.std(values))
    assert st.ci95_halfwidth(values, "upstream") == pytest.approx(1.96 * np.std(values) / 2)
    assert st.std(values, "sample") == pytest.approx(np.std(values, ddof=1))
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert st.ci95_halfwidth(values, "sample") == pytest.approx((hi - lo) / 2)
    assert math.isnan(st.std([1.0], "sample")) and math.isnan(st.ci95_halfwidth([1.0], "sample"))
    assert st.std([1.0], "upstream") == 0.0 and math.isnan(st.mean([]))  # np.std of one value, as upstream prints
    assert st.harmonic_mean(80.0, 60.0) == pytest.approx(2 * 80 * 60 / 140)
    with pytest.raises(ValueError, match="unknown statistics convention"):
        st.std(values, "population")


def test_log_parsing_upstream_formats():
    train = coop_train_log(92.1) + "Evaluate on the *test* set\n* accuracy: 93.4%\n"  # last match after signal wins
    assert value_from_log(train) == pytest.approx(93.4)
    assert value_from_log(coop_test_log(55.2)) is None  # eval-only log has no "Finish training"
    assert value_from_log(coop_test_log(55.2), test_log=True) == pytest.approx(55.2)
    assert value_from_log(coop_train_log(88.0), keyword="macro_f1") == pytest.approx(87.0)
    log = promptkd_log([90.1, 95.5, 94.2], 80.3)
    assert val_values_from_log(log) == pytest.approx([90.1, 95.5, 94.2])
    assert value_from_log(log) == pytest.approx(80.3)
    engine_line = "Finish training\n=> result\n* accuracy: 75.25%\n"  # this project's engine prints two decimals
    assert value_from_log(engine_line) == pytest.approx(75.25)


def test_default_mode_reads_an_upstream_kgcoop_tree(tmp_path, capsys):
    """Upstream KgCoOp's train_base folder (``shots_16_<W>``, Dassl.ProGrad's ``Finished training`` logs) of seeds 1-3
    at 46.00, 47.50 and 48.34: mean 47.28, population std sqrt(((-1.28)² + 0.22² + 1.06²) / 3) = 0.97."""
    exp = tmp_path / "train_base" / "eurosat" / "shots_16_8.0" / "KgCoOp" / "vit_b16_ep100_ctxv1"
    for seed, accuracy in zip((1, 2, 3), (46.0, 47.5, 48.34)):
        (exp / f"seed{seed}").mkdir(parents=True)
        (exp / f"seed{seed}" / "log.txt").write_text(fork_train_tail("KgCoOp", accuracy))
    assert ptr.main([str(exp)]) == 0
    assert "* accuracy: 47.28% +- 0.97% (population std (np.std), as upstream, n=3)" in capsys.readouterr().out


def test_default_mode_upstream_example_both_conventions(tmp_path, capsys):
    """Upstream's seed-folder tree of eval-only logs: 75, 50, 50 prints upstream's 58.33% +- 11.79% by default."""
    exp = tmp_path / "exp"
    make_seed_runs(str(exp), [75.0, 50.0, 50.0], fmt="test_log")
    assert ptr.main([str(exp), "--test-log"]) == 0
    assert "* accuracy: 58.33% +- 11.79% (population std (np.std), as upstream, n=3)" in capsys.readouterr().out
    assert ptr.main([str(exp), "--test-log", "--ci95"]) == 0
    assert "* accuracy: 58.33% +- 13.34% (95% CI half-width 1.96*std/sqrt(n), as upstream, n=3)" in \
        capsys.readouterr().out
    assert ptr.main([str(exp), "--test-log", "--stats", "sample"]) == 0
    assert "* accuracy: 58.33% +- 14.43% (sample std (ddof=1), n=3)" in capsys.readouterr().out
    assert ptr.main([str(exp), "--test-log", "--stats", "sample", "--ci95"]) == 0
    assert "* accuracy: 58.33% +- 35.86% (95% CI half-width, t with 2 dof, n=3)" in capsys.readouterr().out


def test_default_mode_results_json_and_logs(tmp_path, capsys):
    accs = [92.13, 91.52, 92.94]
    exp = tmp_path / "exp"
    make_seed_runs(str(exp), accs)
    assert ptr.main([str(exp)]) == 0
    out = capsys.readouterr().out
    assert f"* accuracy: {np.mean(accs):.2f}% +- {np.std(accs):.2f}% (population std" in out
    assert "seed2" in out and "91.52" in out
    assert ptr.main([str(exp), "--ci95", "--stats", "sample"]) == 0
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(accs), scale=stats.sem(accs))
    assert f"+- {(hi - lo) / 2:.2f}% (95% CI half-width, t with 2 dof, n=3)" in capsys.readouterr().out

    logs = tmp_path / "logs"  # upstream eval-only logs in seed_S folders need --test-log
    make_seed_runs(str(logs), [55.2, 54.1, 56.0], fmt="test_log", seed_style="seed_{}")
    assert ptr.main([str(logs), "--test-log", "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert "| seed_1 | -         | 55.20      |" in out  # the logs record no classes (no config dump)
    assert f"* accuracy: {np.mean([55.2, 54.1, 56.0]):.2f}%" in out
    assert ptr.main([str(logs)]) == 2
    assert "try --test-log" in capsys.readouterr().err


def csv_rows(text: str) -> list[list[str]]:
    """Parse CSV text, asserting that every row has the header's number of fields."""
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and all(len(r) == len(rows[0]) for r in rows), text
    return rows


def test_csv_output_holds_only_table_rows(tmp_path, capsys):
    exp = tmp_path / "exp"
    make_seed_runs(str(exp), [75.0, 50.0, 50.0])
    assert ptr.main([str(exp), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert csv_rows(out) == [["run", "classes", "accuracy"], ["seed1", "-", "75.00"], ["seed2", "-", "50.00"],
                             ["seed3", "-", "50.00"]]
    assert "Summary of directory" in err and "* accuracy: 58.33% +- 11.79%" in err


def test_multi_exp_both_conventions_and_missing_dir(tmp_path, capsys):
    for exp, accs in {"a": [70.0, 72.0], "b": [75.0, 50.0, 50.0]}.items():
        make_seed_runs(str(tmp_path / exp), accs)
    assert ptr.main([str(tmp_path), "--multi-exp", "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert csv_rows(out) == [["experiment", "classes", "n", "accuracy", "std"], ["a", "-", "2", "71.00", "1.00"],
                             ["b", "-", "3", "58.33", "11.79"]]
    assert "std: population std (np.std), as upstream" in err
    assert f"Average performance: {np.mean([71.0, 175 / 3]):.2f}%" in err
    assert ptr.main([str(tmp_path), "--multi-exp", "--format", "csv", "--stats", "sample", "--ci95"]) == 0
    out, err = capsys.readouterr()
    # a: t(1) * 1.414 / 1.414
    assert csv_rows(out)[1:] == [["a", "-", "2", "71.00", "12.71"], ["b", "-", "3", "58.33", "35.86"]]
    assert "ci95: 95% CI half-width, t with n-1 dof" in err
    assert ptr.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "directory not found" in err[0]


def test_b2n_summary_matches_independent_computation(b2n_root):
    data = collect_b2n([b2n_root])
    assert set(data) == {"PETR", "CoOp"}
    summary = summarize_b2n(data)
    for name, table in (("PETR", PETR), ("CoOp", COOP)):
        bases, novels = [], []
        for ds, (b, n) in table.items():
            row = summary[name][ds]
            assert row["base"] == pytest.approx(np.mean(b)) and row["novel"] == pytest.approx(np.mean(n))
            assert row["hm"] == pytest.approx(ref_hm(np.mean(b), np.mean(n)))
            assert (row["n_base"], row["n_novel"]) == (3, 3)
            bases.append(np.mean(b))
            novels.append(np.mean(n))
        avg = summary[name]["average"]
        assert avg["base"] == pytest.approx(np.mean(bases)) and avg["novel"] == pytest.approx(np.mean(novels))
        assert avg["hm"] == pytest.approx(ref_hm(np.mean(bases), np.mean(novels)))  # HM of the averages


def test_b2n_cli_table_delta_paper_and_wilcoxon(b2n_root, capsys):
    rc = ptr.main(["b2n", b2n_root, "--methods", "PETR", "CoOp", "--paper", "--format", "github",
                   "--wilcoxon", "PETR", "CoOp", "--metric", "hm"])
    assert rc == 0
    out = capsys.readouterr().out
    b, n = np.mean(PETR["eurosat"][0]), np.mean(PETR["eurosat"][1])
    cb, cn = np.mean(COOP["eurosat"][0]), np.mean(COOP["eurosat"][1])
    rows = md_rows(out)
    assert rows[0] == ["dataset", "method", "seeds", "Base", "Novel", "HM", "ΔBase", "ΔNovel", "ΔHM"]
    assert ["eurosat", "PETR", "3/3", f"{b:.2f}", f"{n:.2f}", f"{ref_hm(b, n):.2f}", "-", "-", "-"] in rows
    assert ["eurosat", "CoOp", "3/3", f"{cb:.2f}", f"{cn:.2f}", f"{ref_hm(cb, cn):.2f}", f"{cb - b:.2f}",
            f"{cn - n:.2f}", f"{ref_hm(cb, cn) - ref_hm(b, n):.2f}"] in rows
    assert ["average", "PETR (paper)", "-", "88.42", "82.09", "85.14"] == rows[-3][:6]
    order = list(dict.fromkeys(r[0] for r in rows[2:]))  # the papers' dataset order, average last
    assert order == ["imagenet", "caltech101", "oxford_pets", "dtd", "eurosat", "ucf101", "average"]
    assert "Δ = row − PETR (baseline: first --methods entry; change it with --baseline NAME)." in out
    hm_petr = [ref_hm(np.mean(b), np.mean(n)) for b, n in PETR.values()]
    hm_coop = [ref_hm(np.mean(COOP[ds][0]), np.mean(COOP[ds][1])) for ds in PETR]
    ref = stats.wilcoxon(hm_petr, hm_coop)
    assert f"over 6 datasets: W = {ref.statistic:.4g}, p = {ref.pvalue:.4g}" in out
    res = wilcoxon_test(summarize_b2n(collect_b2n([b2n_root])), "PETR", "CoOp", "base")
    ref_base = stats.wilcoxon([np.mean(v[0]) for v in PETR.values()], [np.mean(COOP[ds][0]) for ds in PETR])
    assert res["statistic"] == pytest.approx(ref_base.statistic) and res["pvalue"] == pytest.approx(ref_base.pvalue)


def test_b2n_baseline_paper_alias_and_unknown_method(b2n_root, capsys):
    assert ptr.main(["b2n", b2n_root, "--methods", "PETR", "--baseline", "paper:PETR"]) == 0
    out = capsys.readouterr().out
    avg_b = np.mean([np.mean(b) for b, _ in PETR.values()])
    assert f"{avg_b - 88.42:.2f}" in out and "Δ = row − paper:PETR (baseline: set with --baseline;" in out
    assert ptr.main(["b2n", b2n_root, "--reference", "PETRX"]) == 2  # --reference: the former name, still accepted
    assert "unknown method 'PETRX'" in capsys.readouterr().err


def test_b2n_default_baseline_is_never_alphabetical(b2n_root, capsys):
    """Without --methods: no Δ (and a note saying how to get it), or Δ vs the zero-shot CLIP runs when measured."""
    assert ptr.main(["b2n", b2n_root, "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert md_rows(out)[0] == ["dataset", "method", "seeds", "Base", "Novel", "HM"]
    assert "No Δ columns: name the baseline with --baseline NAME" in out
    zs = {ds: ([60.0], [70.0]) for ds in PETR}
    make_b2n_tree(b2n_root, "ZeroshotCLIP", "vit_b16", zs, fmt="json", shots="shots_0")
    assert ptr.main(["b2n", b2n_root, "--format", "github"]) == 0
    out = capsys.readouterr().out
    rows = md_rows(out)
    assert rows[0][6:] == ["ΔBase", "ΔNovel", "ΔHM"]
    b, n = np.mean(COOP["dtd"][0]), np.mean(COOP["dtd"][1])  # CoOp sorts first alphabetically: not the baseline
    assert ["dtd", "CoOp", "3/3", f"{b:.2f}", f"{n:.2f}", f"{ref_hm(b, n):.2f}", f"{b - 60:.2f}", f"{n - 70:.2f}",
            f"{ref_hm(b, n) - ref_hm(60, 70):.2f}"] in rows
    assert ["dtd", "ZeroshotCLIP", "1/1", "60.00", "70.00", f"{ref_hm(60, 70):.2f}", "-", "-", "-"] in rows
    assert "Δ = row − ZeroshotCLIP (baseline: zero-shot CLIP, the default; change it with --baseline NAME)." in out
    assert ptr.main(["b2n", b2n_root, "--baseline", "CoOp", "--format", "github"]) == 0
    assert "Δ = row − CoOp (baseline: set with --baseline;" in capsys.readouterr().out


def test_b2n_csv_has_no_footnotes(b2n_root, capsys):
    assert ptr.main(["b2n", b2n_root, "--methods", "PETR", "CoOp", "--format", "csv", "--wilcoxon", "PETR",
                     "CoOp"]) == 0
    out, err = capsys.readouterr()
    rows = csv_rows(out)
    assert rows[0] == ["dataset", "method", "seeds", "Base", "Novel", "HM", "ΔBase", "ΔNovel", "ΔHM"]
    assert len(rows) == 1 + 2 * 7  # 6 datasets + average, two methods
    assert "Δ = row − PETR" in err and "HM per dataset" in err and "Wilcoxon" in err


@pytest.mark.parametrize("convention", ["upstream", "sample"])
def test_seed_table_both_conventions(b2n_root, capsys, convention):
    assert ptr.main(["b2n", b2n_root, "--methods", "PETR", "--seed-table", "--format", "csv",
                     "--stats", convention]) == 0
    out, err = capsys.readouterr()
    tables = out.split("\n\n")
    assert len(tables) == 2 and csv_rows(tables[1])[0][:6] == ["dataset", "method", "n", "Base", "Base std",
                                                                "Base ci95"]
    b, n = PETR["dtd"]
    hms = [ref_hm(x, y) for x, y in zip(b, n)]
    if convention == "upstream":  # np.std and 1.96 * std / sqrt(n), as upstream parse_test_res.py
        spread = [(np.std(v), 1.96 * np.std(v) / np.sqrt(3)) for v in (b, n, hms)]
        assert "std = population std (np.std), as upstream" in err
    else:
        spread = [(np.std(v, ddof=1), stats.t.ppf(0.975, 2) * np.std(v, ddof=1) / np.sqrt(3)) for v in (b, n, hms)]
        assert "std = sample std (ddof=1)" in err
    expected = [x for v, (sd, ci) in zip((b, n, hms), spread) for x in (np.mean(v), sd, ci)]
    line = next(r for r in csv_rows(tables[1]) if r[:3] == ["dtd", "PETR", "3/3"])
    assert line[3:] == [f"{v:.2f}" for v in expected]


def test_promptkd_single_folder_fallback(tmp_path):
    root = str(tmp_path / "base2new")
    make_promptkd_tree(root, {"eurosat": [([90.1, 97.2, 96.0], 82.5), ([91.0, 96.4, 97.8], 81.1)]})
    runs = collect_b2n([root])["PromptKD"]["eurosat"]
    assert runs.base == {"1": pytest.approx(97.2), "2": pytest.approx(97.8)}  # best val = base
    assert runs.novel == {"1": pytest.approx(82.5), "2": pytest.approx(81.1)}
    assert runs.test_selected


def test_promptkd_upstream_tree_is_marked_test_selected(tmp_path, capsys):
    """PromptKD's seed_<S> tree beside CoOp's train_base/test_new pair: only the PromptKD rows carry the marker."""
    root = str(tmp_path / "base2new")
    make_promptkd_tree(root, {"eurosat": [([90.1, 97.2, 96.0], 82.5), ([91.0, 96.4, 97.8], 81.1)]})
    make_b2n_tree(root, "CoOp", "vit_b16_ctxv1", {"eurosat": COOP["eurosat"]}, fmt="log")
    for fmt in ("github", "csv"):
        assert ptr.main(["b2n", root, "--methods", "CoOp", "PromptKD", "--format", fmt]) == 0
        out, err = capsys.readouterr()
        rows = md_rows(out) if fmt == "github" else csv_rows(out)
        assert rows[0][-1] == "selection"
        body = rows[2:] if fmt == "github" else rows[1:]  # markdown has a separator row
        selection = {(r[0], r[1]): r[-1] for r in body}
        assert selection == {("eurosat", "CoOp"): "-", ("eurosat", "PromptKD"): "base test",
                             ("average", "CoOp"): "-", ("average", "PromptKD"): "base test"}
        kd = next(r for r in rows if r[1] == "PromptKD" and r[0] == "eurosat")
        assert kd[3:5] == [f"{np.mean([97.2, 97.8]):.2f}", f"{np.mean([82.5, 81.1]):.2f}"]
        assert "selection 'base test': the checkpoint was chosen on the base test set: upstream PromptKD's tree" in (
            out if fmt == "github" else err)


def test_runs_selected_on_test_are_flagged(tmp_path, capsys):
    """results.json ``selected_on: test`` (best_val without a val split): the DIR summary names those runs and the
    b2n table marks the method's rows, as for upstream PromptKD's tree."""
    exp = tmp_path / "exp"
    for seed, (acc, split) in enumerate([(90.0, "test"), (91.0, "val"), (92.0, None)], 1):
        write_results_json(str(exp / f"seed{seed}"), acc, selected_on=split)
    assert ptr.main([str(exp)]) == 0
    out = capsys.readouterr().out
    assert ("Note: 1 of 3 runs selected their model on the test split (results.json selected_on: test; "
            "TEST.FINAL_MODEL best_val without a val split): seed1; not comparable") in out
    root = str(tmp_path / "base2new")
    make_b2n_tree(root, "PETR", "cfg", {"eurosat": PETR["eurosat"]})
    make_b2n_tree(root, "CoOp", "vit_b16_ctxv1", {"eurosat": COOP["eurosat"]})
    write_results_json(run_dir(root, "train_base", "eurosat", "CoOp", "vit_b16_ctxv1", 2), COOP["eurosat"][0][1],
                       dataset="eurosat", trainer="CoOp", selected_on="test")
    assert ptr.main(["b2n", root, "--methods", "PETR", "CoOp", "--format", "github"]) == 0
    rows = md_rows(capsys.readouterr().out)
    assert rows[0][-1] == "selection"
    assert {(r[0], r[1]): r[-1] for r in rows[2:]} == {("eurosat", "PETR"): "-", ("eurosat", "CoOp"): "base test",
                                                        ("average", "PETR"): "-", ("average", "CoOp"): "base test"}


def test_b2n_leaves_out_a_result_of_another_dataset_with_one_warning(tmp_path, capsys):
    """A results.json in eurosat's folder recording DescribableTextures is another dataset's result: out of the
    table, one warning line naming it; dtd's own runs (DATASET.NAME DescribableTextures) stay in."""
    root = str(tmp_path / "base2new")
    for ds, name in (("eurosat", "EuroSAT"), ("dtd", "DescribableTextures")):
        for seed, (base, novel) in enumerate(zip(*PETR[ds]), 1):
            write_results_json(run_dir(root, "train_base", ds, "PETR", "cfg", seed), base, dataset=name)
            write_results_json(run_dir(root, "test_new", ds, "PETR", "cfg", seed), novel, dataset=name)
    foreign = run_dir(root, "test_new", "eurosat", "PETR", "cfg", 4)
    write_results_json(run_dir(root, "train_base", "eurosat", "PETR", "cfg", 4), 10.0, dataset="EuroSAT")
    write_results_json(foreign, 10.0, dataset="DescribableTextures")
    assert ptr.main(["b2n", root, "--format", "csv"]) == 0
    captured = capsys.readouterr()
    rows = {row["dataset"]: row for row in csv.DictReader(io.StringIO(captured.out)) if row.get("method") == "PETR"}
    assert float(rows["eurosat"]["Novel"]) == pytest.approx(np.mean(PETR["eurosat"][1]), abs=0.01)
    assert float(rows["eurosat"]["Base"]) == pytest.approx(np.mean([*PETR["eurosat"][0], 10.0]), abs=0.01)
    assert float(rows["dtd"]["Base"]) == pytest.approx(np.mean(PETR["dtd"][0]), abs=0.01)
    assert [line for line in captured.err.splitlines() if "results.json" in line] == [
        f"warning: {foreign}/results.json records dataset 'DescribableTextures' but lies in the folder of eurosat: "
        "not this folder's run, left out (move it to the folder of the run it records)"]


LEFT_OUT = ": not this folder's run, left out (move it to the folder of the run it records)"


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warning:")]


def csv_table(out: str) -> dict[str, dict[str, str]]:
    """The b2n CSV rows by dataset."""
    return {row["dataset"]: row for row in csv.DictReader(io.StringIO(out))}


@pytest.mark.parametrize("records", ["results.json", "run.json and log.txt"])
def test_b2n_leaves_out_swapped_base_and_novel_results(tmp_path, capsys, records):
    """Seed 1's base and novel results.json swapped (train_base records the novel classes, test_new the base ones):
    both left out, one line each naming the file, the recorded classes and the folder's; seed 2 is the row. The
    classes a results.json does not record come from what the run records beside it (train_base's run.json config,
    test_new's log config dump)."""
    root = str(tmp_path / "base2new")
    make_b2n_tree(root, "PETR", "cfg", {"eurosat": ([50.0, 80.0], [33.33, 60.0])})
    base, new = (run_dir(root, role, "eurosat", "PETR", "cfg", 1) for role in ("train_base", "test_new"))
    in_results = records == "results.json"
    write_results_json(base, 33.33, dataset="eurosat", trainer="PETR", **({"subsample_classes": "new"} if in_results
                                                                          else {}))
    write_results_json(new, 50.0, dataset="eurosat", trainer="PETR", **({"subsample_classes": "base"} if in_results
                                                                        else {}))
    if not in_results:
        with open(os.path.join(base, "run.json"), "w") as f:
            json.dump({"trainer": "PETR", "config": {"DATASET.SUBSAMPLE_CLASSES": "new"}}, f)
        write_dassl_log(new, upstream_cfg("PETR", "EuroSAT", 1, subsample="base"))
    assert ptr.main(["b2n", root, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    row = csv_table(out)["eurosat"]
    assert (row["seeds"], row["Base"], row["Novel"]) == ("1/1", "80.00", "60.00")
    (new_file, base_file, key) = (("results.json", "results.json", "subsample_classes") if in_results else
                                  ("log.txt", "run.json", "DATASET.SUBSAMPLE_CLASSES"))
    assert warnings(err) == [
        f"warning: {new}/{new_file} records {key} 'base' (the base classes) but lies in a folder of the novel "
        f"classes{LEFT_OUT}",
        f"warning: {base}/{base_file} records {key} 'new' (the novel classes) but lies in a folder of the base "
        f"classes{LEFT_OUT}"]


def test_a_run_of_another_seed_is_left_out(tmp_path, capsys):
    """``--extra-opts "SEED 5"`` with ``--seeds 1 2 3``: each seed folder holds the same seed-5 run; no seed is
    counted (seeds 0/0, not 3/3). In one folder of seeds, only the misplaced run is left out."""
    root = str(tmp_path / "base2new")
    for seed in (1, 2, 3):
        for role, acc, classes in (("train_base", 90.0, "base"), ("test_new", 70.0, "new")):
            write_results_json(run_dir(root, role, "eurosat", "PETR", "cfg", seed), acc, dataset="eurosat",
                               trainer="PETR", subsample_classes=classes, seed=5)
    assert ptr.main(["b2n", root, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    row = csv_table(out)["eurosat"]
    assert (row["seeds"], row["Base"], row["Novel"]) == ("0/0", "-", "-")
    seed1 = run_dir(root, "train_base", "eurosat", "PETR", "cfg", 1)
    assert len(warnings(err)) == 6
    assert f"warning: {seed1}/results.json records seed 5 but lies in the folder seed1{LEFT_OUT}" in warnings(err)
    for seed, acc in ((2, 80.0), (3, 82.0)):
        write_results_json(run_dir(root, "train_base", "eurosat", "PETR", "cfg", seed), acc, dataset="eurosat",
                           trainer="PETR", subsample_classes="base")
    assert ptr.main([os.path.dirname(seed1), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert csv_rows(out) == [["run", "classes", "accuracy"], ["seed2", "base", "80.00"], ["seed3", "base", "82.00"]]
    assert warnings(err) == [f"warning: {seed1}/results.json records seed 5 but lies in the folder seed1{LEFT_OUT}"]
    assert "* accuracy: 81.00% +- 1.00% (population std (np.std), as upstream, n=2) on the base classes" in err


@pytest.mark.parametrize("fields,line", [
    ({"trainer": "CoOp"}, "trainer 'CoOp' but lies in the folder of PETR"),
    ({"dataset": "DescribableTextures"}, "dataset 'DescribableTextures' but lies in the folder of eurosat"),
    ({"seed": 2, "subsample_classes": "all"},
     "seed 2 but lies in the folder seed1; subsample_classes 'all' (all classes) but lies in a folder of the novel "
     "classes"),
], ids=["trainer", "dataset", "seed and classes"])
def test_results_json_that_is_not_its_folders_run_is_left_out(tmp_path, capsys, fields, line):
    root = str(tmp_path / "base2new")
    make_b2n_tree(root, "PETR", "cfg", {"eurosat": ([80.0, 82.0], [60.0, 64.0])})
    new = run_dir(root, "test_new", "eurosat", "PETR", "cfg", 1)
    write_results_json(new, 10.0, **{"dataset": "eurosat", "trainer": "PETR", "subsample_classes": "new", **fields})
    for argv in (["b2n", root, "--format", "csv"], [os.path.dirname(new), "--format", "csv"]):
        assert ptr.main(argv) == 0
        out, err = capsys.readouterr()
        assert warnings(err) == [f"warning: {new}/results.json records {line}{LEFT_OUT}"]
        assert "10.00" not in out
        if argv[0] == "b2n":
            assert csv_table(out)["eurosat"]["Novel"] == "64.00"  # seed 2 alone


def test_an_upstream_log_that_is_not_its_folders_run_is_left_out(tmp_path, capsys):
    """An upstream CoOp log whose config dump records SEED 2 and the base classes, in test_new's seed1: one line
    naming the log and both keys."""
    root = str(tmp_path / "base2new")
    make_b2n_tree(root, "CoOp", "c", {"eurosat": ([80.0, 82.0], [60.0, 64.0])}, fmt="log")
    new = run_dir(root, "test_new", "eurosat", "CoOp", "c", 1)
    log = write_dassl_log(new, upstream_cfg("CoOp", "EuroSAT", 2, "base"), coop_test_log(10.0))
    assert ptr.main(["b2n", root, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert csv_table(out)["eurosat"]["Novel"] == "64.00"
    assert warnings(err) == [
        f"warning: {log} records SEED 2 but lies in the folder seed1; DATASET.SUBSAMPLE_CLASSES 'base' (the base "
        f"classes) but lies in a folder of the novel classes{LEFT_OUT}"]


def upstream_promptkd_tree(root: str, runs: list[tuple[list[float], float]]) -> str:
    """Upstream PromptKD's base-to-novel runs (seed_<S> under train_base, its log's config dump: TRAINER.MODAL
    base2novel, DATASET.SUBSAMPLE_CLASSES all) and an empty seed folder after them; returns their config folder."""
    folder = os.path.dirname(run_dir(root, "train_base", "eurosat", "PromptKD", "kd", 1, "shots_0"))
    for seed, (val, novel) in enumerate(runs, 1):
        cfg = upstream_cfg("PromptKD", "EuroSAT", seed, modal="base2novel")
        write_dassl_log(os.path.join(folder, f"seed_{seed}"), cfg, promptkd_log(val, novel))
    os.makedirs(os.path.join(folder, f"seed_{len(runs) + 1}"))
    return folder


def test_a_folder_summary_says_which_classes_it_covers(tmp_path, capsys):
    """Upstream PromptKD's train_base seed folders end with the novel accuracy, ours in the same place with the base
    accuracy: each row and the summary line name the classes; an empty seed folder is named, not dropped."""
    upstream = upstream_promptkd_tree(str(tmp_path / "upstream"), [([90.1, 97.2], 82.5), ([91.0, 97.8], 81.1)])
    assert ptr.main([upstream, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert csv_rows(out) == [["run", "classes", "accuracy"], ["seed_1", "novel", "82.50"], ["seed_2", "novel", "81.10"]]
    assert "* accuracy: 81.80% +- 0.70% (population std (np.std), as upstream, n=2) on the novel classes" in err
    assert "Note: seed_1, seed_2: upstream PromptKD's base-to-novel runs, whose final test covers the novel classes; " \
           "their base accuracy is the best *val* block (parse_test_res.py b2n reads both)" in err
    assert warnings(err) == [f"warning: {upstream}/seed_3 holds no results.json and no log.txt: left out (its run has "
                             "not started, or its files were moved)"]
    ours = os.path.dirname(run_dir(str(tmp_path / "ours"), "train_base", "eurosat", "PromptKD", "kd", 1, "shots_0"))
    for seed, acc in ((1, 97.1), (2, 97.5)):
        write_results_json(os.path.join(ours, f"seed{seed}"), acc, dataset="EuroSAT", trainer="PromptKD",
                           subsample_classes="base")
    assert ptr.main([ours]) == 0
    out = capsys.readouterr().out
    assert "* accuracy: 97.30% +- 0.20% (population std (np.std), as upstream, n=2) on the base classes" in out
    assert [line.split() for line in out.splitlines() if line.startswith("seed")] == [["seed1", "base", "97.10"],
                                                                                      ["seed2", "base", "97.50"]]
    assert ptr.main(["--multi-exp", os.path.dirname(ours), "--format", "csv"]) == 0
    assert csv_rows(capsys.readouterr().out)[1][:3] == ["kd", "base", "2"]


def test_b2n_reads_upstream_promptkd_by_its_config_and_names_an_empty_seed_folder(tmp_path, capsys):
    """b2n on the same upstream tree: Base = the best val block, Novel = the final test, even beside another
    method's test_new runs; the empty seed folder gets one line."""
    root = str(tmp_path / "base2new")
    upstream = upstream_promptkd_tree(root, [([90.1, 97.2], 82.5), ([91.0, 97.8], 81.1)])
    make_b2n_tree(root, "CoOp", "c", {"eurosat": ([80.0], [60.0])})
    assert ptr.main(["b2n", root, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    rows = {(r["dataset"], r["method"]): r for r in csv.DictReader(io.StringIO(out))}
    kd = rows[("eurosat", "PromptKD")]
    assert (kd["seeds"], kd["Base"], kd["Novel"]) == ("2/2", "97.50", "81.80")
    assert warnings(err) == [f"warning: {upstream}/seed_3 holds no results.json and no log.txt: left out (its run has "
                             "not started, or its files were moved)"]


def test_runs_covering_different_classes_are_named(tmp_path, capsys):
    exp = tmp_path / "exp"
    write_results_json(str(exp / "seed1"), 80.0, subsample_classes="base")
    write_results_json(str(exp / "seed2"), 60.0, subsample_classes="new")
    assert ptr.main([str(exp)]) == 0
    out, err = capsys.readouterr()
    assert "* accuracy: 70.00% +- 10.00% (population std (np.std), as upstream, n=2) on mixed classes" in out
    assert warnings(err) == [f"warning: the runs of {exp} cover different classes (base: seed1; novel: seed2): their "
                             "mean mixes them"]


@pytest.mark.parametrize("first,rerun,expected", [
    (UPSTREAM_KILLED_LOG, coop_train_log(91.5), "91.50"),  # the first attempt crashed, the rerun finished
    (coop_train_log(80.0), UPSTREAM_KILLED_LOG, "80.00"),  # the rerun crashed: the newest finished log
], ids=["rerun finished", "rerun crashed"])
def test_a_dassl_folder_run_again_in_place_is_read_from_its_newest_finished_log(tmp_path, capsys, first, rerun,
                                                                                 expected):
    """Dassl keeps the first attempt's log.txt and writes the rerun's log.txt-<timestamp> beside it."""
    folder = run_dir(str(tmp_path), "train_base", "eurosat", "CoOp", "c", 1)
    write_dassl_log(folder, upstream_cfg("CoOp", "EuroSAT", 1, "base"), first)
    write_dassl_log(folder, upstream_cfg("CoOp", "EuroSAT", 1, "base"), rerun, name="log.txt-2024-05-02-10-11-12")
    assert ptr.main([os.path.dirname(folder), "--format", "csv"]) == 0
    assert csv_rows(capsys.readouterr().out) == [["run", "classes", "accuracy"], ["seed1", "base", expected]]


def test_script_runs_from_the_command_line(tmp_path):
    """``python parse_test_res.py ...`` as users type it, from another working directory."""
    exp = tmp_path / "exp"
    make_seed_runs(str(exp), [75.0, 50.0, 50.0], fmt="train_log", seed_style="seed_{}")
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "parse_test_res.py")
    res = subprocess.run([sys.executable, script, str(exp)], capture_output=True, text=True, cwd=tmp_path,
                         timeout=HANG_GUARD_S)
    assert res.returncode == 0, res.stderr
    assert "* accuracy: 58.33% +- 11.79% (population std (np.std), as upstream, n=3)" in res.stdout


def test_test_base_folder_and_seed_naming(tmp_path):
    root = str(tmp_path)
    write_results_json(run_dir(root, "test_base", "dtd", "PETR", "c", 1, seed_style="seed_{}"), 80.0)
    write_results_json(run_dir(root, "test_new", "dtd", "PETR", "c", 1), 60.0)
    row = summarize_b2n(collect_b2n([root]))["PETR"]["dtd"]
    assert (row["base"], row["novel"]) == (80.0, 60.0)  # seed_1 and seed1 pair up


def test_paper_file_spot_checks():
    paper = load_paper()
    assert paper_rows(paper, "PETR")["average"] == {"base": 88.42, "novel": 82.09, "hm": 85.14}
    assert paper_rows(paper, "PromptKD")["eurosat"] == {"base": 97.54, "novel": 82.08, "hm": 89.14}
    assert paper_rows(paper, "PromptKD")["average"] == {"base": 86.96, "novel": 80.73, "hm": 83.73}
    assert paper_rows(paper, "PETR+CoOp")["average"] == {"base": 82.39, "novel": 73.82, "hm": 77.49}
    assert paper_rows(paper, "ZeroshotCLIP")["average"]["hm"] == 71.70
    assert paper["tables"]["cross_dataset"]["methods"]["PETR"]["rows"]["average"]["accuracy"] == 73.09
    assert paper["tables"]["domain_generalization"]["methods"]["PETR"]["rows"]["average"]["accuracy"] == 72.44
    for name, table in paper["tables"].items():
        assert isinstance(table["complete"], bool), name
        for method, entry in table["methods"].items():
            assert entry["source"] and all(s in paper["sources"] for s in entry["source"]), (name, method)
            for ds, row in entry["rows"].items():
                assert set(row) <= set(table["columns"]), (name, method, ds)
                if "hm" in row and "hm_note" not in entry:  # published HM agrees with Base/Novel (rounding)
                    assert row["hm"] == pytest.approx(ref_hm(row["base"], row["novel"]), abs=0.02)
    json.dumps(paper)  # plain data


def test_routed_rows_are_labelled_by_method(tmp_path, capsys):
    """PETR+X runs are named by the learner their results.json says they routed on, PETRCoOp's by its method; the
    --methods filter still takes trainer names, and a PETR+X folder that routed on two learners keeps the trainer."""
    root = str(tmp_path)
    scores = {"eurosat": ([80.0, 82.0], [60.0, 62.0])}
    make_b2n_tree(root, "PETRX", "vit_b16_kgcoop", scores, tuned_trainer="KgCoOp")
    make_b2n_tree(root, "PETRX", "vit_b16_cocoop", scores, tuned_trainer="CoCoOp")
    make_b2n_tree(root, "PETRCoOp", "vit_b16_ctxv1", scores, tuned_trainer="CoOp")
    make_b2n_tree(root, "KgCoOp", "vit_b16_ep100_ctxv1", scores)
    assert set(collect_b2n([root])) == {"PETR+KgCoOp", "PETR+CoCoOp", "PETR+CoOp", "KgCoOp"}
    assert list(order_methods(collect_b2n([root]), ["KgCoOp", "PETRX"])) == ["KgCoOp", "PETR+CoCoOp", "PETR+KgCoOp",
                                                                             "PETR+CoOp"]
    assert ptr.main(["b2n", root, "--methods", "PETRX", "KgCoOp"]) == 0
    table = capsys.readouterr().out
    assert "PETR+KgCoOp" in table and "PETR+CoCoOp" in table and "PETRX" not in table and "PETR+CoOp" not in table
    other = tmp_path / "mixed"
    make_b2n_tree(str(other), "PETRX", "vit_b16_x", {"eurosat": ([80.0], [60.0])}, tuned_trainer="KgCoOp")
    make_b2n_tree(str(other), "PETRX", "vit_b16_x", {"dtd": ([80.0], [60.0])}, tuned_trainer="CoCoOp")
    assert set(collect_b2n([str(other)])) == {"PETRX"}


@pytest.mark.parametrize("name", ["PETR+CoOp", "PETRCoOp", "petr_coop", "PETR+*"])
def test_every_name_of_a_method_selects_its_rows(tmp_path, capsys, name):
    """``--methods`` and ``--baseline`` take a method as the tables print it (PETR+CoOp), its trainer, its scripts
    folder or a glob, and the table names the row by its method; an entry that names no run is one warning line."""
    root = str(tmp_path)
    make_b2n_tree(root, "PETRCoOp", "vit_b16_ctxv1", {"eurosat": ([80.0], [60.0])}, tuned_trainer="CoOp")
    make_b2n_tree(root, "CoOp", "vit_b16_ctxv1", {"eurosat": ([78.0], [50.0])})
    baseline = "petr_coop" if "*" in name else name
    assert ptr.main(["b2n", root, "--methods", "CoOp", name, "CoOpp", "--baseline", baseline, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert [row["method"] for row in csv.DictReader(io.StringIO(out))] == ["CoOp", "PETR+CoOp", "CoOp", "PETR+CoOp"]
    assert "Δ = row − PETR+CoOp (baseline: set with --baseline;" in err
    assert warnings(err) == [f"warning: --methods CoOpp names no run under {root} (methods there: CoOp, PETR+CoOp)"]


@pytest.mark.parametrize("recorded,shown", [("NaN", "nan"), ("Infinity", "inf"), ("-5", "-5"), ("150", "150")])
def test_an_accuracy_that_is_no_percentage_is_left_out_with_one_warning(tmp_path, capsys, recorded, shown):
    """No evaluation gives NaN, infinity, a negative accuracy or one above 100: seed 1's base value is left out of the
    b2n table and of its folder's summary (the means are seed 2's alone), one warning line naming the file."""
    root = str(tmp_path / "base2new")
    make_b2n_tree(root, "PETR", "cfg", {"eurosat": ([50.0, 80.0], [30.0, 60.0])})
    base = run_dir(root, "train_base", "eurosat", "PETR", "cfg", 1)
    path = os.path.join(base, "results.json")
    with open(path) as f:
        text = f.read().replace('"accuracy": 50.0', f'"accuracy": {recorded}')
    with open(path, "w") as f:
        f.write(text)
    warning = (f"warning: {path} records accuracy {shown}, which is no percentage (0 to 100): left out (restore the "
               "file or run the evaluation again)")
    assert ptr.main(["b2n", root, "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    row = csv_table(out)["eurosat"]
    assert (row["Base"], row["Novel"]) == ("80.00", "45.00") and warnings(err) == [warning]
    assert ptr.main([os.path.dirname(base), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert csv_rows(out)[1:] == [["seed1", "base", "-"], ["seed2", "base", "80.00"]] and warnings(err) == [warning]
    assert "* accuracy: 80.00% +- 0.00% (population std (np.std), as upstream, n=1) on the base classes" in err


@pytest.mark.parametrize("content", [b'{"accuracy": "\xff"}', b"[" * 100_000 + b"]" * 100_000],
                         ids=["not UTF-8", "nesting 100,000 lists"])
def test_an_unreadable_results_json_is_one_error_line(tmp_path, capsys, content):
    path = tmp_path / "seed1" / "results.json"
    path.parent.mkdir()
    path.write_bytes(content)
    assert ptr.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"parse_test_res.py: error: malformed {path}: ") and \
        err[0].endswith("(delete it or re-run the evaluation)")
