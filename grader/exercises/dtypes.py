"""Chapter 02 (dtypes): public checks. Hidden checks for the same exercises live in grader/hidden/dtypes.py."""
from __future__ import annotations

import math

import torch

from grader.expect import (call, describe, expect, expect_equal, expect_finite_float, expect_tensor, expect_type,
                           fail)
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import dtypes as scenarios

SMALLEST_SUBNORMAL = exercise("dtypes.smallest_subnormal", points=1)
ROUND_TO_BF16 = exercise("dtypes.round_to_bf16", points=3)
SEQUENTIAL_SUM = exercise("dtypes.sequential_sum", points=1)
KAHAN_SUM = exercise("dtypes.kahan_sum", points=2)
UPDATE_LOSS_SCALE = exercise("dtypes.update_loss_scale", points=2)

FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)
# Exact values, from the formats' definitions: 2^(1 - bias) * 2^(-mantissa bits).
SUBNORMALS = {torch.float32: 2.0**-149, torch.float16: 2.0**-24, torch.bfloat16: 2.0**-133,
              torch.float8_e4m3fn: 2.0**-9, torch.float8_e5m2: 2.0**-16}
_to_bf16 = torch.Tensor.bfloat16  # torch's own conversion (the reference), bound before any student code runs
_isnan = torch.isnan


# ---------------------------------------------------------------- smallest_subnormal

def _in(value: float, dtype: torch.dtype) -> float:
    """`value` stored in `dtype` and read back (float8 converts through float32, as torch does)."""
    return float(torch.tensor(value, dtype=torch.float32).to(dtype).float())


def expect_subnormal(smallest_subnormal, dtype: torch.dtype) -> None:
    name = str(dtype).removeprefix("torch.")
    what = f"smallest_subnormal(torch.{name})"
    got = smallest_subnormal(dtype)
    expect_type(got, float, what)
    expect(got > 0, f"{what} returned {got!r}; the smallest subnormal is a positive number")
    if got == torch.finfo(dtype).smallest_normal:
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


# ---------------------------------------------------------------- round_to_bf16

def expect_rounded(round_to_bf16, x: torch.Tensor, how: str) -> None:
    """Bit-identical to torch's conversion (x.bfloat16().float()), except that every NaN only has to stay NaN."""
    want = _to_bf16(x).float()
    what = f"round_to_bf16({how})"
    got = call(round_to_bf16, x, what=what)
    expect_tensor(got, want, what, rtol=0, atol=0, equal_nan=True)
    nan = _isnan(want)
    expect(bool((_isnan(got) == nan).all()), f"{what}: a NaN input must stay NaN (and nothing else may become NaN)")
    same = got[~nan].view(torch.int32) == want[~nan].view(torch.int32)
    if not bool(same.all()):
        i = int((~same).nonzero()[0])
        fail(f"{what}: {x[~nan][i].item()!r} became {got[~nan][i].item()!r}; the nearest bfloat16 (ties to even) "
             f"is {want[~nan][i].item()!r} (the sign of zero counts too)")
    ops = run_scenario(scenarios.dtypes_produced, round_to_bf16, x)
    expect("bfloat16" not in ops, f"{what} made a bfloat16 tensor: do the rounding with integer operations on "
                                  "x.view(torch.int32), not with torch's own conversion")


@ROUND_TO_BF16.check
def exact_values_stay(round_to_bf16):
    """values that bfloat16 holds exactly come back unchanged"""
    expect_rounded(round_to_bf16, torch.tensor([0.0, 1.0, -2.5, 0.15625, 256.0, -3.0e38]), "exactly representable values")


@ROUND_TO_BF16.check
def rounds_to_nearest(round_to_bf16):
    """other values round to the nearest bfloat16, not toward zero"""
    expect_rounded(round_to_bf16, torch.tensor([0.1, 1.0 + 2**-7 + 2**-9, -1.0 - 2**-7 - 2**-9, 3.14159, 1e-3]),
                   "values between two bfloat16s")


@ROUND_TO_BF16.check
def ties_to_even(round_to_bf16):
    """a value exactly halfway rounds to the neighbour whose last mantissa bit is 0"""
    x = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 2.0 + 2**-7])
    expect_rounded(round_to_bf16, x, "1 + 2^-8, 1 + 3*2^-8, -(1 + 2^-8), 2 + 2^-7 (ties)")


@ROUND_TO_BF16.check
def infinities_and_nan(round_to_bf16):
    """±inf stay, the largest float32 overflows to inf, NaN stays NaN"""
    x = torch.tensor([float("inf"), -float("inf"), 3.4028235e38, -3.4028235e38, float("nan")])
    expect_rounded(round_to_bf16, x, "inf, -inf, ±float32 max, nan")


