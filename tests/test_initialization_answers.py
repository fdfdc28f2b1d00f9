"""Chapter 07 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
import math
import random

import numpy as np
import pytest
import torch
from torch import nn

from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, ids, passes_without_forbid


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
    """Every draw from NumPy's global generator: right statistics, but the exercise asks for torch's generator, and
    torch.manual_seed does not make this init repeat (a wrong answer, caught when graded)."""
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


def seed_cuda_if_there(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _seed_cpu_generator_only(seed):
    """torch's CPU generator alone: no GPU's generator is seeded (torch.manual_seed would seed them too)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.default_generator.manual_seed(seed)


def _seed_current_gpu_only(seed):
    """torch.cuda.manual_seed seeds the current GPU only; the others keep what training left."""
    random.seed(seed)
    np.random.seed(seed)
    torch.default_generator.manual_seed(seed)
    torch.cuda.manual_seed(seed)


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
    ("init_mixture_", mixture_multinomial),
    ("seed_everything", seed_all_cuda), ("seed_everything", seed_and_deterministic),
    ("seed_everything", seed_cuda_if_there),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{f.__name__}" for n, f in CORRECT])
def test_correct_answers_pass_every_check(name, fn):
    assert_passes("initialization", name, fn)


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


def _mixture_assigns_data(weight):
    """weight.data = ...: weight now shows the values, its old memory (a transposed view's base) stays as it was
    (issue 26: the non-contiguous check read the view, not its base)."""
    with torch.no_grad():
        weight.data = mixture_d2l(torch.empty(weight.shape, dtype=weight.dtype))
    return weight


def _mixture_set(weight):
    with torch.no_grad():
        weight.set_(mixture_d2l(torch.empty(weight.shape, dtype=weight.dtype)))
    return weight


def _mixture_parameter_data(weight):
    """Fills contiguous tensors in place, but swaps a Parameter's memory (.data =) 'to keep autograd out'."""
    if isinstance(weight, nn.Parameter):
        weight.data = mixture_d2l(torch.empty(weight.shape, dtype=weight.dtype))
        return weight
    return mixture_index_assignment(weight)


def _quota_values(n, dtype):
    """n values with exactly n // 4 in [5, 10], n // 4 in [-10, -5], the rest 0, in a random order."""
    values = torch.zeros(n, dtype=dtype)
    order = torch.randperm(n)
    q = n // 4
    values[order[:q]] = torch.empty(q, dtype=dtype).uniform_(5, 10)
    values[order[q:2 * q]] = torch.empty(q, dtype=dtype).uniform_(-10, -5)
    return values


def _mixture_randperm_quarters(weight):
    """Exact quarters by randperm instead of independent draws (issue 26: it passed every check)."""
    with torch.no_grad():
        weight.copy_(_quota_values(weight.numel(), weight.dtype).reshape(weight.shape))
    return weight


