"""Routing-analysis tools on synthetic PETR dumps, against direct NumPy computations."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers_results import make_dumps, run_dir
from PIL import Image
from scipy.special import logsumexp

from analysis.dumps import find_units
from tests.helpers_run import HANG_GUARD_S
from tools import lambda_sweep, plot_routing_scores, router_ablation

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

UNITS = [("eurosat", 1), ("eurosat", 2), ("dtd", 1)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("b2n"))
    dumps = {}
    for i, (ds, seed) in enumerate(UNITS):
        dumps[(ds, seed)] = make_dumps(run_dir(root, "train_base", ds, "PETR", "cfg", seed),
                                       run_dir(root, "test_new", ds, "PETR", "cfg", seed), seed=i)
    return root, dumps


def np_mahalanobis(fit: np.ndarray, x: np.ndarray) -> np.ndarray:
    diff = x - fit.mean(axis=0)
    prec = np.linalg.inv(np.cov(fit, rowvar=False, bias=True))
    return np.sqrt(np.einsum("ij,jk,ik->i", diff, prec, diff))


def np_expected(s, router: str, lam: float = 1.4, percentile: float = 99.0) -> dict:
    """Routing accuracy and Base/Novel accuracy of one synthetic unit, computed directly."""
    c = s.q_s.shape[1]
    if router == "mahalanobis":
        threshold = lam * np.percentile(np_mahalanobis(s.fit_q, s.fit_q), percentile)
        route = np_mahalanobis(s.fit_q, np.c_[s.q_s, s.q_u]) <= threshold
    elif router == "energy":
        route = -logsumexp(s.q_s, axis=1) <= np.percentile(-logsumexp(s.fit_q[:, :c], axis=1), 99)
    elif router == "oracle":
        route = s.is_seen
    else:
        route = None
    final = (s.q_s + s.q_u) / 2 if route is None else np.where(route[:, None], s.q_s, s.q_u)
    pred = np.empty(len(final), dtype=int)
    for mask, ids in ((s.is_seen, s.base_ids), (~s.is_seen, s.novel_ids)):
        pred[mask] = ids[final[mask][:, ids].argmax(axis=1)]
    hit = pred == s.labels
    out = {"base": 100 * hit[s.is_seen].mean(), "novel": 100 * hit[~s.is_seen].mean(),
           "route_base": np.nan, "route_novel": np.nan}
    if route is not None:
        out.update(route_base=100 * route[s.is_seen].mean(), route_novel=100 * (~route[~s.is_seen]).mean())
    return out


ROUTERS = ["mahalanobis", "energy", "average", "oracle"]


def test_find_units_pairs_base_and_new(tree):
    root, _ = tree
    units = find_units([root])
    assert [(u.method, u.dataset, u.seed) for u in units] == [("PETR/cfg", "dtd", "1"), ("PETR/cfg", "eurosat", "1"),
                                                              ("PETR/cfg", "eurosat", "2")]  # papers' dataset order
    assert all(len(u.dirs) == 2 and len(u.logits_paths) == 2 and "train_base" in u.fit_path for u in units)


def test_router_ablation_matches_numpy(tree, tmp_path, capsys):
    root, dumps = tree
    out_json = str(tmp_path / "ablation.json")
    assert router_ablation.main([root, "--routers", *ROUTERS, "--format", "csv", "--json", out_json]) == 0
    with open(out_json) as f:
        summary = json.load(f)["PETR/cfg"]
    expected = {(ds, seed): {r: np_expected(dumps[(ds, seed)], r) for r in ROUTERS} for ds, seed in UNITS}
    for router in ROUTERS:
        per_ds = {}
        for ds in ("eurosat", "dtd"):
            runs = [expected[(d, s)][router] for d, s in UNITS if d == ds]
            per_ds[ds] = {k: np.mean([r[k] for r in runs]) for k in runs[0]}
            for key, value in per_ds[ds].items():
                got = summary[ds][router][key]
                assert (got is None and np.isnan(value)) or got == pytest.approx(value), (ds, router, key)
        avg = {k: np.mean([per_ds[ds][k] for ds in per_ds]) for k in ("base", "novel")}
        hm = 2 * avg["base"] * avg["novel"] / (avg["base"] + avg["novel"])
        assert summary["average"][router]["hm"] == pytest.approx(hm)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "dataset,router,route base,route novel,Base,Novel,HM"
    m = per_ds["dtd"]
    assert f"dtd,oracle,100.00,100.00,{m['base']:.2f},{m['novel']:.2f}," in "\n".join(lines)
    assert any(ln.startswith("average,average,-,-,") for ln in lines)


def test_router_ablation_single_run_folder_and_errors(tmp_path, capsys):
    s = make_dumps(str(tmp_path / "eurosat" / "seed_3"), None, seed=7)
    units = find_units([str(tmp_path)])
    assert [(u.dataset, u.seed) for u in units] == [("eurosat", "3")]
    got = router_ablation.evaluate_unit(units[0], ["mahalanobis"])["mahalanobis"]
    ref = np_expected(s, "mahalanobis")
    assert {k: pytest.approx(v) for k, v in ref.items()} == got
    assert router_ablation.main([str(tmp_path / "missing")]) == 2
    assert "directory not found" in capsys.readouterr().err
    assert router_ablation.main([str(tmp_path), "--routers", "lofx"]) == 2
    assert "Did you mean 'lof'" in capsys.readouterr().err


def test_tools_default_to_the_runs_router_json(tmp_path, capsys):
    run = tmp_path / "eurosat" / "seed_1"
    s = make_dumps(str(run), None, seed=3)
    (run / "router.json").write_text(json.dumps({"router": "mahalanobis", "lam": 0.8, "percentile": 95.0}))
    unit = find_units([str(tmp_path)])[0]
    assert unit.router_settings() == (0.8, 95.0) and unit.router_settings(1.2) == (1.2, 95.0)
    got = router_ablation.evaluate_unit(unit, ["mahalanobis"])["mahalanobis"]
    assert {k: pytest.approx(v) for k, v in np_expected(s, "mahalanobis", 0.8, 95.0).items()} == got
    assert got != {k: pytest.approx(v) for k, v in np_expected(s, "mahalanobis").items()}
    explicit = router_ablation.evaluate_unit(unit, ["mahalanobis"], lam=1.4, percentile=99.0)["mahalanobis"]
    assert {k: pytest.approx(v) for k, v in np_expected(s, "mahalanobis").items()} == explicit
    assert router_ablation.main([str(tmp_path), "--routers", "mahalanobis"]) == 0
    assert "λ 0.8, P95" in capsys.readouterr().out


def test_lambda_sweep_matches_numpy(tree, tmp_path, capsys):
    root, dumps = tree
    lambdas = [0.6, 1.0, 1.4, 1.8]
    out_json = str(tmp_path / "sweep.json")
    assert lambda_sweep.main([root, "--json", out_json, "--format", "github"]) == 0
    with open(out_json) as f:
        summary = json.load(f)["PETR/cfg"]
    per_ds = {}
    for ds in ("eurosat", "dtd"):
        runs = []
        for d, seed in UNITS:
            if d != ds:
                continue
            s = dumps[(d, seed)]
            d_fit, d_u = np_mahalanobis(s.fit_q, s.fit_q), np_mahalanobis(s.fit_q, s.train_u_q)
            p99 = np.percentile(d_fit, 99)
            runs.append({lam: (100 * (d_fit <= lam * p99).mean(), 100 * (d_u > lam * p99).mean()) for lam in lambdas})
        per_ds[ds] = {lam: np.mean([r[lam] for r in runs], axis=0) for lam in lambdas}
        for lam in lambdas:
            np.testing.assert_allclose(summary[ds][str(lam)], per_ds[ds][lam])
    for lam in lambdas:
        np.testing.assert_allclose(summary["average"][str(lam)], np.mean([per_ds[ds][lam] for ds in per_ds], axis=0))
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("|")]
    assert rows[0] == ["dataset"] + [f"{k}@{lam:g}" for lam in lambdas for k in ("seen", "unseen")]
    dtd = next(r for r in rows if r[0] == "dtd")
    assert dtd[1:] == [f"{v:.2f}" for lam in lambdas for v in per_ds["dtd"][lam]]


def test_plots_are_valid_pngs(tree, tmp_path, capsys):
    root, _ = tree
    out_dir = str(tmp_path / "figs")
    assert plot_routing_scores.main([root, "--out", out_dir, "--datasets", "eurosat"]) == 0
    files = sorted(os.listdir(out_dir))
    assert files == ["eurosat_seed1_mahalanobis.png", "eurosat_seed2_mahalanobis.png", "mahalanobis_grid.png"]
    for name in files:
        with Image.open(os.path.join(out_dir, name)) as img:
            img.verify()
        with Image.open(os.path.join(out_dir, name)) as img:
            assert img.format == "PNG" and img.size[0] >= 400 and img.size[1] >= 300
    units = [u for u in find_units([root]) if u.dataset == "dtd"]
    written = plot_routing_scores.plot_routers(units, out_dir, routers=["mahalanobis", "entropy", "lof"])
    with Image.open(written[0]) as img:
        assert os.path.basename(written[0]) == "dtd_seed1_routers.png" and img.size[0] >= 1000
    assert plot_routing_scores.main([root, "--out", out_dir, "--datasets", "nope"]) == 2
    assert "none of the datasets" in capsys.readouterr().err


@pytest.mark.parametrize("launcher", [["-m", "tools.router_ablation"], ["tools/lambda_sweep.py"],
                                      ["tools/plot_routing_scores.py", "--out", "figs"]], ids=lambda x: x[-1])
def test_tools_run_as_module_and_as_script(tree, tmp_path, launcher):
    """``python -m tools.<name>`` and ``python tools/<name>.py`` (from the repository root) both run."""
    root, _ = tree
    cmd = [sys.executable, *(os.path.join(tmp_path, a) if a == "figs" else a for a in launcher), root]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=HANG_GUARD_S)
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("Saved") if "--out" in launcher else first.split()[0] == "dataset"