@ROUND_TO_BF16.check
def random_values(round_to_bf16):
    """1000 random values of many magnitudes, in a non-contiguous tensor"""
    x = torch.randn(2000) * 10.0 ** torch.randint(-30, 30, (2000,)).float()
    expect_rounded(round_to_bf16, x[::2], "1000 random values (every other element of a tensor)")


# ---------------------------------------------------------------- sequential_sum and kahan_sum

def expect_sum(fn, name: str, values: torch.Tensor, dtype: torch.dtype, want: float, how: str) -> None:
    what = f"{name}({how}, {dtype})"
    got = call(fn, values, dtype, what=what)
    expect_tensor(got, torch.tensor(want, dtype=dtype), what, rtol=0, atol=0)


@SEQUENTIAL_SUM.check
def drifts_in_float16(sequential_sum):
    """0.01 added a thousand times in float16 drifts to 9.953125 (each partial sum is rounded)"""
    expect_sum(sequential_sum, "sequential_sum", torch.full((1000,), 0.01), torch.float16, 9.953125,
               "a thousand 0.01s")


@SEQUENTIAL_SUM.check
def stalls_when_the_step_is_too_small(sequential_sum):
    """in float16, 2048 + 1 is 2048: adding ones stops counting at 2048"""
    expect_sum(sequential_sum, "sequential_sum", torch.ones(3000), torch.float16, 2048.0, "3000 ones")
    expect_sum(sequential_sum, "sequential_sum", torch.ones(3000), torch.float32, 3000.0, "3000 ones")


@SEQUENTIAL_SUM.check
def empty_is_zero(sequential_sum):
    """an empty tensor sums to 0, as a 0-dim tensor of the dtype"""
    expect_sum(sequential_sum, "sequential_sum", torch.zeros(0), torch.bfloat16, 0.0, "an empty tensor")


@KAHAN_SUM.check
def stays_near_ten(kahan_sum):
    """Kahan summation in float16 adds a thousand 0.01s to 10.0"""
    expect_sum(kahan_sum, "kahan_sum", torch.full((1000,), 0.01), torch.float16, 10.0, "a thousand 0.01s")


@KAHAN_SUM.check
def counts_past_2048(kahan_sum):
    """the compensation carries what each addition lost: 3000 ones in float16 make 3000"""
    expect_sum(kahan_sum, "kahan_sum", torch.ones(3000), torch.float16, 3000.0, "3000 ones")


@KAHAN_SUM.check
def every_operation_in_the_dtype(kahan_sum):
    """the sum and the compensation are float16 at every step (Kahan in float32, cast at the end, gives -697.5)"""
    values = torch.tensor([83.125, -2.4765625, -803.0, 23.65625, 0.28564453125, 0.68994140625], dtype=torch.float64)
    expect_sum(kahan_sum, "kahan_sum", values, torch.float16, -698.0,
               "[83.125, -2.4765625, -803.0, 23.65625, 0.28564453125, 0.68994140625]")


@KAHAN_SUM.check
def kahan_empty_is_zero(kahan_sum):
    """an empty tensor sums to 0, as a 0-dim tensor of the dtype"""
    expect_sum(kahan_sum, "kahan_sum", torch.zeros(0), torch.float16, 0.0, "an empty tensor")


# ---------------------------------------------------------------- update_loss_scale

def expect_sequence(update_loss_scale, scale: float, interval: int, overflows: list[bool],
                    want: list[tuple[float, int]]) -> None:
    """Drive the rule step by step and compare every (scale, good_steps) with `want`."""
    good = 0
    for step, (found_inf, expected) in enumerate(zip(overflows, want)):
        what = f"update_loss_scale({scale!r}, found_inf={found_inf}, good_steps={good}, growth_interval={interval})"
        got = update_loss_scale(scale, found_inf, good, growth_interval=interval)
        expect_type(got, tuple, what)
        expect(len(got) == 2, f"{what} should return (scale, good_steps), got {describe(got)}")
        new_scale, new_good = got
        expect_finite_float(new_scale, f"{what}'s scale")
        expect_type(new_good, int, f"{what}'s good_steps")
        if (float(new_scale), new_good) != expected:
            fail(f"{what} returned ({new_scale!r}, {new_good!r}) at step {step}; GradScaler's rule gives "
                 f"({expected[0]!r}, {expected[1]!r})")
        scale, good = float(new_scale), new_good


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
