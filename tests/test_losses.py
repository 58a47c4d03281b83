"""PromptKD's KD loss against a hand-written NumPy formula, plus gradient checks."""
import numpy as np
import pytest
import torch
from scipy.special import log_softmax, softmax

from trainers.distillation.losses import kd_loss


def numpy_kd(student: np.ndarray, teacher: np.ndarray, tau: float) -> float:
    p_t = softmax(teacher / tau, axis=1)
    kl = (p_t * (np.log(p_t) - log_softmax(student / tau, axis=1))).sum()
    return kl * tau**2 / student.size


@pytest.mark.parametrize("tau", [1.0, 2.0, 0.5])
def test_kd_loss_matches_numpy_formula(tau):
    gen = torch.Generator().manual_seed(0)
    s = torch.randn(5, 7, generator=gen, dtype=torch.float64) * 3
    t = torch.randn(5, 7, generator=gen, dtype=torch.float64) * 3
    got = kd_loss(s, t, tau).item()
    assert got == pytest.approx(numpy_kd(s.numpy(), t.numpy(), tau), rel=1e-12)


def test_kd_loss_zero_for_identical_logits_and_float32():
    s = torch.randn(3, 4)
    assert kd_loss(s, s.clone(), 2.0).item() == pytest.approx(0.0, abs=1e-6)
    t = torch.randn(3, 4)
    assert kd_loss(s, t, 1.0).item() == pytest.approx(numpy_kd(s.double().numpy(), t.double().numpy(), 1.0), rel=1e-5)


def test_kd_loss_gradient_and_detached_teacher():
    gen = torch.Generator().manual_seed(1)
    s = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    t = torch.randn(4, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    tau = 1.7
    assert torch.autograd.gradcheck(lambda x: kd_loss(x, t, tau), (s,))
    kd_loss(s, t, tau).backward()
    assert t.grad is None  # teacher is detached
    # closed form: d/ds = tau * (softmax(s/tau) - softmax(t/tau)) / numel
    expected = tau * (softmax(s.detach().numpy() / tau, axis=1) - softmax(t.detach().numpy() / tau, axis=1)) / s.numel()
    np.testing.assert_allclose(s.grad.numpy(), expected, rtol=1e-10, atol=1e-14)


def test_kd_loss_rejects_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        kd_loss(torch.zeros(2, 3), torch.zeros(2, 4), 1.0)
    with pytest.raises(ValueError, match="temperature"):
        kd_loss(torch.zeros(2, 3), torch.zeros(2, 3), 0.0)
