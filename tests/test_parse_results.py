"""parse_test_res.py on fabricated output trees (our results.json and upstream CoOp / PromptKD logs)."""
import json
import math

import numpy as np
import pytest
from helpers_results import (
    coop_test_log,
    coop_train_log,
    make_b2n_tree,
    make_promptkd_tree,
    promptkd_log,
    run_dir,
    write_results_json,
    write_text,
)
from scipy import stats

import parse_test_res as ptr

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


def test_statistics_match_numpy_and_scipy():
    values = [92.1, 91.5, 92.9, 90.7]
    mean, std = ptr.mean_std(values)
    assert mean == pytest.approx(np.mean(values)) and std == pytest.approx(np.std(values, ddof=1))
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert ptr.ci95_halfwidth(values) == pytest.approx((hi - lo) / 2)
    assert math.isnan(ptr.mean_std([1.0])[1]) and math.isnan(ptr.ci95_halfwidth([1.0]))
    assert ptr.harmonic_mean(80.0, 60.0) == pytest.approx(2 * 80 * 60 / 140)


def test_log_parsing_upstream_formats():
    train = coop_train_log(92.1) + "Evaluate on the *test* set\n* accuracy: 93.4%\n"  # last match after signal wins
    assert ptr.value_from_log(train) == pytest.approx(93.4)
    assert ptr.value_from_log(coop_test_log(55.2)) is None  # eval-only log has no "Finish training"
    assert ptr.value_from_log(coop_test_log(55.2), test_log=True) == pytest.approx(55.2)
    assert ptr.value_from_log(coop_train_log(88.0), keyword="macro_f1") == pytest.approx(87.0)
    log = promptkd_log([90.1, 95.5, 94.2], 80.3)
    assert ptr.val_values_from_log(log) == pytest.approx([90.1, 95.5, 94.2])
    assert ptr.value_from_log(log) == pytest.approx(80.3)
    engine_line = "Finish training\n=> result\n* accuracy: 75.25%\n"  # this project's engine prints two decimals
    assert ptr.value_from_log(engine_line) == pytest.approx(75.25)


def test_default_mode_results_json_and_logs(tmp_path, capsys):
    accs = [92.13, 91.52, 92.94]
    exp = tmp_path / "exp"
    for s, a in enumerate(accs, 1):
        write_results_json(str(exp / f"seed{s}"), a)
    assert ptr.main([str(exp)]) == 0
    out = capsys.readouterr().out
    assert f"* accuracy: {np.mean(accs):.2f}% +- {np.std(accs, ddof=1):.2f}% (sample std, n=3)" in out
    assert "seed2" in out and "91.52" in out
    assert ptr.main([str(exp), "--ci95"]) == 0
    lo, hi = stats.t.interval(0.95, 2, loc=np.mean(accs), scale=stats.sem(accs))
    assert f"+- {(hi - lo) / 2:.2f}% (95% CI half-width, t with 2 dof, n=3)" in capsys.readouterr().out

    logs = tmp_path / "logs"  # upstream eval-only logs in seed_S folders need --test-log
    for s, a in enumerate([55.2, 54.1, 56.0], 1):
        write_text(str(logs / f"seed_{s}" / "log.txt"), coop_test_log(a))
    assert ptr.main([str(logs), "--test-log", "--format", "github"]) == 0
    out = capsys.readouterr().out
    assert "| seed_1 | 55.20      |" in out
    assert f"* accuracy: {np.mean([55.2, 54.1, 56.0]):.2f}%" in out
    assert ptr.main([str(logs)]) == 2
    assert "try --test-log" in capsys.readouterr().err


