"""Chapter 07 (initialization): hidden checks (random arguments, other widths, dtypes, layouts and shapes) and
reference implementations, run only at grading."""
from __future__ import annotations

import math

import torch

from grader.exercises.initialization import (ACTIVATION_STDS, DEFAULT_LINEAR_BOUND, INIT_MIXTURE, KAIMING_RELU_STD,
                                             KAIMING_STD, RELU_LOG_TOL, SEED_EVERYTHING, WIDTH1_LAW, WIDTH1_SEEDS,
                                             XAVIER_STD, _calculate_gain, expect_close,
                                             expect_counts_vary_between_tensors, expect_differ,
                                             expect_filled_in_place, expect_float64_mixture, expect_fresh_weights,
                                             expect_growth, expect_mixture, expect_mixture_values,
                                             expect_no_reseeding, expect_non_contiguous_mixture,
                                             expect_python_float, expect_repeats, expect_standard_seeding,
                                             expect_width_one_factors, mixture_fill, run_mixture, seed_draws,
                                             stds_of)
from grader.expect import call, expect, expect_raises
from grader.inputs import randint
from grader.scenarios import initialization as scenarios

_NONLINEARITIES = ("linear", "sigmoid", "tanh", "relu", "leaky_relu")


# ---------------------------------------------------------------- reference implementations

def default_linear_bound(fan_in: int) -> float:
    return 1 / math.sqrt(fan_in)


def xavier_std(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    return gain * math.sqrt(2 / (fan_in + fan_out))


def kaiming_std(fan_in: int, nonlinearity: str = "relu") -> float:
    return _calculate_gain(nonlinearity) / math.sqrt(fan_in)


def activation_stds(depth: int, width: int, init: str, nonlinearity: str, batch: int = 1024, seed: int = 0) -> list[float]:
    acts = {"linear": lambda x: x, "relu": torch.relu, "tanh": torch.tanh}
    if init not in ("normal1", "default", "xavier", "kaiming"):
        raise ValueError(f"unknown init {init!r}")
    if nonlinearity not in acts:
        raise ValueError(f"unknown nonlinearity {nonlinearity!r}")
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, width, generator=g)
    stds = []
    for _ in range(depth):
        std = {"normal1": 1.0, "default": 1 / math.sqrt(3 * width), "xavier": math.sqrt(1 / width),
               "kaiming": _calculate_gain(nonlinearity) / math.sqrt(width)}[init]
        w = torch.randn(width, width, generator=g) * std if init != "default" else \
            (torch.rand(width, width, generator=g) * 2 - 1) / math.sqrt(width)
        h = acts[nonlinearity](h @ w.T)
        stds.append(float(h.std()))
    return stds


# ---------------------------------------------------------------- default_linear_bound

@DEFAULT_LINEAR_BOUND.hidden
def random_fan_ins(default_linear_bound):
    """random fan_in from 1 to 10^7, and 2^40"""
    for fan_in in [randint(1, 10**7) for _ in range(40)] + [2**40, 7, 12288]:
        what = f"default_linear_bound({fan_in})"
        got = expect_python_float(call(default_linear_bound, fan_in, what=what), what)
        expect_close(got, 1 / math.sqrt(fan_in), what, rel=1e-12)


# ---------------------------------------------------------------- xavier_std / kaiming_std

@XAVIER_STD.hidden
def random_xavier(xavier_std):
    """random fan_in, fan_out and gain (int or float, positional or keyword); the default gain is 1"""
    for _ in range(40):
        fan_in, fan_out = randint(1, 5000), randint(1, 5000)
        gain = [1.0, 2, _calculate_gain("tanh"), _calculate_gain("relu"), randint(1, 30) / 7][randint(0, 4)]
        what = f"xavier_std({fan_in}, {fan_out}, gain={gain})"
        got = expect_python_float(xavier_std(fan_in, fan_out, gain=gain), what)
        expect_close(got, gain * math.sqrt(2 / (fan_in + fan_out)), what)
        what = f"xavier_std({fan_in}, {fan_out})"
        got = expect_python_float(xavier_std(fan_in, fan_out), what)
        expect_close(got, math.sqrt(2 / (fan_in + fan_out)), what)


@KAIMING_STD.hidden
def random_kaiming(kaiming_std):
    """random fan_in with each of linear, sigmoid, tanh, relu, leaky_relu (positional or keyword)"""
    for _ in range(10):
        for name in _NONLINEARITIES:
            fan_in = randint(1, 10**6)
            what = f"kaiming_std({fan_in}, nonlinearity={name!r})"
            got = expect_python_float(kaiming_std(fan_in, nonlinearity=name), what)
            expect_close(got, _calculate_gain(name) / math.sqrt(fan_in), what)