def _mixture_shuffled_pattern(weight):
    """A fixed pattern [+, 0, 0, -] repeated, then shuffled: a quarter, a half, a quarter by construction."""
    n = weight.numel()
    with torch.no_grad():
        sign = torch.tensor([1.0, 0.0, 0.0, -1.0], dtype=weight.dtype).repeat(n // 4 + 1)[:n]
        sign = sign[torch.randperm(n)]
        weight.copy_((sign * torch.empty(n, dtype=weight.dtype).uniform_(5, 10)).reshape(weight.shape))
    return weight


def _mixture_stratified(weight):
    """Stratified draws: one uniform in each of n equal slices of [0, 1), shuffled: the quotas hold to one element."""
    n = weight.numel()
    with torch.no_grad():
        u = (torch.randperm(n, dtype=torch.float64) + torch.rand(n, dtype=torch.float64)) / max(n, 1)
        magnitude = torch.empty(n, dtype=weight.dtype).uniform_(5, 10)
        values = torch.where(u < 0.25, magnitude, torch.where(u < 0.5, -magnitude, torch.zeros((), dtype=weight.dtype)))
        weight.copy_(values.reshape(weight.shape))
    return weight


def _mixture_row_quotas(weight):
    """Exact quarters within every row (argsort of random keys per row); a 1-D tensor is one row."""
    with torch.no_grad():
        rows = weight.reshape(-1, weight.shape[-1]) if weight.dim() else weight.reshape(1, 1)
        n = rows.shape[-1]
        rank = torch.rand(rows.shape).argsort(dim=-1).argsort(dim=-1)  # each row: a random order of 0 .. n - 1
        magnitude = torch.empty(rows.shape, dtype=weight.dtype).uniform_(5, 10)
        zero = torch.zeros((), dtype=weight.dtype)
        values = torch.where(rank < n // 4, magnitude, torch.where(rank < n // 2, -magnitude, zero))
        weight.copy_(values.reshape(weight.shape))
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


def _stds_ignores_batch(depth, width, init, nonlinearity, batch=1024, seed=0):
    return _stds_generic(depth, width, init, nonlinearity, 1024, seed)


_MEAN_FIELD_GAIN = {"linear": 1.0, "relu": math.sqrt(2.0), "tanh": 5.0 / 3}
_HERMITE_NODES, _HERMITE_WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


def _stds_mean_field_with_noise(depth, width, init, nonlinearity, batch=1024, seed=0):
    """Builds no network: the mean-field prediction of each layer's std (Gauss-Hermite for tanh) times the exp of a
    seeded random walk, so that seeds and batches differ and the factor keeps varying (review c0607, finding 6: it
    passed every check)."""
    if nonlinearity not in _MEAN_FIELD_GAIN:
        raise ValueError(nonlinearity)
    var_w = {"normal1": 1.0, "default": 1 / (3 * width), "xavier": 1 / width,
             "kaiming": _MEAN_FIELD_GAIN[nonlinearity] ** 2 / width}.get(init)
    if var_w is None:
        raise ValueError(init)
    noise = torch.randn(depth, generator=torch.Generator().manual_seed((seed * 1_000_003 + batch) % 2**63),
                        dtype=torch.float64)
    second, walk, out = 1.0, 0.0, []
    for layer in range(depth):
        v = var_w * width * second  # the pre-activation's variance
        if nonlinearity == "linear":
            second, mean = v, 0.0
        elif nonlinearity == "relu":
            second, mean = v / 2, math.sqrt(v / (2 * math.pi))
        else:
            weights = _HERMITE_WEIGHTS / _HERMITE_WEIGHTS.sum()
            second, mean = float((np.tanh(math.sqrt(v) * _HERMITE_NODES) ** 2 * weights).sum()), 0.0
        walk += float(noise[layer]) * (0.5 / width if layer == 0 else 2.0 / width)
        out.append(math.sqrt(second - mean * mean) * math.exp(walk))
    return out


def _seed_salted_hash(seed):
    """Each generator's seed from hash() of a string, 'to decorrelate them': Python salts str hashes in every
    process, so the numbers repeat within one process only (review c0607, finding 7: it passed every check)."""
    random.seed(hash(f"random-{seed}"))
    np.random.seed(hash(f"numpy-{seed}") % 2**32)
    torch.manual_seed(hash(f"torch-{seed}") % 2**63)


_ACTS = {"linear": lambda h: h, "relu": torch.relu, "tanh": torch.tanh}
_INITS = {"normal1": lambda w, g: nn.init.normal_(w, generator=g),
          "default": lambda w, g: nn.init.kaiming_uniform_(w, a=math.sqrt(5), generator=g),
          "xavier": lambda w, g: nn.init.xavier_normal_(w, generator=g),
          "kaiming": None}


def _draw(init, nonlinearity, width, g):
    if init not in _INITS or nonlinearity not in _ACTS:
        raise ValueError(f"unknown init {init!r} or nonlinearity {nonlinearity!r}")
    w = torch.empty(width, width)
    if init == "kaiming":
        return nn.init.kaiming_normal_(w, nonlinearity=nonlinearity, generator=g)
    return _INITS[init](w, g)


def _stds_one_matrix(depth, width, init, nonlinearity, batch=1024, seed=0):
    """Draws one matrix before the loop and applies it in every layer (issue 26: it passed every check)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(batch, width, generator=g)
    w = _draw(init, nonlinearity, width, g)
    out = []
    for _ in range(depth):
        h = _ACTS[nonlinearity](h @ w.T)
        out.append(h.std().item())
    return out


def _stds_generator_per_layer(depth, width, init, nonlinearity, batch=1024, seed=0):
    """Makes its generator inside the loop: every layer gets the same first draw from `seed`."""
    h = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed))
    out = []
    for _ in range(depth):
        w = _draw(init, nonlinearity, width, torch.Generator().manual_seed(seed + 1))
        h = _ACTS[nonlinearity](h @ w.T)
        out.append(float(h.std()))
    return out


def _stds_one_layer_module(depth, width, init, nonlinearity, batch=1024, seed=0):
    """One nn.Linear built, initialised, and called depth times."""
    torch.manual_seed(seed)
    layer = nn.Linear(width, width, bias=False)
    with torch.no_grad():
        layer.weight.copy_(_draw(init, nonlinearity, width, None))
        h = torch.randn(batch, width)
        out = []
        for _ in range(depth):
            h = _ACTS[nonlinearity](layer(h))
            out.append(float(h.std()))
    return out


def _stds_reseeds_each_layer(depth, width, init, nonlinearity, batch=1024, seed=0):
    """The input from a generator of its own, then torch.manual_seed(seed + 1) before every layer's draw, 'so that each
    layer is reproducible'."""
    h = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed))
    out = []
    for _ in range(depth):
        torch.manual_seed(seed + 1)
        w = _draw(init, nonlinearity, width, None)
        h = _ACTS[nonlinearity](h @ w.T)
        out.append(float(h.std()))
    return out


