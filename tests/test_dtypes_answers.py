"""Chapter 02 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail, also when graded in a real kernel."""
from __future__ import annotations

import functools
import math
import struct

import pytest
import torch

from grader import registry
from grader.runner import run_check, run_exercise

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


def subnormal_by_formula(dtype):
    exponent_bits = {torch.float64: 11, torch.float32: 8, torch.bfloat16: 8, torch.float16: 5,
                     torch.float8_e4m3fn: 4, torch.float8_e5m2: 5}[dtype]
    mantissa_bits = torch.finfo(dtype).bits - 1 - exponent_bits
    bias = 2 ** (exponent_bits - 1) - 1
    return math.ldexp(1.0, 1 - bias - mantissa_bits)


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


def round_sign_magnitude(x):
    """Round |x|'s bits (as 31-bit magnitudes), then put the sign bit back; NaN patterns kept as they are."""
    bits = x.view(torch.int32)
    sign = bits & (-2**31)
    mag = bits & 0x7FFFFFFF
    rounded = (mag + 0x7FFF + ((mag >> 16) & 1)) & MASK
    is_nan = mag > 0x7F800000
    return torch.where(is_nan, bits, rounded | sign).view(torch.float32).clone()


def round_python_struct(x):
    """One value at a time in Python: slow, but integer operations on the bits all the same."""
    out = []
    for v in x.reshape(-1).tolist():
        (b,) = struct.unpack("<I", struct.pack("<f", v))
        if v != v:
            out.append(v)
            continue
        b = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
        out.append(struct.unpack("<f", struct.pack("<I", b))[0])
    return torch.tensor(out, dtype=torch.float32).reshape(x.shape)


def sequential_python_loop(values, dtype):
    acc = torch.tensor(0.0, dtype=dtype)
    for i in range(values.numel()):
        acc += values[i].to(dtype)
    return acc


def sequential_rounding_floats(values, dtype):
    """A Python float accumulator, rounded to dtype after every addition: exactly one rounding per step too."""
    total = 0.0
    for v in values.to(dtype).tolist():
        total = torch.tensor(total + v, dtype=torch.float64).to(dtype).item()
    return torch.tensor(total, dtype=dtype)


def kahan_named(values, dtype):
    s = torch.zeros((), dtype=dtype)
    comp = torch.zeros((), dtype=dtype)
    for x in values.to(dtype).unbind():
        corrected = x - comp
        new = s + corrected
        comp = (new - s) - corrected
        s = new
    return s


def kahan_negated_compensation(values, dtype):
    """Keeps -c instead of c (y = x + c, c = y - (t - s)): negation is exact, so every result is the same."""
    s, c = torch.tensor(0.0, dtype=dtype), torch.tensor(0.0, dtype=dtype)
    for x in values.to(dtype):
        y = x + c
        t = s + y
        c = y - (t - s)
        s = t
    return s