def test_multi_exp_and_missing_dir(tmp_path, capsys):
    for exp, accs in {"a": [70.0, 72.0], "b": [80.0, 81.0, 82.0]}.items():
        for s, acc in enumerate(accs, 1):
            write_results_json(str(tmp_path / exp / f"seed{s}"), acc)
    assert ptr.main([str(tmp_path), "--multi-exp", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "b,3,81.00,1.00" in out
    assert f"Average performance: {np.mean([71.0, 81.0]):.2f}%" in out
    assert ptr.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "directory not found" in err[0]


def test_b2n_summary_matches_independent_computation(b2n_root):
    data = ptr.collect_b2n([b2n_root])
    assert set(data) == {"PETR", "CoOp"}
    summary = ptr.summarize_b2n(data)
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
    assert "Δ = row − PETR." in out
    hm_petr = [ref_hm(np.mean(b), np.mean(n)) for b, n in PETR.values()]
    hm_coop = [ref_hm(np.mean(COOP[ds][0]), np.mean(COOP[ds][1])) for ds in PETR]
    ref = stats.wilcoxon(hm_petr, hm_coop)
    assert f"over 6 datasets: W = {ref.statistic:.4g}, p = {ref.pvalue:.4g}" in out
    res = ptr.wilcoxon_test(ptr.summarize_b2n(ptr.collect_b2n([b2n_root])), "PETR", "CoOp", "base")
    ref_base = stats.wilcoxon([np.mean(v[0]) for v in PETR.values()], [np.mean(COOP[ds][0]) for ds in PETR])
    assert res["statistic"] == pytest.approx(ref_base.statistic) and res["pvalue"] == pytest.approx(ref_base.pvalue)


def test_b2n_reference_paper_and_unknown_method(b2n_root, capsys):
    assert ptr.main(["b2n", b2n_root, "--methods", "PETR", "--reference", "paper:PETR"]) == 0
    out = capsys.readouterr().out
    avg_b = np.mean([np.mean(b) for b, _ in PETR.values()])
    assert f"{avg_b - 88.42:.2f}" in out
    assert ptr.main(["b2n", b2n_root, "--reference", "PETRX"]) == 2
    assert "unknown method 'PETRX'" in capsys.readouterr().err


def test_seed_table(b2n_root, capsys):
    assert ptr.main(["b2n", b2n_root, "--methods", "PETR", "--seed-table", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    b, n = PETR["dtd"]
    hms = [ref_hm(x, y) for x, y in zip(b, n)]
    expected = [np.mean(b), np.std(b, ddof=1), ptr.ci95_halfwidth(b), np.mean(n), np.std(n, ddof=1),
                stats.t.ppf(0.975, 2) * np.std(n, ddof=1) / np.sqrt(3), np.mean(hms), np.std(hms, ddof=1)]
    line = next(ln for ln in out.splitlines() if ln.startswith("dtd,PETR,3/3,") and ln.count(",") == 11)
    assert line.split(",")[3:11] == [f"{v:.2f}" for v in expected]


def test_promptkd_single_folder_fallback(tmp_path):
    root = str(tmp_path / "base2new")
    make_promptkd_tree(root, {"eurosat": [([90.1, 97.2, 96.0], 82.5), ([91.0, 96.4, 97.8], 81.1)]})
    data = ptr.collect_b2n([root])
    cell = data["PromptKD"]["eurosat"]
    assert cell["base"] == {"1": pytest.approx(97.2), "2": pytest.approx(97.8)}  # best val = base
    assert cell["novel"] == {"1": pytest.approx(82.5), "2": pytest.approx(81.1)}


def test_test_base_folder_and_seed_naming(tmp_path):
    root = str(tmp_path)
    write_results_json(run_dir(root, "test_base", "dtd", "PETR", "c", 1, seed_style="seed_{}"), 80.0)
    write_results_json(run_dir(root, "test_new", "dtd", "PETR", "c", 1), 60.0)
    row = ptr.summarize_b2n(ptr.collect_b2n([root]))["PETR"]["dtd"]
    assert (row["base"], row["novel"]) == (80.0, 60.0)  # seed_1 and seed1 pair up


def test_paper_file_spot_checks():
    paper = ptr.load_paper()
    assert ptr.paper_rows(paper, "PETR")["average"] == {"base": 88.42, "novel": 82.09, "hm": 85.14}
    assert ptr.paper_rows(paper, "PromptKD")["eurosat"] == {"base": 97.54, "novel": 82.08, "hm": 89.14}
    assert ptr.paper_rows(paper, "PromptKD")["average"] == {"base": 86.96, "novel": 80.73, "hm": 83.73}
    assert ptr.paper_rows(paper, "PETR+CoOp")["average"] == {"base": 82.39, "novel": 73.82, "hm": 77.49}
    assert ptr.paper_rows(paper, "ZeroshotCLIP")["average"]["hm"] == 71.70
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
