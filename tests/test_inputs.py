import pytest
import torch

from grader.expect import CheckFailure, call, expect_raises, expect_tensor
from grader.inputs import layouts, random_shape


@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
def test_layouts_hold_the_same_values_in_other_layouts(shape):
    x = torch.randn(shape)
    variants = dict(layouts(x))
    assert variants["contiguous"].is_contiguous()
    for name, v in variants.items():
        assert torch.equal(v, x), name
        if name != "contiguous":
            assert not v.is_contiguous() or v.storage_offset() > 0, name


def test_random_shape_bounds():
    for _ in range(50):
        s = random_shape(1, 3, 2, 4)
        assert 1 <= len(s) <= 3 and all(2 <= d <= 4 for d in s)


def test_expect_tensor_messages():
    x = torch.ones(2, 3)
    with pytest.raises(CheckFailure, match=r"shape \(3, 2\), expected \(2, 3\)"):
        expect_tensor(x.t(), x, "out")
    with pytest.raises(CheckFailure, match="dtype torch.float64"):
        expect_tensor(x.double(), x, "out")
    with pytest.raises(CheckFailure, match="1 of 6 values differ, first at index \\(1, 2\\)"):
        y = x.clone()
        y[1, 2] = 5
        expect_tensor(y, x, "out")
    with pytest.raises(CheckFailure, match="should be a tensor"):
        expect_tensor([1.0], x, "out")
    expect_tensor(x + 1e-7, x, "out")


def test_expect_tensor_ignores_patched_torch(monkeypatch):
    monkeypatch.setattr(torch, "isclose", lambda *a, **k: torch.ones(2, 3, dtype=torch.bool))
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    with pytest.raises(CheckFailure):
        expect_tensor(torch.zeros(2, 3), torch.ones(2, 3), "out")


def test_expect_raises():
    expect_raises(ValueError, lambda: int("x"), "int('x')")
    with pytest.raises(CheckFailure, match="but returned int 3"):
        expect_raises(ValueError, lambda: 3, "f()")
    with pytest.raises(CheckFailure, match="but raised KeyError"):
        expect_raises(ValueError, lambda: {}[1], "f()")
    with pytest.raises(NotImplementedError):
        expect_raises(ValueError, lambda: (_ for _ in ()).throw(NotImplementedError), "f()")


def test_call_catches_changed_inputs():
    x = torch.arange(6.0)
    assert torch.equal(call(lambda t: t * 2, x, what="f(x)"), x * 2)
    with pytest.raises(CheckFailure, match="changed its input in place"):
        call(lambda t: t.add_(1), x, what="f(x)")
    with pytest.raises(CheckFailure, match="changed its input in place"):
        call(lambda t: t.resize_(3), torch.arange(6.0), what="f(x)")
    nan = torch.tensor([float("nan"), 1.0])
    call(lambda t: t + 0, nan, what="f(x)")  # NaN inputs are unchanged, not "different from themselves"
