"""Chapter 04 (flops): public checks. Hidden checks for the same exercises live in grader/hidden/flops.py."""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from grader.expect import expect, expect_equal, expect_finite_float, expect_type, fail
from grader.registry import exercise

_Counter = FlopCounterMode  # torch's own FLOP counter: the oracle for mlp_flops, bound before student code runs
_Linear, _Sequential = nn.Linear, nn.Sequential

MATMUL_FLOPS = exercise("flops.matmul_flops", points=1)
MLP_FLOPS = exercise("flops.mlp_flops", points=3)
MFU = exercise("flops.mfu", points=1)
TRAINING_DAYS = exercise("flops.training_days", points=2)
ARITHMETIC_INTENSITY = exercise("flops.arithmetic_intensity", points=1)
ROOFLINE = exercise("flops.roofline", points=2)


def close(got: float, want: float, rel: float = 1e-9) -> bool:
    return abs(got - want) <= rel * max(abs(want), 1e-300)


# ---------------------------------------------------------------- matmul_flops

def expect_matmul(matmul_flops, m: int, k: int, n: int, want: int) -> None:
    what = f"matmul_flops({m}, {k}, {n})"
    got = matmul_flops(m, k, n)
    expect_type(got, int, what)
    expect(got == want, f"{what} returned {got}; an ({m}, {k}) @ ({k}, {n}) matmul takes {want} FLOPs "
                        "(a multiply and an add for each of the k terms of each of the m * n outputs)")


@MATMUL_FLOPS.check
def small_matmuls(matmul_flops):
    """(2, 3) @ (3, 4) is 48 FLOPs; (1, 1) @ (1, 1) is 2"""
    expect_matmul(matmul_flops, 2, 3, 4, 48)
    expect_matmul(matmul_flops, 1, 1, 1, 2)


@MATMUL_FLOPS.check
def agrees_with_flop_counter(matmul_flops):
    """torch's FlopCounterMode counts the same for a (64, 128) @ (128, 32) matmul"""
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    with _Counter(display=False) as counter:
        torch.mm(a, b)
    expect_matmul(matmul_flops, 64, 128, 32, counter.get_total_flops())


# ---------------------------------------------------------------- mlp_flops

def counted(batch: int, dims: list[int]) -> dict[str, int]:
    """What FlopCounterMode counts for bias-free linear layers dims[0] -> dims[1] -> ..., forward and backward,
    with an input that does not require grad (the oracle: torch's own counter on a real model)."""
    model = _Sequential(*[_Linear(a, b, bias=False) for a, b in zip(dims, dims[1:])])
    x = torch.randn(batch, dims[0])
    with _Counter(display=False) as fwd:
        out = model(x)
    with _Counter(display=False) as bwd:
        out.sum().backward()
    f, b = fwd.get_total_flops(), bwd.get_total_flops()
    return {"forward": f, "backward": b, "total": f + b}


def expect_mlp(mlp_flops, batch: int, dims: list[int], want: dict[str, int] | None = None) -> None:
    want = want or counted(batch, dims)
    what = f"mlp_flops({batch}, {dims})"
    got = mlp_flops(batch, list(dims))
    expect_type(got, dict, what)
    expect_equal(sorted(got), ["backward", "forward", "total"], f"{what}'s keys")
    for key in ("forward", "backward", "total"):
        expect_type(got[key], int, f"{what}[{key!r}]")
    if got["forward"] != want["forward"]:
        fail(f"{what}['forward'] is {got['forward']}; FlopCounterMode counts {want['forward']}")
    if got["backward"] != want["backward"]:
        hint = ""
        if got["backward"] == 2 * want["forward"]:
            hint = (" (that is 2 x forward: but the first layer's input does not require grad, so its input "
                    "gradient is never computed)")
        fail(f"{what}['backward'] is {got['backward']}; FlopCounterMode counts {want['backward']}{hint}")
    expect(got["total"] == got["forward"] + got["backward"], f"{what}['total'] should be forward + backward")


@MLP_FLOPS.check
def one_hidden_layer(mlp_flops):
    """batch 4, dims [3, 5, 2]: forward 200, backward 280 (no input gradient for the first layer), total 480"""
    expect_mlp(mlp_flops, 4, [3, 5, 2], {"forward": 200, "backward": 280, "total": 480})


@MLP_FLOPS.check
def counts_what_flop_counter_counts(mlp_flops):
    """deeper stacks, checked against FlopCounterMode on a real model"""
    expect_mlp(mlp_flops, 8, [16, 32, 32, 4])
    expect_mlp(mlp_flops, 3, [10, 7])


