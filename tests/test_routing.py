"""Routers against independent NumPy / SciPy / scikit-learn computations."""
import warnings

import numpy as np
import pytest
import scipy.linalg
import torch
from scipy.special import logsumexp, softmax
from sklearn.covariance import EmpiricalCovariance
from sklearn.ensemble import IsolationForest
from sklearn.neighbors import LocalOutlierFactor
from sklearn.svm import OneClassSVM

from trainers.routing.routers import (
    ROUTERS,
    MahalanobisRouter,
    build_router,
    load_logits_dump,
    restricted_argmax,
    router_from_state,
    routing_metrics,
    save_logits_dump,
)


def correlated(n: int, d: int, seed: int, shift: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mix = rng.normal(size=(d, d))
    return rng.normal(size=(n, d)) @ mix + shift


def np_mahalanobis(x_fit: np.ndarray, x: np.ndarray, inverse) -> np.ndarray:
    mu = x_fit.mean(axis=0)
    cov = np.cov(x_fit, rowvar=False, bias=True)
    diff = x - mu
    return np.sqrt(np.maximum(np.einsum("ij,jk,ik->i", diff, inverse(cov), diff), 0.0))


@pytest.fixture(scope="module")
def data():
    fit = correlated(300, 6, seed=0)
    test = np.concatenate([correlated(40, 6, seed=1), correlated(40, 6, seed=2, shift=4.0)])
    return torch.from_numpy(fit), torch.from_numpy(test)


def test_mahalanobis_distance_matches_numpy_and_sklearn(data):
    fit, test = data
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # well-conditioned: no pseudo-inverse warning
        router = MahalanobisRouter().fit(fit.float())
    d = router.distance(test).numpy()
    ref = np_mahalanobis(fit.float().double().numpy(), test.numpy(), np.linalg.inv)
    np.testing.assert_allclose(d, ref, rtol=1e-8)
    sk = EmpiricalCovariance(assume_centered=False).fit(fit.float().double().numpy())
    np.testing.assert_allclose(d, np.sqrt(sk.mahalanobis(test.numpy())), rtol=1e-6)  # sklearn returns squared
    assert not router.pseudo_inverse


@pytest.mark.parametrize("lam,percentile", [(1.4, 99.0), (0.6, 95.0), (1.0, 50.0)])
def test_mahalanobis_threshold_and_routes(data, lam, percentile):
    fit, test = data
    router = MahalanobisRouter(lam=lam, percentile=percentile).fit(fit)
    d_fit = np_mahalanobis(fit.numpy(), fit.numpy(), np.linalg.inv)
    thr = lam * np.percentile(d_fit, percentile)
    assert router.threshold == pytest.approx(thr, rel=1e-9)
    d_test = np_mahalanobis(fit.numpy(), test.numpy(), np.linalg.inv)
    np.testing.assert_array_equal(router.route_to_seen(test).numpy(), d_test <= thr)
    q = test.float()
    combined = router.combine(q, num_classes=3).numpy()
    expected = np.where((d_test <= thr)[:, None], q[:, :3].numpy(), q[:, 3:].numpy())
    np.testing.assert_array_equal(combined, expected)
    summary = router.summary()
    assert summary["threshold"] == pytest.approx(thr, rel=1e-9)
    assert summary["fit_score_quantiles"]["p50"] == pytest.approx(np.percentile(d_fit, 50), rel=1e-9)
    assert summary["fit_score_quantiles"]["max"] == pytest.approx(d_fit.max(), rel=1e-9)


@pytest.mark.parametrize("dup_column", [False, True])
def test_mahalanobis_singular_uses_pinv_and_says_so_in_words(dup_column):
    if dup_column:  # N > D but two identical columns: singular covariance
        fit = correlated(100, 5, seed=3)
        fit = np.concatenate([fit, fit[:, :1]], axis=1)
    else:  # N < D
        fit = correlated(8, 12, seed=3)
    test = correlated(10, fit.shape[1], seed=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an expected property of the fit, not a warning
        router = MahalanobisRouter().fit(torch.from_numpy(fit))
    d = router.distance(torch.from_numpy(test)).numpy()
    assert np.isfinite(d).all()
    ref = np_mahalanobis(fit, test, lambda c: np.linalg.pinv(c, rcond=1e-10, hermitian=True))
    np.testing.assert_allclose(d, ref, rtol=1e-6)
    ref_pinvh = np_mahalanobis(fit, test, lambda c: scipy.linalg.pinvh(c, rtol=1e-10))
    np.testing.assert_allclose(d, ref_pinvh, rtol=1e-6)
    centred = fit - fit.mean(axis=0)
    rank = np.linalg.matrix_rank(centred.T @ centred / len(fit), rtol=1e-10, hermitian=True)
    assert rank < fit.shape[1] and router.pseudo_inverse and router.summary()["pseudo_inverse"]
    assert f"rank {rank} of {fit.shape[1]} dimensions" in router.note and "pseudo-inverse" in router.note


def fitted(name: str, fit: torch.Tensor) -> object:
    return build_router(name, lam=1.4, percentile=90.0).fit(fit)


@pytest.mark.parametrize("name", sorted(ROUTERS))
def test_state_dict_round_trip(tmp_path, data, name):
    fit, test = data
    router = fitted(name, fit)
    path = tmp_path / "router.pt"
    torch.save(router.state_dict(), path)
    state = torch.load(path, weights_only=True)
    restored = router_from_state(state)
    assert type(restored) is type(router)
    truth = torch.arange(len(test)) < 40
    for r in (router, restored):
        if r.needs_truth:
            r.set_truth(truth)
    torch.testing.assert_close(restored.combine(test), router.combine(test), rtol=0, atol=0)
    if router.routes:
        torch.testing.assert_close(restored.score(test), router.score(test), rtol=0, atol=0)
        assert restored.threshold == router.threshold


def test_sklearn_routers_match_estimators(data):
    fit, test = data
    x, y = fit.numpy(), test.numpy()
    cases = {
        "iforest": (IsolationForest(n_estimators=100, random_state=0).fit(x), None),
        "ocsvm": (OneClassSVM(kernel="rbf", gamma="scale", nu=0.5).fit(x), None),
        "lof": (LocalOutlierFactor(n_neighbors=20, novelty=True).fit(x), "lof"),
    }
    for name, (est, kind) in cases.items():
        router = fitted(name, fit)
        np.testing.assert_allclose(router.score(test).numpy(), -est.score_samples(y), rtol=1e-10)
        fit_scores = -est.negative_outlier_factor_ if kind == "lof" else -est.score_samples(x)
        assert router.threshold == pytest.approx(np.percentile(fit_scores, 90.0), rel=1e-10)
        np.testing.assert_array_equal(router.route_to_seen(test).numpy(),
                                      -est.score_samples(y) <= np.percentile(fit_scores, 90.0))


def test_seen_branch_scores_match_numpy(data):
    fit, test = data
    q_s = test.numpy()[:, :3]
    p = softmax(q_s, axis=1)
    expected = {
        "max_conf": -p.max(axis=1),
        "entropy": -(p * np.log(p)).sum(axis=1),
        "energy": -logsumexp(q_s, axis=1),
    }
    for name, ref in expected.items():
        router = fitted(name, fit)
        np.testing.assert_allclose(router.score(test).numpy(), ref, rtol=1e-10)
        fit_q_s = fit.numpy()[:, :3]
        fp = softmax(fit_q_s, axis=1)
        fit_ref = {"max_conf": -fp.max(axis=1), "entropy": -(fp * np.log(fp)).sum(axis=1),
                   "energy": -logsumexp(fit_q_s, axis=1)}[name]
        assert router.threshold == pytest.approx(np.percentile(fit_ref, 90.0), rel=1e-10)  # lam not applied
    energy_t2 = build_router("energy", temperature=2.0).fit(fit)
    np.testing.assert_allclose(energy_t2.score(test).numpy(), -2.0 * logsumexp(q_s / 2.0, axis=1), rtol=1e-10)


def test_average_and_oracle(data):
    fit, test = data
    q = test.float()
    avg = build_router("average").fit(fit)
    np.testing.assert_allclose(avg.combine(q).numpy(), (q[:, :3].numpy() + q[:, 3:].numpy()) / 2, rtol=1e-6)
    with pytest.raises(RuntimeError, match="does not route"):
        avg.route_to_seen(q)
    oracle = build_router("oracle").fit(fit)
    with pytest.raises(RuntimeError, match="set_truth"):
        oracle.route_to_seen(q)
    truth = torch.rand(len(q), generator=torch.Generator().manual_seed(0)) < 0.5
    oracle.set_truth(truth)
    np.testing.assert_array_equal(oracle.route_to_seen(q).numpy(), truth.numpy())
    expected = np.where(truth.numpy()[:, None], q[:, :3].numpy(), q[:, 3:].numpy())
    np.testing.assert_array_equal(oracle.combine(q).numpy(), expected)


def test_build_router_errors():
    with pytest.raises(ValueError, match="Did you mean 'mahalanobis'"):
        build_router("mahalanobis2")
    with pytest.raises(ValueError, match="lam"):
        build_router("mahalanobis", lam=0)
    with pytest.raises(ValueError, match="even width"):
        build_router("entropy").fit(torch.randn(10, 5))
    with pytest.raises(RuntimeError, match="not fitted"):
        MahalanobisRouter().route_to_seen(torch.randn(3, 4))


def test_routing_metrics_and_restricted_argmax():
    route = torch.tensor([1, 1, 0, 1, 0, 0, 0], dtype=torch.bool)
    seen = torch.tensor([1, 1, 1, 0, 0, 0, 0], dtype=torch.bool)
    m = routing_metrics(route, seen)
    assert m["route_acc_seen"] == pytest.approx(100 * 2 / 3)
    assert m["route_acc_unseen"] == pytest.approx(100 * 3 / 4)
    assert m["route_acc"] == pytest.approx(100 * 5 / 7)
    assert m["share_seen"] == pytest.approx(100 * 3 / 7) and m["share_unseen"] == pytest.approx(100 * 4 / 7)
    assert (m["n_seen"], m["n_unseen"]) == (3, 4)
    logits = torch.tensor([[5.0, 1.0, 2.0, 3.0], [0.0, 9.0, 1.0, 2.0]])
    ids = torch.tensor([2, 3])
    assert restricted_argmax(logits, ids).tolist() == [3, 3]


def test_logits_dump_round_trip_and_validation(tmp_path):
    path = str(tmp_path / "logits_test.pt")
    q = torch.randn(4, 3)
    save_logits_dump(path, q, q + 1, torch.tensor([0, 1, 2, 0]), torch.ones(4, dtype=torch.bool), torch.tensor([0, 1]))
    dump = load_logits_dump(path)
    torch.testing.assert_close(dump["q_u"], q + 1)
    torch.save({"q_s": q}, path)
    with pytest.raises(ValueError, match="lacks keys"):
        load_logits_dump(path)
