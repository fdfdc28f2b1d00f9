"""Chapter 02 (dtypes): public checks. Hidden checks for the same exercises live in grader/hidden/dtypes.py."""
from __future__ import annotations

import math
import sys
import types

import torch

from grader.expect import call, describe, expect, expect_tensor_like, expect_type, fail
from grader.guard import MOVES, THRESHOLDS, UNSEEN, UNTRACED, entry_operator, lineage_text, resolve, unseen_values
from grader.registry import exercise
from grader.scenario import tracing


def numpy_aliases(*dotted: str) -> tuple[str, ...]:
    """Each name, then every other name NumPy's loaded modules give the same object (numpy.nextafter is also
    numpy._core.umath.nextafter): the guard refuses a ufunc or a class by replacing the attributes it is told of."""
    wanted = {id(obj): obj for obj in map(resolve, dotted) if obj is not None}
    aliases = [f"{name}.{attr}" for name, module in sorted(sys.modules.items())
               if (name == "numpy" or name.startswith("numpy.")) and isinstance(module, types.ModuleType)
               for attr, value in sorted(vars(module).items()) if id(value) in wanted and wanted[id(value)] is value]
    return tuple(dict.fromkeys((*dotted, *aliases)))


# Each of these hands over the smallest subnormal (nextafter(0, 1), NumPy's finfo.smallest_subnormal, math.ulp(0.0)):
# the exercise is to build it from torch.finfo's smallest normal and eps, or from the bits.
# The aten operators (torch.ops.aten.nextafter, called directly) and the in-place method are the same function under
# other names; numpy.spacing(0) is the smallest subnormal too. torch's and math's are builtins, refused by identity
# under any name; NumPy's ufuncs and finfo class only at the names given, so every alias NumPy has is listed
# (numpy._core.umath.nextafter; NumPy 2's numpy.core.umath.nextafter looks that one up).
SMALLEST_SUBNORMAL = exercise("dtypes.smallest_subnormal", points=1,
                              forbid=("torch.nextafter", "torch.Tensor.nextafter", "torch.Tensor.nextafter_",
                                      "torch.ops.aten.nextafter", "torch.ops.aten.nextafter_", "math.nextafter",
                                      "math.ulp", *numpy_aliases("numpy.nextafter", "numpy.spacing", "numpy.finfo")))
# torch.Tensor.bfloat16 is refused outright (a clear message); every other way of making a bfloat16 tensor
# (.to(torch.bfloat16), .type(...), copy_ into one, aten ops...) is caught by the trace of the call, which records
# the dtype of every tensor the student's function makes and where its result's values came from: integer bit
# operations, as the exercise asks, not floating-point arithmetic (frexp and ldexp, a scaled round). The trace sees
# operators through torch's Python dispatch: what turns that off for a while (so that a conversion or a float
# addition run there leaves no record) is refused too (torch's own helper, which printing a tensor calls, is made a
# no-op instead: guard._HARMLESS), and so is every other way to compute values out of its sight (NumPy, a storage
# written directly, another thread or process: guard.UNTRACED). A check also counts the operators: values written in
# one element at a time (Python numbers, each a scalar operand like any constant) take thousands.
ROUND_TO_BF16 = exercise("dtypes.round_to_bf16", points=3, forbid=("torch.Tensor.bfloat16", *UNTRACED))
# A library sum does the whole job its own way (pairwise, in a float32 accumulator, or exactly): refused by name,
# torch's (its aten operators called directly too; index_add into one slot adds in order), and NumPy's (a cumulative
# sum's last element is the sum).
_LIBRARY_SUMS = ("torch.sum", "torch.Tensor.sum", "torch.nansum", "torch.Tensor.nansum", "torch.cumsum",
                 "torch.Tensor.cumsum", "torch.Tensor.cumsum_", "torch.ops.aten.sum", "torch.ops.aten.cumsum",
                 "torch.ops.aten.cumsum_", "torch.index_add", "torch.Tensor.index_add", "torch.Tensor.index_add_",
                 "torch.ops.aten.index_add", "torch.ops.aten.index_add_", "math.fsum", "numpy.sum", "numpy.ndarray.sum", "numpy.nansum",
                 "numpy.add.reduce", "numpy.cumsum", "numpy.ndarray.cumsum", "numpy.nancumsum",
                 "numpy.add.accumulate")
