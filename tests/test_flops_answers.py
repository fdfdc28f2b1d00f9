"""Chapter 04 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import pytest

from grader.runner import run_exercise


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


SECONDS_PER_DAY = 24 * 60 * 60

CORRECT = [
    ("matmul_flops", lambda m, k, n: 2 * m * k * n), ("matmul_flops", lambda m, k, n: m * n * (2 * k)),
    ("mlp_flops", mlp_loop), ("mlp_flops", mlp_formula),
    ("mfu", lambda flops, seconds, peak: flops / seconds / peak),
    ("mfu", lambda flops, seconds, peak: (flops / peak) / seconds),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: (6 * n * d / (p * m) / g) / 3600 / 24),
    ("arithmetic_intensity", lambda flops, nbytes: flops / nbytes),
    ("roofline", lambda i, p, b: min(p, i * b)),
    ("roofline", lambda i, p, b: p if i >= p / b else i * b),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    r = run_exercise(f"flops.{name}", fn, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


WRONG = [
    ("matmul_flops", lambda m, k, n: m * k * n), ("matmul_flops", lambda m, k, n: float(2 * m * k * n)),
    ("mlp_flops", mlp_first_input_grad), ("mlp_flops", mlp_twice_forward), ("mlp_flops", mlp_no_batch),
    ("mfu", lambda flops, seconds, peak: peak / (flops / seconds)),
    ("mfu", lambda flops, seconds, peak: 100 * flops / seconds / peak),
    ("mfu", lambda flops, seconds, peak: flops / peak),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / (7 * SECONDS_PER_DAY)),
    ("training_days", lambda n, d, g, p, m: 2 * n * d / (g * p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / 3600),
    ("arithmetic_intensity", lambda flops, nbytes: nbytes / flops),
    ("roofline", lambda i, p, b: max(p, i * b)), ("roofline", lambda i, p, b: min(p, i / b)),
    ("roofline", lambda i, p, b: i * b),
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


def test_public_checks_catch_the_classic_mistakes():
    """The first layer's input gradient, MFU upside down, 6ND over a week of seconds."""
    for name, fn in [WRONG[2], WRONG[5], WRONG[8]]:
        r = run_exercise(f"flops.{name}", fn)
        assert r.status != "passed", name
    week = run_exercise("flops.training_days", WRONG[8][1])
    assert any("week" in c.message for c in week.checks if not c.passed)