def scale_rule_compact(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    good_steps += 1
    return (scale * 2.0, 0) if good_steps >= growth_interval else (scale, good_steps)


def scale_rule_ints(scale, found_inf, good_steps, growth_interval=2000):
    """Returns int scales when they are whole (2048 for 2048.0): accepted, the value is the same."""
    if found_inf:
        return scale / 2, 0
    if good_steps + 1 == growth_interval:
        new = scale * 2
        return (int(new) if new == int(new) else new), 0
    return scale, good_steps + 1


def scale_rule_tensor_math(scale, found_inf, good_steps, growth_interval=2000):
    """GradScaler's arithmetic on tensors, returned as Python numbers."""
    s = torch.tensor(scale, dtype=torch.float64)
    if found_inf:
        return float(s * 0.5), 0
    count = good_steps + 1
    if count == growth_interval:
        return float(s * 2), 0
    return float(s), int(count)


CORRECT = [
    ("smallest_subnormal", lambda d: torch.finfo(d).smallest_normal * torch.finfo(d).eps),
    ("smallest_subnormal", subnormal_by_bits), ("smallest_subnormal", subnormal_by_halving),
    ("smallest_subnormal", subnormal_by_formula),
    ("round_to_bf16", round_by_comparison), ("round_to_bf16", round_via_int64),
    ("round_to_bf16", round_sign_magnitude), ("round_to_bf16", round_python_struct),
    ("sequential_sum", sequential_python_loop), ("sequential_sum", sequential_rounding_floats),
    ("sequential_sum", lambda v, d: functools.reduce(lambda a, b: a + b, v.to(d).unbind(), torch.zeros((), dtype=d))),
    # Python's builtin sum adds left to right (0 + v0 + v1 ...): sequential, and not torch's forbidden sum
    ("sequential_sum", lambda v, d: torch.zeros((), dtype=d) + sum(v.to(d).unbind(), torch.zeros((), dtype=d))),
    ("kahan_sum", kahan_named), ("kahan_sum", kahan_negated_compensation),
    ("update_loss_scale", scale_rule_compact), ("update_loss_scale", scale_rule_ints),
    ("update_loss_scale", scale_rule_tensor_math),
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
    """Ties away from zero (adding 0x8000 to a sign-magnitude pattern)."""
    return ((x.view(torch.int32) + 0x8000) & MASK).view(torch.float32)


def round_nan_careless(x):
    bits = x.view(torch.int32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & MASK).view(torch.float32)


def round_nan_to_inf(x):
    """Treats NaN like a too-large number."""
    out = round_by_comparison(x)
    return torch.where(torch.isnan(x), torch.full_like(x, float("inf")), out)


def round_nan_to_zero(x):
    return torch.nan_to_num(round_by_comparison(x), nan=0.0, posinf=float("inf"), neginf=-float("inf"))


def round_saturates(x):
    """Clamps to bfloat16's largest finite number instead of overflowing to inf."""
    out = round_by_comparison(x)
    big = torch.finfo(torch.bfloat16).max
    return torch.where(torch.isinf(out) & ~torch.isinf(x), torch.sign(x) * big, out)


def round_loses_sign_of_zero(x):
    out = round_by_comparison(x)
    return torch.where(out == 0, torch.zeros_like(out), out)


def round_flushes_subnormals(x):
    out = round_by_comparison(x)
    return torch.where(x.abs() < torch.finfo(torch.float32).tiny, torch.zeros_like(x) * torch.sign(x), out)


def round_contiguous_only(x):
    return round_by_comparison(x.view(-1)).view(x.shape)


def round_returns_bits(x):
    return round_by_comparison(x).view(torch.int32)


def round_in_place(x):
    out = round_by_comparison(x.clone())
    x.copy_(out)
    return out


def round_via_copy_into_bf16(x):
    return torch.empty(x.shape, dtype=torch.bfloat16).copy_(x).to(torch.float32)


def round_via_aten(x):
    return torch.ops.aten._to_copy.default(x, dtype=torch.bfloat16).to(torch.float32)


class _AlwaysClose(torch.Tensor):
    """A tensor subclass that claims to equal anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.Tensor.__eq__, torch.Tensor.__ne__, torch.equal):
            return torch.ones(args[0].shape, dtype=torch.bool) if func is not torch.equal else True
        return super().__torch_function__(func, types, args, kwargs or {})


def round_with_torch_method(x):
    return x.bfloat16().float()


def round_with_torch_to(x):
    return x.to(torch.bfloat16).to(torch.float32)


def seq_pairwise(values, dtype):
    return values.to(dtype).sum()


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


def seq_float64_accumulator(values, dtype):
    acc = torch.zeros((), dtype=torch.float64)
    for v in values.to(dtype):
        acc = acc + v.double()
    return acc.to(dtype)


def seq_not_converted_first(values, dtype):
    """Adds each value in its own dtype (0-dim tensors promote), rounding once per step to dtype."""
    acc = torch.zeros((), dtype=dtype)
    for v in values:
        acc = (acc + v).to(dtype)
    return acc


def seq_shape_one(values, dtype):
    acc = torch.zeros(1, dtype=dtype)
    for v in values.to(dtype):
        acc = acc + v
    return acc


def seq_from_first_value(values, dtype):
    values = values.to(dtype)
    acc = values[0]
    for v in values[1:]:
        acc = acc + v
    return acc


def kahan_in_float32(values, dtype):
    return kahan_named(values.float(), torch.float32).to(dtype)


def kahan_in_float64(values, dtype):
    return kahan_named(values.to(dtype).double(), torch.float64).to(dtype)


def kahan_compensation_in_float32(values, dtype):
    s, c = torch.zeros((), dtype=dtype), torch.zeros((), dtype=torch.float32)
    for x in values.to(dtype):
        y = x.float() - c
        t = s + y.to(dtype)
        c = (t.float() - s.float()) - y
        s = t
    return s


def kahan_wrong_sign(values, dtype):
    s, c = torch.zeros((), dtype=dtype), torch.zeros((), dtype=dtype)
    for x in values.to(dtype):
        y = x + c
        t = s + y
        c = (t - s) - y
        s = t
    return s


def kahan_returns_dtype_float32(values, dtype):
    return kahan_named(values, dtype).float()


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


def scale_grows_early(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    good_steps += 1
    if good_steps >= growth_interval - 1:
        return scale * 2, 0
    return scale, good_steps


def scale_keeps_count(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    if good_steps + 1 == growth_interval:
        return scale * 2, good_steps + 1
    return scale, good_steps + 1


def scale_integer_halving(scale, found_inf, good_steps, growth_interval=2000):
    """Integer arithmetic: 1 // 2 is 0."""
    if found_inf:
        return int(scale) // 2, 0
    return scale_rule_compact(int(scale), False, good_steps, growth_interval)


def scale_float_count(scale, found_inf, good_steps, growth_interval=2000):
    new_scale, count = scale_rule_compact(scale, found_inf, good_steps, growth_interval)
    return new_scale, float(count)


def scale_count_from_one(scale, found_inf, good_steps, growth_interval=2000):
    """Counts the overflowing step itself as the first of the next run."""
    if found_inf:
        return scale * 0.5, 1
    return scale_rule_compact(scale, False, good_steps, growth_interval)


def _subnormal_formula(dtype):
    return float(torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps)


def subnormal_by_nextafter(dtype):
    """The next number after 0 toward 1 (torch has no nextafter for float8: the formula there)."""
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return _subnormal_formula(dtype)
    return float(torch.nextafter(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)))


def subnormal_by_tensor_nextafter(dtype):
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return _subnormal_formula(dtype)
    return float(torch.zeros((), dtype=dtype).nextafter(torch.ones((), dtype=dtype)))


def subnormal_by_numpy_finfo(dtype):
    """NumPy's finfo has smallest_subnormal for the dtypes NumPy knows."""
    import numpy as np
    known = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}
    return float(np.finfo(known[dtype]).smallest_subnormal) if dtype in known else _subnormal_formula(dtype)


