"""A result off by a clean factor says so: the message names the factor and the likely mistake, in every chapter."""
import pytest
import torch

from grader.expect import CheckFailure, clean_factor, expect_equal, expect_tensor, factor_hint
from grader.runner import run_exercise


@pytest.mark.parametrize("actual,expected,words", [
    (2.0, 1.0, "2.00× the expected value: summed instead of averaged?"),
    (96, 48, "2.00×"),
    (0.25, 1.0, "0.25× the expected value (1/4 of it)"),
    (50.0, 0.5, "a percentage"),
    (-3.0, 3.0, "the sign is flipped"),
    (7.0, 1.0, "counted 7 times"),
])
def test_clean_factors_are_named(actual, expected, words):
    assert words in factor_hint(actual, expected)


@pytest.mark.parametrize("actual,expected", [(1.5, 1.0), (48, 48), (0.0, 1.0), (1.0, 0.0), (True, 2), (-2.0, 1.0),
                                             (4096.0, 1.0), (float("inf"), 1.0), ("2", 1)])
def test_other_differences_get_no_factor(actual, expected):
    assert factor_hint(actual, expected) == "" and clean_factor(1.0000001, 1.0) is None


def test_expect_equal_and_expect_tensor_name_the_factor():
    with pytest.raises(CheckFailure, match="got 20, expected 10; yours is 2.00×"):
        expect_equal(20, 10, "count")
    x = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(CheckFailure, match=r"0.2× the expected value \(1/5 of it\): averaged instead of summed"):
        expect_tensor(x / 5, x, "grad")
    with pytest.raises(CheckFailure) as e:  # not a multiple everywhere: no factor claimed
        expect_tensor(x * torch.tensor([2.0, 2.0, 2.0, 3.0], dtype=torch.float64), x, "grad")
    assert "×" not in str(e.value)


def _message(exercise: str, fn) -> str:
    r = run_exercise(exercise, fn)
    return " | ".join(c.message for c in r.checks if not c.passed)


@pytest.mark.parametrize("exercise,fn", [
    # forgot the 2 (a multiply and an add): flops.small_matmuls
    ("flops.matmul_flops", lambda m, k, n: m * k * n),
    # mean over the batch instead of the sum: autograd.one_output, through expect_tensor
    ("autograd.linear_loss_grad", lambda x, w, t: x.T @ (x @ w - t) / x.shape[0]),
    # bits instead of bytes: memory.float32_matrix
    ("memory.get_memory_usage", lambda x: x.numel() * x.element_size() * 8),
    # the gain applied twice (gain 2 gives 4x): initialization.xavier_values
    ("initialization.xavier_std", lambda fan_in, fan_out, gain=1.0: gain * gain * (2 / (fan_in + fan_out)) ** 0.5),
])
def test_each_chapter_reports_the_factor(exercise, fn):
    assert "× the expected value" in _message(exercise, fn)
