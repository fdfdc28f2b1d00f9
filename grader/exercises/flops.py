"""Chapter 04 (flops): public checks. Hidden checks for the same exercises live in grader/hidden/flops.py.

Expected values come from literals, from torch's own FlopCounterMode (bound at import, before any
student code runs) and from properties (the ridge point, monotonicity); no function here computes
an answer from its arguments.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from grader.expect import describe, expect, expect_equal, factor_hint, fail
from grader.registry import exercise

_Counter = FlopCounterMode  # torch's own FLOP counter: the oracle for matmul_flops and mlp_flops
_Linear, _Sequential, _randn, _mm = nn.Linear, nn.Sequential, torch.randn, torch.mm
_Tensor = torch.Tensor

MATMUL_FLOPS = exercise("flops.matmul_flops", points=1)
MLP_FLOPS = exercise("flops.mlp_flops", points=3)
MFU = exercise("flops.mfu", points=1)
TRAINING_DAYS = exercise("flops.training_days", points=2)
ARITHMETIC_INTENSITY = exercise("flops.arithmetic_intensity", points=1)
ROOFLINE = exercise("flops.roofline", points=2)


def close(got: float, want: float, rel: float = 1e-9) -> bool:
    return abs(got - want) <= rel * max(abs(want), 1e-300)


def expect_int(value: Any, what: str) -> int:
    """A Python int, exactly: not a bool, not a float holding a whole number, not a NumPy integer, not a
    subclass (only plain Python values cross from the student's kernel when grading, so the notebook refuses
    the rest too, and a subclass cannot lie about equality)."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value) and value == int(value):
        fail(f"{what} should be a Python int, got the float {value!r}: floats hold every integer only up to "
             "2**53 (about 9e15), and FLOP counts go far beyond; count with ints")
    fail(f"{what} should be a Python int, got {describe(value)}")
    raise AssertionError("unreachable")


def expect_number(value: Any, what: str) -> float:
    """A finite Python float or int (or a plain one-element tensor). NumPy scalars and other subclasses are
    refused in the notebook as they are when grading, where only plain Python values cross from the kernel."""
    if type(value) is _Tensor and value.numel() == 1:
        value = value.item()
    if type(value) not in (int, float):
        hint = " (convert it with float(...))" if isinstance(value, (int, float)) and type(value) is not bool else ""
        fail(f"{what} should be a Python float, got {describe(value)}{hint}")
    if not math.isfinite(value):
        fail(f"{what} should be finite, got {value}")
    return float(value)


# ---------------------------------------------------------------- matmul_flops

def expect_matmul(matmul_flops, m: int, k: int, n: int, want: int) -> None:
    what = f"matmul_flops({m}, {k}, {n})"
    got = expect_int(matmul_flops(m, k, n), what)
    expect(got == want, f"{what} returned {got}; an ({m}, {k}) @ ({k}, {n}) matmul takes {want} FLOPs "
                        "(a multiply and an add for each of the k terms of each of the m * n outputs)"
                        + factor_hint(got, want))


@MATMUL_FLOPS.check
def small_matmuls(matmul_flops):
    """(2, 3) @ (3, 4) is 48 FLOPs, (5, 1) @ (1, 7) is 70, (1, 1) @ (1, 1) is 2: a Python int each time"""
    expect_matmul(matmul_flops, 2, 3, 4, 48)
    expect_matmul(matmul_flops, 5, 1, 7, 70)
    expect_matmul(matmul_flops, 1, 1, 1, 2)


@MATMUL_FLOPS.check
def agrees_with_flop_counter(matmul_flops):
    """torch's FlopCounterMode counts the same for (64, 128) @ (128, 32) and (3, 50) @ (50, 7)"""
    for m, k, n in ((64, 128, 32), (3, 50, 7)):
        with _Counter(display=False) as counter:
            _mm(_randn(m, k), _randn(k, n))
        expect_matmul(matmul_flops, m, k, n, counter.get_total_flops())


# ---------------------------------------------------------------- mlp_flops

def counted(batch: int, dims: list[int]) -> dict[str, int]:
    """What FlopCounterMode counts for bias-free linear layers dims[0] -> dims[1] -> ..., forward and backward,
    with an input that does not require grad (the oracle: torch's own counter on a real model)."""
    model = _Sequential(*[_Linear(a, b, bias=False) for a, b in zip(dims, dims[1:])])
    x = _randn(batch, dims[0])
    with _Counter(display=False) as fwd:
        out = model(x)
    with _Counter(display=False) as bwd:
        out.sum().backward()
    f, b = fwd.get_total_flops(), bwd.get_total_flops()
    return {"forward": f, "backward": b, "total": f + b}


def _backward_hint(got: int, want: dict[str, int], batch: int, dims: list[int]) -> str:
    if got == want["backward"] + 2 * batch * dims[0] * dims[1]:  # the same as 2 x forward
        return (" (that is 2 x forward: it counts the first layer's input gradient, but the input does not "
                "require grad, so autograd never computes it)")
    return ""