W = Wrong
WRONG = [
    # default_linear_bound
    W("default_linear_bound", lambda fan_in: 1 / fan_in, "values", "returned 0.3333333333333333"),
    W("default_linear_bound", lambda fan_in: math.sqrt(6 / fan_in), "matches_nn_linear",
      "the bound is too large"),  # kaiming_uniform_ with a = 0
    W("default_linear_bound", lambda fan_in: 1 / math.sqrt(3 * fan_in), "matches_nn_linear",
      "beyond default_linear_bound(10)"),  # the std, not the bound
    W("default_linear_bound", lambda fan_in: math.sqrt(3 / fan_in), "matches_nn_linear", "the bound is too large"),
    W("default_linear_bound", lambda fan_in: torch.tensor(fan_in, dtype=torch.float64) ** -0.5, "values",
      "should be a Python float, got torch.Tensor"),
    W("default_linear_bound", lambda fan_in: np.float64(fan_in) ** -0.5, "values",
      "should be a Python float, got numpy.float64"),
    # xavier_std
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: gain * math.sqrt(1 / (fan_in + fan_out)), "xavier_values",
      "Xavier's variance is 2 / (fan_in + fan_out)"),  # without the 2
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: math.sqrt(2 / (fan_in + fan_out)), "xavier_values",
      "xavier_std(3, 5, 2.0) returned 0.5, expected 1.0"),  # ignores the gain
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: gain * math.sqrt(2 / fan_in), "xavier_values",
      "returned 0.1414213562373095, expected 0.1"),  # Kaiming's fan_in, not Xavier's mean of the fans
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: gain * math.sqrt(6 / (fan_in + fan_out)), "xavier_values",
      "returned 0.17320508075688773, expected 0.1"),  # uniform's bound
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: gain**2 * math.sqrt(2 / (fan_in + fan_out)), "xavier_values",
      "2.00× the expected value"),  # the gain squared
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: torch.tensor(gain * math.sqrt(2 / (fan_in + fan_out))),
      "xavier_values", "should be a Python float, got torch.Tensor"),
    W("xavier_std", lambda fan_in, fan_out, gain=1.0: _EqualsAnything(0.0), "xavier_values",
      "should be a Python float, got test_initialization_answers._EqualsAnything"),
    # kaiming_std
    W("kaiming_std", lambda fan_in, nonlinearity="relu": 1 / math.sqrt(fan_in), "kaiming_values",
      "the gain for relu is missing"),  # without the gain
    W("kaiming_std", lambda fan_in, nonlinearity="relu": nn.init.calculate_gain(nonlinearity) * math.sqrt(2 / fan_in),
      "kaiming_values", "kaiming_std(2, 'relu') returned 1.4142135623730951, expected 1.0"),  # the gain twice for relu
    # "fan_in + fan_out" for a square layer, without Xavier's 2
    W("kaiming_std", lambda fan_in, nonlinearity="relu": nn.init.calculate_gain(nonlinearity) / math.sqrt(2 * fan_in),
      "kaiming_values", "kaiming_std(2, 'relu') returned 0.707107"),
    W("kaiming_std", lambda fan_in, nonlinearity="relu": math.sqrt(2 / fan_in), "kaiming_values",
      "kaiming_std(100, 'linear') returned 0.1414213562373095, expected 0.1"),  # relu's gain for everything
    W("kaiming_std", lambda fan_in, nonlinearity="relu": nn.init.calculate_gain(nonlinearity, 0) / math.sqrt(fan_in)
      if nonlinearity == "leaky_relu" else nn.init.calculate_gain(nonlinearity) / math.sqrt(fan_in),
      "default_is_relu", "kaiming_std(1, 'leaky_relu') returned 1.4142135623730951"),  # slope 0
    W("kaiming_std", lambda fan_in, nonlinearity="relu": _GAINS.get(nonlinearity, 1.0) / math.sqrt(fan_in),
      "unknown_nonlinearity", "should raise ValueError"),  # no error
    W("kaiming_std", lambda fan_in, nonlinearity="relu": math.sqrt(3) * nn.init.calculate_gain(nonlinearity)
      / math.sqrt(fan_in), "kaiming_values", "returned 1.7320508075688774, expected 1.0"),  # kaiming_uniform_'s bound
    W("kaiming_std", lambda fan_in, nonlinearity="relu": torch.tensor(nn.init.calculate_gain(nonlinearity))
      / math.sqrt(fan_in), "kaiming_values", "should be a Python float, got torch.Tensor"),
    # activation_stds
    W("activation_stds", _stds(before=True), "kaiming_relu_stays",
      "measure after the nonlinearity"),  # measured before the nonlinearity
    W("activation_stds", _stds(bias=True), "default_relu_shrinks",
      "ReLU halves the mean square (no bias)"),  # nn.Linear's bias left in
    W("activation_stds", _stds(xavier_gain=True), "xavier",
      "Xavier's variance 2/(fan_in + fan_out) = 1/256"),  # Xavier with the nonlinearity's gain
    # Kaiming's ReLU gain for every nonlinearity (the text asks for each nonlinearity's own gain)
    W("activation_stds", _stds(kaiming_gain=math.sqrt(2)), "kaiming_gain_follows_the_nonlinearity",
      "Kaiming's gain for linear is 1"),
    W("activation_stds", _stds(default_bound=lambda n: 1 / n), "default_relu_shrinks",
      "U(-1/sqrt(fan_in), 1/sqrt(fan_in)) has variance 1/(3 fan_in)"),  # the bound 1/fan_in
    W("activation_stds", _stds(seeded=False), "deterministic_for_a_seed",
      "the same seed should give the same stds"),  # the global generator, never seeded
    W("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: _stds_generic(d, w, i, n, b, 0)),
      "deterministic_for_a_seed", "different seeds should give different draws"),  # ignores seed
    W("activation_stds", _stds(fallback=True), "unknown_names",
      "should raise ValueError"),  # an unknown init silently becomes "default"
    W("activation_stds", _stds(normal_std=0.0625), "normal1_linear_grows",
      "the factor should be in [15.2, 16.8]"),  # "normal1" scaled by 1/sqrt(width)
    W("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: [torch.tensor(v) for v in
                                                                _stds_generic(d, w, i, n, b, s)]),
      "one_float_per_layer", "should be a Python float, got torch.Tensor"),
    W("activation_stds", _stds_wrapper(lambda d, w, i, n, b, s: [_EqualsAnything(v) for v in
                                                                _stds_generic(d, w, i, n, b, s)]),
      "one_float_per_layer", "should be a Python float, got test_initialization_answers._EqualsAnything"),
    # ignores the batch argument (the text asks for `batch` rows)
    W("activation_stds", _stds_ignores_batch, "uses_the_batch_argument",
      "the batch argument changes what is measured"),
    # issue 26: one weight matrix in every layer (drawn once, a generator made per layer, one module, reseeding)
    *(W("activation_stds", fn, "fresh_weights_in_every_layer", "settles on one value")
      for fn in (_stds_one_matrix, _stds_generator_per_layer, _stds_one_layer_module, _stds_reseeds_each_layer)),
    # no network at all: a prediction with seeded noise; at width 1 the factors are not the weights' |w|
    W("activation_stds", _stds_mean_field_with_noise, "width_one_factors_are_the_weights",
      "std_(l+1) / std_l = |w|, and with N(0, 1) weights these factors are |N(0, 1)|; yours are not"),
    # init_mixture_
    W("init_mixture_", _mixture_new_tensor, "fills_in_place", "not w itself: fill w in place"),  # not in place
    W("init_mixture_", _mixture_filled_but_clone, "fills_in_place", "not w itself: fill w in place"),
    W("init_mixture_", _mixture_thirds, "fractions", "a fraction 0.3324 of the 1000000 values is exactly 0"),
    W("init_mixture_", _mixture_zero_quarter, "fractions", "a fraction 0.2500 of the 1000000 values is exactly 0"),
    W("init_mixture_", _mixture_never_zero, "fractions", "a fraction 0.0000 of the 1000000 values is exactly 0"),
    W("init_mixture_", _mixture_tiny_not_zero, "fills_in_place", "neither exactly 0 nor in [5, 10] or [-10, -5]"),
    W("init_mixture_", _mixture_one_draw, "fractions", "it should be 0.5"),  # one draw for every element
    W("init_mixture_", _mixture_no_grad_missing, "works_on_a_parameter",
      "must run under torch.no_grad()"),  # without no_grad
    W("init_mixture_", _mixture_per_row, "independent_of_position",
      "every element should be drawn the same way, wherever it sits"),
    W("init_mixture_", _mixture_per_column, "independent_of_position",
      "draw each element on its own, not one draw per row or column"),
    W("init_mixture_", _mixture_not_uniform, "uniform_in_each_range", "are not uniform over it"),
    # the text asks: no reseeding, non-contiguous tensors, float64 stays float64
    W("init_mixture_", _mixture_reseeds, "no_reseeding", "do not call torch.manual_seed inside an init function"),
    W("init_mixture_", _mixture_view, "non_contiguous", "raised RuntimeError: view size is not compatible"),
    W("init_mixture_", _mixture_rebinds_data, "float64_stays_float64", "gave w other memory"),
    # issue 26: in place means in w's memory (a transposed view's base, a Parameter an optimizer holds)
    W("init_mixture_", _mixture_assigns_data, "non_contiguous", "gave w other memory (w.data = ..."),
    W("init_mixture_", _mixture_set, "fills_in_place", "gave w other memory"),
    W("init_mixture_", _mixture_parameter_data, "works_on_a_parameter", "gave w other memory"),
    # issue 26: quotas instead of independent draws (the fractions come out exact)
    W("init_mixture_", _mixture_randperm_quarters, "counts_vary_like_independent_draws", "fixed quotas"),
    W("init_mixture_", _mixture_shuffled_pattern, "counts_vary_like_independent_draws", "fixed quotas"),
    W("init_mixture_", _mixture_stratified, "counts_vary_like_independent_draws", "fixed quotas"),
    W("init_mixture_", _mixture_row_quotas, "independent_of_position", "between the rows of w"),
    W("init_mixture_", _mixture_turns_off_grad, "works_on_a_parameter", "left layer.weight with requires_grad=False"),
    # seed_everything
    W("seed_everything", _seed_torch_only, "same_seed_same_numbers", "must seed numpy too (np.random.seed)"),
    W("seed_everything", _seed_numpy_constant, "different_seeds_differ",
      "seed numpy with the seed you were given (np.random.seed), not a constant"),
    W("seed_everything", _seed_ignores_argument, "different_seeds_differ",
      "seed torch with the seed you were given (torch.manual_seed), not a constant"),
    W("seed_everything", _seed_no_random, "same_seed_same_numbers", "must seed random too (random.seed)"),
    # every GPU's generator too (2 simulated GPUs: this machine may have none)
    W("seed_everything", _seed_cpu_generator_only, "every_gpu_seeded", "the generator of GPU 0 was not the same"),
    W("seed_everything", _seed_current_gpu_only, "every_gpu_seeded", "the generator of GPU 1 was not the same"),
    W("seed_everything", _seed_default_rng, "same_seed_same_numbers", "must seed numpy too (np.random.seed)"),
    W("seed_everything", _seed_local_torch_generator, "same_seed_same_numbers",
      "must seed torch too (torch.manual_seed)"),
    W("seed_everything", _seed_salted_hash, "same_numbers_in_every_process",
      "seed torch with the seed itself; a seed made from it with hash() of a string"),
]


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    """Every check named here is public: the mistakes the chapter warns about are caught before grading."""
    assert_caught("initialization", wrong, public_only=True)