SEQUENTIAL_SUM = exercise("dtypes.sequential_sum", points=1, forbid=_LIBRARY_SUMS)
KAHAN_SUM = exercise("dtypes.kahan_sum", points=2, forbid=_LIBRARY_SUMS)
# GradScaler's own update (torch._amp_update_scale_, which GradScaler.update calls, and its aten operators) is the
# rule itself.
UPDATE_LOSS_SCALE = exercise("dtypes.update_loss_scale", points=2,
                             forbid=("torch._amp_update_scale_", "torch.ops.aten._amp_update_scale_",
                                     "torch.ops.aten._amp_update_scale", "torch.amp.GradScaler",
                                     "torch.amp.grad_scaler.GradScaler"))

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# Exact values, from the formats' definitions: 2^(1 - bias) * 2^(-mantissa bits).
SUBNORMALS = {torch.float64: 2.0**-1074, torch.float32: 2.0**-149, torch.float16: 2.0**-24,
              torch.bfloat16: 2.0**-133, torch.float8_e4m3fn: 2.0**-9, torch.float8_e5m2: 2.0**-16}
# torch's own functions, bound before any student code runs: the references and the tools of the checks.
_to = torch.Tensor.to
_view = torch.Tensor.view
_isnan = torch.isnan
_tensor = torch.tensor
_finfo = torch.finfo


def bits_to_float32(*patterns: int) -> torch.Tensor:
    """float32 values from their 32-bit patterns, written as unsigned hex (0xFFC00000 is -nan)."""
    return _view(_tensor([p - 2**32 if p >= 2**31 else p for p in patterns], dtype=torch.int32), torch.float32)


# ---------------------------------------------------------------- smallest_subnormal

def _in(value: float, dtype: torch.dtype) -> float:
    """`value` stored in `dtype` and read back (float8 converts through float32, as torch does)."""
    if dtype == torch.float64:
        return float(_tensor(value, dtype=torch.float64))
    return float(_to(_to(_tensor(value, dtype=torch.float32), dtype), torch.float32))


def expect_subnormal(smallest_subnormal, dtype: torch.dtype) -> None:
    name = str(dtype).removeprefix("torch.")
    what = f"smallest_subnormal(torch.{name})"
    got = smallest_subnormal(dtype)
    expect_type(got, float, what)
    expect(got > 0, f"{what} returned {got!r}; the smallest subnormal is a positive number")
    if got == _finfo(dtype).smallest_normal:
        fail(f"{what} returned {got!r}: that is the smallest *normal* number (finfo.tiny); subnormals go lower")
    expect(_in(got, dtype) == got, f"{what} returned {got!r}, which {name} cannot hold exactly")
    expect(_in(got / 2, dtype) == 0.0, f"{what} returned {got!r}, but half of it is still nonzero in {name} "
                                       "(there is a smaller positive number)")
    want = SUBNORMALS[dtype]
    expect(got == want, f"{what} returned {got!r}; expected 2^{round(math.log2(want))}")


@SMALLEST_SUBNORMAL.check
def float32_and_float16(smallest_subnormal):
    """float32 and float16: nonzero in the dtype, and half of it rounds to 0"""
    expect_subnormal(smallest_subnormal, torch.float32)
    expect_subnormal(smallest_subnormal, torch.float16)


@SMALLEST_SUBNORMAL.check
def bfloat16(smallest_subnormal):
    """bfloat16: float32's exponent range, but only 7 stored mantissa bits"""
    expect_subnormal(smallest_subnormal, torch.bfloat16)


