"""Chapter 02 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import pytest
import torch

from grader.runner import run_exercise

MASK = -65536  # 0xFFFF0000 as an int32


# ---------------------------------------------------------------- correct, written differently

def subnormal_by_bits(dtype):
    """The bit pattern 0...01 is the smallest positive subnormal."""
    ints = {4: torch.int32, 2: torch.int16, 1: torch.uint8, 8: torch.int64}[torch.finfo(dtype).bits // 8]
    return float(torch.tensor([1], dtype=ints).view(dtype).to(torch.float64))


def subnormal_by_halving(dtype):
    value = torch.finfo(dtype).smallest_normal
    while float(torch.tensor(value / 2, dtype=torch.float64).to(dtype).double()) != 0.0:
        value /= 2
    return float(value)


def round_by_comparison(x):
    bits = x.view(torch.int32)
    low = bits & 0xFFFF
    up = (low > 0x8000) | ((low == 0x8000) & (((bits >> 16) & 1) == 1))
    out = (bits & MASK) + up.to(torch.int32) * 0x10000
    return torch.where(torch.isnan(x), x, out.view(torch.float32))


def round_via_int64(x):
    bits = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    rounded = torch.where(rounded >= 2**31, rounded - 2**32, rounded).to(torch.int32)
    result = rounded.view(torch.float32)
    return torch.where(x != x, torch.full_like(x, float("nan")), result)


def sequential_python_loop(values, dtype):
    acc = torch.tensor(0.0, dtype=dtype)
    for i in range(values.numel()):
        acc += values[i].to(dtype)
    return acc


def kahan_named(values, dtype):
    s = torch.zeros((), dtype=dtype)
    comp = torch.zeros((), dtype=dtype)
    for x in values.to(dtype).unbind():
        corrected = x - comp
        new = s + corrected
        comp = (new - s) - corrected
        s = new
    return s


def scale_rule_compact(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    good_steps += 1
    return (scale * 2.0, 0) if good_steps >= growth_interval else (scale, good_steps)


def scale_rule_ints(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale / 2, 0
    if good_steps + 1 == growth_interval:
        return scale * 2, 0
    return scale, good_steps + 1


CORRECT = [
    ("smallest_subnormal", lambda d: torch.finfo(d).smallest_normal * torch.finfo(d).eps),
    ("smallest_subnormal", subnormal_by_bits), ("smallest_subnormal", subnormal_by_halving),
    ("round_to_bf16", round_by_comparison), ("round_to_bf16", round_via_int64),
    ("round_to_bf16", lambda x: round_by_comparison(x.abs()) * torch.sign(x)),  # symmetric: round |x|, restore sign
    ("sequential_sum", sequential_python_loop),
    ("sequential_sum", lambda v, d: __import__("functools").reduce(lambda a, b: a + b, v.to(d).unbind(),
                                                                   torch.zeros((), dtype=d))),
    ("kahan_sum", kahan_named),
    ("update_loss_scale", scale_rule_compact), ("update_loss_scale", scale_rule_ints),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    r = run_exercise(f"dtypes.{name}", fn, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


# ---------------------------------------------------------------- plausible but wrong

def round_truncate(x):
    return (x.view(torch.int32) & MASK).view(torch.float32)


def round_half_up(x):
    return ((x.view(torch.int32) + 0x8000) & MASK).view(torch.float32)


def round_nan_careless(x):
    bits = x.view(torch.int32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & MASK).view(torch.float32)


def round_in_place(x):
    out = round_by_comparison(x.clone())
    x.copy_(out)
    return out


def seq_in_float32(values, dtype):
    acc = torch.zeros((), dtype=torch.float32)
    for v in values.float():
        acc = acc + v
    return acc.to(dtype)


def seq_python_float(values, dtype):
    total = 0.0
    for v in values.tolist():
        total += v
    return torch.tensor(total, dtype=dtype)


def kahan_in_float32(values, dtype):
    return kahan_named(values.float(), torch.float32).to(dtype)


def scale_no_reset(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, good_steps
    return scale_rule_compact(scale, False, good_steps, growth_interval)


def scale_grows_late(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    if good_steps + 1 > growth_interval:
        return scale * 2, 0
    return scale, good_steps + 1


def scale_keeps_count(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    if good_steps + 1 == growth_interval:
        return scale * 2, good_steps + 1
    return scale, good_steps + 1


WRONG = [
    ("smallest_subnormal", lambda d: torch.finfo(d).tiny),
    ("smallest_subnormal", lambda d: torch.finfo(d).eps),
    ("smallest_subnormal", lambda d: 0.0),
    ("smallest_subnormal", lambda d: torch.tensor(torch.finfo(d).smallest_normal * torch.finfo(d).eps)),
    ("round_to_bf16", round_truncate), ("round_to_bf16", round_half_up), ("round_to_bf16", round_nan_careless),
    ("round_to_bf16", lambda x: x.bfloat16().float()), ("round_to_bf16", lambda x: x.to(torch.bfloat16)),
    ("round_to_bf16", round_in_place),
    ("sequential_sum", lambda v, d: v.to(d).sum()), ("sequential_sum", lambda v, d: v.to(d).cumsum(0)[-1]),
    ("sequential_sum", seq_in_float32), ("sequential_sum", seq_python_float),
    ("kahan_sum", sequential_python_loop), ("kahan_sum", kahan_in_float32),
    ("kahan_sum", lambda v, d: float(kahan_named(v, d))),
    ("update_loss_scale", scale_no_reset), ("update_loss_scale", scale_grows_late),
    ("update_loss_scale", scale_keeps_count),
    ("update_loss_scale", lambda s, f, g, growth_interval=2000: (s * 0.5, 0) if f else (s * 2, 0)),
]


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_plausible_wrong_answers_fail(name, fn):
    r = run_exercise(f"dtypes.{name}", fn, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,fn", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answers_get_a_readable_message(name, fn):
    r = run_exercise(f"dtypes.{name}", fn)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600


def test_public_checks_catch_the_classic_mistakes():
    """The smallest normal, truncation, torch's own conversion, a pairwise sum, Kahan in float32, no reset."""
    for name, fn in [WRONG[0], WRONG[4], WRONG[7], WRONG[10], WRONG[15], WRONG[17]]:
        assert run_exercise(f"dtypes.{name}", fn).status != "passed", name
