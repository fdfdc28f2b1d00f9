"""Chapter 04 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from grader.runner import run_exercise

SECONDS_PER_DAY = 24 * 60 * 60


# ---------------------------------------------------------------- correct, written differently

def mlp_loop(batch, dims):
    forward = backward = 0
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        layer = 2 * batch * a * b
        forward += layer
        backward += layer                 # weight gradient
        if i > 0:
            backward += layer             # input gradient, except for the first layer
    return {"forward": forward, "backward": backward, "total": forward + backward}


def mlp_formula(batch, dims):
    pairs = sum(a * b for a, b in zip(dims, dims[1:]))
    f = 2 * batch * pairs
    b = 2 * f - 2 * batch * dims[0] * dims[1]
    return dict(forward=f, backward=b, total=f + b)


def mlp_counter_on_meta(batch, dims):
    """Let torch count, on the meta device (shapes only, nothing computed)."""
    model = nn.Sequential(*[nn.Linear(a, b, bias=False, device="meta") for a, b in zip(dims, dims[1:])])
    with FlopCounterMode(display=False) as fwd:
        out = model(torch.empty(batch, dims[0], device="meta"))
    with FlopCounterMode(display=False) as bwd:
        out.sum().backward()
    return {"total": fwd.get_total_flops() + bwd.get_total_flops(), "forward": fwd.get_total_flops(),
            "backward": bwd.get_total_flops()}


def mlp_per_token_params(batch, dims):
    params = sum(a * b for a, b in zip(dims, dims[1:]))
    first = dims[0] * dims[1]
    return {"forward": 2 * batch * params, "backward": 4 * batch * params - 2 * batch * first,
            "total": 6 * batch * params - 2 * batch * first}


def roofline_branch(i, p, b):
    ridge = p / b
    return i * b if i < ridge else p


CORRECT = [
    ("matmul_flops", lambda m, k, n: 2 * m * k * n), ("matmul_flops", lambda m, k, n: m * n * (2 * k)),
    ("matmul_flops", lambda m, k, n: math.prod((m, k, n)) << 1),
    ("mlp_flops", mlp_loop), ("mlp_flops", mlp_formula), ("mlp_flops", mlp_counter_on_meta),
    ("mlp_flops", mlp_per_token_params),
    ("mfu", lambda flops, seconds, peak: flops / seconds / peak),
    ("mfu", lambda flops, seconds, peak: (flops / peak) / seconds),
    ("mfu", lambda flops, seconds, peak: float(torch.tensor(flops, dtype=torch.float64) / seconds / peak)),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: (6 * n * d / (p * m) / g) / 3600 / 24),
    ("training_days", lambda n, d, g, p, m: 2 * 7 * (6 * n * d / (g * p * m)) / (2 * 7 * 86_400)),
    ("arithmetic_intensity", lambda flops, nbytes: flops / nbytes),
    ("arithmetic_intensity", lambda flops, nbytes: float(flops) * (1.0 / float(nbytes))),
    ("roofline", lambda i, p, b: min(p, i * b)),
    ("roofline", lambda i, p, b: p if i >= p / b else i * b), ("roofline", roofline_branch),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    r = run_exercise(f"flops.{name}", fn, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


# ---------------------------------------------------------------- plausible but wrong

def mlp_first_input_grad(batch, dims):
    out = mlp_loop(batch, dims)
    out["backward"] += 2 * batch * dims[0] * dims[1]   # counts the input gradient nobody asked for
    out["total"] = out["forward"] + out["backward"]
    return out


def mlp_twice_forward(batch, dims):
    f = mlp_loop(batch, dims)["forward"]
    return {"forward": f, "backward": 2 * f, "total": 3 * f}


def mlp_no_batch(batch, dims):
    return mlp_loop(1, dims)


def mlp_first_layer_only(batch, dims):
    return mlp_loop(batch, dims[:2])


def mlp_ends_only(batch, dims):
    return mlp_loop(batch, [dims[0], dims[-1]])


def mlp_floats(batch, dims):
    return {k: float(v) for k, v in mlp_loop(batch, dims).items()}


def mlp_numpy_ints(batch, dims):
    return {k: np.int64(v) for k, v in mlp_loop(batch, dims).items()}


def mlp_total_is_forward(batch, dims):
    out = mlp_loop(batch, dims)
    return {**out, "total": out["forward"]}


def mlp_tensors(batch, dims):
    return {k: torch.tensor(v) for k, v in mlp_loop(batch, dims).items()}


class _LyingInt(int):
    """An int that claims to equal anything."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class _LyingFloat(float):
    """A float that claims to equal, and be close to, anything."""

    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    def __float__(self):
        return 0.0

    __hash__ = float.__hash__