@SMALLEST_SUBNORMAL.check
def float8(smallest_subnormal):
    """float8_e4m3fn and float8_e5m2"""
    for dtype in FLOAT8:
        expect_subnormal(smallest_subnormal, dtype)


@SMALLEST_SUBNORMAL.check
def float64(smallest_subnormal):
    """float64, which the same definition covers"""
    expect_subnormal(smallest_subnormal, torch.float64)


# ---------------------------------------------------------------- round_to_bf16

def _hex(value: torch.Tensor) -> str:
    """A float32 scalar as its value and its bit pattern, e.g. `nan (0x7fffffff)`."""
    return f"{value.item()!r} (0x{int(_view(value.reshape(1), torch.int32)) & 0xFFFFFFFF:08x})"


# What the result's values may come from (its trace's lineage, "operator:dtype"): at least one integer bit operation,
# and no floating-point arithmetic, which is the other way to round (frexp/ldexp and a scaled round, x * c - ..., a
# float64 "magic number" added by a sum or a matmul). Every operator that makes a floating-point (or complex) tensor
# on the way must be one that only makes, copies, moves or selects values: any other can do arithmetic (sum, neg,
# mm, diff, cumsum, a conversion between float dtypes that rounds...), so none is trusted: guard.MOVES, and abs,
# because torch.isinf and torch.isfinite run it.
_BIT_OPS = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift", "bitwise_right_shift",
            "and", "or", "xor", "lshift", "rshift", "iand", "ior", "ixor", "ilshift", "irshift"}
_FLOAT_MOVES = MOVES | {"abs"}
_FLOATING = ("float", "bfloat", "complex")
# An ordering comparison of x's floats, or of its bits, with a table of thresholds (guard.THRESHOLDS: both sides hold
# many different values, as in a binary search over bfloat16 midpoints or over their bit patterns) rounds by
# comparing, with bool output; x != x, isnan, isinf, x.abs() == inf, bits > 0x7F800000 and r == x are tests, and stay
# allowed.
# A move only moves values within float32, x's dtype: a copy into float16 rounds (x's mantissa shifted into float16's
# subnormals keeps bfloat16's 7 bits, ties to even). A search of a table of midpoints rounds too, with integer output.
_SEARCHES = {"searchsorted", "bucketize"}
_ALLOCATES = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"}  # memory, no values in it


def expect_integer_method(lineage: set[str], what: str) -> None:
    """The result's values came from integer bit operations (on x.view(torch.int32)), not floating-point arithmetic."""
    ops = sorted(lineage)
    arithmetic = sorted({f"{op} into {dtype}" if op in _FLOAT_MOVES else op for op, dtype in map(entry_operator, ops)
                         if op != UNSEEN and (op in _SEARCHES or dtype.startswith(_FLOATING) and op not in _ALLOCATES
                                              and (op not in _FLOAT_MOVES or dtype != "float32"))})
    if arithmetic:
        fail(f"{what} rounded with floating-point arithmetic ({', '.join(arithmetic[:8])}): do the rounding with "
             "integer operations on x.view(torch.int32), as the exercise asks")
    if unseen := unseen_values(lineage):
        fail(f"{what}: {unseen}; compute the result from x.view(torch.int32) with torch's integer operations, inside "
             "the function")
    if not any(op in _BIT_OPS and dtype.startswith(("int", "uint")) for op, dtype in map(entry_operator, ops)):
        came = f"its values came from {lineage_text(ops, 8)}" if ops else "no tensor operation made its values"
        fail(f"{what} computed its result without integer bit operations on x.view(torch.int32) ({came}): round "
             "the bits themselves, with integer operations on the int32 view")


# A search compares every value with a table of thresholds (a broadcast `x[..., None] >= table` then a count, or a
# chain of comparisons over exponent ranges): either way the call makes a value per element and threshold, hundreds
# or thousands per element of x (the trace's count of the elements its operators returned, views included), where
# rounding the bits makes 13 to 18. Float comparisons that keep NaN or find inf make one per element; a table built
# once, a fixed amount.
_MADE_PER_VALUE = 100
_MADE_FIXED = 2**13


