"""Chapter 07 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
import math
import random

import numpy as np
import pytest
import torch
from torch import nn

from grader import registry
from grader.runner import run_exercise


# ---------------------------------------------------------------- correct, written differently

def bound_power(fan_in):
    return fan_in ** -0.5


def bound_from_gain(fan_in):
    # what kaiming_uniform_(a=sqrt(5)) computes: sqrt(3) * gain / sqrt(fan_in)
    return math.sqrt(3.0) * nn.init.calculate_gain("leaky_relu", math.sqrt(5)) / math.sqrt(fan_in)


def bound_tensor_then_float(fan_in):
    return float(torch.tensor(float(fan_in), dtype=torch.float64).rsqrt())


def xavier_power(fan_in, fan_out, gain=1.0):
    return gain * (2 / (fan_in + fan_out)) ** 0.5


def xavier_mean_fan(fan_in, fan_out, gain=1.0):
    fan_avg = (fan_in + fan_out) / 2
    return float(gain / math.sqrt(fan_avg))


_GAINS = {"linear": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3, "relu": math.sqrt(2.0),
          "leaky_relu": math.sqrt(2.0 / (1 + 0.01**2))}


def kaiming_table(fan_in, nonlinearity="relu"):
    if nonlinearity not in _GAINS:
        raise ValueError(f"no gain for {nonlinearity}")
    return _GAINS[nonlinearity] / math.sqrt(fan_in)


def kaiming_variance(fan_in, nonlinearity="relu"):
    return math.sqrt(nn.init.calculate_gain(nonlinearity) ** 2 / fan_in)


def stds_global_rng(depth, width, init, nonlinearity, batch=1024, seed=0):
    """nn.Linear modules from the global generator, seeded with torch.manual_seed; population std."""
    acts = {"linear": nn.Identity(), "relu": nn.ReLU(), "tanh": nn.Tanh()}
    if init not in ("normal1", "default", "xavier", "kaiming") or nonlinearity not in acts:
        raise ValueError("unknown init or nonlinearity")
    torch.manual_seed(seed)
    x = torch.randn(batch, width)
    out = []
    with torch.no_grad():
        for _ in range(depth):
            layer = nn.Linear(width, width, bias=False)  # default init already done
            if init == "normal1":
                layer.weight.normal_()
            elif init == "xavier":
                nn.init.xavier_normal_(layer.weight)
            elif init == "kaiming":
                nn.init.kaiming_normal_(layer.weight, nonlinearity=nonlinearity)
            x = acts[nonlinearity](layer(x))
            out.append(float(x.std(unbiased=False)))
    return out


def stds_numpy(depth, width, init, nonlinearity, batch=1024, seed=0):
    """All in NumPy float64 with its own generator; uniform draws where the variance is what matters."""
    if nonlinearity not in ("linear", "relu", "tanh"):
        raise ValueError(nonlinearity)
    rng = np.random.default_rng(seed)
    gain = {"linear": 1.0, "relu": math.sqrt(2), "tanh": 5 / 3}[nonlinearity]
    draw = {
        "normal1": lambda: rng.standard_normal((width, width)),
        "default": lambda: rng.uniform(-1, 1, (width, width)) / math.sqrt(width),
        "xavier": lambda: rng.uniform(-1, 1, (width, width)) * math.sqrt(3) * math.sqrt(2 / (2 * width)),
        "kaiming": lambda: rng.standard_normal((width, width)) * gain / math.sqrt(width),
    }
    if init not in draw:
        raise ValueError(init)
    h = rng.standard_normal((batch, width))
    out = []
    for _ in range(depth):
        h = h @ draw[init]()
        h = {"linear": h, "relu": np.maximum(h, 0), "tanh": np.tanh(h)}[nonlinearity]
        out.append(float(h.std()))
    return out


def mixture_d2l(weight):
    """d2l's way: U(-10, 10), then zero everything with |w| < 5 (probability 1/2)."""
    with torch.no_grad():
        nn.init.uniform_(weight, -10, 10)
        weight *= weight.abs() >= 5
    return weight