@KAIMING_STD.hidden
def more_unknown_names(kaiming_std):
    """more unknown nonlinearities raise ValueError"""
    for name in ("", "softmax_typo", "relu6x"):
        expect_raises(ValueError, lambda: kaiming_std(64, name), f"kaiming_std(64, {name!r})")


# ---------------------------------------------------------------- activation_stds
# Bounds: see the public module. Other widths scale the sd of the per-layer log growth by sqrt(256 / width) and
# fewer layers by sqrt(9 / (depth - 1)); each tolerance below is at least 7 of those sd (false failure < 3e-12).

@ACTIVATION_STDS.hidden
def normal1_relu(activation_stds):
    """normal1 + relu at width 128: the std grows by sqrt(128 / 2) = 8 per layer"""
    values, what = stds_of(activation_stds, 8, 128, "normal1", "relu")
    # sd of the per-layer log growth at width 128 over 7 steps: 0.026 (1000 seeds); 0.2 is 7.8 sigma
    expect_growth(values, what, 8.0, 0.2, "N(0, 1) weights multiply the mean square by fan_in, ReLU halves it")


@ACTIVATION_STDS.hidden
def default_linear_and_tanh(activation_stds):
    """default init shrinks linear and tanh nets by 1/sqrt(3) per layer (width 512 and 256)"""
    values, what = stds_of(activation_stds, 5, 512, "default", "linear")
    # linear, width 512, 4 steps: sd 0.0012 (300 seeds); 0.05 is 40 sigma
    expect_growth(values, what, 1 / math.sqrt(3), 0.05, "U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has variance 1/(3 fan_in)")
    values, what = stds_of(activation_stds, 10, 256, "default", "tanh")
    # tanh, width 256: mean factor 0.571 (tanh is linear near 0), sd of its log 0.0022; 0.05 is 18 sigma away
    expect_growth(values, what, 1 / math.sqrt(3), 0.05, "U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has variance 1/(3 fan_in) "
                                                        "and tanh is nearly linear for small inputs")


@ACTIVATION_STDS.hidden
def xavier_linear(activation_stds):
    """xavier keeps a square linear net at std 1"""
    values, what = stds_of(activation_stds, 10, 256, "xavier", "linear")
    expect_growth(values, what, 1.0, 0.05, "Xavier's variance 2/(256 + 256) = 1/256 keeps a square linear layer's variance")


@ACTIVATION_STDS.hidden
def batch_and_depth_one(activation_stds):
    """the batch argument is used (default 1024), and depth 1 works"""
    small, what = stds_of(activation_stds, 3, 64, "kaiming", "relu", batch=2)
    default, what2 = stds_of(activation_stds, 3, 64, "kaiming", "relu")
    expect(small != default, f"{what} and {what2} returned the same stds {small}: use the batch argument")
    values, what = stds_of(activation_stds, 1, 256, "kaiming", "relu", batch=4096)
    # layer-1 std at batch 4096: sd 0.0026 over 300 seeds (the shared weights dominate); 0.03 is 11 sigma
    expect(abs(values[0] - KAIMING_RELU_STD) < 0.03, f"{what}[0] = {values[0]:.4g}; it should be about "
                                                     f"{KAIMING_RELU_STD:.4f}")
    values, what = stds_of(activation_stds, 1, 256, "default", "linear")
    # one default layer on unit-normal input: std sqrt(256 / (3 * 256)) = 0.577, sd 0.0015 (300 seeds): 20 sigma
    expect(abs(values[0] - 1 / math.sqrt(3)) < 0.03, f"{what}[0] = {values[0]:.4g}; it should be about 0.577")


@ACTIVATION_STDS.hidden
def seeds(activation_stds):
    """five seeds give five different lists; each seed repeats"""
    got = [stds_of(activation_stds, 3, 32, "xavier", "tanh", seed=s)[0] for s in range(5, 10)]
    expect(len({tuple(v) for v in got}) == 5, "activation_stds(3, 32, 'xavier', 'tanh', seed=s) for s = 5..9 returned "
                                              "repeated lists: each seed should give its own draws")
    again, what = stds_of(activation_stds, 3, 32, "xavier", "tanh", seed=7)
    expect(again == got[2], f"{what} returned {again}, before {got[2]}: the same seed should give the same list")


@ACTIVATION_STDS.hidden
def fresh_weights_other_seeds(activation_stds):
    """every layer draws its own weights, for 9 random seeds (the public check's bound and reasoning)"""
    expect_fresh_weights(activation_stds, [randint(0, 2**31 - 1) for _ in range(9)])