def expect_no_search(made: int, numel: int, what: str) -> None:
    """The call made a few values per element of x (its trace's count), not one per threshold of a searched table."""
    if made > _MADE_PER_VALUE * numel + _MADE_FIXED:
        fail(f"{what} made {made:,} values to round {numel:,} ({made / max(numel, 1):,.0f} for each, where rounding "
             "the bits makes about 20): it compares every value with a table of thresholds (a broadcast comparison "
             "and a count, or a chain of comparisons over ranges), a search that rounds by comparing floats, like "
             "searchsorted, or repeats work on the whole tensor for each element; round the bits themselves, with a "
             "few integer operations on the whole x.view(torch.int32)")


def expect_no_table_search(lineage: set[str], what: str) -> None:
    """No comparison with a table of thresholds reached the result (guard.THRESHOLDS): a binary search over bfloat16
    midpoints, of floats or of their bits, takes a few values per element, but rounds by comparing, not by rounding."""
    searched = sorted({op.removesuffix(THRESHOLDS) for op, _ in map(entry_operator, lineage)
                       if op.endswith(THRESHOLDS)})
    if searched:
        fail(f"{what} compared x's values with many different thresholds ({', '.join(searched)} against a table of "
             "them, floats or their bits): a search, such as a binary search over the midpoints between bfloat16 "
             "values, finds the answer by comparing instead of rounding. Testing for NaN or inf (x != x, "
             "torch.isinf, or the bits against 0x7F800000) is fine; do the rounding itself with a few integer "
             "operations on x.view(torch.int32)")


def expect_rounded(round_to_bf16, x: torch.Tensor, how: str) -> None:
    """Bit-identical to torch's conversion (x.to(torch.bfloat16).float()), except that a NaN only has to stay
    NaN; no bfloat16 tensor made on the way, and the rounding done on integer bits (the call's trace)."""
    what = f"round_to_bf16({how})"
    with tracing(lineage=True) as trace:
        got = call(round_to_bf16, x, what=what)
    expect_rounded_result(x, got, trace, what)


def expect_rounded_result(x: torch.Tensor, got, trace, what: str) -> None:
    """What expect_rounded judges, once the call is made: the values against torch's conversion, the dtypes the call
    made and where the result's values came from (the call's trace)."""
    want = _to(_to(x, torch.bfloat16), torch.float32)
    expect_tensor_like(got, tuple(want.shape), torch.float32, want.device, what)
    flat_x, flat_got, flat_want = x.reshape(-1), got.reshape(-1), want.reshape(-1)
    nan = _isnan(flat_want)
    wrong_nan = _isnan(flat_got) != nan
    if bool(wrong_nan.any()):
        i = int(wrong_nan.nonzero()[0, 0])
        fail(f"{what}: {_hex(flat_x[i])} became {_hex(flat_got[i])}; a NaN must stay NaN (whatever its payload: "
             "adding to its bits can carry into the exponent or the sign), and nothing else may become NaN")
    differ = _view(flat_got, torch.int32) != _view(flat_want, torch.int32)
    differ &= ~nan
    if bool(differ.any()):
        i = int(differ.nonzero()[0, 0])
        zero = " (the sign of zero counts too)" if float(flat_want[i]) == 0.0 else ""
        fail(f"{what}: {_hex(flat_x[i])} became {_hex(flat_got[i])}; the nearest bfloat16 (ties to even) "
             f"is {_hex(flat_want[i])}{zero}")
    expect("bfloat16" not in trace.dtypes, f"{what} made a bfloat16 tensor: do the rounding with integer operations "
                                           "on x.view(torch.int32), not with torch's own conversion")
    expect_integer_method(trace.lineage, what)
    expect_no_search(trace.made, x.numel(), what)
    expect_no_table_search(trace.lineage, what)


