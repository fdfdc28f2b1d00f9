"""Chapter 04 (flops): hidden checks, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.flops import (ARITHMETIC_INTENSITY, MATMUL_FLOPS, MFU, MLP_FLOPS, ROOFLINE, TRAINING_DAYS,
                                    close, expect_days, expect_matmul, expect_mfu, expect_mlp, expect_roofline)
from grader.expect import expect, expect_finite_float
from grader.inputs import randint


@MATMUL_FLOPS.hidden
def random_sizes(matmul_flops):
    """random sizes up to 10^5, non-square"""
    for _ in range(30):
        m, k, n = randint(1, 10**5), randint(1, 10**5), randint(1, 10**5)
        expect_matmul(matmul_flops, m, k, n, 2 * m * k * n)


@MLP_FLOPS.hidden
def random_stacks(mlp_flops):
    """random depths (one layer too), widths and batch sizes, against FlopCounterMode"""
    for _ in range(8):
        dims = [randint(1, 24) for _ in range(randint(2, 5))]
        expect_mlp(mlp_flops, randint(1, 9), dims)


@MLP_FLOPS.hidden
def large_sizes(mlp_flops):
    """a wide layer, where the count is large: exact integers, no float rounding"""
    b, dims = 4096, [12288, 49152, 12288]
    f = 2 * b * (dims[0] * dims[1] + dims[1] * dims[2])
    expect_mlp(mlp_flops, b, dims, {"forward": f, "backward": 2 * f - 2 * b * dims[0] * dims[1],
                                    "total": 3 * f - 2 * b * dims[0] * dims[1]})


@MFU.hidden
def random_runs(mfu):
    """random FLOPs, times and peaks"""
    for _ in range(20):
        flops, seconds, peak = 10.0 ** randint(9, 20), 10.0 ** randint(-4, 3), 10.0 ** randint(11, 16)
        expect_mfu(mfu, flops, seconds, peak, flops / seconds / peak)


@TRAINING_DAYS.hidden
def random_runs_in_days(training_days):
    """random model sizes, tokens, GPU counts, peaks and MFUs"""
    for _ in range(20):
        n, d = 10.0 ** randint(8, 12), 10.0 ** randint(10, 14)
        gpus, peak, m = randint(1, 16384), 10.0 ** randint(13, 16), randint(10, 70) / 100
        expect_days(training_days, n, d, gpus, peak, m, 6 * n * d / (gpus * peak * m) / 86400)


@ARITHMETIC_INTENSITY.hidden
def random_ratios(arithmetic_intensity):
    """random FLOPs and bytes, including an elementwise op (under 1 FLOP per byte)"""
    for _ in range(20):
        flops, nbytes = randint(1, 10**9), randint(1, 10**9)
        got = expect_finite_float(arithmetic_intensity(flops, nbytes), f"arithmetic_intensity({flops}, {nbytes})")
        expect(close(got, flops / nbytes), f"arithmetic_intensity({flops}, {nbytes}) returned {got:g}")


@ROOFLINE.hidden
def random_devices(roofline):
    """random intensities on both sides of random devices' ridge points"""
    for _ in range(30):
        peak, bw = 10.0 ** randint(11, 16), 10.0 ** randint(10, 13)
        intensity = (peak / bw) * 10.0 ** (randint(-20, 20) / 10)
        expect_roofline(roofline, intensity, peak, bw, min(peak, intensity * bw))


@ROOFLINE.hidden
def zero_intensity(roofline):
    """an operation that moves bytes but computes nothing attains 0 FLOP/s"""
    expect_roofline(roofline, 0.0, 1e15, 1e12, 0.0)
