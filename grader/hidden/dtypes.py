"""Chapter 02 (dtypes): hidden checks and reference implementations, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.dtypes import (KAHAN_SUM, ROUND_TO_BF16, SEQUENTIAL_SUM, SMALLEST_SUBNORMAL, UPDATE_LOSS_SCALE,
                                     bits_to_float32, expect_new_state, expect_rounded, expect_rounded_result,
                                     expect_subnormal, expect_sum)
from grader.expect import expect_type, fail
from grader.guard import lineage_text
from grader.inputs import layouts, randint
from grader.scenario import run_scenario, tracing
from grader.scenarios import dtypes as scenarios

SUBNORMAL64 = 2.0**-1074
_GradScaler = torch.amp.GradScaler  # the reference, bound before any student code runs
_to = torch.Tensor.to


# ---------------------------------------------------------------- references

def reference_sequential(values: torch.Tensor, dtype: torch.dtype) -> float:
    acc = torch.zeros((), dtype=dtype)
    for v in _to(values, dtype):
        acc = acc + v
    return float(acc)


def reference_kahan(values: torch.Tensor, dtype: torch.dtype) -> float:
    total, carry = torch.zeros((), dtype=dtype), torch.zeros((), dtype=dtype)
    for v in _to(values, dtype):
        y = v - carry
        t = total + y
        carry = (t - total) - y
        total = t
    return float(total)


def gradscaler_sequence(init_scale: float, interval: int, overflows: list[bool], seed: int = 0
                        ) -> list[tuple[float, int]]:
    """What torch.amp.GradScaler itself does, driven on the CPU with a real (tiny) model and optimizer: a step
    whose input holds an inf has inf/NaN gradients. (scale, growth tracker) after each step."""
    gen = torch.Generator().manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = _GradScaler("cpu", init_scale=init_scale, growth_interval=interval)
    out = []
    for found_inf in overflows:
        x = torch.randn(3, 4, generator=gen)
        if found_inf:
            x[1, 2] = float("inf")
        opt.zero_grad()
        scaler.scale(model(x).square().mean()).backward()
        scaler.step(opt)  # skipped when a gradient is not finite
        scaler.update()
        state = scaler.state_dict()
        out.append((float(state["scale"]), int(state["_growth_tracker"])))
    return out


# ---------------------------------------------------------------- smallest_subnormal

@SMALLEST_SUBNORMAL.hidden
def float64_too(smallest_subnormal):
    """float64, which the same definition covers (2^-1074), and the 16- and 32-bit formats again"""
    got = smallest_subnormal(torch.float64)
    expect_type(got, float, "smallest_subnormal(torch.float64)")
    if got != SUBNORMAL64:
        fail(f"smallest_subnormal(torch.float64) returned {got!r}")
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        expect_subnormal(smallest_subnormal, dtype)


# ---------------------------------------------------------------- round_to_bf16

@ROUND_TO_BF16.hidden
def every_kind_of_bit_pattern(round_to_bf16):
    """random 32-bit patterns: normals, subnormals, infinities and NaNs with any payload and sign"""
    bits = torch.randint(-2**31, 2**31 - 1, (20000,), dtype=torch.int64).to(torch.int32)
    expect_rounded(round_to_bf16, bits.view(torch.float32), "20000 random bit patterns")


@ROUND_TO_BF16.hidden
def every_nan_payload(round_to_bf16):
    """NaNs of both signs with random payloads, many of which carry into the exponent when rounded"""
    payload = torch.randint(1, 2**23, (4000,), dtype=torch.int32)
    payload[:1000] |= 0x7F8000   # upper mantissa bits all ones: a carry reaches the exponent
    payload[1000:1100] = torch.arange(1, 101, dtype=torch.int32)  # the low bits only: truncating gives inf
    nans = (payload | 0x7F800000).view(torch.float32)
    expect_rounded(round_to_bf16, torch.cat([nans, -nans]), "8000 NaNs with random payloads")


@ROUND_TO_BF16.hidden
def zeros_infinities_and_the_overflow_edge(round_to_bf16):
    """±0, ±inf, and values around bfloat16's largest finite number up to float32's largest"""
    edge = bits_to_float32(0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7F0000, 0x7F7F7FFF, 0x7F7F8000,
                           0x7F7F8001, 0x7F7FFFFF, 0xFF7F7FFF, 0xFF7F8000, 0xFF7FFFFF, 0x7F7E8000, 0x7F7EFFFF)
    expect_rounded(round_to_bf16, edge, "±0, ±inf and values around bfloat16's largest finite number")
    top = torch.randint(0x7F7F0000, 0x7F800000, (500,), dtype=torch.int64).to(torch.int32).view(torch.float32)
    expect_rounded(round_to_bf16, torch.cat([top, -top]), "1000 values just below float32's largest")


@ROUND_TO_BF16.hidden
def float32_subnormals(round_to_bf16):
    """random float32 subnormals of both signs, and the largest one (which rounds up to a normal)"""
    tiny = torch.randint(1, 2**23, (1000,), dtype=torch.int32).view(torch.float32)
    expect_rounded(round_to_bf16, torch.cat([tiny, -tiny, bits_to_float32(0x007FFFFF, 0x807FFFFF)]),
                   "2002 float32 subnormals")


@ROUND_TO_BF16.hidden
def random_exact_ties(round_to_bf16):
    """values exactly halfway between two bfloat16s, with odd and even neighbours, all magnitudes"""
    upper = torch.randint(0, 0x7F7F, (4000,), dtype=torch.int32) << 16   # a finite bfloat16 pattern, shifted up
    ties = (upper | 0x8000).view(torch.float32)                          # plus exactly half a bfloat16 step
    expect_rounded(round_to_bf16, torch.cat([ties, -ties]), "8000 exact ties")
    near = torch.cat([upper | 0x7FFF, upper | 0x8001]).view(torch.float32)  # one float32 step either side
    expect_rounded(round_to_bf16, near, "8000 values one float32 step either side of a tie")


@ROUND_TO_BF16.hidden
def shapes_and_layouts(round_to_bf16):
    """a 0-dim tensor, an empty one, a 3-D one and non-contiguous layouts of a 2-D one"""
    expect_rounded(round_to_bf16, torch.tensor(1.00390625), "a 0-dim tensor holding a tie")
    expect_rounded(round_to_bf16, torch.zeros(0, 3), "an empty (0, 3) tensor")
    expect_rounded(round_to_bf16, torch.randn(3, 4, 5), "a (3, 4, 5) tensor")
    x = torch.randn(6, 7) * 10.0 ** torch.randint(-20, 20, (6, 7)).float()
    for how, variant in layouts(x):
        expect_rounded(round_to_bf16, variant, f"a (6, 7) tensor, {how}")
    expect_rounded(round_to_bf16, x.t(), "a transposed (7, 6) tensor")


@ROUND_TO_BF16.hidden
def computed_from_x(round_to_bf16):
    """the result is computed from x by torch operations, not rebuilt from NumPy arrays or Python numbers"""
    upper = torch.randint(0, 0x7F7F, (1500,), dtype=torch.int32) << 16
    bits = torch.cat([upper | torch.randint(0, 0x10000, (1500,), dtype=torch.int32), upper[:500] | 0x8000,
                      torch.randint(-2**31, 2**31 - 1, (1000,), dtype=torch.int64).to(torch.int32)])
    x = bits.view(torch.float32)
    what = "round_to_bf16(3000 random values, exact ties and bit patterns)"
    with tracing(lineage=True) as trace:
        got = run_scenario(scenarios.round_marked, round_to_bf16, x.clone())
    expect_rounded_result(x, got, trace, what)
    if scenarios.MARK not in trace.lineage:
        came = lineage_text(trace.lineage, 8) or "no tensor operation"
        fail(f"{what}: the result's values did not come from x through torch operations (they came from {came}): "
             "a tensor rebuilt from NumPy or Python numbers (torch.from_numpy, torch.tensor(...)), or one made where "
             "the grader cannot see, does not count; compute the result from x.view(torch.int32) with torch's "
             "integer operations")


# ---------------------------------------------------------------- sequential_sum and kahan_sum

def _random_values(n: int, dtype: torch.dtype) -> torch.Tensor:
    """Mostly positive values of a few magnitudes (so cancellation and drift both happen), in `dtype`."""
    values = (torch.rand(n, dtype=torch.float64) * 10.0 ** torch.randint(-3, 3, (n,)).double()) * \
        torch.where(torch.rand(n) < 0.8, 1.0, -1.0).double()
    return values.to(dtype)


def _sum_inputs():
    """(values, dtype to sum in): float64, float32 and float16 inputs, summed in float16, bfloat16 and float32."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for source in (torch.float64, torch.float32, torch.float16):
            yield _random_values(randint(1, 300), source), dtype