@ROUND_TO_BF16.check
def exact_values_stay(round_to_bf16):
    """values that bfloat16 holds exactly come back unchanged, -0.0 included"""
    expect_rounded(round_to_bf16, _tensor([0.0, -0.0, 1.0, -2.5, 0.15625, 256.0, -3.3895313892515355e38]),
                   "[0.0, -0.0, 1.0, -2.5, 0.15625, 256.0, -3.3895313892515355e38]")


@ROUND_TO_BF16.check
def rounds_to_nearest(round_to_bf16):
    """other values round to the nearest bfloat16, not toward zero"""
    expect_rounded(round_to_bf16, _tensor([0.1, 1.0 + 2**-7 + 2**-9, -1.0 - 2**-7 - 2**-9, 3.14159, 1e-3]),
                   "[0.1, 1 + 2^-7 + 2^-9, its negative, 3.14159, 1e-3]")


@ROUND_TO_BF16.check
def ties_to_even(round_to_bf16):
    """a value exactly halfway rounds to the neighbour whose last mantissa bit is 0 (down or up)"""
    x = _tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), -(1.0 + 3 * 2**-8), 2.0 + 2**-7])
    expect_rounded(round_to_bf16, x, "ties 1 + 2^-8, 1 + 3*2^-8, their negatives, 2 + 2^-7")


@ROUND_TO_BF16.check
def subnormals(round_to_bf16):
    """float32 subnormals round like any other number (a carry can make one normal)"""
    x = bits_to_float32(0x00000001, 0x00008000, 0x00018000, 0x0000FFFF, 0x807FFFFF, 0x007F8000)
    expect_rounded(round_to_bf16, x, "float32 subnormals 0x00000001, 0x00008000, 0x00018000, 0x0000ffff, "
                                     "0x807fffff, 0x007f8000")


@ROUND_TO_BF16.check
def infinities_and_overflow(round_to_bf16):
    """±inf stay, and values above bfloat16's largest finite number round up to ±inf"""
    x = _tensor([float("inf"), -float("inf"), 3.4028235e38, -3.4028235e38, 3.3961e38])
    expect_rounded(round_to_bf16, x, "[inf, -inf, 3.4028235e38, -3.4028235e38, 3.3961e38]")


@ROUND_TO_BF16.check
def nan_stays_nan(round_to_bf16):
    """NaN stays NaN, whatever its payload, even when rounding its bits would carry into the exponent"""
    x = bits_to_float32(0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F808000, 0x7FFF8000)
    expect_rounded(round_to_bf16, x, "NaNs 0x7fc00000, 0xffc00000, 0x7f800001, 0x7fffffff, 0xffffffff, "
                                     "0x7f808000, 0x7fff8000")


@ROUND_TO_BF16.check
def random_values(round_to_bf16):
    """1000 random values of many magnitudes, in a non-contiguous tensor"""
    x = torch.randn(2000) * 10.0 ** torch.randint(-30, 30, (2000,)).float()
    expect_rounded(round_to_bf16, x[::2], "1000 random values (every other element of a tensor)")


@ROUND_TO_BF16.check
def whole_tensor_at_once(round_to_bf16):
    """works on the whole tensor at once: no more tensor operations for 4096 values than for 16"""
    ran, calls = {}, []
    for n in (16, 4096):
        x = torch.randn(n) * 10.0 ** torch.randint(-30, 30, (n,)).float()
        x[:3] = _tensor([float("nan"), float("inf"), 0.0])
        what = f"round_to_bf16({n} values)"
        with tracing(lineage=True) as trace:
            got = call(round_to_bf16, x, what=what)
        calls.append((x, got, trace, what))
        ran[n] = sum(trace.ops.values())
    if ran[4096] > ran[16] + 32:  # a branch on the values may differ by a few; a loop differs by thousands
        fail(f"round_to_bf16 ran {ran[16]:,} tensor operations on 16 values and {ran[4096]:,} on 4096: it works on "
             "a few elements at a time (a loop over them, or values written in one by one); round every element "
             "with a few operations on the whole x.view(torch.int32)")
    for x, got, trace, what in calls:  # after the count: a loop's views of x also make many values per element
        expect_rounded_result(x, got, trace, what)