def expect_mlp(mlp_flops, batch: int, dims: list[int], want: dict[str, int] | None = None) -> None:
    want = want or counted(batch, dims)
    what = f"mlp_flops({batch}, {dims})"
    got = mlp_flops(batch, list(dims))
    if type(got) is not dict:
        fail(f"{what} should return a dict, got {describe(got)}")
    expect_equal(sorted(map(str, got)), ["backward", "forward", "total"], f"{what}'s keys")
    values = {key: expect_int(got[key], f"{what}[{key!r}]") for key in ("forward", "backward", "total")}
    if values["forward"] != want["forward"]:
        hint = ""
        if batch > 1 and values["forward"] * batch == want["forward"]:
            hint = " (that is for one row of the batch: every row goes through every layer)"
        hint = hint or factor_hint(values["forward"], want["forward"])
        fail(f"{what}['forward'] is {values['forward']}; FlopCounterMode counts {want['forward']}{hint}")
    if values["backward"] != want["backward"]:
        fail(f"{what}['backward'] is {values['backward']}; FlopCounterMode counts {want['backward']}"
             + (_backward_hint(values["backward"], want, batch, dims)
                or factor_hint(values["backward"], want["backward"])))
    expect(values["total"] == values["forward"] + values["backward"],
           f"{what}['total'] is {values['total']}; it should be forward + backward")


@MLP_FLOPS.check
def one_hidden_layer(mlp_flops):
    """batch 4, dims [3, 5, 2]: forward 200, backward 280 (no input gradient for the first layer), total 480"""
    expect_mlp(mlp_flops, 4, [3, 5, 2], {"forward": 200, "backward": 280, "total": 480})


@MLP_FLOPS.check
def counts_what_flop_counter_counts(mlp_flops):
    """a single layer and a deeper stack, checked against FlopCounterMode on a real model"""
    expect_mlp(mlp_flops, 3, [10, 7])
    expect_mlp(mlp_flops, 8, [16, 32, 32, 4])


# ---------------------------------------------------------------- mfu

def expect_mfu(mfu, flops: float, seconds: float, peak: float, want: float) -> None:
    what = f"mfu({flops:g}, {seconds:g}, {peak:g})"
    got = expect_number(mfu(flops, seconds, peak), what)
    if close(got, want):
        return
    hint = ""
    if got != 0 and close(1 / got, want, 1e-6):
        hint = " (upside down: MFU is achieved FLOP/s divided by the peak, never the other way)"
    elif close(got, 100 * want, 1e-6):
        hint = " (a percentage: return the fraction, 0.5 rather than 50)"
    hint = hint or factor_hint(got, want)
    fail(f"{what} returned {got:g}; achieved FLOP/s over peak FLOP/s is {want:g}{hint}")


@MFU.check
def half_of_the_peak(mfu):
    """1e15 FLOPs in 2 s on a 1e15 FLOP/s device is MFU 0.5 (a fraction, not a percentage)"""
    expect_mfu(mfu, 1e15, 2.0, 1e15, 0.5)


@MFU.check
def an_h100_step(mfu):
    """6e14 FLOPs in 1.2 s on an H100's 989.5 TFLOP/s dense bf16 peak: MFU 0.50531"""
    expect_mfu(mfu, 6e14, 1.2, 989.5e12, 0.5053057099545225)


# ---------------------------------------------------------------- training_days

def _days_hint(got: float, want: float, gpus: int, mfu: float) -> str:
    if close(got * 7, want, 1e-6):
        return " (that is the number of weeks: divide by the 86,400 seconds of a day, not a week's 604,800)"
    if close(got * 3, want, 1e-6):
        return " (that is 2ND, the forward pass only: training costs 6ND)"
    if close(got, 24 * want, 1e-6):
        return " (that is hours: divide by the 86,400 seconds of a day, not 3,600)"
    if gpus > 1 and close(got, gpus * want, 1e-6):
        return " (the GPUs share the work: divide by their number too)"
    if mfu != 1 and close(got, mfu * want, 1e-6):
        return " (each GPU delivers MFU x its peak: divide by the MFU too)"
    return ""


def expect_days(training_days, n: float, d: float, gpus: int, peak: float, mfu: float, want: float) -> None:
    what = f"training_days({n:g}, {d:g}, {gpus}, {peak:g}, {mfu:g})"
    got = expect_number(training_days(n, d, gpus, peak, mfu), what)
    if not close(got, want, 1e-6):
        fail(f"{what} returned {got:.5g}; the run takes {want:.5g} days"
             + (_days_hint(got, want, gpus, mfu) or factor_hint(got, want)))


@TRAINING_DAYS.check
def llama_scale(training_days):
    """70e9 parameters on 15e12 tokens, 1024 H100s at 989.5e12 FLOP/s and MFU 0.5: 143.93 days"""
    expect_days(training_days, 70e9, 15e12, 1024, 989.5e12, 0.5, 143.92659381842682)