def mixture_index_assignment(weight):
    with torch.no_grad():
        u = torch.rand(weight.shape)
        magnitude = torch.rand(weight.shape) * 5 + 5
        weight.zero_()
        weight[u < 0.25] = magnitude[u < 0.25].to(weight.dtype)
        weight[u > 0.75] = -magnitude[u > 0.75].to(weight.dtype)
    return weight


def mixture_data(weight):
    """Through .data (no autograd either), sign times magnitude times a Bernoulli(1/2) keep mask."""
    sign = torch.randint(0, 2, weight.shape) * 2 - 1
    keep = torch.rand(weight.shape) < 0.5
    weight.data.copy_(sign * keep * torch.empty(weight.shape, dtype=weight.dtype).uniform_(5, 10))
    return weight


def mixture_numpy(weight):
    branch = np.random.choice(3, size=tuple(weight.shape), p=[0.25, 0.5, 0.25])
    magnitude = np.random.uniform(5, 10, size=tuple(weight.shape))
    values = np.where(branch == 0, magnitude, np.where(branch == 2, -magnitude, 0.0))
    with torch.no_grad():
        weight.copy_(torch.from_numpy(values))
    return weight


def seed_all_cuda(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def seed_and_deterministic(seed):
    torch.random.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    torch.use_deterministic_algorithms(True)  # the scenario puts the setting back


def xavier_from_fans(fan_in, fan_out, gain=1.0):
    """The forward and backward variances 1/fan_in and 1/fan_out, averaged as harmonic mean: the same formula."""
    return gain * math.sqrt(1 / ((fan_in + fan_out) / 2))


def kaiming_own_gains(fan_in, nonlinearity="relu"):
    """Gains written out from the nonlinearities' definitions, leaky_relu's slope 0.01 included."""
    slope = 0.01
    gains = {"linear": 1, "sigmoid": 1, "tanh": 5 / 3, "relu": math.sqrt(2), "leaky_relu": math.sqrt(2 / (1 + slope**2))}
    try:
        return gains[nonlinearity] / fan_in ** 0.5
    except KeyError:
        raise ValueError(f"unsupported nonlinearity {nonlinearity}") from None


def mixture_multinomial(weight):
    """Branches drawn with torch.multinomial; magnitudes with nn.init.uniform_ (building blocks, not the whole job)."""
    with torch.no_grad():
        n = weight.numel()
        # multinomial refuses to draw 0 samples: draw one at least, keep n (an empty weight stays empty)
        branch = torch.multinomial(torch.tensor([0.25, 0.5, 0.25]), max(n, 1), replacement=True)[:n]
        branch = branch.reshape(weight.shape)
        magnitude = nn.init.uniform_(torch.empty(weight.shape, dtype=weight.dtype), 5, 10)
        sign = (1 - branch).to(weight.dtype)  # branch 0 -> +1, 1 -> 0, 2 -> -1
        weight.copy_(sign * magnitude)
    return weight


CORRECT = [
    ("default_linear_bound", bound_power), ("default_linear_bound", bound_from_gain),
    ("default_linear_bound", bound_tensor_then_float),
    ("xavier_std", xavier_power), ("xavier_std", xavier_mean_fan), ("xavier_std", xavier_from_fans),
    ("kaiming_std", kaiming_table), ("kaiming_std", kaiming_variance), ("kaiming_std", kaiming_own_gains),
    ("activation_stds", stds_global_rng), ("activation_stds", stds_numpy),
    ("init_mixture_", mixture_d2l), ("init_mixture_", mixture_index_assignment), ("init_mixture_", mixture_data),
    ("init_mixture_", mixture_numpy), ("init_mixture_", mixture_multinomial),
    ("seed_everything", seed_all_cuda), ("seed_everything", seed_and_deterministic),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{f.__name__}" for n, f in CORRECT])
def test_correct_answers_pass_every_check(name, fn):
    r = run_exercise(f"initialization.{name}", fn, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


def test_a_correct_seed_everything_leaves_the_deterministic_setting_alone():
    before = torch.are_deterministic_algorithms_enabled()
    run_exercise("initialization.seed_everything", seed_and_deterministic, hidden=True)
    assert torch.are_deterministic_algorithms_enabled() == before


# ---------------------------------------------------------------- plausible but wrong

class _EqualsAnything(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def _stds_wrapper(change):
    """A correct activation_stds with one thing changed."""
    def fn(depth, width, init, nonlinearity, batch=1024, seed=0):
        return change(depth, width, init, nonlinearity, batch, seed)
    return fn


def _stds_generic(depth, width, init, nonlinearity, batch, seed, *, before=False, bias=False, xavier_gain=False,
                  kaiming_gain=None, default_bound=None, seeded=True, fallback=False, normal_std=1.0):
    acts = {"linear": lambda h: h, "relu": torch.relu, "tanh": torch.tanh}
    if nonlinearity not in acts or (init not in ("normal1", "default", "xavier", "kaiming") and not fallback):
        raise ValueError("unknown")
    g = torch.Generator().manual_seed(seed) if seeded else None
    h = torch.randn(batch, width, generator=g)
    out = []
    for _ in range(depth):
        w = torch.empty(width, width)
        if init == "normal1":
            w.normal_(0, normal_std, generator=g)
        elif init == "xavier":
            gain = nn.init.calculate_gain(nonlinearity) if xavier_gain else 1.0
            w.normal_(0, gain / math.sqrt(width), generator=g)
        elif init == "kaiming":
            gain = kaiming_gain if kaiming_gain is not None else nn.init.calculate_gain(nonlinearity)
            w.normal_(0, gain / math.sqrt(width), generator=g)
        else:
            b = default_bound(width) if default_bound else 1 / math.sqrt(width)
            w.uniform_(-b, b, generator=g)
        z = h @ w.T
        if bias:
            z = z + torch.empty(width).uniform_(-1 / math.sqrt(width), 1 / math.sqrt(width), generator=g)
        h = acts[nonlinearity](z)
        out.append(float(z.std() if before else h.std()))
    return out


def _stds(**kw):
    return _stds_wrapper(lambda *a: _stds_generic(*a, **kw))


def _mixture_new_tensor(weight):
    branch = torch.randint(0, 4, weight.shape)
    magnitude = torch.empty(weight.shape, dtype=weight.dtype).uniform_(5, 10)
    return torch.where(branch == 0, magnitude, torch.where(branch == 1, -magnitude, torch.zeros_like(magnitude)))


def _mixture_filled_but_clone(weight):
    return mixture_d2l(weight).clone()


def _mixture_thirds(weight):
    with torch.no_grad():
        u = torch.rand(weight.shape)
        magnitude = torch.empty(weight.shape).uniform_(5, 10)
        weight.copy_(torch.where(u < 1 / 3, magnitude, torch.where(u < 2 / 3, -magnitude, torch.zeros(()))))
    return weight


def _mixture_zero_quarter(weight):
    """U(5, 10) with a random sign, but zero with probability 1/4 instead of 1/2."""
    with torch.no_grad():
        sign = torch.randint(0, 2, weight.shape) * 2 - 1
        keep = torch.rand(weight.shape) >= 0.25
        weight.copy_(sign * keep * torch.empty(weight.shape).uniform_(5, 10))
    return weight


def _mixture_never_zero(weight):
    with torch.no_grad():
        sign = torch.randint(0, 2, weight.shape) * 2 - 1
        weight.copy_(sign * torch.empty(weight.shape).uniform_(5, 10))
    return weight


def _mixture_tiny_not_zero(weight):
    with torch.no_grad():
        mixture_d2l(weight)
        weight[weight == 0] = 1e-8
    return weight


def _mixture_one_draw(weight):
    with torch.no_grad():
        value = mixture_d2l(torch.empty(1)).item()
        weight.fill_(value)
    return weight


def _mixture_no_grad_missing(weight):
    weight.uniform_(-10, 10)
    weight.mul_(weight.abs() >= 5)
    return weight


def _mixture_per_row(weight):
    """One branch draw per row (broadcast), magnitudes per element."""
    with torch.no_grad():
        w2 = weight.reshape(-1, weight.shape[-1]) if weight.dim() else weight.reshape(1, 1)
        branch = torch.randint(0, 4, (w2.shape[0], 1))
        magnitude = torch.empty(w2.shape).uniform_(5, 10)
        values = torch.where(branch == 0, magnitude, torch.where(branch == 1, -magnitude, torch.zeros(())))
        weight.copy_(values.reshape(weight.shape))
    return weight


def _mixture_per_column(weight):
    with torch.no_grad():
        branch = torch.randint(0, 4, weight.shape[-1:])
        magnitude = torch.empty(weight.shape).uniform_(5, 10)
        weight.copy_(torch.where(branch == 0, magnitude, torch.where(branch == 1, -magnitude, torch.zeros(()))))
    return weight


def _mixture_not_uniform(weight):
    with torch.no_grad():
        u = torch.rand(weight.shape)
        magnitude = 5 + 5 * torch.rand(weight.shape) ** 2
        weight.copy_(torch.where(u < 0.25, magnitude, torch.where(u < 0.5, -magnitude, torch.zeros(()))))
    return weight


def _mixture_reseeds(weight):
    torch.manual_seed(0)
    return mixture_d2l(weight)


def _mixture_view(weight):
    """Works on contiguous tensors only."""
    with torch.no_grad():
        flat = weight.view(-1)
        flat.copy_(mixture_d2l(torch.empty(flat.shape, dtype=weight.dtype)))
    return weight


def _mixture_rebinds_data(weight):
    """Swaps in a new float32 tensor through .data: a float64 weight silently becomes float32."""
    weight.data = mixture_d2l(torch.empty(weight.shape))
    return weight


def _mixture_turns_off_grad(weight):
    weight.requires_grad_(False)
    return _mixture_no_grad_missing(weight)


def _seed_torch_only(seed):
    torch.manual_seed(seed)


def _seed_numpy_constant(seed):
    random.seed(seed)
    np.random.seed(0)
    torch.manual_seed(seed)


def _seed_ignores_argument(seed):
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)


def _seed_no_random(seed):
    np.random.seed(seed)
    torch.manual_seed(seed)


def _seed_default_rng(seed):
    random.seed(seed)
    np.random.default_rng(seed)  # a new generator: the global one is untouched
    torch.manual_seed(seed)


def _seed_local_torch_generator(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.Generator().manual_seed(seed)  # seeds a generator nobody uses


WRONG = [
    # default_linear_bound
    ("default_linear_bound", lambda fan_in: 1 / fan_in),
    ("default_linear_bound", lambda fan_in: math.sqrt(6 / fan_in)),  # kaiming_uniform_ with a = 0
    ("default_linear_bound", lambda fan_in: 1 / math.sqrt(3 * fan_in)),  # the std, not the bound
    ("default_linear_bound", lambda fan_in: math.sqrt(3 / fan_in)),
    ("default_linear_bound", lambda fan_in: torch.tensor(fan_in, dtype=torch.float64) ** -0.5),
    ("default_linear_bound", lambda fan_in: np.float64(fan_in) ** -0.5),
    # xavier_std
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: gain * math.sqrt(1 / (fan_in + fan_out))),  # without the 2
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: math.sqrt(2 / (fan_in + fan_out))),  # ignores the gain
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: gain * math.sqrt(2 / fan_in)),
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: gain * math.sqrt(6 / (fan_in + fan_out))),  # uniform's bound
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: gain**2 * math.sqrt(2 / (fan_in + fan_out))),
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: torch.tensor(gain * math.sqrt(2 / (fan_in + fan_out)))),
    ("xavier_std", lambda fan_in, fan_out, gain=1.0: _EqualsAnything(0.0)),
    # kaiming_std
    ("kaiming_std", lambda fan_in, nonlinearity="relu": 1 / math.sqrt(fan_in)),  # without the gain
    ("kaiming_std", lambda fan_in, nonlinearity="relu": nn.init.calculate_gain(nonlinearity) * math.sqrt(2 / fan_in)),
    # "fan_in + fan_out" for a square layer, without Xavier's 2
    ("kaiming_std", lambda fan_in, nonlinearity="relu": nn.init.calculate_gain(nonlinearity) / math.sqrt(2 * fan_in)),
    ("kaiming_std", lambda fan_in, nonlinearity="relu": math.sqrt(2 / fan_in)),  # relu's gain for everything
    ("kaiming_std", lambda fan_in, nonlinearity="relu": nn.init.calculate_gain(nonlinearity, 0) / math.sqrt(fan_in)
     if nonlinearity == "leaky_relu" else nn.init.calculate_gain(nonlinearity) / math.sqrt(fan_in)),  # slope 0
    ("kaiming_std", lambda fan_in, nonlinearity="relu": _GAINS.get(nonlinearity, 1.0) / math.sqrt(fan_in)),  # no error
    ("kaiming_std", lambda fan_in, nonlinearity="relu": math.sqrt(3) * nn.init.calculate_gain(nonlinearity)
     / math.sqrt(fan_in)),  # kaiming_uniform_'s bound
    ("kaiming_std", lambda fan_in, nonlinearity="relu": torch.tensor(nn.init.calculate_gain(nonlinearity))
     / math.sqrt(fan_in)),
    # activation_stds
    ("activation_stds", _stds(before=True)),  # measured before the nonlinearity
    ("activation_stds", _stds(bias=True)),  # nn.Linear's bias left in
    ("activation_stds", _stds(xavier_gain=True)),  # Xavier with the nonlinearity's gain
    ("activation_stds", _stds(kaiming_gain=math.sqrt(2))),  # Kaiming's ReLU gain for every nonlinearity
    ("activation_stds", _stds(default_bound=lambda n: 1 / n)),
    ("activation_stds", _stds(seeded=False)),  # the global generator, never seeded
    ("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: _stds_generic(d, w, i, n, b, 0))),  # ignores seed
    ("activation_stds", _stds(fallback=True)),  # an unknown init silently becomes "default"
    ("activation_stds", _stds(normal_std=0.0625)),  # "normal1" scaled by 1/sqrt(width)
    ("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: [torch.tensor(v) for v in
                                                               _stds_generic(d, w, i, n, b, s)])),
    ("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: [_EqualsAnything(v) for v in
                                                               _stds_generic(d, w, i, n, b, s)])),
    ("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: _stds_generic(d, w, i, n, 1024, s))),  # ignores batch
    # init_mixture_
    ("init_mixture_", _mixture_new_tensor),
    ("init_mixture_", _mixture_filled_but_clone),
    ("init_mixture_", _mixture_thirds),
    ("init_mixture_", _mixture_zero_quarter),
    ("init_mixture_", _mixture_never_zero),
    ("init_mixture_", _mixture_tiny_not_zero),
    ("init_mixture_", _mixture_one_draw),
    ("init_mixture_", _mixture_no_grad_missing),
    ("init_mixture_", _mixture_per_row),
    ("init_mixture_", _mixture_per_column),
    ("init_mixture_", _mixture_not_uniform),
    ("init_mixture_", _mixture_reseeds),
    ("init_mixture_", _mixture_view),
    ("init_mixture_", _mixture_rebinds_data),
    ("init_mixture_", _mixture_turns_off_grad),
    # seed_everything
    ("seed_everything", _seed_torch_only),
    ("seed_everything", _seed_numpy_constant),
    ("seed_everything", _seed_ignores_argument),
    ("seed_everything", _seed_no_random),
    ("seed_everything", _seed_default_rng),
    ("seed_everything", _seed_local_torch_generator),
]


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_plausible_wrong_answers_fail(name, fn):
    r = run_exercise(f"initialization.{name}", fn, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answers_get_a_readable_message(name, fn):
    r = run_exercise(f"initialization.{name}", fn)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600


CLASSIC = {
    "xavier without the 2": WRONG[6],
    "seed_everything that seeds torch only": WRONG[-6],
    "default bound 1/fan_in": WRONG[0],
    "kaiming without the gain": WRONG[13],
    "activations measured before the nonlinearity": WRONG[21],
    "activation_stds not seeded": WRONG[26],
    "init_mixture_ not in place": WRONG[33],
    "init_mixture_ with probabilities 1/3": WRONG[35],
    "init_mixture_ without no_grad": WRONG[40],
    "init_mixture_ with one draw for every element": WRONG[39],
    "seed_everything seeding numpy with a constant": WRONG[-5],
}


def test_classic_list_points_at_the_right_answers():
    assert CLASSIC["seed_everything that seeds torch only"][1] is _seed_torch_only
    assert CLASSIC["seed_everything seeding numpy with a constant"][1] is _seed_numpy_constant
    assert CLASSIC["init_mixture_ not in place"][1] is _mixture_new_tensor
    assert CLASSIC["init_mixture_ with probabilities 1/3"][1] is _mixture_thirds
    assert CLASSIC["init_mixture_ without no_grad"][1] is _mixture_no_grad_missing
    assert CLASSIC["init_mixture_ with one draw for every element"][1] is _mixture_one_draw
    assert [n for n, _ in CLASSIC.values()][:6] == ["xavier_std", "seed_everything", "default_linear_bound",
                                                   "kaiming_std", "activation_stds", "activation_stds"]


@pytest.mark.parametrize("mistake", list(CLASSIC))
def test_public_checks_catch_the_classic_mistakes(mistake):
    """The mistakes the chapter warns about are caught before grading, not only by hidden checks."""
    name, fn = CLASSIC[mistake]
    r = run_exercise(f"initialization.{name}", fn)
    assert r.status != "passed", mistake


def test_xavier_without_the_2_gets_told_so():
    r = run_exercise("initialization.xavier_std", WRONG[6][1])
    assert any("2 / (fan_in + fan_out)" in c.message for c in r.checks if not c.passed)


def test_seeding_torch_only_names_numpy():
    r = run_exercise("initialization.seed_everything", _seed_torch_only)
    assert any("numpy" in c.message and "np.random.seed" in c.message for c in r.checks if not c.passed)


def _stds_ignores_batch(depth, width, init, nonlinearity, batch=1024, seed=0):
    return _stds_generic(depth, width, init, nonlinearity, 1024, seed)


@pytest.mark.parametrize("name,fn,check", [
    ("init_mixture_", _mixture_rebinds_data, "float64_stays_float64"),
    ("init_mixture_", _mixture_view, "non_contiguous"),
    ("init_mixture_", _mixture_reseeds, "no_reseeding"),
    ("activation_stds", _stds_ignores_batch, "uses_the_batch_argument"),
], ids=["mixture-float64", "mixture-non-contiguous", "mixture-reseeds", "stds-ignores-batch"])
def test_stated_requirements_fail_a_public_check(name, fn, check):
    """What the exercise's text asks (float64, non-contiguous, no reseeding; the batch argument) is checked in the
    student's notebook, not only at grading."""
    failed = {c.name: c.message for c in run_exercise(f"initialization.{name}", fn).checks if not c.passed}
    assert check in failed, failed


# ---------------------------------------------------------------- shortcuts: a library call that does the whole job
# Each number the first three exercises ask for is one an nn.init function uses: draw with it from a seeded
# generator, draw unit values from the same seed, and the ratio is the number, exact in float64.

def _ratio_to_unit(init, shape, unit="normal", **kwargs):
    w = torch.empty(shape, dtype=torch.float64)
    init(w, generator=torch.Generator().manual_seed(0), **kwargs)
    u = torch.empty(shape, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    u.normal_(generator=g) if unit == "normal" else u.uniform_(-1, 1, generator=g)
    return float(w[0, 0] / u[0, 0])


def bound_by_kaiming_uniform(fan_in):
    return _ratio_to_unit(nn.init.kaiming_uniform_, (1, fan_in), "uniform", a=math.sqrt(5))


def bound_by_nn_linear(fan_in):
    """A float64 nn.Linear made after a seed, against unit uniforms from the same seed."""
    torch.manual_seed(0)
    layer = nn.Linear(fan_in, 1, dtype=torch.float64)
    torch.manual_seed(0)
    u = torch.empty(1, fan_in, dtype=torch.float64).uniform_(-1, 1)
    return float(layer.weight.detach()[0, 0] / u[0, 0])


def xavier_by_xavier_normal(fan_in, fan_out, gain=1.0):
    return _ratio_to_unit(nn.init.xavier_normal_, (fan_out, fan_in), gain=gain)


def xavier_by_xavier_uniform(fan_in, fan_out, gain=1.0):
    return _ratio_to_unit(nn.init.xavier_uniform_, (fan_out, fan_in), "uniform", gain=gain) / math.sqrt(3)


def kaiming_by_kaiming_normal(fan_in, nonlinearity="relu"):
    # kaiming_normal_'s own slope for leaky_relu is a=0 (ReLU's gain); the exercise's is calculate_gain's 0.01
    a = 0.01 if nonlinearity == "leaky_relu" else 0
    return _ratio_to_unit(nn.init.kaiming_normal_, (1, fan_in), a=a, nonlinearity=nonlinearity)


def kaiming_by_kaiming_uniform(fan_in, nonlinearity="relu"):
    a = 0.01 if nonlinearity == "leaky_relu" else 0
    return _ratio_to_unit(nn.init.kaiming_uniform_, (1, fan_in), "uniform", a=a,
                          nonlinearity=nonlinearity) / math.sqrt(3)


def mixture_by_mixture_same_family(weight):
    """The mixture as a distribution: a zero-width Uniform(0, 0) is the point mass at 0 (validation off)."""
    from torch.distributions import Categorical, MixtureSameFamily, Uniform
    mix = MixtureSameFamily(Categorical(torch.tensor([0.25, 0.5, 0.25])),
                            Uniform(torch.tensor([5.0, 0.0, -10.0]), torch.tensor([10.0, 0.0, -5.0]),
                                    validate_args=False))
    if weight.numel():  # its Categorical cannot draw 0 samples
        with torch.no_grad():
            weight.copy_(mix.sample(weight.shape))
    return weight


SHORTCUTS = [
    ("default_linear_bound", bound_by_kaiming_uniform, "values", "not call torch.nn.init.kaiming_uniform_"),
    ("default_linear_bound", bound_by_nn_linear, "values", "not call torch.nn.Linear.reset_parameters"),
    ("xavier_std", xavier_by_xavier_normal, "xavier_values", "not call torch.nn.init.xavier_normal_"),
    ("xavier_std", xavier_by_xavier_uniform, "xavier_values", "not call torch.nn.init.xavier_uniform_"),
    ("kaiming_std", kaiming_by_kaiming_normal, "kaiming_values", "not call torch.nn.init.kaiming_normal_"),
    ("kaiming_std", kaiming_by_kaiming_uniform, "kaiming_values", "not call torch.nn.init.kaiming_uniform_"),
    ("init_mixture_", mixture_by_mixture_same_family, "fills_in_place",
     "not call torch.distributions.MixtureSameFamily"),
]


@pytest.mark.parametrize("name,fn,check,words", SHORTCUTS, ids=[f"{s[0]}-{s[1].__name__}" for s in SHORTCUTS])
def test_public_checks_name_the_shortcut(name, fn, check, words):
    """A whole-job library call fails a public check whose message names it, before any grading."""
    r = run_exercise(f"initialization.{name}", fn)
    failed = {c.name: c.message for c in r.checks if not c.passed}
    assert check in failed and words in failed[check], failed


@pytest.mark.parametrize("name,fn,check,words", SHORTCUTS, ids=[f"{s[0]}-{s[1].__name__}" for s in SHORTCUTS])
def test_the_shortcuts_would_pass_without_the_forbid_list(monkeypatch, name, fn, check, words):
    """The forbidden calls really do the whole job (else forbidding them would prove nothing): every public check
    passes without the forbid list (the hidden ones use sizes up to 2**40 that these float64 draws cannot allocate)."""
    monkeypatch.setattr(registry.load().get(f"initialization.{name}"), "forbid", ())
    r = run_exercise(f"initialization.{name}", fn)
    assert r.status == "passed", [(c.name, c.message) for c in r.checks if not c.passed]


def test_the_forbidden_functions_are_back_after_a_check():
    """The refusal lasts only while the student's function runs: the notebook's own nn.Linear still works."""
    run_exercise("initialization.default_linear_bound", bound_by_nn_linear)
    assert nn.Linear(3, 2).weight.abs().max() <= 1 / math.sqrt(3)
    assert nn.init.xavier_normal_(torch.empty(4, 4)).isfinite().all()


# ---------------------------------------------------------------- requirements the text states, checked publicly

def _xavier_gain_renamed(fan_in, fan_out, g=1.0):
    return g * math.sqrt(2 / (fan_in + fan_out))


def _kaiming_nonlinearity_renamed(fan_in, nl="relu"):
    return nn.init.calculate_gain(nl) / math.sqrt(fan_in)


def _mixture_2d_only(weight):
    """Works on matrices only: reads two sizes from weight.shape."""
    rows, cols = weight.shape
    with torch.no_grad():
        u = torch.rand(rows, cols)
        magnitude = torch.empty(rows, cols).uniform_(5, 10)
        weight.copy_(torch.where(u < 0.25, magnitude, torch.where(u < 0.5, -magnitude, torch.zeros(()))))
    return weight


def _seed_returns_the_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return seed


def _seed_numpy_offset(seed):
    """numpy's seed offset "to decorrelate it from torch's": 2**32 - 1 + 1 is out of numpy's range."""
    random.seed(seed)
    np.random.seed(seed + 1)
    torch.manual_seed(seed)


@pytest.mark.parametrize("name,fn,check", [
    ("xavier_std", _xavier_gain_renamed, "xavier_values"),
    ("kaiming_std", _kaiming_nonlinearity_renamed, "kaiming_values"),
    ("activation_stds", _stds(kaiming_gain=math.sqrt(2)), "kaiming_gain_follows_the_nonlinearity"),
    ("init_mixture_", _mixture_2d_only, "any_shape"),
    ("seed_everything", _seed_returns_the_seed, "returns_nothing"),
    ("seed_everything", _seed_numpy_offset, "same_seed_same_numbers"),
], ids=["xavier-gain-keyword", "kaiming-nonlinearity-keyword", "stds-kaiming-gain", "mixture-any-shape",
        "seed-returns-nothing", "seed-up-to-2**32-1"])
def test_more_stated_requirements_fail_a_public_check(name, fn, check):
    """The keyword arguments of the signature, Kaiming's gain for each nonlinearity, any shape, seeds up to
    2**32 - 1 and returning nothing are stated in the exercise text: each fails a public check."""
    failed = {c.name: c.message for c in run_exercise(f"initialization.{name}", fn).checks if not c.passed}
    assert check in failed, failed