# ---------------------------------------------------------------- sequential_sum and kahan_sum

def expect_sum(fn, name: str, values: torch.Tensor, dtype: torch.dtype, want: float, how: str,
               hint: str = "") -> None:
    """A 0-dim tensor of `dtype` holding exactly `want` (the sign of a zero included)."""
    what = f"{name}({how}, {dtype})"
    got = call(fn, values, dtype, what=what)
    expect_tensor_like(got, (), dtype, "cpu", what)
    value = float(got)
    if value != want or math.copysign(1.0, value) != math.copysign(1.0, want):
        fail(f"{what} returned {value!r}, expected {want!r}" + hint)


ONES = "3000 ones"
HUNDREDTHS = "a thousand 0.01s (float32)"
# float64 values that are not float16s: converted first, 2^-11 + 2^-22 becomes 2^-11 (a tie, to even), and
# 1 + 2^-11 is a tie that rounds to 1.0; added in float64 and rounded once, 1 + 2^-11 + 2^-22 rounds up to
# 1 + 2^-10. (2^-22 survives torch's float64 -> float16 conversion, which goes through float32.)
NOT_CONVERTED = "[1.0, 2^-11 + 2^-22] (float64)"
_NOT_CONVERTED_HINT = (" (convert each value to the dtype first, then add: here the second value becomes 2^-11, "
                       "and 1 + 2^-11 is a tie that rounds to even)")


def _not_converted() -> torch.Tensor:
    return _tensor([1.0, 2.0**-11 + 2.0**-22], dtype=torch.float64)


@SEQUENTIAL_SUM.check
def drifts_in_float16(sequential_sum):
    """0.01 added a thousand times in float16 drifts to 9.953125 (each partial sum is rounded)"""
    expect_sum(sequential_sum, "sequential_sum", torch.full((1000,), 0.01), torch.float16, 9.953125, HUNDREDTHS,
               " (add one value at a time, rounding every partial sum to float16)")


@SEQUENTIAL_SUM.check
def stalls_when_the_step_is_too_small(sequential_sum):
    """in float16, 2048 + 1 is 2048: adding ones stops counting at 2048"""
    expect_sum(sequential_sum, "sequential_sum", torch.ones(3000), torch.float16, 2048.0, ONES)
    expect_sum(sequential_sum, "sequential_sum", torch.ones(3000), torch.float32, 3000.0, ONES)


@SEQUENTIAL_SUM.check
def converts_each_value_first(sequential_sum):
    """each value is converted to the dtype before it is added"""
    expect_sum(sequential_sum, "sequential_sum", _not_converted(), torch.float16, 1.0, NOT_CONVERTED,
               _NOT_CONVERTED_HINT)


@SEQUENTIAL_SUM.check
def empty_is_zero(sequential_sum):
    """an empty tensor sums to 0, as a 0-dim tensor of the dtype"""
    expect_sum(sequential_sum, "sequential_sum", torch.zeros(0), torch.bfloat16, 0.0, "an empty tensor")


@KAHAN_SUM.check
def stays_near_ten(kahan_sum):
    """Kahan summation in float16 adds a thousand 0.01s to 10.0"""
    expect_sum(kahan_sum, "kahan_sum", torch.full((1000,), 0.01), torch.float16, 10.0, HUNDREDTHS,
               " (carry each addition's rounding error in the compensation and subtract it from the next value)")


@KAHAN_SUM.check
def counts_past_2048(kahan_sum):
    """the compensation carries what each addition lost: 3000 ones in float16 make 3000"""
    expect_sum(kahan_sum, "kahan_sum", torch.ones(3000), torch.float16, 3000.0, ONES)