def _mixture_numpy_categories(weight):
    """The categories from NumPy's global generator (np.random.choice), the magnitudes from torch: the statistics
    are right, but torch.manual_seed no longer makes the init repeat."""
    with torch.no_grad():
        branch = torch.from_numpy(np.random.choice(4, size=tuple(weight.shape)))
        magnitude = torch.empty_like(weight).uniform_(5, 10)
        weight.copy_(torch.where(branch == 0, magnitude, torch.where(branch == 1, -magnitude, torch.zeros(()))))
    return weight


def _mixture_python_random(weight):
    """torch draws, but from a generator of its own seeded from Python's random module: not torch's generator."""
    g = torch.Generator().manual_seed(random.getrandbits(63))
    with torch.no_grad():
        branch = torch.randint(0, 4, weight.shape, generator=g)
        magnitude = torch.empty(weight.shape, dtype=weight.dtype).uniform_(5, 10, generator=g)
        weight.copy_(torch.where(branch == 0, magnitude, torch.where(branch == 1, -magnitude, torch.zeros(()))))
    return weight


# Right statistics from another generator than torch's, which the exercise asks for: only grading's hidden check
# (two calls after the same torch.manual_seed, NumPy's and random's states changed in between) tells.
CAUGHT_WHEN_GRADED = [
    W("init_mixture_", _mixture_numpy_categories, "repeats_after_torch_manual_seed",
      "draw from torch's random generator"),
    W("init_mixture_", mixture_numpy, "repeats_after_torch_manual_seed", "elements differ"),
    W("init_mixture_", _mixture_python_random, "repeats_after_torch_manual_seed", "not from NumPy's or Python's"),
]