@ACTIVATION_STDS.hidden
def width_one_other_seeds(activation_stds):
    """at width 1 the per-layer factors are the weights' |w|, for random seeds (the public check's bound)"""
    for init in WIDTH1_LAW:
        expect_width_one_factors(activation_stds, init, [randint(0, 2**31 - 1) for _ in range(WIDTH1_SEEDS)])


@ACTIVATION_STDS.hidden
def more_unknown(activation_stds):
    """more unknown inits and nonlinearities raise ValueError"""
    for init, nl in [("zeros_typo", "linear"), ("", "tanh"), ("normal1", "softmax_typo"), ("default", "")]:
        expect_raises(ValueError, lambda: activation_stds(2, 8, init, nl), f"activation_stds(2, 8, {init!r}, {nl!r})")


# ---------------------------------------------------------------- init_mixture_

@INIT_MIXTURE.hidden
def float64_large(init_mixture_):
    """a float64 tensor stays float64, with the same statistics"""
    expect_float64_mixture(init_mixture_, (1000, 1000), 11, every_test=True)


@INIT_MIXTURE.hidden
def non_contiguous_large(init_mixture_):
    """a transposed (non-contiguous) view is filled in place like any tensor"""
    expect_non_contiguous_mixture(init_mixture_, (1000, 1000), 12, every_test=True)


@INIT_MIXTURE.hidden
def other_shapes(init_mixture_):
    """1-D and 3-D tensors of 10^6 elements, and tiny or empty ones"""
    for shape in [(10**6,), (100, 100, 100)]:
        out, where = mixture_fill(init_mixture_, shape, seed=13)
        expect_filled_in_place(out[0], where)
        expect_mixture(out[0]["values"], where)
    for shape in [(1,), (2, 3), (0, 4)]:
        out, where = mixture_fill(init_mixture_, shape, seed=14)
        expect_filled_in_place(out[0], where)
        expect_mixture_values(out[0]["values"], where)


@INIT_MIXTURE.hidden
def counts_vary_other_sizes(init_mixture_):
    """300 tensors of a random 2-D shape: the counts of zeros and positives vary as independent draws make them"""
    expect_counts_vary_between_tensors(init_mixture_, (randint(20, 60), randint(20, 60)), 300, randint(0, 10**6))


@INIT_MIXTURE.hidden
def no_reseeding_again(init_mixture_):
    """two calls fill two tensors differently (the function must not reseed the generator)"""
    expect_no_reseeding(init_mixture_, (200, 300), 15)


@INIT_MIXTURE.hidden
def repeats_after_torch_manual_seed(init_mixture_):
    """after the same torch.manual_seed(s), two calls fill w alike, whatever state NumPy's and Python's random are in"""
    seed, shape = randint(0, 2**31 - 1), (200, 300)
    first = randint(0, 2**31 - 1)
    others = [first, first + 1 + randint(0, 2**20)]
    where = f"init_mixture_(w) on a float32 tensor of shape {shape}"
    out = run_mixture(where, scenarios.mixture_repeats, init_mixture_, list(shape), seed, others)
    for values in out:
        expect_mixture_values(values, where)
    differ = int((out[0] != out[1]).sum())
    expect(differ == 0,
           f"{where}, called twice, each time right after torch.manual_seed({seed}) (NumPy's and Python's random "
           f"generators seeded differently before each call), wrote different values ({differ} of {out[0].numel()} "
           "elements differ): draw from torch's random generator (torch.rand, torch.randint, uniform_...), which "
           "torch.manual_seed makes repeat, not from NumPy's or Python's")


# ---------------------------------------------------------------- seed_everything

@SEED_EVERYTHING.hidden
def large_seeds_and_order(seed_everything):
    """seeds up to 2^32 - 1, in any order: s, t, s, t repeats s and t"""
    seeds = [2**32 - 1, 7, 2**32 - 1, 7]
    draws = seed_draws(seed_everything, seeds)
    expect_repeats(draws, seeds, 0, 2)
    expect_repeats(draws, seeds, 1, 3)
    expect_differ(draws, seeds, 0, 1)
    expect_standard_seeding(draws, seeds)


@SEED_EVERYTHING.hidden
def random_seeds(seed_everything):
    """five random seeds give five different draws from each generator; each repeats, as seeding with the seed does"""
    seeds = [randint(0, 2**31 - 1) for _ in range(5)]
    seeds = seeds + seeds[:1]
    draws = seed_draws(seed_everything, seeds)
    for i in range(5):
        for j in range(i + 1, 5):
            if seeds[i] != seeds[j]:
                expect_differ(draws, seeds, i, j)
    expect_repeats(draws, seeds, 0, 5)
    expect_standard_seeding(draws, seeds)