@KAHAN_SUM.check
def every_operation_in_the_dtype(kahan_sum):
    """the sum and the compensation are float16 at every step (Kahan in float32, cast at the end, gives -697.5)"""
    values = _tensor([83.125, -2.4765625, -803.0, 23.65625, 0.28564453125, 0.68994140625], dtype=torch.float64)
    expect_sum(kahan_sum, "kahan_sum", values, torch.float16, -698.0,
               "[83.125, -2.4765625, -803.0, 23.65625, 0.28564453125, 0.68994140625] (float64)",
               " (hold the sum and the compensation in float16, so that every operation rounds to float16)")


@KAHAN_SUM.check
def kahan_converts_each_value_first(kahan_sum):
    """each value is converted to the dtype before it is used"""
    expect_sum(kahan_sum, "kahan_sum", _not_converted(), torch.float16, 1.0, NOT_CONVERTED, _NOT_CONVERTED_HINT)


@KAHAN_SUM.check
def kahan_empty_is_zero(kahan_sum):
    """an empty tensor sums to 0, as a 0-dim tensor of the dtype"""
    expect_sum(kahan_sum, "kahan_sum", torch.zeros(0), torch.float16, 0.0, "an empty tensor")


# ---------------------------------------------------------------- update_loss_scale

def expect_new_state(got, what: str) -> tuple[float, int]:
    """(scale, good_steps): the scale any real number (a float, or an int of the same value), the count an int."""
    expect_type(got, tuple, what)
    expect(len(got) == 2, f"{what} should return (scale, good_steps), got {describe(got)}")
    scale, good = got
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        fail(f"{what} returned the scale as {describe(scale)}; it should be a number (a Python float)")
    expect(math.isfinite(scale), f"{what} returned the scale {scale!r}; it should stay finite")
    expect_type(good, int, f"{what}'s good_steps")
    return float(scale), good


def expect_sequence(update_loss_scale, scale: float, interval: int, overflows: list[bool],
                    want: list[tuple[float, int]]) -> None:
    """Drive the rule step by step, feeding back what it returns, and compare every (scale, good_steps)."""
    good = 0
    for step, (found_inf, expected) in enumerate(zip(overflows, want)):
        what = f"update_loss_scale({scale!r}, found_inf={found_inf}, good_steps={good}, growth_interval={interval})"
        new_scale, new_good = expect_new_state(update_loss_scale(scale, found_inf, good, growth_interval=interval),
                                               what)
        if (new_scale, new_good) != expected:
            fail(f"{what} returned ({new_scale!r}, {new_good!r}) at step {step}; GradScaler's rule gives "
                 f"({expected[0]!r}, {expected[1]!r})")
        scale, good = new_scale, new_good


@UPDATE_LOSS_SCALE.check
def halves_and_resets_on_overflow(update_loss_scale):
    """an overflow halves the scale and resets the count of clean steps"""
    expect_sequence(update_loss_scale, 1024.0, 2000, [False, False, True, True],
                    [(1024.0, 1), (1024.0, 2), (512.0, 0), (256.0, 0)])


@UPDATE_LOSS_SCALE.check
def doubles_after_interval_clean_steps(update_loss_scale):
    """growth_interval clean steps in a row double the scale and start the count again"""
    expect_sequence(update_loss_scale, 8.0, 3, [False, False, False, False, False, False],
                    [(8.0, 1), (8.0, 2), (16.0, 0), (16.0, 1), (16.0, 2), (32.0, 0)])


@UPDATE_LOSS_SCALE.check
def overflow_interrupts_growth(update_loss_scale):
    """an overflow before the interval is up: halve, and the count starts again"""
    expect_sequence(update_loss_scale, 64.0, 2, [False, True, False, False],
                    [(64.0, 1), (32.0, 0), (32.0, 1), (64.0, 0)])


@UPDATE_LOSS_SCALE.check
def scale_below_one(update_loss_scale):
    """the scale is a float and can fall below 1; with growth_interval=1 every clean step doubles it"""
    expect_sequence(update_loss_scale, 2.0, 1, [True, True, True, False, True],
                    [(1.0, 0), (0.5, 0), (0.25, 0), (0.5, 0), (0.25, 0)])
