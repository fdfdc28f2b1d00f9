"""Helpers for writing checks: each raises CheckFailure with a message a student can act on.

The comparison functions are bound when the grader is imported, so a notebook that
later patches `torch.allclose` or `torch.equal` does not change what they decide.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

_isclose = torch.isclose
_isnan = torch.isnan
_isfinite = torch.isfinite
_Tensor = torch.Tensor


class CheckFailure(AssertionError):
    """A check found wrong behaviour; the message is shown to the student as is."""


def fail(message: str) -> None:
    raise CheckFailure(message)


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailure(message)


# A result off by a clean factor is usually one mistake; the message names the likely one.
_MAX_FACTOR = 1024


def _named_factor(k: float) -> str:
    """What a result `k` times the expected one usually means."""
    if k == -1:
        return "the sign is flipped"
    if k in (100, 0.01):
        return "a percentage where a fraction was wanted?" if k == 100 else "a fraction where a percentage was wanted?"
    if k > 1 and k == int(k):
        return "summed instead of averaged?" if k == 2 else f"summed instead of averaged, or counted {int(k)} times?"
    n = round(1 / k)
    return "averaged instead of summed, or a factor of 2 missing?" if n == 2 else \
        f"averaged instead of summed, or divided by {n} once too often?"


def clean_factor(actual: float, expected: float, rel: float = 1e-6) -> float | None:
    """k when actual is k times expected for a clean k (-1, n or 1/n with 2 <= n <= 1024), else None."""
    if not (math.isfinite(actual) and math.isfinite(expected)) or expected == 0 or actual == 0:
        return None
    r = actual / expected
    candidates = [-1.0] + ([float(round(r))] if abs(r) >= 1 else [1 / round(1 / r)])
    for k in candidates:
        if (k > 0 or k == -1) and k != 1 and abs(r - k) <= rel * abs(k) and 1 / _MAX_FACTOR <= abs(k) <= _MAX_FACTOR:
            return k
    return None


def factor_message(k: float) -> str:
    """'yours is 2.00× the expected value: summed instead of averaged?' for a clean factor k."""
    if abs(k) >= 1:
        return f"yours is {k:.2f}× the expected value: {_named_factor(k)}"
    return f"yours is {k:.3g}× the expected value (1/{round(1 / k)} of it): {_named_factor(k)}"


def factor_hint(actual: Any, expected: Any) -> str:
    """'; yours is 2.00× the expected value: ...' when two numbers differ by a clean factor, else ''."""
    if isinstance(actual, bool) or isinstance(expected, bool) or not isinstance(actual, (int, float)) \
            or not isinstance(expected, (int, float)):
        return ""
    k = clean_factor(float(actual), float(expected))
    return "" if k is None else f"; {factor_message(k)}"


def _tensor_factor(a: torch.Tensor, e: torch.Tensor, rtol: float, atol: float) -> float | None:
    """The clean k with a close to k * e everywhere (e not all zero), else None."""
    a64, e64 = a.double(), e.double()
    finite = _isfinite(a64) & _isfinite(e64)
    if not bool(finite.all()) or not bool((e64 != 0).any()):
        return None
    ratio = float((a64 * e64).sum() / (e64 * e64).sum())  # least squares: a = k e
    k = clean_factor(ratio, 1.0, rel=1e-3)
    if k is None or not bool(_isclose(a64, k * e64, rtol=rtol, atol=atol * abs(k)).all()):
        return None
    return k


def describe(x: Any) -> str:
    """A short description of an input or output, for messages: kind, dtype, shape, layout."""
    if isinstance(x, _Tensor):
        parts = [f"{str(x.dtype).removeprefix('torch.')} tensor of shape {tuple(x.shape)}"]
        if x.dim() and not x.is_contiguous():
            parts.append("not contiguous")
        if x.device.type != "cpu":
            parts.append(f"on {x.device}")
        return ", ".join(parts)
    if isinstance(x, (bool, int, float, str)) or x is None:
        return f"{type(x).__name__} {x!r}"[:80]
    if isinstance(x, (tuple, list)) and len(x) <= 8:
        return f"{type(x).__name__} {x!r}"[:80]
    return f"{type(x).__name__}"


def expect_type(value: Any, kind: type | tuple[type, ...], what: str) -> None:
    if isinstance(value, bool) and kind in (int, float):
        fail(f"{what} should be {kind.__name__}, got bool {value!r}")
    if not isinstance(value, kind):
        name = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        fail(f"{what} should be {name}, got {describe(value)}")


def expect_equal(actual: Any, expected: Any, what: str) -> None:
    """Plain values (ints, bools, tuples): equal and of the same kind."""
    if type(actual) is bool or type(expected) is bool:
        ok = type(actual) is type(expected) and actual == expected
    else:
        ok = actual == expected
    if not ok:
        fail(f"{what}: got {actual!r}, expected {expected!r}{factor_hint(actual, expected)}")


def call(fn: Callable[..., Any], *args: Any, what: str) -> Any:
    """Call student code on `args` and fail if it changed any tensor argument in place.

    Checks compute their reference before calling, and this makes sure the inputs they
    describe in messages are still the inputs the student saw.
    """
    before = [(a, a.detach().clone(), a.shape, a.stride(), a.storage_offset())
              for a in args if isinstance(a, _Tensor)]
    result = fn(*args)
    for a, values, shape, stride, offset in before:
        if (a.shape, a.stride(), a.storage_offset()) != (shape, stride, offset) or not _same_values(a, values):
            fail(f"{what} changed its input in place ({describe(values)}); work on a copy or a new tensor")
    return result


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    a, b = a.detach(), b.detach()
    if a.is_floating_point():
        return bool((((a == b) | (_isnan(a) & _isnan(b)))).all())
    return bool((a == b).all())


def expect_tensor_like(actual: Any, shape: tuple[int, ...], dtype: torch.dtype | None, device: Any, what: str) -> None:
    """A plain tensor of this shape (and dtype and device, unless None); values are not looked at."""
    if not isinstance(actual, _Tensor):
        fail(f"{what} should be a tensor, got {describe(actual)}")
    if type(actual) not in (_Tensor, torch.nn.Parameter):
        fail(f"{what} should be a plain torch.Tensor, got the subclass {type(actual).__name__}")
    if tuple(actual.shape) != tuple(shape):
        fail(f"{what} has shape {tuple(actual.shape)}, expected {tuple(shape)}")
    if dtype is not None and actual.dtype != dtype:
        fail(f"{what} has dtype {actual.dtype}, expected {dtype} (keep the input's dtype)")
    if device is not None and actual.device != torch.device(device):
        fail(f"{what} is on {actual.device}, expected {device}")


def expect_tensor(actual: Any, expected: torch.Tensor, what: str, *, rtol: float | None = None,
                  atol: float | None = None, check_dtype: bool = True, check_device: bool = True,
                  equal_nan: bool = True) -> None:
    """Compare a tensor with the reference: kind, shape, dtype, device, then values within tolerance.

    Default tolerances follow torch.testing.assert_close for the expected dtype.
    """
    expect_tensor_like(actual, tuple(expected.shape), expected.dtype if check_dtype else None,
                       expected.device if check_device else None, what)
    a, e = actual.detach(), expected.detach()
    if a.dtype != e.dtype:
        a = a.to(e.dtype)
    if a.device != e.device:
        a = a.to(e.device)
    if e.is_floating_point() or e.is_complex():
        dr, da = _default_tolerance(e.dtype)
        rtol = dr if rtol is None else rtol
        atol = da if atol is None else atol
        close = _isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)
    else:
        close = a == e
    if not bool(close.all()):
        bad = (~close).nonzero()
        where = tuple(bad[0].tolist())
        n_bad = bad.shape[0]
        msg = f"{what}: {n_bad} of {e.numel()} values differ, first at index {where}"
        if e.is_floating_point():
            diff = (a.float() - e.float()).abs()
            diff = diff[~(_isnan(diff))]
            if diff.numel():
                msg += f" (largest difference {float(diff.max()):.3g})"
        k = _tensor_factor(a, e, rtol if e.is_floating_point() else 0.0, atol if e.is_floating_point() else 0.0)
        if k is not None:
            msg += f"; {factor_message(k)}"
        fail(msg)


def _default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    return {
        torch.float16: (1e-3, 1e-5),
        torch.bfloat16: (1.6e-2, 1e-5),
        torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7),
    }.get(dtype, (1.3e-6, 1e-5))


def expect_raises(exc_type: type[BaseException] | tuple[type[BaseException], ...], fn: Callable[[], Any],
                  what: str) -> BaseException:
    """`fn()` must raise `exc_type`; anything else (or nothing) is a clear failure."""
    name = exc_type.__name__ if isinstance(exc_type, type) else " or ".join(t.__name__ for t in exc_type)
    try:
        result = fn()
    except (NotImplementedError, CheckFailure):  # a stub, or a check that already failed (a forbidden call)
        raise
    except exc_type as e:
        return e
    except Exception as e:  # the wrong exception is a failed check, not a crash
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        fail(f"{what} should raise {name}, but raised {type(e).__name__}: {first}"[:300])
    fail(f"{what} should raise {name}, but returned {describe(result)}")
    raise AssertionError("unreachable")


# A counter of one's own (a dispatch mode that adds up what a model runs): a count runs no model, so a counting
# exercise forbids entering any dispatch mode, whatever it counts.
OWN_COUNTER = "torch.utils._python_dispatch.TorchDispatchMode.__enter__"
# What a count may ask of torch: a tensor made to read its element size or dtype, a dtype worked out, a Python
# number in and out. Anything else (a matrix product, a layer, an optimizer's update) is a model run, here or at
# smaller sizes.
_ASKING = {"empty", "empty_strided", "zeros", "ones", "full", "scalar_tensor", "lift_fresh", "lift_fresh_copy",
           "local_scalar_dense", "detach", "alias", "promote_types", "result_type", "can_cast",
           # a small tensor made some other way, or converted to the dtype asked about (`torch.tensor(0.).to(dtype)`)
           "_to_copy", "copy", "copy_", "clone", "randn", "rand", "normal_", "uniform_", "arange"}


def at_sizes_no_tensor_can_hold(fn: Callable[..., Any], name: str, *, holds: str = "hold more than 2**63 elements",
                                also_raise: tuple[type[BaseException], ...] = ()) -> Callable[..., Any]:
    """The student's `fn`, called where a tensor of the sizes asked for would `holds` (more than 2**63 elements or
    bytes): an error there means the code built tensors (a model run under a counter, on the meta device or not)
    instead of doing arithmetic on the sizes, and the failure says so. (A model run at smaller sizes and scaled up
    fails every check of a counting exercise: runner.run_check traces its calls.) `also_raise`: errors that pass
    unchanged."""
    def called(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (NotImplementedError, CheckFailure, *also_raise):  # a stub, or a forbidden call already refused
            raise
        except Exception as e:
            first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
            shown = ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            fail(f"{name}({shown}) raised {type(e).__name__}: {first[:120]}. A tensor of these sizes would {holds}, "
                 "which no tensor can, not even on the meta device. A count is arithmetic on the sizes: compute it "
                 "instead of building or running a model")
    return called


def expect_no_model_run(ops: dict[str, int], what: str) -> None:
    """A count's trace holds no tensor operation beyond asking torch about a dtype: anything else is a model run,
    at the sizes asked or at small ones scaled up (exact for a count that is linear or polynomial in them)."""
    ran = sorted({op.split(".")[1] if op.startswith("aten.") else op for op in ops}
                 - {f"{a}{b}" for a in ("", "_") for b in _ASKING})
    if ran:
        fail(f"{what} ran tensor operations ({', '.join(ran[:6])}): a model run, at these sizes or at smaller ones "
             "scaled up, is not a count. A count is arithmetic on the sizes: compute it with Python ints")


def expect_int(value: Any, what: str) -> int:
    """A count is a Python int, exactly: not a bool, not a float holding a whole number (exact only up to 2**53), not
    a NumPy integer or a tensor, not a subclass (only plain Python values cross from the student's kernel when
    grading, so the notebook refuses the rest too, and a subclass cannot lie about equality)."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value) and value == int(value):
        fail(f"{what} should be a Python int, got the float {value!r}: a float holds every integer only up to 2**53 "
             "(about 9e15), and FLOP counts go far beyond; count with ints (// where you divide)")
    fail(f"{what} should be a Python int, got {describe(value)}")
    raise AssertionError("unreachable")
