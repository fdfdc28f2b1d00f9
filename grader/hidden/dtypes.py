"""Chapter 02 (dtypes): hidden checks and reference implementations, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.dtypes import (KAHAN_SUM, ROUND_TO_BF16, SEQUENTIAL_SUM, SMALLEST_SUBNORMAL, UPDATE_LOSS_SCALE,
                                     expect_rounded, expect_subnormal, expect_sum)
from grader.expect import expect_finite_float, expect_type, fail
from grader.inputs import randint

SUBNORMAL64 = 2.0**-1074


def reference_sequential(values: torch.Tensor, dtype: torch.dtype) -> float:
    acc = torch.zeros((), dtype=dtype)
    for v in values.to(dtype):
        acc = acc + v
    return float(acc)


def reference_kahan(values: torch.Tensor, dtype: torch.dtype) -> float:
    total, carry = torch.zeros((), dtype=dtype), torch.zeros((), dtype=dtype)
    for v in values.to(dtype):
        y = v - carry
        t = total + y
        carry = (t - total) - y
        total = t
    return float(total)


@SMALLEST_SUBNORMAL.hidden
def float64_too(smallest_subnormal):
    """float64, which the same definition covers (2^-1074)"""
    got = smallest_subnormal(torch.float64)
    expect_type(got, float, "smallest_subnormal(torch.float64)")
    if got != SUBNORMAL64:
        fail(f"smallest_subnormal(torch.float64) returned {got!r}")
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        expect_subnormal(smallest_subnormal, dtype)


@ROUND_TO_BF16.hidden
def every_kind_of_bit_pattern(round_to_bf16):
    """random 32-bit patterns: normals, subnormals, infinities and NaNs with any payload and sign"""
    bits = torch.randint(-2**31, 2**31 - 1, (20000,), dtype=torch.int64).to(torch.int32)
    expect_rounded(round_to_bf16, bits.view(torch.float32), "20000 random bit patterns")


@ROUND_TO_BF16.hidden
def subnormals_and_the_overflow_edge(round_to_bf16):
    """float32 subnormals, and values around bfloat16's largest finite number"""
    tiny = torch.randint(1, 2**23, (500,), dtype=torch.int32).view(torch.float32)
    bf16_max = 3.3895313892515355e38
    edge = torch.tensor([bf16_max, bf16_max * (1 + 2**-9), bf16_max * (1 + 2**-8.5), 3.4e38, -bf16_max * (1 + 2**-9)])
    expect_rounded(round_to_bf16, torch.cat([tiny, -tiny]), "float32 subnormals")
    expect_rounded(round_to_bf16, edge, "values just above bfloat16's largest finite number")


@ROUND_TO_BF16.hidden
def random_exact_ties(round_to_bf16):
    """values exactly halfway between two bfloat16s, with odd and even neighbours"""
    upper = torch.randint(0, 2**15, (2000,), dtype=torch.int32) * 2**16   # a bfloat16 pattern, shifted up
    ties = (upper | 0x3F800000 | 0x8000).view(torch.float32)  # exponent >= 0, then exactly half a bfloat16 step
    expect_rounded(round_to_bf16, torch.cat([ties, -ties]), "2000 exact ties")


@ROUND_TO_BF16.hidden
def shapes_and_layouts(round_to_bf16):
    """a 0-dim tensor, a 3-D tensor and a transposed one"""
    expect_rounded(round_to_bf16, torch.tensor(1.00390625), "a 0-dim tensor")
    expect_rounded(round_to_bf16, torch.randn(3, 4, 5), "a (3, 4, 5) tensor")
    expect_rounded(round_to_bf16, torch.randn(6, 7).t(), "a transposed (7, 6) tensor")


def _random_values(n: int) -> torch.Tensor:
    return (torch.rand(n, dtype=torch.float64) * 10.0 ** torch.randint(-3, 3, (n,)).double()) * \
        torch.where(torch.rand(n) < 0.8, 1.0, -1.0).double()


@SEQUENTIAL_SUM.hidden
def matches_the_reference_bit_for_bit(sequential_sum):
    """random float64 values summed in float16, bfloat16 and float32, one at a time"""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for _ in range(2):
            values = _random_values(randint(1, 200))
            expect_sum(sequential_sum, "sequential_sum", values, dtype, reference_sequential(values, dtype),
                       f"{values.numel()} random float64 values")


@KAHAN_SUM.hidden
def kahan_matches_the_reference_bit_for_bit(kahan_sum):
    """random float64 values, Kahan-summed with every operation in float16, bfloat16 and float32"""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for _ in range(2):
            values = _random_values(randint(1, 200))
            expect_sum(kahan_sum, "kahan_sum", values, dtype, reference_kahan(values, dtype),
                       f"{values.numel()} random float64 values")


@KAHAN_SUM.hidden
def single_value(kahan_sum):
    """a single value comes back rounded to the dtype"""
    expect_sum(kahan_sum, "kahan_sum", torch.tensor([0.1], dtype=torch.float64), torch.bfloat16,
               float(torch.tensor(0.1).bfloat16()), "one value")


def gradscaler_sequence(init_scale: float, interval: int, overflows: list[bool]) -> list[tuple[float, int]]:
    """What torch.amp.GradScaler itself does, driven on the CPU: (scale, growth tracker) after each step."""
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=interval)
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([param], lr=0.0)
    out = []
    for found_inf in overflows:
        scaler.scale((param * 2).sum()).backward()
        if found_inf:
            with torch.no_grad():
                param.grad[1] = float("inf")
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        out.append((float(scaler.get_scale()), int(scaler._growth_tracker)))
    return out


@UPDATE_LOSS_SCALE.hidden
def agrees_with_gradscaler(update_loss_scale):
    """random overflow sequences, growth intervals 1, 2, 3 and 7, against torch.amp.GradScaler itself"""
    for interval in (1, 2, 3, 7):
        scale = 2.0 ** randint(0, 16)
        overflows = [bool(torch.rand(()) < 0.3) for _ in range(30)]
        want = gradscaler_sequence(scale, interval, overflows)
        good = 0
        for step, found_inf in enumerate(overflows):
            what = (f"update_loss_scale({scale!r}, found_inf={found_inf}, good_steps={good}, "
                    f"growth_interval={interval})")
            got = update_loss_scale(scale, found_inf, good, growth_interval=interval)
            if not (isinstance(got, tuple) and len(got) == 2):
                fail(f"{what} should return (scale, good_steps)")
            new_scale = expect_finite_float(got[0], f"{what}'s scale")
            expect_type(got[1], int, f"{what}'s good_steps")
            if (new_scale, got[1]) != want[step]:
                fail(f"{what} at step {step} of a random sequence disagrees with GradScaler")
            scale, good = new_scale, got[1]


@UPDATE_LOSS_SCALE.hidden
def default_interval_is_2000(update_loss_scale):
    """without growth_interval, 2000 clean steps double the scale (GradScaler's default)"""
    scale, good = 65536.0, 1998
    got = update_loss_scale(scale, False, good)
    if tuple(got) != (65536.0, 1999):
        fail("update_loss_scale(65536.0, False, 1998) with the default interval")
    got = update_loss_scale(65536.0, False, 1999)
    if (float(got[0]), got[1]) != (131072.0, 0):
        fail("update_loss_scale(65536.0, False, 1999) with the default interval should double")