def subnormal_by_math_ulp(dtype):
    """math.ulp(0.0) is float64's smallest subnormal; the public float64 check names it."""
    return math.ulp(0.0) if dtype == torch.float64 else _subnormal_formula(dtype)


def seq_by_fsum(values, dtype):
    """math.fsum adds exactly and rounds once: not one rounding per step."""
    return torch.tensor(math.fsum(values.to(dtype).tolist()), dtype=dtype)


def kahan_by_fsum(values, dtype):
    return torch.tensor(math.fsum(values.to(dtype).tolist()), dtype=dtype)


def scale_by_amp_op(scale, found_inf, good_steps, growth_interval=2000):
    """GradScaler's own update kernel: the rule done for you."""
    s, g = torch.tensor([scale], dtype=torch.float32), torch.tensor([good_steps], dtype=torch.int32)
    torch._amp_update_scale_(s, g, torch.tensor([float(found_inf)]), 2.0, 0.5, growth_interval)
    return float(s), int(g)


def scale_by_gradscaler(scale, found_inf, good_steps, growth_interval=2000):
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=growth_interval)
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": good_steps})
    return scale_by_amp_op(scale, found_inf, good_steps, growth_interval)


WRONG = [
    # 0-7: the smallest normal (finfo.tiny) for the smallest subnormal, and other misreadings
    ("smallest_subnormal", lambda d: torch.finfo(d).tiny),
    ("smallest_subnormal", lambda d: torch.finfo(d).smallest_normal),
    ("smallest_subnormal", lambda d: torch.finfo(d).eps),
    ("smallest_subnormal", lambda d: 0.0),
    ("smallest_subnormal", lambda d: torch.tensor(torch.finfo(d).smallest_normal * torch.finfo(d).eps)),
    ("smallest_subnormal", lambda d: torch.finfo(d).smallest_normal * torch.finfo(d).eps / 2),  # off by one bit
    ("smallest_subnormal", lambda d: torch.finfo(d).tiny / 2),
    ("smallest_subnormal", lambda d: torch.finfo(d).resolution),
    # 8: truncating instead of rounding, then ties away from zero, NaN mistakes, overflow and zeros
    ("round_to_bf16", round_truncate), ("round_to_bf16", round_half_up), ("round_to_bf16", round_nan_careless),
    ("round_to_bf16", round_nan_to_inf), ("round_to_bf16", round_nan_to_zero), ("round_to_bf16", round_saturates),
    ("round_to_bf16", round_loses_sign_of_zero), ("round_to_bf16", round_flushes_subnormals),
    ("round_to_bf16", round_contiguous_only), ("round_to_bf16", round_returns_bits),
    # 18: torch's own conversion, however it is spelled
    ("round_to_bf16", round_with_torch_method), ("round_to_bf16", lambda x: x.to(torch.bfloat16)),
    ("round_to_bf16", round_with_torch_to),
    ("round_to_bf16", lambda x: x.type(torch.bfloat16).float()),
    ("round_to_bf16", round_via_copy_into_bf16), ("round_to_bf16", round_via_aten),
    # 24: careless or hostile
    ("round_to_bf16", round_in_place),
    ("round_to_bf16", lambda x: torch.zeros_like(x).as_subclass(_AlwaysClose)),
    # 26: sums that are not sequential, not in the dtype, or not what was asked
    ("sequential_sum", seq_pairwise), ("sequential_sum", lambda v, d: v.to(d).cumsum(0)[-1]),
    ("sequential_sum", seq_in_float32), ("sequential_sum", seq_python_float),
    ("sequential_sum", seq_float64_accumulator), ("sequential_sum", seq_not_converted_first),
    ("sequential_sum", seq_shape_one), ("sequential_sum", seq_from_first_value),
    ("sequential_sum", lambda v, d: float(sequential_python_loop(v, d))),
    # 35: Kahan in a wider dtype, naive, signs, types
    ("kahan_sum", sequential_python_loop), ("kahan_sum", kahan_in_float32), ("kahan_sum", kahan_in_float64),
    ("kahan_sum", kahan_compensation_in_float32), ("kahan_sum", kahan_wrong_sign),
    ("kahan_sum", kahan_returns_dtype_float32), ("kahan_sum", lambda v, d: float(kahan_named(v, d))),
    ("kahan_sum", lambda v, d: v.to(d).sum()),
    # 43: the loss-scale rule
    ("update_loss_scale", scale_no_reset), ("update_loss_scale", scale_grows_late),
    ("update_loss_scale", scale_grows_early), ("update_loss_scale", scale_keeps_count),
    ("update_loss_scale", lambda s, f, g, growth_interval=2000: (s * 0.5, 0) if f else (s * 2, 0)),
    ("update_loss_scale", scale_integer_halving), ("update_loss_scale", scale_float_count),
    ("update_loss_scale", scale_count_from_one),
    ("update_loss_scale", lambda s, f, g, growth_interval=2000: list(scale_rule_compact(s, f, g, growth_interval))),
    # 52: library calls that do the whole job (issue 16's shortcut sweep); SHORTCUTS below names the check and message
    ("smallest_subnormal", subnormal_by_nextafter), ("smallest_subnormal", subnormal_by_tensor_nextafter),
    ("smallest_subnormal", subnormal_by_numpy_finfo), ("smallest_subnormal", subnormal_by_math_ulp),
    ("sequential_sum", seq_by_fsum), ("kahan_sum", kahan_by_fsum), ("kahan_sum", lambda v, d: v.to(d).cumsum(0)[-1]),
    ("update_loss_scale", scale_by_amp_op), ("update_loss_scale", scale_by_gradscaler),
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


def subnormal_is_tiny(dtype):
    return torch.finfo(dtype).tiny


CLASSIC = {  # the mistakes the chapter warns about, which the public checks alone must catch
    "the smallest normal for the smallest subnormal": ("smallest_subnormal", subnormal_is_tiny),
    "truncating instead of rounding": ("round_to_bf16", round_truncate),
    "ties away from zero": ("round_to_bf16", round_half_up),
    "NaN payload carried into the exponent": ("round_to_bf16", round_nan_careless),
    "torch's own conversion": ("round_to_bf16", round_with_torch_method),
    "torch's conversion through .to": ("round_to_bf16", round_with_torch_to),
    "a pairwise sum": ("sequential_sum", seq_pairwise),
    "a float64 accumulator": ("sequential_sum", seq_python_float),
    "values not converted first": ("sequential_sum", seq_not_converted_first),
    "Kahan in float32": ("kahan_sum", kahan_in_float32),
    "Kahan in float64": ("kahan_sum", kahan_in_float64),
    "the naive sum as Kahan": ("kahan_sum", sequential_python_loop),
    "no reset on overflow": ("update_loss_scale", scale_no_reset),
    "growth one step late": ("update_loss_scale", scale_grows_late),
    "growth one step early": ("update_loss_scale", scale_grows_early),
    "the count kept after growth": ("update_loss_scale", scale_keeps_count),
    "integer halving": ("update_loss_scale", scale_integer_halving),
}
assert all(entry in WRONG for entry in CLASSIC.values() if entry[1] is not subnormal_is_tiny)


@pytest.mark.parametrize("mistake", list(CLASSIC))
def test_public_checks_catch_the_classic_mistakes(mistake):
    name, fn = CLASSIC[mistake]
    assert run_exercise(f"dtypes.{name}", fn).status != "passed", mistake


SHORTCUTS = [  # (exercise, answer, the public check that catches it, words of its message)
    ("smallest_subnormal", subnormal_by_nextafter, "float32_and_float16", "not call torch.nextafter"),
    ("smallest_subnormal", subnormal_by_tensor_nextafter, "float32_and_float16", "not call torch.Tensor.nextafter"),
    ("smallest_subnormal", subnormal_by_numpy_finfo, "float32_and_float16", "not call numpy.finfo"),
    ("smallest_subnormal", subnormal_by_math_ulp, "float64", "not call math.ulp"),
    ("sequential_sum", seq_pairwise, "drifts_in_float16", "not call torch.Tensor.sum"),
    ("sequential_sum", seq_by_fsum, "drifts_in_float16", "not call math.fsum"),
    ("sequential_sum", lambda v, d: v.to(d).cumsum(0)[-1], "drifts_in_float16", "not call torch.Tensor.cumsum"),
    ("kahan_sum", lambda v, d: v.to(d).sum(), "stays_near_ten", "not call torch.Tensor.sum"),
    ("kahan_sum", lambda v, d: torch.sum(v.to(d)), "stays_near_ten", "not call torch.sum"),
    ("kahan_sum", kahan_by_fsum, "stays_near_ten", "not call math.fsum"),
    ("update_loss_scale", scale_by_amp_op, "halves_and_resets_on_overflow", "not call torch._amp_update_scale_"),
    ("update_loss_scale", scale_by_gradscaler, "halves_and_resets_on_overflow", "not call torch.amp.GradScaler"),
    ("round_to_bf16", round_with_torch_method, "exact_values_stay", "not call torch.Tensor.bfloat16"),
    ("round_to_bf16", round_with_torch_to, "exact_values_stay", "made a bfloat16 tensor"),
]


@pytest.mark.parametrize("name,fn,check,words", SHORTCUTS, ids=[f"{s[0]}-{s[2]}-{i}" for i, s in enumerate(SHORTCUTS)])
def test_public_checks_name_the_shortcut(name, fn, check, words):
    """A whole-job library call fails a public check whose message names it, before any grading."""
    r = run_exercise(f"dtypes.{name}", fn)
    failed = {c.name: c.message for c in r.checks if not c.passed}
    assert check in failed and words in failed[check], failed


def test_the_shortcuts_would_pass_without_the_forbid_list(monkeypatch):
    """The forbidden calls really do the whole job (else forbidding them would prove nothing)."""
    for name, fn in [("smallest_subnormal", subnormal_by_nextafter), ("smallest_subnormal", subnormal_by_numpy_finfo),
                     ("smallest_subnormal", subnormal_by_math_ulp), ("update_loss_scale", scale_by_amp_op)]:
        monkeypatch.setattr(registry.load().get(f"dtypes.{name}"), "forbid", ())
        r = run_exercise(f"dtypes.{name}", fn, hidden=True)
        assert r.status == "passed", (name, fn.__name__, [(c.name, c.message) for c in r.checks if not c.passed])


def test_the_messages_name_the_mistake():
    """Truncation shows the value, what it became and the nearest bfloat16; a conversion is named as such."""
    def first_failure(name, fn):
        return next(c.message for c in run_exercise(f"dtypes.{name}", fn).checks if not c.passed)

    msg = first_failure("round_to_bf16", round_truncate)
    assert "became" in msg and "nearest bfloat16" in msg and "0x" in msg
    assert "bfloat16 tensor" in first_failure("round_to_bf16", lambda x: x.to(torch.bfloat16).to(torch.float32))
    assert "torch.Tensor.bfloat16" in first_failure("round_to_bf16", round_with_torch_method)
    assert "smallest *normal*" in first_failure("smallest_subnormal", subnormal_is_tiny)
    assert "NaN must stay NaN" in first_failure("round_to_bf16", round_nan_careless)
    assert "GradScaler's rule gives" in first_failure("update_loss_scale", scale_no_reset)


# ---------------------------------------------------------------- graded in a real kernel

KERNEL_CELL = '''
import torch
MASK = -65536
def round_ok(x):
    bits = x.view(torch.int32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & MASK
    return torch.where(torch.isnan(x), x, rounded.view(torch.float32))
def round_to(x):
    return x.to(torch.bfloat16).to(torch.float32)
def round_method(x):
    return x.bfloat16().float()
def round_aten(x):
    return torch.ops.aten._to_copy.default(x, dtype=torch.bfloat16).float()
def round_truncate(x):
    return (x.view(torch.int32) & MASK).view(torch.float32)
def scale_ok(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, 0
    good_steps += 1
    return (scale * 2.0, 0) if good_steps == growth_interval else (scale, good_steps)
def scale_no_reset(scale, found_inf, good_steps, growth_interval=2000):
    if found_inf:
        return scale * 0.5, good_steps
    return scale_ok(scale, False, good_steps, growth_interval)
'''


@pytest.fixture(scope="module")
def kernel_bridge(grading_bridge):
    return grading_bridge([KERNEL_CELL], check_timeout=20)


def graded_in_kernel(bridge, exercise_id: str, name: str) -> list[tuple[str, bool, str]]:
    """Every check (public and hidden) of the exercise on the kernel's function `name`, as grading runs them."""
    from grader.autograde.bridge import RemoteFunction

    ex = registry.load(hidden=True).get(exercise_id)
    fn = RemoteFunction(bridge, name, ex)
    out = []
    for check in ex.checks:
        bridge.limit, bridge.deadline = 20, None
        r = run_check(ex, check, (fn,), timeout=None)
        out.append((check.name, r.passed, r.message))
    return out


@pytest.mark.parametrize("name,passes", [("round_ok", True), ("round_to", False), ("round_method", False),
                                         ("round_aten", False), ("round_truncate", False)])
def test_round_to_bf16_graded_in_a_kernel(kernel_bridge, name, passes):
    """The conversion is caught where the student's code runs, not only in the notebook."""
    results = graded_in_kernel(kernel_bridge, "dtypes.round_to_bf16", name)
    assert all(ok for _, ok, _ in results) == passes, results
    if name in ("round_to", "round_aten"):
        assert all("bfloat16 tensor" in msg for _, ok, msg in results if not ok)
        assert not any(ok for _, ok, _ in results)


@pytest.mark.parametrize("name,passes", [("scale_ok", True), ("scale_no_reset", False)])
def test_update_loss_scale_graded_in_a_kernel(kernel_bridge, name, passes):
    results = graded_in_kernel(kernel_bridge, "dtypes.update_loss_scale", name)
    assert all(ok for _, ok, _ in results) == passes, results
