"""Chapter 07 (initialization): public checks. Hidden checks for the same exercises live in grader/hidden/initialization.py.

Random draws depend on how a student uses the random number generators, so the checks on random output are
statistical: each bound is stated with the probability that a CORRECT answer fails it (its false-failure
probability), chosen so small that a correct answer passes essentially always while the wrong answers the
chapter warns about miss the bound by many standard deviations.
"""
from __future__ import annotations

import math
import random

import numpy as np
import torch

from grader.expect import call, describe, expect, expect_raises, factor_hint, fail
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import initialization as scenarios

_Linear = torch.nn.Linear  # the references, bound before any student code runs
_calculate_gain = torch.nn.init.calculate_gain
_xavier_normal = torch.nn.init.xavier_normal_
_kaiming_normal = torch.nn.init.kaiming_normal_
_empty = torch.empty
_Tensor = torch.Tensor
_Generator = torch.Generator
_rand = torch.rand
_RandomState = np.random.RandomState
_Random = random.Random

# Whole-job shortcuts, refused while the student's code runs. Each number asked for is one that an nn.init function
# uses: draw with it from a seeded generator, draw unit values from the same seed, and the ratio is the answer, exact
# in float64. So the init that uses the number is refused in the exercise that asks for it: kaiming_uniform_ (and
# nn.Linear's reset_parameters, which calls it) for the default bound, the Xavier and Kaiming inits for their stds;
# calculate_gain stays allowed (the exercise text offers it). Other layers draw from U(-1/sqrt(n), 1/sqrt(n)) by
# their own code, nn.Bilinear (n = in1_features), the recurrent layers and cells (n = hidden_size): the same number
# under another name, refused there too. A mixture distribution draws init_mixture_'s values in one call.
# activation_stds builds on nn.init by design, and seed_everything's one-call versions live in other libraries
# (Lightning's seed_everything, transformers' set_seed) that the course does not install.
DEFAULT_LINEAR_BOUND = exercise("initialization.default_linear_bound", points=1,
                                forbid=("torch.nn.init.kaiming_uniform_", "torch.nn.Linear.reset_parameters",
                                        "torch.nn.Bilinear.reset_parameters",
                                        "torch.nn.modules.rnn.RNNBase.reset_parameters",
                                        "torch.nn.modules.rnn.RNNCellBase.reset_parameters"))
XAVIER_STD = exercise("initialization.xavier_std", points=1,
                      forbid=("torch.nn.init.xavier_normal_", "torch.nn.init.xavier_uniform_"))
KAIMING_STD = exercise("initialization.kaiming_std", points=2,
                       forbid=("torch.nn.init.kaiming_normal_", "torch.nn.init.kaiming_uniform_"))
ACTIVATION_STDS = exercise("initialization.activation_stds", points=3)
INIT_MIXTURE = exercise("initialization.init_mixture_", points=3,
                        forbid=("torch.distributions.MixtureSameFamily",
                                "torch.distributions.mixture_same_family.MixtureSameFamily"))
SEED_EVERYTHING = exercise("initialization.seed_everything", points=2)


def expect_python_float(value, what: str) -> float:
    """A Python float (an int is accepted too): not a tensor, a NumPy scalar or a bool; finite."""
    if type(value) not in (int, float):
        hint = ""
        if isinstance(value, _Tensor):
            hint = "; return a Python number (math.sqrt, or float(...) of the tensor)"
        elif type(value).__module__ == "numpy":
            hint = "; convert it with float(...)"
        fail(f"{what} should be a Python float, got {type(value).__module__}.{type(value).__name__}"
             f" {value!r}"[:200] + hint)
    if not math.isfinite(value):
        fail(f"{what} should be finite, got {value}")
    return float(value)


def call_with_keywords(fn, args: tuple, kwargs: dict, what: str, signature: str):
    """fn(*args, **kwargs), where a TypeError about a keyword points at the signature's parameter names."""
    try:
        return fn(*args, **kwargs)
    except TypeError as e:
        if "keyword" not in str(e):
            raise
        fail(f"{what} raised TypeError: {str(e)[:150]}; keep the parameter names of the signature, {signature}")


def expect_close(got: float, want: float, what: str, rel: float = 1e-9) -> None:
    if not math.isclose(got, want, rel_tol=rel, abs_tol=0.0):
        # float32 keeps about 7 digits: an answer computed in a float32 tensor is off by up to 6e-8 of itself
        single = math.isclose(got, want, rel_tol=1.2e-7, abs_tol=0.0)
        hint = ("; that is the value rounded to float32 (a tensor's default dtype): compute it with Python floats "
                "(math.sqrt), which are float64" if single else factor_hint(got, want))
        fail(f"{what} returned {got!r}, expected {want!r}{hint}")


# ---------------------------------------------------------------- default_linear_bound

@DEFAULT_LINEAR_BOUND.check
def values(default_linear_bound):
    """fan_in = 1, 3, 4, 100 give 1, 0.577..., 0.5, 0.1"""
    for fan_in, want in [(1, 1.0), (3, 0.5773502691896258), (4, 0.5), (100, 0.1)]:
        got = expect_python_float(call(default_linear_bound, fan_in, what=f"default_linear_bound({fan_in})"),
                                  f"default_linear_bound({fan_in})")
        expect_close(got, want, f"default_linear_bound({fan_in})")