WRONG = [
    # matmul_flops: a multiply-add counted once; k forgotten; a float; a detour through floats (inexact
    # past 2**53); a NumPy integer; a lying int subclass
    ("matmul_flops", lambda m, k, n: m * k * n), ("matmul_flops", lambda m, k, n: 2 * m * n),
    ("matmul_flops", lambda m, k, n: float(2 * m * k * n)), ("matmul_flops", lambda m, k, n: int(2.0 * m * k * n)),
    ("matmul_flops", lambda m, k, n: np.array([2 * m * k * n])[0]), ("matmul_flops", lambda m, k, n: _LyingInt(0)),
    # mlp_flops: the first layer's input gradient (the course's issue), backward = 2 x forward, the batch
    # forgotten, one layer only, floats, NumPy ints, 0-d tensors, total = forward, lying ints
    ("mlp_flops", mlp_first_input_grad), ("mlp_flops", mlp_twice_forward), ("mlp_flops", mlp_no_batch),
    ("mlp_flops", mlp_first_layer_only), ("mlp_flops", mlp_ends_only), ("mlp_flops", mlp_floats),
    ("mlp_flops", mlp_numpy_ints), ("mlp_flops", mlp_tensors), ("mlp_flops", mlp_total_is_forward),
    ("mlp_flops", lambda b, d: {k: _LyingInt(0) for k in ("forward", "backward", "total")}),
    ("mlp_flops", lambda b, d: list(mlp_loop(b, d).values())),
    # mfu: upside down (the source notes' formula), a percentage, seconds forgotten, a NumPy scalar, a liar
    ("mfu", lambda flops, seconds, peak: peak / (flops / seconds)),
    ("mfu", lambda flops, seconds, peak: 100 * flops / seconds / peak),
    ("mfu", lambda flops, seconds, peak: flops / peak),
    ("mfu", lambda flops, seconds, peak: np.float64(flops / seconds / peak)),
    ("mfu", lambda flops, seconds, peak: f"{100 * flops / seconds / peak:.0f}%"),
    ("mfu", lambda flops, seconds, peak: _LyingFloat(0.0)),
    # training_days: 6ND over a week of seconds (the course's issue), 2ND, GPUs or MFU forgotten, MFU
    # multiplied, hours, seconds
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / (7 * SECONDS_PER_DAY)),
    ("training_days", lambda n, d, g, p, m: 2 * n * d / (g * p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: 6 * n * d * m / (g * p) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / 3600),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m)),
    # arithmetic_intensity: inverted, floor division, bits instead of bytes
    ("arithmetic_intensity", lambda flops, nbytes: nbytes / flops),
    ("arithmetic_intensity", lambda flops, nbytes: flops // nbytes),
    ("arithmetic_intensity", lambda flops, nbytes: flops / (8 * nbytes)),
    # roofline: max instead of min, intensity / bandwidth, no roof, no slope, the ridge point wrong
    ("roofline", lambda i, p, b: max(p, i * b)), ("roofline", lambda i, p, b: min(p, i / b)),
    ("roofline", lambda i, p, b: i * b), ("roofline", lambda i, p, b: p),
    ("roofline", lambda i, p, b: p if i >= b / p else i * b),
    ("roofline", lambda i, p, b: p if i >= p else i * b),
    ("roofline", lambda i, p, b: p if i >= 2 * p / b else i * b),
    ("roofline", lambda i, p, b: p if i >= 0.5 * p / b else i * b),
    ("roofline", lambda i, p, b: min(p, i * b) if i > 0 else p),
]


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_plausible_wrong_answers_fail(name, fn):
    r = run_exercise(f"flops.{name}", fn, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answers_get_a_readable_message(name, fn):
    r = run_exercise(f"flops.{name}", fn)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600


def _first_failure(name, fn):
    r = run_exercise(f"flops.{name}", fn)
    assert r.status != "passed", (name, fn)
    return next(c.message for c in r.checks if not c.passed)


def test_public_checks_catch_the_classic_mistakes():
    """Every wrong answer above but one fails the public checks alone: the detour through floats, wrong only
    past 2**53, is left to a hidden check's sizes."""
    for index, (name, fn) in enumerate(WRONG):
        if index != 3:
            _first_failure(name, fn)


def test_the_named_mistakes_are_explained():
    """The course's issue names three: the first layer's input gradient, MFU upside down, 6ND over a week of
    seconds. The public checks catch each and say what went wrong."""
    assert "first layer's input gradient" in _first_failure("mlp_flops", mlp_first_input_grad)
    assert "first layer's input gradient" in _first_failure("mlp_flops", mlp_twice_forward)  # the same numbers
    assert "upside down" in _first_failure("mfu", lambda f, s, p: p / (f / s))
    assert "percentage" in _first_failure("mfu", lambda f, s, p: 100 * f / s / p)
    assert "weeks" in _first_failure("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / 604_800)
    assert "2ND" in _first_failure("training_days", lambda n, d, g, p, m: 2 * n * d / (g * p * m) / 86_400)
    assert "hours" in _first_failure("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / 3600)
    assert "upside down" in _first_failure("arithmetic_intensity", lambda f, b: b / f)
    assert "smaller" in _first_failure("roofline", lambda i, p, b: max(p, i * b))
    assert "Python int" in _first_failure("matmul_flops", lambda m, k, n: float(2 * m * k * n))