@SEQUENTIAL_SUM.hidden
def matches_the_reference_bit_for_bit(sequential_sum):
    """random values (float64, float32, float16) summed in float16, bfloat16 and float32, one at a time"""
    for values, dtype in _sum_inputs():
        expect_sum(sequential_sum, "sequential_sum", values, dtype, reference_sequential(values, dtype),
                   f"{values.numel()} random {str(values.dtype)[6:]} values")


@SEQUENTIAL_SUM.hidden
def non_contiguous_and_single(sequential_sum):
    """a strided slice, a single value, and an empty float64 tensor summed in float32"""
    values = _random_values(400, torch.float64)[::3]
    expect_sum(sequential_sum, "sequential_sum", values, torch.bfloat16, reference_sequential(values, torch.bfloat16),
               "every third of 400 random values")
    one = torch.tensor([0.1], dtype=torch.float64)
    expect_sum(sequential_sum, "sequential_sum", one, torch.float16, reference_sequential(one, torch.float16),
               "one value")
    expect_sum(sequential_sum, "sequential_sum", torch.zeros(0, dtype=torch.float64), torch.float32, 0.0,
               "an empty float64 tensor")


@KAHAN_SUM.hidden
def kahan_matches_the_reference_bit_for_bit(kahan_sum):
    """random values (float64, float32, float16), Kahan-summed with every operation in float16, bfloat16, float32"""
    for values, dtype in _sum_inputs():
        expect_sum(kahan_sum, "kahan_sum", values, dtype, reference_kahan(values, dtype),
                   f"{values.numel()} random {str(values.dtype)[6:]} values")