@DEFAULT_LINEAR_BOUND.check
def matches_nn_linear(default_linear_bound):
    """it is the bound of a fresh nn.Linear's weight and bias (every value inside, the extremes reach it)"""
    for fan_in in (10, 300):
        layer = _Linear(fan_in, 10**6 // fan_in)  # about a million weights, 10**6 // fan_in biases
        bound = expect_python_float(call(default_linear_bound, fan_in, what=f"default_linear_bound({fan_in})"),
                                    f"default_linear_bound({fan_in})")
        for name, p in (("weight", layer.weight), ("bias", layer.bias)):
            top = float(p.detach().abs().max())
            expect(top <= bound * (1 + 1e-6),
                   f"nn.Linear({fan_in}, {layer.out_features}).{name} holds a value of size {top:.6g}, "
                   f"beyond default_linear_bound({fan_in}) = {bound:.6g}")
            # |w| / bound is uniform on [0, 1]: all n values below 1 - eps has probability (1 - eps)^n ~ e^(-eps n);
            # eps = 100 / n makes a false failure e^-100 (below 1e-43).
            eps = 100 / p.numel()
            expect(top >= bound * (1 - eps),
                   f"default_linear_bound({fan_in}) = {bound:.6g}, but the largest of the {p.numel()} values of a "
                   f"fresh nn.Linear({fan_in}, {layer.out_features}).{name} is only {top:.6g}: the bound is too large")


# ---------------------------------------------------------------- xavier_std / kaiming_std

@XAVIER_STD.check
def xavier_values(xavier_std):
    """sqrt(2 / (fan_in + fan_out)) times the gain: (100, 100) -> 0.1, (3, 5) -> 0.5, gain 2 (or gain=2) doubles it"""
    cases = [((100, 100), {}, 0.1), ((3, 5), {}, 0.5), ((30, 20), {}, 0.2), ((3, 5, 2.0), {}, 1.0),
             ((3, 5), {"gain": 2.0}, 1.0), ((18, 32, 5 / 3), {}, 1 / 3)]
    for args, kwargs, want in cases:
        what = f"xavier_std({args[0]}, {args[1]}, gain={kwargs['gain']})" if kwargs else f"xavier_std{args}"
        got = expect_python_float(call_with_keywords(xavier_std, args, kwargs, what,
                                                     "xavier_std(fan_in, fan_out, gain=1.0)"), what)
        if args[:2] == (100, 100) and math.isclose(got, math.sqrt(1 / 200), rel_tol=1e-6):
            fail(f"{what} returned {got:.6g} = sqrt(1 / (fan_in + fan_out)): Xavier's variance is "
                 "2 / (fan_in + fan_out), the mean of 1/fan_in (forward) and 1/fan_out (backward)")
        expect_close(got, want, what)


@XAVIER_STD.check
def matches_xavier_normal(xavier_std):
    """it is the standard deviation nn.init.xavier_normal_ gives a (fan_out, fan_in) weight"""
    for fan_in, fan_out, gain in [(400, 2500, 1.0), (1000, 1000, _calculate_gain("tanh"))]:
        w = _empty(fan_out, fan_in)
        _xavier_normal(w, gain=gain)
        # The sample std of n = 10^6 normal values is off by about 1/sqrt(2n) = 7e-4 (relative): the 1% bound is
        # 14 of those, a false failure has probability below 1e-40.
        measured = float(w.std())
        what = f"xavier_std({fan_in}, {fan_out}, gain={gain:.4g})"
        got = expect_python_float(call(xavier_std, fan_in, fan_out, gain, what=what), what)
        expect(abs(got / measured - 1) < 0.01,
               f"{what} returned {got:.6g}, but nn.init.xavier_normal_ on a ({fan_out}, {fan_in}) weight gives "
               f"values with standard deviation {measured:.6g}")


def _gains():
    return {name: _calculate_gain(name) for name in ("linear", "sigmoid", "tanh", "relu", "leaky_relu")}


@KAIMING_STD.check
def kaiming_values(kaiming_std):
    """gain / sqrt(fan_in): relu 2 -> 1.0, linear 100 -> 0.1, tanh 25 -> 1/3, sigmoid 4 -> 0.5 (or nonlinearity=...)"""
    for fan_in, nonlinearity, want, keyword in [(2, "relu", 1.0, False), (50, "relu", 0.2, False),
                                                (100, "linear", 0.1, False), (25, "tanh", 1 / 3, False),
                                                (4, "sigmoid", 0.5, False), (25, "tanh", 1 / 3, True)]:
        if keyword:
            what = f"kaiming_std({fan_in}, nonlinearity={nonlinearity!r})"
            got = expect_python_float(call_with_keywords(kaiming_std, (fan_in,), {"nonlinearity": nonlinearity}, what,
                                                         "kaiming_std(fan_in, nonlinearity='relu')"), what)
        else:
            what = f"kaiming_std({fan_in}, {nonlinearity!r})"
            got = expect_python_float(call(kaiming_std, fan_in, nonlinearity, what=what), what)
        if nonlinearity in ("relu", "tanh") and math.isclose(got, 1 / math.sqrt(fan_in), rel_tol=1e-6):
            fail(f"{what} returned {got:.6g} = 1/sqrt(fan_in): the gain for {nonlinearity} is missing "
                 f"(nn.init.calculate_gain({nonlinearity!r}) = {_calculate_gain(nonlinearity):.6g})")
        expect_close(got, want, what)


@KAIMING_STD.check
def default_is_relu(kaiming_std):
    """the default nonlinearity is relu, and leaky_relu uses its default slope 0.01"""
    what = "kaiming_std(8)"
    got = expect_python_float(call(kaiming_std, 8, what=what), what)
    expect_close(got, 0.5, what)
    what = "kaiming_std(1, 'leaky_relu')"
    got = expect_python_float(call(kaiming_std, 1, "leaky_relu", what=what), what)
    expect_close(got, math.sqrt(2 / (1 + 0.01**2)), what)


@KAIMING_STD.check
def matches_kaiming_normal(kaiming_std):
    """it is the standard deviation nn.init.kaiming_normal_ gives a weight, for each nonlinearity"""
    for nonlinearity in _gains():
        w = _empty(1000, 1000)
        _kaiming_normal(w, nonlinearity=nonlinearity)  # mode="fan_in": fan_in is w.shape[1]
        measured = float(w.std())  # relative error ~7e-4 for 10^6 values: the 1% bound is 14 sigma (below 1e-40)
        what = f"kaiming_std(1000, {nonlinearity!r})"
        got = expect_python_float(call(kaiming_std, 1000, nonlinearity, what=what), what)
        expect(abs(got / measured - 1) < 0.01,
               f"{what} returned {got:.6g}, but nn.init.kaiming_normal_(w, nonlinearity={nonlinearity!r}) on a "
               f"(1000, 1000) weight gives values with standard deviation {measured:.6g}")


@KAIMING_STD.check
def unknown_nonlinearity(kaiming_std):
    """an unknown nonlinearity raises ValueError"""
    for name in ("not_a_nonlinearity", "tanhh"):
        expect_raises(ValueError, lambda: kaiming_std(100, name), f"kaiming_std(100, {name!r})")


# ---------------------------------------------------------------- activation_stds

# Where these bounds come from: the per-layer mean of log(std_{l+1} / std_l) over 9 steps was measured for a
# correct implementation on 3000 seeds at width 256 (batch 1024): for ReLU nets its standard deviation is 0.0172
# (the weights are shared by the whole batch, so the batch does not average it away), for linear and tanh nets
# below 0.003; its distribution looks normal (skew 0.03, excess kurtosis -0.1, extremes at 3.8 sigma). A bound
# 0.12 away from the theory is 7 sigma for ReLU: a false failure has probability about 3e-12 (normal tails).
RELU_LOG_TOL = 0.12
KAIMING_RELU_STD = math.sqrt(2) * math.sqrt(0.5 - 1 / (2 * math.pi))  # std(relu(z)), z ~ N(0, 2): 0.8256


def stds_of(activation_stds, depth, width, init, nonlinearity, **kwargs):
    extra = "".join(f", {k}={v!r}" for k, v in kwargs.items())
    what = f"activation_stds({depth}, {width}, {init!r}, {nonlinearity!r}{extra})"
    got = activation_stds(depth, width, init, nonlinearity, **kwargs)
    if type(got) not in (list, tuple):
        fail(f"{what} should return a list of floats, got {describe(got)}")
    if len(got) != depth:
        fail(f"{what} returned {len(got)} values; it should return one per layer ({depth})")
    values = [expect_python_float(v, f"{what}[{i}]") for i, v in enumerate(got)]
    for i, v in enumerate(values):
        expect(v > 0, f"{what}[{i}] = {v!r}: a standard deviation of real activations is positive")
    return values, what


def mean_log_ratio(values):
    """The per-layer growth of the std, as the mean of log(std_{l+1} / std_l): log(std_last / std_first) / (depth - 1)."""
    return math.log(values[-1] / values[0]) / (len(values) - 1)


def expect_growth(values, what, want_factor, tol, story):
    got = mean_log_ratio(values)
    lo, hi = want_factor * math.exp(-tol), want_factor * math.exp(tol)
    if not lo <= math.exp(got) <= hi:
        fail(f"{what}: the std changes by a factor of {math.exp(got):.4g} per layer on average (from {values[0]:.4g} "
             f"at layer 1 to {values[-1]:.4g} at layer {len(values)}); {story}, so the factor should be in "
             f"[{lo:.3g}, {hi:.3g}]")


@ACTIVATION_STDS.check
def one_float_per_layer(activation_stds):
    """one positive Python float per layer"""
    for depth in (1, 3):
        stds_of(activation_stds, depth, 32, "kaiming", "relu")


@ACTIVATION_STDS.check
def kaiming_relu_stays(activation_stds):
    """kaiming + relu: the std after each ReLU starts at 0.826 and stays (factor 1 per layer)"""
    values, what = stds_of(activation_stds, 10, 256, "kaiming", "relu")
    # Layer 1 measures relu(z) with z ~ N(0, 2): std sqrt(2) * sqrt(1/2 - 1/(2 pi)) = 0.8256. Over 3000 seeds its
    # sample standard deviation was 0.0031 at batch 1024 (0.0038 at 512): the bound 0.03 is 8 sigma (below 1e-15).
    expect(abs(values[0] - KAIMING_RELU_STD) < 0.03,
           f"{what}[0] = {values[0]:.4g}; the std of the first layer's output AFTER the ReLU should be about "
           f"{KAIMING_RELU_STD:.4f} (the pre-activation has variance 2, its ReLU std sqrt(2) * sqrt(1/2 - 1/(2 pi))); "
           f"measure after the nonlinearity, with Kaiming's gain sqrt(2)")
    expect_growth(values, what, 1.0, RELU_LOG_TOL, "Kaiming's gain sqrt(2) makes up for the half that ReLU removes")


@ACTIVATION_STDS.check
def kaiming_gain_follows_the_nonlinearity(activation_stds):
    """kaiming keeps linear nets at std 1 and tanh nets near 0.65 (the gain follows the nonlinearity)"""
    values, what = stds_of(activation_stds, 10, 256, "kaiming", "linear")
    # linear: per-layer log growth sd 0.0021, layer-1 std sd 0.0034 (300 seeds): 0.05 is 20 and 14 sigma
    expect_growth(values, what, 1.0, 0.05, "Kaiming's gain for linear is 1: variance fan_in * (1/fan_in) = 1")
    expect(abs(values[0] - 1) < 0.05, f"{what}[0] = {values[0]:.4g}; it should be about 1 (Kaiming's gain for "
                                      "'linear' is 1)")
    values, what = stds_of(activation_stds, 10, 256, "kaiming", "tanh")
    # tanh with gain 5/3: the std after layer 10 was 0.651 with sd 0.002 (300 seeds): [0.58, 0.72] is 35 sigma
    expect(0.58 < values[-1] < 0.72, f"{what}: the std after layer 10 is {values[-1]:.4g}; with Kaiming's gain 5/3 "
                                      "for tanh (nn.init.calculate_gain('tanh')) it settles near 0.65")


@ACTIVATION_STDS.check
def normal1_linear_grows(activation_stds):
    """normal1 + linear: the std grows by sqrt(width) = 16 per layer at width 256"""
    values, what = stds_of(activation_stds, 6, 256, "normal1", "linear")
    # Linear nets: the per-layer log growth has sd 0.0025 (300 seeds): the bound 0.05 is 20 sigma (~1e-88).
    expect_growth(values, what, 16.0, 0.05, "each output sums 256 products of unit variance")
    # Layer 1 std: 16 with sd 0.054 (300 seeds); the bound 0.6 is 11 sigma (below 1e-27).
    expect(abs(values[0] - 16) < 0.6, f"{what}[0] = {values[0]:.4g}; with N(0, 1) weights one layer turns unit-normal "
                                      "input into outputs of variance 256 (std 16)")


@ACTIVATION_STDS.check
def default_relu_shrinks(activation_stds):
    """default + relu: the std shrinks by 1/sqrt(6) = 0.41 per layer"""
    values, what = stds_of(activation_stds, 10, 256, "default", "relu")
    expect_growth(values, what, 1 / math.sqrt(6), RELU_LOG_TOL,
                  "PyTorch's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has variance 1/(3 fan_in) and ReLU halves "
                  "the mean square (no bias)")


@ACTIVATION_STDS.check
def xavier(activation_stds):
    """xavier (gain 1): with relu the std shrinks by 1/sqrt(2) per layer; with tanh it decays only slowly"""
    values, what = stds_of(activation_stds, 10, 256, "xavier", "relu")
    expect_growth(values, what, 1 / math.sqrt(2), RELU_LOG_TOL,
                  "Xavier's variance 2/(fan_in + fan_out) = 1/256 keeps the variance of a linear layer, and ReLU halves "
                  "the mean square")
    values, what = stds_of(activation_stds, 10, 256, "xavier", "tanh")
    # Measured over 3000 seeds: std after layer 10 is 0.2275 with sample sd 0.003: [0.17, 0.29] is 19 sigma wide
    # on either side (below 1e-70). PyTorch's default init would give 0.003 there, N(0, 1) weights about 1.
    expect(0.17 < values[-1] < 0.29,
           f"{what}: the std after layer 10 is {values[-1]:.4g}; Xavier's gain-1 init keeps tanh nets near their linear "
           "regime, where the std decays only slowly (to about 0.23 by layer 10)")


# A fresh matrix in every layer makes each layer's factor std_{l+1} / std_l a new random draw; one matrix reused in
# every layer makes h_l = x (W^T)^l, whose factor settles on W's largest eigenvalue. Measured for a linear Kaiming net
# of width 8 (depth 64, batch 256) on 2000 seeds: the variance of log(factor) over the last 32 layers was 0.064 in the
# median with fresh weights (0.1% quantile 0.023, smallest 0.0215), and with one reused matrix at least 0.02 for 2.15%
# of the seeds. The check takes the median over 9 seeds against 0.02: fresh weights fall below it only if 5 of the 9
# do (each below 1e-3: under 1e-13), a reused matrix reaches it only if 5 of 9 do (each 0.0215): about 6e-7. 9 x 64
# layers: a few seconds for an answer that builds an nn.Linear per layer.
FRESH_DEPTH, FRESH_WIDTH, FRESH_BATCH, FRESH_TAIL, FRESH_VARIANCE = 64, 8, 256, 32, 0.02


def factor_variance(values: list[float], tail: int) -> float:
    """Variance of log(std_{l+1} / std_l) over the last `tail` layer-to-layer steps."""
    logs = [math.log(b / a) for a, b in zip(values[-tail - 1:-1], values[-tail:])]
    mean = sum(logs) / len(logs)
    return sum((x - mean) ** 2 for x in logs) / len(logs)


def expect_fresh_weights(activation_stds, seeds: list[int]) -> None:
    """Each layer draws its own matrix: in a deep narrow linear net the per-layer factor keeps varying."""
    variances = []
    for seed in seeds:
        values, what = stds_of(activation_stds, FRESH_DEPTH, FRESH_WIDTH, "kaiming", "linear", batch=FRESH_BATCH,
                               seed=seed)
        variances.append(factor_variance(values, FRESH_TAIL))
    median = sorted(variances)[len(variances) // 2]
    expect(median >= FRESH_VARIANCE,
           f"activation_stds({FRESH_DEPTH}, {FRESH_WIDTH}, 'kaiming', 'linear', batch={FRESH_BATCH}, seed=s) for "
           f"the seeds {seeds}: over the last {FRESH_TAIL} layers the per-layer factor std_(l+1) / std_l settles on "
           f"one value (the variance of its log is {median:.2g} in the median, below {FRESH_VARIANCE}); with a new "
           "N(0, 1/8) matrix in every layer it keeps varying (about 0.06), while one matrix used in every layer "
           "settles on its largest eigenvalue: draw fresh weights for each layer (and do not reseed between layers)")


@ACTIVATION_STDS.check
def fresh_weights_in_every_layer(activation_stds):
    """every layer draws its own weights: in a narrow deep linear net the per-layer factor keeps varying"""
    expect_fresh_weights(activation_stds, list(range(9)))


# At width 1 a linear layer multiplies every value by its one weight w, so std_(l+1) / std_l = |w| exactly, whatever
# the batch and whichever std (unbiased or not): the factors of a real measurement are independent draws of |w|,
# |N(0, 1)| for "kaiming" (gain 1, fan_in 1) and uniform on [0, 1] for "default" (U(-1, 1)). A prediction of the
# std with seeded noise added knows no weight and gives other factors. Kolmogorov-Smirnov over the WIDTH1_SEEDS x
# (WIDTH1_DEPTH - 1) factors: a correct answer exceeds sqrt(m) D > 3.5 with probability below 5e-11 (three correct
# answers gave 0.4 to 0.9 on 60 seeds; the mean-field prediction with noise 8 to 10). Depth 11 keeps the values'
# squares within float32's range (the log of the product of 11 factors: mean -7 or -11, sd 3.7 or 3.3).
WIDTH1_DEPTH, WIDTH1_BATCH, WIDTH1_SEEDS, WIDTH1_KS = 11, 256, 100, 3.5
WIDTH1_LAW = {"kaiming": ("N(0, 1)", "|N(0, 1)|", lambda r: torch.erf(r / math.sqrt(2))),
              "default": ("U(-1, 1)", "uniform on [0, 1]", lambda r: r)}


def expect_width_one_factors(activation_stds, init: str, seeds: list[int]) -> None:
    """At width 1 the per-layer factors std_(l+1) / std_l are the weights' |w|: |N(0, 1)| or U(0, 1)."""
    weights, law, to_unit = WIDTH1_LAW[init]
    ratios = []
    for seed in seeds:
        values, what = stds_of(activation_stds, WIDTH1_DEPTH, 1, init, "linear", batch=WIDTH1_BATCH, seed=seed)
        ratios += [b / a for a, b in zip(values, values[1:])]
    what = (f"activation_stds({WIDTH1_DEPTH}, 1, {init!r}, 'linear', batch={WIDTH1_BATCH}, seed=s) for "
            f"{len(seeds)} seeds s")
    story = (f"at width 1 a layer multiplies every value by its one weight w, so std_(l+1) / std_l = |w|, and "
             f"with {weights} weights these factors are {law}")
    r = torch.tensor(ratios, dtype=torch.float64)
    if init == "default" and float(r.max()) > 1 + 1e-4:
        fail(f"{what}: one layer multiplies the std by {float(r.max()):.4g}; {story}, never above 1: compute each "
             "std from a real network's output, with a fresh weight drawn in every layer")
    d = ks_distance(to_unit(r).clamp(0, 1))
    bound = WIDTH1_KS / math.sqrt(r.numel())
    expect(d <= bound,
           f"{what}: {story}; yours are not (their median is {float(r.median()):.3g}, that of {law} "
           f"{0.6745 if init == 'kaiming' else 0.5}; their distribution function is {d:.3f} away from it at some "
           f"point, a real measurement stays within {bound:.3f}): compute each std from a real network's output, "
           "with a fresh weight drawn in every layer")


@ACTIVATION_STDS.check
def width_one_factors_are_the_weights(activation_stds):
    """at width 1 each layer multiplies by its one weight: std_(l+1) / std_l is |w|, |N(0, 1)| or uniform on [0, 1]"""
    for init in WIDTH1_LAW:
        expect_width_one_factors(activation_stds, init, list(range(WIDTH1_SEEDS)))


@ACTIVATION_STDS.check
def deterministic_for_a_seed(activation_stds):
    """the same seed gives the same list; different seeds give different lists"""
    first, what = stds_of(activation_stds, 4, 64, "kaiming", "tanh", seed=3)
    again, _ = stds_of(activation_stds, 4, 64, "kaiming", "tanh", seed=3)
    expect(first == again, f"{what} returned {first} and then {again}: the same seed should give the same stds "
                           "(seed a generator from `seed` inside the function)")
    other, what2 = stds_of(activation_stds, 4, 64, "kaiming", "tanh", seed=4)
    expect(other != first, f"{what} and {what2} both returned {first}: different seeds should give different draws")


def expect_batch_used(activation_stds, batch: int, other: int) -> None:
    """activation_stds(..., batch=batch) and (..., batch=other) differ: the input has `batch` rows."""
    first, what = stds_of(activation_stds, 3, 32, "kaiming", "tanh", batch=batch)
    second, what2 = stds_of(activation_stds, 3, 32, "kaiming", "tanh", batch=other)
    expect(first != second, f"{what} and {what2} both returned {first}: the input x has `batch` rows, so the "
                            "batch argument changes what is measured")


@ACTIVATION_STDS.check
def uses_the_batch_argument(activation_stds):
    """the input has `batch` rows: batch=3 and batch=5 give different lists"""
    expect_batch_used(activation_stds, 3, 5)


@ACTIVATION_STDS.check
def unknown_names(activation_stds):
    """an unknown init or nonlinearity raises ValueError"""
    expect_raises(ValueError, lambda: activation_stds(3, 16, "orthogonal_typo", "relu"),
                  "activation_stds(3, 16, 'orthogonal_typo', 'relu')")
    expect_raises(ValueError, lambda: activation_stds(3, 16, "kaiming", "swish_typo"),
                  "activation_stds(3, 16, 'kaiming', 'swish_typo')")


# ---------------------------------------------------------------- init_mixture_

def run_mixture(where: str, scenario, *args):
    """run_scenario(scenario, *args), a RuntimeError of the student's init_mixture_ failed as one line naming `where`."""
    try:
        return run_scenario(scenario, *args)
    except NotImplementedError:
        raise
    except RuntimeError as e:
        fail(f"{where} raised RuntimeError: {str(e).splitlines()[0][:200] if str(e) else ''}")


def mixture_fill(init_mixture_, shape, dtype=torch.float32, layout="contiguous", seed=0, calls=1):
    """The scenario's records for init_mixture_ on fresh NaN-filled tensors, with a clear failure for an error."""
    where = f"init_mixture_(w) on a {str(dtype).removeprefix('torch.')} tensor of shape {tuple(shape)}" + (
        f" ({layout})" if layout != "contiguous" else "")
    return run_mixture(where, scenarios.mixture_fill, init_mixture_, list(shape), dtype, layout, seed, calls), where


def expect_filled_in_place(record, where):
    """w returned, still in the memory it had (read through an alias made before the call), every element written."""
    expect(record["returned_argument"],
           f"{where} returned a {record['returned_type']} that is not w itself: fill w in place and return w "
           "(as nn.init.uniform_ and the other nn.init functions do)")
    expect(record["kept_memory"],
           f"{where} gave w other memory (w.data = ... or w.set_(...)) instead of writing into the memory w had: "
           "whatever else holds that memory (the tensor a transposed view was taken from, an optimizer holding the "
           "Parameter) still reads the old values; write into w itself (w.copy_(...), w[...] = ...)")
    values = record["values"]
    unwritten = int(values.isnan().sum())
    expect(unwritten == 0, f"{where}: w started as NaN everywhere and {unwritten} of its {values.numel()} elements are "
                           "still NaN afterwards: write every element of w in place (w.copy_(...), w[...] = ...)")


def _masks(values):
    """The values flat, and where they are exactly 0, in [5, 10] and in [-10, -5] (compared in their own dtype: 0,
    5 and 10 are exact in every float format, and widening a value changes no comparison)."""
    v = values.detach().reshape(-1)
    return v, v == 0, (v >= 5) & (v <= 10), (v >= -10) & (v <= -5)


def _fraction(mask: torch.Tensor) -> float:
    """The fraction of True in `mask`, counted exactly (NaN for an empty one, which no bound accepts)."""
    return int(mask.sum()) / mask.numel() if mask.numel() else math.nan


# The Kolmogorov-Smirnov distance is read at KS_POINTS + 1 evenly spaced points of [0, 1] from a histogram (a sort of
# each range's 250,000 values cost a third of a second per check). Between two neighbouring points the empirical
# distribution function and the uniform one each move by at most the gap, so the distance read there is at most
# the exact D and at least D - 1 / KS_POINTS (0.2 % of the bound below for 250,000 values).
KS_POINTS = 2**16


def ks_distance(u: torch.Tensor) -> float:
    """The Kolmogorov-Smirnov distance between values `u` in [0, 1] and the uniform distribution, read at the
    KS_POINTS + 1 points k / KS_POINTS (the empirical distribution function's left limits there)."""
    bins = (u.double() * KS_POINTS).long().clamp_(0, KS_POINTS - 1)
    below = torch.bincount(bins, minlength=KS_POINTS).cumsum(0).double() / u.numel()  # F(k / KS_POINTS), k >= 1
    points = torch.arange(1, KS_POINTS + 1, dtype=torch.float64) / KS_POINTS
    return float((below - points).abs().max())


def expect_mixture_values(values, where):
    """Every value is exactly 0, or in [5, 10], or in [-10, -5] (no NaN left)."""
    v, zero, pos, neg = _masks(values)
    bad = ~(zero | pos | neg)
    if bool(bad.any()):
        fail(f"{where}: {int(bad.sum())} of {v.numel()} values are neither exactly 0 nor in [5, 10] or [-10, -5] "
             f"(for example {float(v[bad][0]):.6g})")


def expect_mixture_fractions(values, where):
    """Fractions 1/2 (exactly 0), 1/4 (in [5, 10]), 1/4 (in [-10, -5])."""
    v, zero, pos, neg = _masks(values)
    n = v.numel()
    # Binomial fractions: n = 10^6 draws with p = 1/2 have sd sqrt(p(1-p)/n) = 5e-4; each bound is 6 sd, so a
    # correct answer fails it with probability about 2e-9 (normal approximation; the same for p = 1/4, sd 4.3e-4).
    for name, mask, p in (("exactly 0", zero, 0.5), ("in [5, 10]", pos, 0.25), ("in [-10, -5]", neg, 0.25)):
        frac = _fraction(mask)
        bound = 6 * math.sqrt(p * (1 - p) / n)
        expect(abs(frac - p) <= bound,
               f"{where}: a fraction {frac:.4f} of the {n} values is {name}; it should be {p} (within {bound:.4f})")


def expect_mixture_uniform(values, where):
    """Uniform within [5, 10] and within [-10, -5]."""
    v, zero, pos, neg = _masks(values)
    # The Kolmogorov-Smirnov distance D between the values of one range (mapped onto [0, 1]) and the uniform
    # distribution: for m independent uniform values P(sqrt(m) D > 3.5) < 2 exp(-2 * 3.5^2) = 5e-11 (the distance
    # read at KS_POINTS points is at most D: no more likely to exceed it).
    for name, mask, to_unit in (("[5, 10]", pos, lambda x: (x - 5) / 5), ("[-10, -5]", neg, lambda x: (-x - 5) / 5)):
        u = to_unit(v[mask].double())
        m = u.numel()
        if m < 100:
            continue
        d = ks_distance(u)
        expect(math.sqrt(m) * d <= 3.5,
               f"{where}: the {m} values in {name} are not uniform over it: their empirical distribution function is "
               f"{d:.4f} away from the uniform one at some point (a uniform sample stays within {3.5 / math.sqrt(m):.4f})")


def expect_mixture_independent(values, where):
    """Independent of position: both halves alike, neighbouring elements independent."""
    v, zero, pos, neg = _masks(values)
    n = v.numel()
    # Halves: the difference of two fractions over n/2 values each has sd sqrt(2 p (1-p) / (n/2)); the bound is
    # 6 sd: a false failure has probability about 2e-9 each.
    half = n // 2
    for name, mask, p in (("exactly 0", zero, 0.5), ("positive", pos, 0.25)):
        a, b = _fraction(mask[:half]), _fraction(mask[half:2 * half])
        bound = 6 * math.sqrt(2 * p * (1 - p) / half)
        expect(abs(a - b) <= bound,
               f"{where}: the first half of w (in row-major order) has a fraction {a:.4f} of values {name}, the second "
               f"half {b:.4f}; every element should be drawn the same way, wherever it sits")
    # Neighbours: two independent elements are both 0 with probability p^2, p the fraction of zeros (1/2 when
    # correct); both positive with p^2, p = 1/4. The observed fraction of such pairs is compared with the square
    # of the observed marginal fraction, so that an answer with wrong fractions (caught above) is not also told
    # that its elements depend on each other. Over m chained pairs (neighbouring pairs share an element) the
    # pair count has variance about m (p^2 (1-p^2) + 2 (p^3 - p^4)) (5/16 for zeros, 21/256 for positives), and
    # the square of the marginal about 4 p^3 (1-p) / m (1/4 and 12/256); the two are positively correlated, so
    # the sum bounds the variance of the difference. The bound is 6 sd of it: a false failure about 2e-9 each.
    width = values.shape[-1] if values.dim() else 1
    for direction, pairs in (("next to each other in a row", lambda g: (g[:, :-1], g[:, 1:])),
                             ("above each other in a column", lambda g: (g[:-1], g[1:]))):
        for name, mask, var in (("0", zero, 5 / 16 + 1 / 4), ("positive", pos, 21 / 256 + 12 / 256)):
            x, y = pairs(mask.reshape(-1, width))
            m = x.numel()
            if m < 10_000:  # too few pairs for the normal approximation to hold at 6 sd
                continue
            frac = _fraction(x & y)
            p = _fraction(mask)
            bound = 6 * math.sqrt(var / m)
            expect(abs(frac - p * p) <= bound,
                   f"{where}: a fraction {frac:.4f} of the pairs of elements {direction} are both {name}; with a "
                   f"fraction {p:.4f} of all values {name}, independent elements give {p * p:.4f} (within "
                   f"{bound:.4f}): draw each element on its own, not one draw per row or column")


# Counts of independent draws vary: in K groups of n elements each, the number of zeros (or positives) is binomial, and
# T = sum_i (c_i - n p)^2 / (n p (1 - p)), p pooled over the groups, is chi-square with K - 1 degrees of freedom. Exact
# quotas (a random permutation of a fixed split: exactly n/4 positives) make T about 0; one draw per row or column
# shared by its elements makes it huge. The bounds 0.4 (K - 1) and 2 (K - 1) are 7.8 sd (Wilson-Hilferty) from the
# mean for K = 200 groups (farther for more): a correct answer falls outside either with probability below 1e-14.
DISPERSION_LOW, DISPERSION_HIGH = 0.4, 2.0


def dispersion(masks: torch.Tensor) -> float | None:
    """T / (K - 1) for a (K, n) boolean tensor of K groups: about 1 for independent draws; None when p is 0 or 1."""
    k, n = masks.shape
    counts = masks.sum(dim=1).double()
    p = float(counts.sum()) / (k * n)
    if k < 2 or not 0 < p < 1:
        return None
    return float(((counts - n * p) ** 2).sum()) / (n * p * (1 - p)) / (k - 1)


def expect_counts_vary(groups: torch.Tensor, what: str, where: str) -> None:
    """The zeros and the positives of each group (a row of `groups`) are counted: the counts must vary between
    groups as much as independent draws make them vary, neither less (quotas) nor more (draws shared by a group)."""
    for name, mask in (("exactly 0", groups == 0), ("in [5, 10]", (groups >= 5) & (groups <= 10))):
        ratio = dispersion(mask)
        if ratio is None:
            continue
        k, n = groups.shape
        if ratio < DISPERSION_LOW:
            fail(f"{where}: the number of values {name} hardly varies between {what} ({k} groups of {n} elements: "
                 f"its variance is {ratio:.3f} of the binomial variance independent draws give, expected about 1): the "
                 "elements are dealt out in fixed quotas (a shuffled fixed split), not drawn one by one; draw each "
                 "element on its own, so that a quarter is only what it comes to on average")
        if ratio > DISPERSION_HIGH:
            fail(f"{where}: the number of values {name} varies between {what} ({k} groups of {n} elements) "
                 f"{ratio:.1f} times as much as independent draws make it vary: elements of one group share a draw; "
                 "draw each element on its own")


def expect_rows_and_columns_vary(values, where):
    """Within one 2-D tensor: counts per row and per column vary as independent draws make them."""
    if values.dim() != 2 or min(values.shape) < 100:
        return
    v = values.detach()
    expect_counts_vary(v, "the rows of w", where)
    expect_counts_vary(v.t(), "the columns of w", where)


def expect_mixture(values, where):
    """All the properties at once (hidden checks)."""
    expect_mixture_values(values, where)
    expect_mixture_fractions(values, where)
    expect_mixture_uniform(values, where)
    expect_mixture_independent(values, where)
    expect_rows_and_columns_vary(values, where)


@INIT_MIXTURE.check
def fills_in_place(init_mixture_):
    """fills w in place, every element, and returns w itself (like nn.init functions)"""
    out, where = mixture_fill(init_mixture_, (300, 200))
    expect_filled_in_place(out[0], where)
    expect_mixture_values(out[0]["values"], where)


@INIT_MIXTURE.check
def fractions(init_mixture_):
    """on a 1000 x 1000 tensor: half the values exactly 0, a quarter in [5, 10], a quarter in [-10, -5]"""
    out, where = mixture_fill(init_mixture_, (1000, 1000), seed=1)
    expect_filled_in_place(out[0], where)
    expect_mixture_values(out[0]["values"], where)
    expect_mixture_fractions(out[0]["values"], where)


@INIT_MIXTURE.check
def uniform_in_each_range(init_mixture_):
    """values in [5, 10] and in [-10, -5] are spread uniformly over them (Kolmogorov-Smirnov)"""
    out, where = mixture_fill(init_mixture_, (1000, 1000), seed=2)
    expect_filled_in_place(out[0], where)
    expect_mixture_values(out[0]["values"], where)
    expect_mixture_uniform(out[0]["values"], where)


@INIT_MIXTURE.check
def independent_of_position(init_mixture_):
    """every element is drawn on its own: both halves, rows, columns and neighbouring elements look alike"""
    out, where = mixture_fill(init_mixture_, (1000, 1000), seed=3)
    expect_filled_in_place(out[0], where)
    expect_mixture_values(out[0]["values"], where)
    expect_mixture_independent(out[0]["values"], where)
    expect_rows_and_columns_vary(out[0]["values"], where)


def expect_counts_vary_between_tensors(init_mixture_, shape: tuple[int, ...], calls: int, seed: int) -> None:
    """`calls` tensors of `shape` filled one after another: their counts of zeros and positives vary binomially."""
    out, where = mixture_fill(init_mixture_, shape, seed=seed, calls=calls)
    for record in out:
        expect_filled_in_place(record, where)
        expect_mixture_values(record["values"], where)
    groups = torch.stack([record["values"].reshape(-1) for record in out])
    expect_counts_vary(groups, f"{calls} tensors filled one after another", f"{where}, called {calls} times")


@INIT_MIXTURE.check
def counts_vary_like_independent_draws(init_mixture_):
    """200 tensors of 2000 elements: how many are 0 varies between tensors as independent draws make it (no quotas)"""
    expect_counts_vary_between_tensors(init_mixture_, (2000,), 200, 9)


def expect_float64_mixture(init_mixture_, shape: tuple[int, ...], seed: int, every_test: bool) -> None:
    """A float64 tensor is filled in place and stays float64, with the mixture's values and fractions."""
    out, where = mixture_fill(init_mixture_, shape, dtype=torch.float64, seed=seed)
    expect_filled_in_place(out[0], where)
    expect(out[0]["dtype"] == "torch.float64", f"{where} left w as {out[0]['dtype']}")
    (expect_mixture if every_test else expect_mixture_fractions)(out[0]["values"], where)


def expect_non_contiguous_mixture(init_mixture_, shape: tuple[int, ...], seed: int, every_test: bool) -> None:
    """A transposed (non-contiguous) view of a NaN-filled tensor is filled in place, every element."""
    out, where = mixture_fill(init_mixture_, shape, layout="transposed", seed=seed)
    expect_filled_in_place(out[0], where)
    (expect_mixture if every_test else expect_mixture_fractions)(out[0]["values"], where)


def expect_no_reseeding(init_mixture_, shape: tuple[int, ...], seed: int) -> None:
    """Two calls fill two tensors differently."""
    out, where = mixture_fill(init_mixture_, shape, seed=seed, calls=2)
    for record in out:
        expect_filled_in_place(record, where)
    expect(not torch.equal(out[0]["values"], out[1]["values"]),
           f"{where}, called twice on two tensors, filled both with the same values: every weight would be equal; "
           "do not call torch.manual_seed inside an init function")


@INIT_MIXTURE.check
def any_shape(init_mixture_):
    """any shape: 1-D, 3-D and empty tensors are filled in place with the mixture's values"""
    for shape in [(4000,), (10, 20, 30), (0, 4)]:
        out, where = mixture_fill(init_mixture_, shape, seed=8)
        expect_filled_in_place(out[0], where)
        expect(tuple(out[0]["shape"]) == shape, f"{where} changed w's shape to {tuple(out[0]['shape'])}")
        expect_mixture_values(out[0]["values"], where)


@INIT_MIXTURE.check
def float64_stays_float64(init_mixture_):
    """a float64 tensor is filled in place and stays float64"""
    expect_float64_mixture(init_mixture_, (400, 250), 5, every_test=False)


@INIT_MIXTURE.check
def non_contiguous(init_mixture_):
    """a transposed (non-contiguous) view is filled in place, every element of it"""
    expect_non_contiguous_mixture(init_mixture_, (400, 250), 6, every_test=False)


@INIT_MIXTURE.check
def no_reseeding(init_mixture_):
    """two calls fill two tensors differently: do not reseed the generator"""
    expect_no_reseeding(init_mixture_, (100, 80), 7)


@INIT_MIXTURE.check
def works_on_a_parameter(init_mixture_):
    """works on nn.Linear(1000, 1000).weight, a Parameter that requires grad (no autograd error)"""
    where = "init_mixture_(layer.weight) for layer = nn.Linear(1000, 1000)"
    try:
        out = run_scenario(scenarios.mixture_parameter, init_mixture_, 1000, 1000, 4)
    except NotImplementedError:
        raise
    except RuntimeError as e:
        first = (str(e).splitlines()[0][:200] if str(e) else "").rstrip(".")
        hint = (": an in-place change of a leaf that requires grad must run under torch.no_grad()"
                if "leaf" in first or "requires grad" in first else "")
        fail(f"{where} raised RuntimeError: {first}{hint}")
    expect_filled_in_place(out, where)
    expect(out["same_parameter"] and out["is_parameter"],
           f"{where} replaced layer.weight; fill the Parameter in place instead")
    expect(out["requires_grad"] and out["is_leaf"],
           f"{where} left layer.weight with requires_grad={out['requires_grad']}, is_leaf={out['is_leaf']}: it must "
           "stay a trainable leaf (write under torch.no_grad() instead of turning gradients off)")
    expect_mixture(out["values"], where)


# ---------------------------------------------------------------- seed_everything

GENERATORS = {"torch": "torch.manual_seed", "numpy": "np.random.seed", "random": "random.seed",
              "cuda": "torch.cuda.manual_seed_all (torch.manual_seed also seeds every GPU)"}


def seed_draws(seed_everything, seeds):
    return run_scenario(scenarios.seed_draws, seed_everything, list(seeds))


def expect_repeats(draws, seeds, i, j):
    """Draws i and j came after the same seed: every generator must repeat."""
    for gen, how in GENERATORS.items():
        a, b = draws[i][gen], draws[j][gen]
        if a is None and b is None:
            continue
        expect(a == b, f"after seed_everything({seeds[i]}) {gen} gave {[round(x, 4) for x in a]}, and after calling "
                       f"seed_everything({seeds[j]}) again it gave {[round(x, 4) for x in b]}: seed_everything must "
                       f"seed {gen} too ({how})")


def expect_differ(draws, seeds, i, j):
    """Draws i and j came after different seeds: every generator must give other numbers."""
    for gen, how in GENERATORS.items():
        a, b = draws[i][gen], draws[j][gen]
        if a is None and b is None:
            continue
        expect(a != b, f"seed_everything({seeds[i]}) and seed_everything({seeds[j]}) made {gen} give the same "
                       f"numbers {[round(x, 4) for x in a]}: seed {gen} with the seed you were given ({how}), "
                       "not a constant")


@SEED_EVERYTHING.check
def same_seed_same_numbers(seed_everything):
    """after each seed_everything(seed), torch, numpy, random (and CUDA) repeat their numbers (seeds 0 to 2**32 - 1)"""
    seeds = [0, 0, 1234, 1234, 2**32 - 1, 2**32 - 1]
    draws = seed_draws(seed_everything, seeds)
    expect_repeats(draws, seeds, 0, 1)
    expect_repeats(draws, seeds, 2, 3)
    expect_repeats(draws, seeds, 4, 5)


@SEED_EVERYTHING.check
def every_gpu_seeded(seed_everything):
    """on a machine with 2 GPUs (simulated), each GPU's generator repeats after the same seed, whatever state training
    left it in, and differs after another"""
    seeds = [7, 7, 8]
    states = run_scenario(scenarios.seed_gpu_states, seed_everything, seeds, 2)
    for gpu in range(2):
        expect(states[0][gpu] == states[1][gpu],
               f"on a machine with 2 GPUs (simulated), the generator of GPU {gpu} was not the same after "
               f"seed_everything(7) twice: seed every GPU's generator (torch.cuda.manual_seed_all(seed), which "
               "torch.manual_seed(seed) also does; torch.cuda.manual_seed seeds the current GPU only)")
        expect(states[1][gpu] != states[2][gpu],
               f"on a machine with 2 GPUs (simulated), seed_everything(7) and seed_everything(8) left GPU {gpu}'s "
               "generator in the same state: seed it with the seed you were given")


def standard_draws(seed: int, n: int = 4) -> dict[str, list[float]]:
    """The numbers torch, numpy and random give after torch.manual_seed(seed), np.random.seed(seed), random.seed(seed):
    computed here from generators of their own, so that no global state is touched."""
    numpy_gen, python_gen = _RandomState(seed), _Random(seed)
    return {"torch": _rand(n, generator=_Generator().manual_seed(seed)).tolist(),
            "numpy": [float(v) for v in numpy_gen.random_sample(n)], "random": [python_gen.random() for _ in range(n)]}


def expect_standard_seeding(draws, seeds) -> None:
    """After seed_everything(s) each generator gives what seeding it with s itself gives: the same in every process."""
    for seed, record in zip(seeds, draws):
        for gen, want in standard_draws(seed).items():
            got = record[gen]
            expect(got == want,
                   f"after seed_everything({seed}) {gen} gave {[round(x, 4) for x in got]}, but {GENERATORS[gen]}"
                   f"({seed}) makes it give {[round(x, 4) for x in want]}: seed {gen} with the seed itself; a seed "
                   "made from it with hash() of a string (salted anew in every process), the process id or the "
                   "clock gives other numbers in the next run of the notebook")


@SEED_EVERYTHING.check
def same_numbers_in_every_process(seed_everything):
    """each generator gives the numbers that seeding it with seed itself gives (so every run repeats them)"""
    seeds = [0, 1234, 2**32 - 1]
    expect_standard_seeding(seed_draws(seed_everything, seeds), seeds)


@SEED_EVERYTHING.check
def returns_nothing(seed_everything):
    """it returns nothing (None)"""
    for seed, record in zip([0, 7], seed_draws(seed_everything, [0, 7])):
        expect(record["returned"] is None, f"seed_everything({seed}) returned a value of type {record['returned']}; "
                                           "it should seed the generators and return nothing (None)")


@SEED_EVERYTHING.check
def different_seeds_differ(seed_everything):
    """different seeds give different numbers, from every generator"""
    seeds = [0, 1, 1234]
    draws = seed_draws(seed_everything, seeds)
    expect_differ(draws, seeds, 0, 1)
    expect_differ(draws, seeds, 0, 2)
    expect_differ(draws, seeds, 1, 2)