@pytest.mark.parametrize("wrong", CAUGHT_WHEN_GRADED, ids=ids(CAUGHT_WHEN_GRADED))
def test_draws_from_another_generator_are_caught_when_graded(wrong):
    assert_caught("initialization", wrong)


# ---------------------------------------------------------------- shortcuts: a library call that does the whole job
# Each number the first three exercises ask for is one an nn.init function uses: draw with it from a seeded
# generator, draw unit values from the same seed, and the ratio is the number, exact in float64.

def _ratio(w, u) -> float:
    """w / u where |u| is largest: exact to float64's rounding (where u is near 0 the ratio loses digits)."""
    i = int(u.abs().reshape(-1).argmax())
    return float(w.detach().reshape(-1)[i] / u.reshape(-1)[i])


def _ratio_to_unit(init, shape, unit="normal", **kwargs):
    w = torch.empty(shape, dtype=torch.float64)
    init(w, generator=torch.Generator().manual_seed(0), **kwargs)
    u = torch.empty(shape, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    u.normal_(generator=g) if unit == "normal" else u.uniform_(-1, 1, generator=g)
    return _ratio(w, u)


def bound_by_kaiming_uniform(fan_in):
    return _ratio_to_unit(nn.init.kaiming_uniform_, (1, fan_in), "uniform", a=math.sqrt(5))


def bound_by_nn_linear(fan_in):
    """A float64 nn.Linear made after a seed, against unit uniforms from the same seed."""
    torch.manual_seed(0)
    layer = nn.Linear(fan_in, 1, dtype=torch.float64)
    torch.manual_seed(0)
    u = torch.empty(1, fan_in, dtype=torch.float64).uniform_(-1, 1)
    return _ratio(layer.weight, u)


def bound_by_bilinear(fan_in):
    """nn.Bilinear(fan_in, 1, 1) draws U(-1/sqrt(fan_in), 1/sqrt(fan_in)) by its own code: the same number."""
    torch.manual_seed(0)
    layer = nn.Bilinear(fan_in, 1, 1, bias=False, dtype=torch.float64)
    torch.manual_seed(0)
    return _ratio(layer.weight, torch.empty(1, fan_in, 1, dtype=torch.float64).uniform_(-1, 1))


def bound_by_rnn(fan_in):
    """A recurrent layer of hidden size fan_in draws every weight from U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    torch.manual_seed(0)
    rnn = nn.RNN(1, fan_in, bias=False, dtype=torch.float64)
    torch.manual_seed(0)
    return _ratio(rnn.weight_ih_l0, torch.empty(fan_in, 1, dtype=torch.float64).uniform_(-1, 1))


def bound_by_rnn_cell(fan_in):
    """A recurrent cell (nn.RNNCell, LSTMCell, GRUCell: RNNCellBase's reset_parameters) of hidden size fan_in draws
    from the same U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (review c0607: it passed every public check)."""
    torch.manual_seed(0)
    cell = nn.RNNCell(1, fan_in, bias=False, dtype=torch.float64)
    torch.manual_seed(0)
    return _ratio(cell.weight_ih, torch.empty(fan_in, 1, dtype=torch.float64).uniform_(-1, 1))


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
    W("default_linear_bound", bound_by_kaiming_uniform, "values", "not call torch.nn.init.kaiming_uniform_"),
    W("default_linear_bound", bound_by_nn_linear, "values", "not call torch.nn.Linear.reset_parameters"),
    W("default_linear_bound", bound_by_bilinear, "values", "not call torch.nn.Bilinear.reset_parameters"),
    W("default_linear_bound", bound_by_rnn, "values", "not call torch.nn.modules.rnn.RNNBase.reset_parameters"),
    W("default_linear_bound", bound_by_rnn_cell, "values",
      "not call torch.nn.modules.rnn.RNNCellBase.reset_parameters"),
    W("xavier_std", xavier_by_xavier_normal, "xavier_values", "not call torch.nn.init.xavier_normal_"),
    W("xavier_std", xavier_by_xavier_uniform, "xavier_values", "not call torch.nn.init.xavier_uniform_"),
    W("kaiming_std", kaiming_by_kaiming_normal, "kaiming_values", "not call torch.nn.init.kaiming_normal_"),
    W("kaiming_std", kaiming_by_kaiming_uniform, "kaiming_values", "not call torch.nn.init.kaiming_uniform_"),
    W("init_mixture_", mixture_by_mixture_same_family, "fills_in_place",
      "not call torch.distributions.MixtureSameFamily"),
]
# The hidden checks ask for sizes no draw can serve in a check's time: random_fan_ins for fan-ins up to 2**40 (a
# weight of that many float64 values fits no memory; the recurrent layer's is fan_in squared), random_xavier for 80
# weights of up to 5000 x 5000 float64 values drawn twice each, which took over a minute on a loaded machine (with
# one salt, not another: the check's time limit, not its logic, would decide). Only their public checks can pass.
PUBLIC_SIZES_ONLY = (bound_by_kaiming_uniform, bound_by_nn_linear, bound_by_bilinear, bound_by_rnn,
                     bound_by_rnn_cell, xavier_by_xavier_normal, xavier_by_xavier_uniform)


@pytest.mark.parametrize("wrong", SHORTCUTS, ids=ids(SHORTCUTS))
def test_public_checks_name_the_shortcut(wrong):
    """A whole-job library call fails a public check whose message names it, before any grading."""
    assert_caught("initialization", wrong, public_only=True)


@pytest.mark.parametrize("wrong", [w for w in SHORTCUTS if w.answer not in PUBLIC_SIZES_ONLY],
                         ids=ids(w for w in SHORTCUTS if w.answer not in PUBLIC_SIZES_ONLY))
def test_the_shortcuts_would_pass_without_the_forbid_list(monkeypatch, wrong):
    """The forbidden calls really do the whole job (else forbidding them would prove nothing)."""
    passes_without_forbid(monkeypatch, "initialization", wrong.exercise, *wrong.objs)


@pytest.mark.parametrize("wrong", [w for w in SHORTCUTS if w.answer in PUBLIC_SIZES_ONLY],
                         ids=ids(w for w in SHORTCUTS if w.answer in PUBLIC_SIZES_ONLY))
def test_the_huge_draw_shortcuts_would_pass_the_public_checks_without_the_forbid_list(monkeypatch, wrong):
    """As above, on the public checks only: the hidden ones ask for sizes no draw serves in a check's time."""
    passes_without_forbid(monkeypatch, "initialization", wrong.exercise, *wrong.objs, hidden=False)


def test_the_forbidden_functions_are_back_after_a_check():
    """The refusal lasts only while the student's function runs: the notebook's own nn.Linear still works."""
    run_exercise("initialization.default_linear_bound", bound_by_nn_linear)
    assert nn.Linear(3, 2).weight.abs().max() <= 1 / math.sqrt(3)
    assert nn.init.xavier_normal_(torch.empty(4, 4)).isfinite().all()


def exact_ks_distance(u: torch.Tensor) -> float:
    """The Kolmogorov-Smirnov distance to the uniform distribution from the sorted sample (the textbook formula)."""
    u = u.double().sort().values
    m = u.numel()
    steps = torch.arange(1, m + 1, dtype=torch.float64) / m
    return float(torch.maximum(steps - u, u - (steps - 1 / m)).max())


@pytest.mark.parametrize("draw", ["uniform", "squared", "grid of 7", "two spikes", "uniform, few"])
def test_the_ks_distance_read_at_points_is_within_a_gap_below_the_exact_one(draw):
    """The uniformity check reads the distance from a histogram: never above the exact D (so a uniform sample fails
    no more often than with D), never more than 1 / KS_POINTS below it (so a non-uniform one is caught alike)."""
    from grader.exercises.initialization import KS_POINTS, ks_distance

    g = torch.Generator().manual_seed(len(draw))
    u = torch.rand(250_000 if draw != "uniform, few" else 150, generator=g, dtype=torch.float64)
    u = {"squared": u**2, "grid of 7": (u * 7).floor() / 6,
         "two spikes": torch.where(u < 0.5, torch.full_like(u, 0.3), torch.full_like(u, 1.0))}.get(draw, u)
    exact = exact_ks_distance(u)
    assert exact - 1 / KS_POINTS - 1e-12 <= ks_distance(u) <= exact + 1e-12  # "two spikes" meets the lower bound


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


REQUIRED = [
    W("xavier_std", _xavier_gain_renamed, "xavier_values", "keep the parameter names of the signature"),
    W("kaiming_std", _kaiming_nonlinearity_renamed, "kaiming_values", "keep the parameter names of the signature"),
    W("init_mixture_", _mixture_2d_only, "any_shape", "not enough values to unpack", status=ERROR),
    W("seed_everything", _seed_returns_the_seed, "returns_nothing", "return nothing (None)"),
    W("seed_everything", _seed_numpy_offset, "same_seed_same_numbers", "Seed must be between 0 and 2**32 - 1",
      status=ERROR),
]


@pytest.mark.parametrize("wrong", REQUIRED, ids=ids(REQUIRED))
def test_stated_requirements_fail_a_public_check(wrong):
    """The keyword arguments of the signature, any shape, seeds up to 2**32 - 1 and returning nothing are stated
    in the exercise text: each fails a public check (the batch argument, Kaiming's gain for each nonlinearity,
    float64, non-contiguous tensors and no reseeding are in WRONG)."""
    assert_caught("initialization", wrong, public_only=True)


# ---------------------------------------------------------------- the new hidden checks hold for any grading seed
# A hidden check draws its inputs from a seed that changes with every grading run (runner.seed_for's salt): it must
# fail its wrong answers, and pass the correct ones, whatever the salt.

SALTS = ("a", "b", "c")


def _hidden(exercise: str, check: str):
    from grader import registry
    ex = registry.load(hidden=True).get(f"initialization.{exercise}")
    return ex, next(c for c in ex.checks if c.name == check)


HIDDEN_CATCHES = [
    ("activation_stds", "fresh_weights_other_seeds", _stds_one_matrix),
    ("activation_stds", "fresh_weights_other_seeds", _stds_generator_per_layer),
    ("init_mixture_", "counts_vary_other_sizes", _mixture_randperm_quarters),
    ("init_mixture_", "counts_vary_other_sizes", _mixture_stratified),
    ("init_mixture_", "repeats_after_torch_manual_seed", _mixture_numpy_categories),
    ("activation_stds", "width_one_other_seeds", _stds_mean_field_with_noise),
    ("seed_everything", "random_seeds", _seed_salted_hash),
]


@pytest.mark.parametrize("exercise,check,wrong", HIDDEN_CATCHES,
                         ids=[f"{c}-{w.__name__}" for _, c, w in HIDDEN_CATCHES])
def test_new_hidden_checks_catch_for_any_salt(exercise, check, wrong):
    from grader.runner import run_check
    ex, c = _hidden(exercise, check)
    for salt in SALTS:
        result = run_check(ex, c, (wrong,), None, salt=salt)
        assert result.status == "failed", (salt, result.status, result.message)


HIDDEN_PASSES = [("activation_stds", "fresh_weights_other_seeds", fn) for fn in (stds_global_rng, stds_numpy)] + [
    ("init_mixture_", "counts_vary_other_sizes", fn) for fn in (mixture_d2l, mixture_multinomial)] + [
    ("init_mixture_", "repeats_after_torch_manual_seed", fn) for fn in (mixture_d2l, mixture_index_assignment,
                                                                        mixture_data, mixture_multinomial)] + [
    ("activation_stds", "width_one_other_seeds", fn) for fn in (stds_global_rng, stds_numpy)] + [
    ("seed_everything", "random_seeds", fn) for fn in (seed_all_cuda, seed_and_deterministic)]


@pytest.mark.parametrize("exercise,check,right", HIDDEN_PASSES,
                         ids=[f"{c}-{r.__name__}" for _, c, r in HIDDEN_PASSES])
def test_new_hidden_checks_pass_correct_answers_for_any_salt(exercise, check, right):
    from grader.runner import run_check
    ex, c = _hidden(exercise, check)
    for salt in SALTS:
        result = run_check(ex, c, (right,), None, salt=salt)
        assert result.status == "passed", (salt, result.message)