@KAHAN_SUM.hidden
def kahan_non_contiguous_and_single(kahan_sum):
    """a strided slice, a single value rounded to the dtype, and an empty tensor summed in float32"""
    values = _random_values(400, torch.float64)[::3]
    expect_sum(kahan_sum, "kahan_sum", values, torch.bfloat16, reference_kahan(values, torch.bfloat16),
               "every third of 400 random values")
    one = torch.tensor([0.1], dtype=torch.float64)
    expect_sum(kahan_sum, "kahan_sum", one, torch.bfloat16, float(_to(one, torch.bfloat16)[0]), "one value")
    expect_sum(kahan_sum, "kahan_sum", torch.zeros(0, dtype=torch.float64), torch.float32, 0.0,
               "an empty float64 tensor")


# ---------------------------------------------------------------- update_loss_scale

@UPDATE_LOSS_SCALE.hidden
def agrees_with_gradscaler(update_loss_scale):
    """random overflow sequences, growth intervals 1, 2, 3 and 7, several initial scales, against
    torch.amp.GradScaler itself (scale and count after every step)"""
    for interval in (1, 2, 3, 7):
        for scale in (2.0 ** randint(0, 16), 1000.0 * randint(1, 3)):
            overflows = [bool(torch.rand(()) < 0.3) for _ in range(30)]
            want = gradscaler_sequence(scale, interval, overflows, seed=randint(0, 2**20))
            good = 0
            for step, found_inf in enumerate(overflows):
                what = (f"update_loss_scale({scale!r}, found_inf={found_inf}, good_steps={good}, "
                        f"growth_interval={interval})")
                got = expect_new_state(update_loss_scale(scale, found_inf, good, growth_interval=interval), what)
                if got != want[step]:
                    fail(f"{what} at step {step} of a random sequence disagrees with GradScaler")
                scale, good = got


@UPDATE_LOSS_SCALE.hidden
def default_interval_is_2000(update_loss_scale):
    """without growth_interval, 2000 clean steps double the scale (GradScaler's default)"""
    got = expect_new_state(update_loss_scale(65536.0, False, 1998), "update_loss_scale(65536.0, False, 1998)")
    if got != (65536.0, 1999):
        fail("update_loss_scale(65536.0, False, 1998) with the default interval")
    got = expect_new_state(update_loss_scale(65536.0, False, 1999), "update_loss_scale(65536.0, False, 1999)")
    if got != (131072.0, 0):
        fail("update_loss_scale(65536.0, False, 1999) with the default interval should double")
    got = expect_new_state(update_loss_scale(65536.0, True, 1999), "update_loss_scale(65536.0, True, 1999)")
    if got != (32768.0, 0):
        fail("update_loss_scale(65536.0, True, 1999) should halve and reset")