@TRAINING_DAYS.check
def one_day_exactly(training_days):
    """6 x 1.2e9 x 1.8e7 = 1.296e17 FLOPs on one GPU of peak 3e12 FLOP/s at MFU 0.5 take 86,400 s: 1 day"""
    expect_days(training_days, 1.2e9, 1.8e7, 1, 3e12, 0.5, 1.0)


@TRAINING_DAYS.check
def two_weeks_on_eight_gpus(training_days):
    """7e9 parameters on 91.19232e9 tokens, 8 H100s at MFU 0.4: exactly two weeks, 14 days"""
    expect_days(training_days, 7e9, 91.19232e9, 8, 989.5e12, 0.4, 14.0)


# ---------------------------------------------------------------- arithmetic_intensity and roofline

def expect_intensity(arithmetic_intensity, flops: float, nbytes: float, want: float) -> None:
    what = f"arithmetic_intensity({flops}, {nbytes})"
    got = expect_number(arithmetic_intensity(flops, nbytes), what)
    if not close(got, want):
        hint = " (upside down: FLOPs per byte, not bytes per FLOP)" if got and close(1 / got, want, 1e-6) else ""
        hint = hint or factor_hint(got, want)
        fail(f"{what} returned {got:g}; expected {want:g} FLOPs per byte{hint}")


@ARITHMETIC_INTENSITY.check
def flops_per_byte(arithmetic_intensity):
    """an n x n x n float32 matmul, 2n^3 FLOPs on 3 x 4n^2 bytes, has intensity n / 6: 1024 -> 170.67"""
    expect_intensity(arithmetic_intensity, 2 * 1024**3, 3 * 4 * 1024**2, 1024 / 6)
    expect_intensity(arithmetic_intensity, 2 * 4096**3, 3 * 4 * 4096**2, 4096 / 6)


@ARITHMETIC_INTENSITY.check
def elementwise_add(arithmetic_intensity):
    """a float32 add, 1 FLOP per 12 bytes (two reads, one write), has intensity 1/12: below 1, not 0"""
    expect_intensity(arithmetic_intensity, 1_000_000, 12_000_000, 1 / 12)


def expect_roofline(roofline, intensity: float, peak: float, bandwidth: float, want: float) -> None:
    what = f"roofline({intensity:g}, {peak:g}, {bandwidth:g})"
    got = expect_number(roofline(intensity, peak, bandwidth), what)
    if not close(got, want):
        hint = ""
        if got > peak * (1 + 1e-9):
            hint = " (above the peak: nothing runs faster than the peak, so take the smaller of the two limits)"
        elif close(got, peak) and want < peak:
            hint = (f" (the peak, but below the ridge point, {peak / bandwidth:g} FLOP/byte, memory delivers only "
                    "intensity x bandwidth: take the smaller of the two limits)")
        elif close(want, peak) and got < peak:
            hint = f" (past the ridge point, {peak / bandwidth:g} FLOP/byte, the work is compute-bound: it runs at the peak)"
        hint = hint or factor_hint(got, want)
        fail(f"{what} returned {got:g}; the attainable FLOP/s is {want:g}{hint}")


@ROOFLINE.check
def memory_bound_below_the_ridge(roofline):
    """below the ridge point bandwidth x intensity limits: 10 FLOP/byte at 3.35e12 B/s is 3.35e13 FLOP/s"""
    expect_roofline(roofline, 10, 989.5e12, 3.35e12, 3.35e13)
    expect_roofline(roofline, 0.25, 1e12, 1e11, 2.5e10)


@ROOFLINE.check
def compute_bound_above_the_ridge(roofline):
    """above the ridge point the peak limits: 1000 FLOP/byte on the same device reaches only 989.5e12"""
    expect_roofline(roofline, 1000, 989.5e12, 3.35e12, 989.5e12)
    expect_roofline(roofline, 50, 1e12, 1e11, 1e12)


@ROOFLINE.check
def the_ridge_point(roofline):
    """peak 1e12 FLOP/s and bandwidth 1e11 B/s put the ridge at 10 FLOP/byte: 9.9 gives 9.9e11, 10.1 the
    peak; the line never falls as the intensity grows"""
    for intensity, want in ((10, 1e12), (5, 5e11), (9.9, 9.9e11), (10.1, 1e12), (20, 1e12)):
        expect_roofline(roofline, intensity, 1e12, 1e11, want)
    previous = -1.0
    for i in (0.0, 0.1, 1.0, 2.0, 4.0, 8.0, 9.99, 10.0, 10.01, 16.0, 100.0, 1e4):
        got = expect_number(roofline(i, 1e12, 1e11), f"roofline({i:g}, 1e+12, 1e+11)")
        expect(got >= previous, f"roofline(intensity, 1e+12, 1e+11) falls from {previous:g} to {got:g} as the "
                                f"intensity grows to {i:g}")
        previous = got