# ---------------------------------------------------------------- mfu

def expect_mfu(mfu, flops: float, seconds: float, peak: float, want: float) -> None:
    what = f"mfu({flops:g}, {seconds:g}, {peak:g})"
    got = expect_finite_float(mfu(flops, seconds, peak), what)
    expect(close(got, want), f"{what} returned {got:g}; achieved FLOP/s over peak FLOP/s is {want:g}")


@MFU.check
def half_of_the_peak(mfu):
    """1e15 FLOPs in 2 s on a 1e15 FLOP/s device is MFU 0.5 (a fraction, not a percentage)"""
    expect_mfu(mfu, 1e15, 2.0, 1e15, 0.5)


@MFU.check
def an_h100_step(mfu):
    """6e14 FLOPs in 1.2 s on an H100's 989.5 TFLOP/s dense bf16 peak"""
    expect_mfu(mfu, 6e14, 1.2, 989.5e12, 6e14 / 1.2 / 989.5e12)


# ---------------------------------------------------------------- training_days

def expect_days(training_days, n: float, d: float, gpus: int, peak: float, mfu: float, want: float) -> None:
    what = f"training_days({n:g}, {d:g}, {gpus}, {peak:g}, {mfu:g})"
    got = expect_finite_float(training_days(n, d, gpus, peak, mfu), what)
    if close(got * 7, want, 1e-6):
        fail(f"{what} returned {got:.4g}: that is the number of weeks, not days (divided by a week of seconds?)")
    expect(close(got, want, 1e-6), f"{what} returned {got:.4g}; the run takes {want:.4g} days")


@TRAINING_DAYS.check
def llama_scale(training_days):
    """70e9 parameters on 15e12 tokens, 1024 H100s at 989.5e12 FLOP/s and MFU 0.5: about 144 days"""
    expect_days(training_days, 70e9, 15e12, 1024, 989.5e12, 0.5, 6 * 70e9 * 15e12 / (1024 * 989.5e12 * 0.5) / 86400)
    got = training_days(70e9, 15e12, 1024, 989.5e12, 0.5)
    expect(143 < got < 145, f"training_days(70e9, 15e12, 1024, 989.5e12, 0.5) returned {got:.4g}")


@TRAINING_DAYS.check
def one_day_exactly(training_days):
    """a run of exactly 86400 s of compute at full speed on one GPU takes 1 day"""
    expect_days(training_days, 1e9, 86400 * 1e12 / 6e9, 1, 1e12, 1.0, 1.0)


# ---------------------------------------------------------------- arithmetic_intensity and roofline

@ARITHMETIC_INTENSITY.check
def flops_per_byte(arithmetic_intensity):
    """FLOPs per byte moved: 2n^3 FLOPs over 3 * 4n^2 bytes for an n x n float32 matmul"""
    for n in (1024, 4096):
        flops, nbytes = 2 * n**3, 3 * 4 * n * n
        got = expect_finite_float(arithmetic_intensity(flops, nbytes), f"arithmetic_intensity({flops}, {nbytes})")
        expect(close(got, n / 6), f"arithmetic_intensity({flops}, {nbytes}) returned {got:g}; expected {n / 6:g} "
                                  "FLOPs per byte")


def expect_roofline(roofline, intensity: float, peak: float, bandwidth: float, want: float) -> None:
    what = f"roofline({intensity:g}, {peak:g}, {bandwidth:g})"
    got = expect_finite_float(roofline(intensity, peak, bandwidth), what)
    expect(close(got, want), f"{what} returned {got:g}; the attainable FLOP/s is {want:g}")


@ROOFLINE.check
def memory_bound_below_the_ridge(roofline):
    """below the ridge point, bandwidth x intensity limits: 10 FLOP/byte at 3.35e12 B/s is 3.35e13 FLOP/s"""
    expect_roofline(roofline, 10, 989.5e12, 3.35e12, 3.35e13)


@ROOFLINE.check
def compute_bound_above_the_ridge(roofline):
    """above the ridge point the peak limits: 1000 FLOP/byte on the same device reaches only 989.5e12"""
    expect_roofline(roofline, 1000, 989.5e12, 3.35e12, 989.5e12)
    ridge = 989.5e12 / 3.35e12
    expect_roofline(roofline, ridge, 989.5e12, 3.35e12, 989.5e12)
