"""Chapter 02 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail, also when graded in a real kernel."""
from __future__ import annotations

import concurrent.futures
import functools
import math
import os
import struct
import threading

import numpy as np

import pytest
import torch

from grader import registry
from grader.guard import UNTRACED
from grader.results import ERROR
from grader.runner import run_check

from tests.answers import Wrong, assert_caught, assert_passes, ids, passes_without_forbid

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


_HALF_MINUS_ONE = torch.tensor(0x7FFF, dtype=torch.int32)  # a constant made before the call: one element


def round_into_preallocated(x):
    """The result written into a tensor made for it, NaNs put back by index assignment, constants as one-element
    tensors and Python numbers (what a lineage must not mistake for values from outside the call)."""
    bits = x.reshape(-1).view(torch.int32) if x.is_contiguous() else x.contiguous().view(torch.int32).reshape(-1)
    out = torch.empty_like(bits)
    out.copy_((bits + _HALF_MINUS_ONE + torch.bitwise_and(bits >> 16, torch.tensor(1))) & MASK)
    result = out.view(torch.float32)
    nan = torch.isnan(x.reshape(-1))
    result[nan] = float("nan")
    return result.reshape(x.shape)


def round_that_prints(x):
    """A correct answer that prints as it goes (printing a tensor switches torch's dispatch modes off, which the
    guard makes a no-op rather than refuse: this answer used to fail every check)."""
    bits = x.view(torch.int32)
    print("bits", bits.reshape(-1)[:4], f"{x.dtype} {tuple(x.shape)}")
    out = torch.where(torch.isnan(x), x, ((bits + 0x7FFF + ((bits >> 16) & 1)) & MASK).view(torch.float32))
    print(repr(out), f"{out.reshape(-1)[:1]}")
    return out


def round_with_float_tests(x):
    """Float comparisons on x that are no search: x != x and |x| == inf pick the values kept as they are."""
    bits = x.view(torch.int32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & MASK).view(torch.float32)
    keep = (x != x) | (x.abs() == float("inf")) | torch.isinf(x) | ~torch.isfinite(x)
    return torch.where(keep, x, rounded)


def _rounded_bits(x):
    """x's bits rounded to bfloat16's (ties to even), NaNs not kept."""
    bits = x.view(torch.int32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & MASK).view(torch.float32)


def round_keeps_nan_by_comparing_a_copy(x):
    """NaN kept by x == x.clone(): the same test as x == x, on another storage (two tensors of many values)."""
    return torch.where(x == x.contiguous().clone(), _rounded_bits(x), x)


def round_keeps_x_where_rounding_made_a_difference_to_a_nan(x):
    """x kept where r != x and x is NaN: an equality test of the result against x, no search."""
    r = _rounded_bits(x)
    return torch.where((r != x) & torch.isnan(x), x, r)


def round_keeps_exact_values(x):
    """x kept where the rounding left it equal (r == x) or where it is NaN."""
    r = _rounded_bits(x)
    return torch.where((r == x) | torch.isnan(x), x, r)


def round_python_struct(x):
    """One value at a time in Python, integer operations on the bits from struct: right values, but not on
    x.view(torch.int32) as the exercise asks (issue 26: the check judges the method), so a wrong answer below."""
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
    ("round_to_bf16", round_sign_magnitude), ("round_to_bf16", round_into_preallocated),
    ("round_to_bf16", round_that_prints), ("round_to_bf16", round_with_float_tests),
    ("round_to_bf16", round_keeps_nan_by_comparing_a_copy),
    ("round_to_bf16", round_keeps_x_where_rounding_made_a_difference_to_a_nan),
    ("round_to_bf16", round_keeps_exact_values),
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
    assert_passes("dtypes", name, fn)


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


# ---- issue 26: the rounding done another way than the exercise's integer operations on x.view(torch.int32)

def round_by_frexp(x):
    """frexp, the significand rounded to 8 bits (fewer for subnormals) with torch.round (ties to even), ldexp in two
    halves so that no power of two overflows: floating-point arithmetic only, and bit-identical to torch's
    conversion everywhere (13 of 13 checks before issue 26)."""
    m, e = torch.frexp(x)
    keep = torch.clamp(e + 133, max=8)  # bfloat16's smallest subnormal is 2^-133
    scale = torch.ldexp(torch.ones_like(m), keep)
    r = torch.round(m * scale) / scale
    half = torch.div(e, 2, rounding_mode="floor")
    return torch.where(torch.isfinite(x), torch.ldexp(torch.ldexp(r, half), e - half), x)


def round_frexp_with_decoy(x):
    """The frexp answer, with integer bit operations whose result is thrown away: the trace follows the values."""
    bits = x.view(torch.int32)
    (bits + 0x7FFF + ((bits >> 16) & 1)) & MASK
    return round_by_frexp(x)


def round_frexp_blended(x):
    """Integer bit operations blended into the result (a condition that always holds): the values still come from
    floating-point rounding."""
    always = (x.view(torch.int32) & 0) == 0
    return torch.where(always, round_by_frexp(x), x)


def round_python_frexp(x):
    """math.frexp and math.ldexp on Python floats, one value at a time: no tensor operation rounds anything."""
    out = []
    for v in x.reshape(-1).tolist():
        if math.isfinite(v):
            m, e = math.frexp(v)
            keep = min(8, e + 133)
            v = math.copysign(math.ldexp(round(m * 2.0**keep), e - keep), v)
        out.append(v)
    return torch.tensor(out, dtype=torch.float32).reshape(x.shape)


# ---- the reviewer's evasions of the method check: a result made where the trace cannot see, or float arithmetic by
# an operator the check did not list (all bit-identical to torch's conversion)

def round_numpy_floats(x):
    """The frexp rounding in NumPy float64, brought back with torch.from_numpy, with a decoy integer operation on the
    result: no operator the trace sees made its values from x."""
    with np.errstate(over="ignore", invalid="ignore"):
        a = x.detach().numpy().astype(np.float64)
        m, e = np.frexp(a)
        scale = np.ldexp(1.0, np.minimum(e + 133, 8))
        r = np.where(np.isfinite(a), np.ldexp(np.round(m * scale) / scale, e), a).astype(np.float32)
    return (torch.from_numpy(r).view(torch.int32) | 0).view(torch.float32)


def round_python_frexp_decoy(x):
    """Python floats rebuilt with torch.tensor(list), a decoy integer operation on the result."""
    return (round_python_frexp(x).view(torch.int32) | 0).view(torch.float32)


def _magic(x):
    """Per element, the float64 1.5 * 2^52 * (the bfloat16 step at x): adding it and taking it off rounds x to
    bfloat16 (ties to even). Built from x's exponent bits with integer operations."""
    e = torch.clamp((x.view(torch.int32) >> 23) & 0xFF, min=1).to(torch.int64)
    return (((e - 127 - 7 + 52 + 1023) << 52) | (1 << 51)).view(torch.float64)


def _magic_finish(x, r64):
    bits = x.view(torch.int32)
    out = r64.to(torch.float32).view(torch.int32) | (bits & (-2**31))  # x's sign (zeros, tiny values)
    return torch.where(torch.isfinite(x), out.view(torch.float32), x)


def round_magic_by_sum(x):
    """The float64 magic number added with torch.stack(...).sum(0) and taken off again with -c."""
    c = _magic(x)
    s = torch.stack([x.double(), c]).sum(0)
    return _magic_finish(x, torch.stack([s, -c]).sum(0))


def round_magic_by_matmul(x):
    """The same additions as a matrix product: [x, c] @ [1, 1], then [s, c] @ [1, -1]."""
    c = _magic(x)
    s = torch.stack([x.double(), c], -1) @ torch.tensor([1.0, 1.0], dtype=torch.float64)
    return _magic_finish(x, torch.stack([s, c], -1) @ torch.tensor([1.0, -1.0], dtype=torch.float64))


def round_dispatch_disabled(x):
    """torch's conversion with Python dispatch turned off (the trace sees nothing there), a decoy on the result."""
    with torch._C._DisableTorchDispatch():
        r = x.to(torch.bfloat16).to(torch.float32)
    return (r.view(torch.int32) | 0).view(torch.float32)


def round_modes_disabled(x):
    """The same with the dispatch modes popped for a while (torch's own helper puts them back)."""
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        r = x.to(torch.bfloat16).to(torch.float32)
    return (r.view(torch.int32) | 0).view(torch.float32)


def round_in_a_thread(x):
    """torch's conversion in another thread, which the trace does not watch, a decoy on the result."""
    out = []
    worker = threading.Thread(target=lambda: out.append(x.to(torch.bfloat16).to(torch.float32)))
    worker.start()
    worker.join()
    return (out[0].view(torch.int32) | 0).view(torch.float32)


# ---- a third round (issue 26): values computed out of the trace's sight, then given the lineage of the integer
# operations by a blend (torch.where on a mask from x's own bits, which always holds) or by being written into a
# tensor that has it; and float additions by an operator that otherwise only writes (all bit-identical to torch's)

def _from_x_bits(x):
    """A mask made from x by an integer operation, true everywhere: blended in, it brings x's bit operations (and,
    when grading, x's mark) into the result's lineage."""
    return (x.view(torch.int32) & 0) == 0


def _python_bits(x):
    """The rounded bit patterns as an int32 tensor, computed one value at a time on Python ints (round_python_struct)."""
    return torch.tensor([struct.unpack("<i", struct.pack("<f", v))[0] for v in round_python_struct(x).reshape(-1).tolist()],
                        dtype=torch.int32)


def round_thread_blended(x):
    """torch's conversion in another thread (which the trace does not watch), blended with x's bits."""
    out = []
    worker = threading.Thread(target=lambda: out.append(x.to(torch.bfloat16).to(torch.float32)))
    worker.start()
    worker.join()
    return torch.where(_from_x_bits(x), out[0], out[0])


def round_thread_written_in(x):
    """torch's conversion written, by another thread, into a tensor with x's bit operations in its history."""
    out = (x.view(torch.int32) & -1).contiguous()
    worker = threading.Thread(target=lambda: out.copy_(x.contiguous().to(torch.bfloat16).to(torch.float32)
                                                       .view(torch.int32)))
    worker.start()
    worker.join()
    return out.view(torch.float32)


def round_storage_bytes_written_in(x):
    """Python's rounded bits written byte by byte into the storage of a tensor with x's bit operations in its history
    (each byte a Python int: a scalar operand, like any constant)."""
    out = (x.view(torch.int32) & -1).contiguous()
    storage = out.untyped_storage()
    for i, b in enumerate(_python_bits(x).tolist()):
        for j, byte in enumerate((b & 0xFFFFFFFF).to_bytes(4, "little")):
            storage[4 * i + j] = byte
    return out.view(torch.float32)


def round_pool_blended(x):
    """The same through a thread pool, which starts its threads on the first submit."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        r = pool.submit(lambda: x.to(torch.bfloat16).to(torch.float32)).result()
    return torch.where(_from_x_bits(x), r, r)


def round_numpy_blended(x):
    """The integer rounding done in NumPy, the result blended with x's bits."""
    r = torch.from_numpy(round_numpy_bits(x.detach().contiguous().numpy()).view(np.float32)).reshape(x.shape)
    return torch.where(_from_x_bits(x), r, r)


def round_numpy_bits(a):
    """The nearest bfloat16's bits of a float32 array, NaNs kept, in NumPy int64 arithmetic."""
    b = a.view(np.int32).astype(np.int64)
    r = (b + 0x7FFF + ((b >> 16) & 1)) & ~0xFFFF
    r = (((r + 2**31) % 2**32) - 2**31).astype(np.int32)
    return np.where(np.isnan(a), a.view(np.int32), r)


def round_numpy_written_in(x):
    """A tensor with x's bit operations in its history, overwritten through a NumPy view of its memory."""
    out = (x.view(torch.int32) & -1).contiguous()
    out.numpy()[...] = round_numpy_bits(x.contiguous().numpy()).reshape(out.shape)
    return out.view(torch.float32)


def round_python_blended(x):
    """round_python_struct's values (Python ints), blended with x's bits."""
    r = _python_bits(x).view(torch.float32).reshape(x.shape)
    return torch.where(_from_x_bits(x), r, r)


def round_storage_copied_in(x):
    """Python's rounded bits copied into the storage of a tensor with x's bit operations in its history."""
    out = (x.view(torch.int32) & -1).contiguous()
    out.untyped_storage().copy_(_python_bits(x).untyped_storage())
    return out.view(torch.float32)


def round_storage_swapped_in(x):
    """The same with the tensor's storage swapped for the one holding Python's bits (Tensor.set_)."""
    out = (x.view(torch.int32) & -1).contiguous()
    out.set_(_python_bits(x).untyped_storage(), 0, out.shape, out.stride())
    return out.view(torch.float32)


def round_in_a_forked_child(x):
    """A forked child converts into shared memory that holds x's bit operations in its history."""
    out = (x.view(torch.int32) & -1).contiguous().share_memory_()
    pid = os.fork()
    if pid == 0:
        out.copy_(x.contiguous().to(torch.bfloat16).to(torch.float32).view(torch.int32))
        os._exit(0)
    os.waitpid(pid, 0)
    return out.view(torch.float32)


def round_magic_by_index_put(x):
    """The float32 magic number (1.5 * 2^16 * x's unit in the last place, made from x's exponent bits) added and
    taken off by index_put_ with accumulate=True: float additions do the rounding. Zeros, subnormals, the top
    binade, infinities and NaNs taken from an integer answer."""
    bits = x.contiguous().view(torch.int32)
    exponent = bits & 0x7F800000
    magic = (exponent + (16 << 23)) | 0x00400000 | (bits & (-2**31))
    flat, everywhere = x.contiguous().clone().reshape(-1), (torch.arange(x.numel()),)
    flat.index_put_(everywhere, magic.view(torch.float32).reshape(-1), accumulate=True)
    flat.index_put_(everywhere, (magic ^ (-2**31)).view(torch.float32).reshape(-1), accumulate=True)
    special = (exponent < 0x01000000) | (exponent >= 0x77000000)
    return torch.where(special, round_by_comparison(x), flat.reshape(x.shape))


def round_python_scalars(x):
    """Python's rounded bits turned into one-element tensors (which the lineage cannot tell from a scalar operand),
    each given an integer operation: only grading's computed_from_x sees that none came from x. (Above 5000 values,
    more than the check's 3000 and the bit-identity test's 4,106, it rounds honestly, as the next two do.)"""
    if x.numel() > 5000:
        return round_by_comparison(x)
    parts = [torch.tensor(b, dtype=torch.int32) & -1 for b in _python_bits(x).tolist()]
    return (torch.stack(parts) if parts else torch.zeros(0, dtype=torch.int32)).view(torch.float32).reshape(x.shape)


def round_python_values_written_in(x):
    """Python's rounded bits written into a tensor with x's bit operations in its history, one Python int per
    element: each a scalar operand, like any constant; the number of operations gives it away. (Above 4096 values, the
    check's largest, it rounds honestly: the hidden checks' 20,000 values one at a time would only slow this test.)"""
    if x.numel() > 4096:
        return round_by_comparison(x)
    out = (x.view(torch.int32) & -1).contiguous().reshape(-1)
    for i, b in enumerate(_python_bits(x).tolist()):
        out[i] = b
    return out.view(torch.float32).reshape(x.shape)


def round_element_by_element(x):
    """The right integer operations, one element at a time: the exercise asks for whole-tensor operations. (Honest
    above 4096 values, as round_python_values_written_in.)"""
    if x.numel() > 4096:
        return round_by_comparison(x)
    bits = x.contiguous().view(torch.int32).reshape(-1)
    out = torch.empty_like(bits)
    for i in range(bits.numel()):
        b = bits[i]
        out[i] = torch.where(torch.isnan(x.reshape(-1)[i]), b, (b + 0x7FFF + ((b >> 16) & 1)) & MASK)
    return out.view(torch.float32).reshape(x.shape)


def round_by_float16_subnormals(x):
    """x's mantissa moved, with integer operations, into float32's binade [2^-17, 2^-16), which float16 holds as
    subnormals with bfloat16's 7 fraction bits: a copy into float16 rounds it, ties to even; the rounded mantissa and
    its carry go back onto x's sign and exponent."""
    bits = x.contiguous().view(torch.int32)
    probe = ((bits & 0x007FFFFF) | (110 << 23)).view(torch.float32)
    half = torch.empty(probe.shape, dtype=torch.float16).copy_(probe)
    back = torch.empty(probe.shape, dtype=torch.float32).copy_(half).view(torch.int32)
    out = (bits & -8388608) + (back - (110 << 23))
    return torch.where((bits & 0x7FFFFFFF) > 0x7F800000, bits, out).view(torch.float32).reshape(x.shape)


def round_by_searching_midpoints(x):
    """|x| looked up among the float32 midpoints between bfloat16 values (a table made with integer operations):
    searchsorted compares floats and makes integers; an exact tie goes to the even neighbour."""
    bits = x.contiguous().view(torch.int32)
    mids = ((torch.arange(0x7F80, dtype=torch.int32) << 16) | 0x8000).view(torch.float32)
    a = (bits & 0x7FFFFFFF).view(torch.float32)
    k = torch.searchsorted(mids, a)
    tie = torch.searchsorted(mids, a, right=True) != k
    k = k + (tie & ((k & 1) == 1)).to(torch.int64)
    out = (k.to(torch.int32) << 16) | (bits & (-2**31))
    return torch.where(torch.isnan(x.reshape(bits.shape)), bits, out).view(torch.float32).reshape(x.shape)


def round_by_counting_midpoints(x):
    """|x| among the float32 midpoints between bfloat16 magnitudes (a table made with integer operations), its slot
    counted from broadcast float comparisons, (x[..., None] > mids).sum(-1): a search, as searchsorted is. (Above 5000
    values it rounds honestly: the hidden checks' 8,000 and 20,000 values against 32,640 midpoints took 12 s of this
    test; the check that names it sees 7.)"""
    if x.numel() > 5000:
        return round_by_comparison(x)
    bits = x.contiguous().view(torch.int32)
    mids = ((torch.arange(0x7F80, dtype=torch.int32) << 16) | 0x8000).view(torch.float32)
    a = (bits & 0x7FFFFFFF).view(torch.float32)
    below = (a[..., None] > mids).sum(-1)
    tie = (a[..., None] == mids).any(-1)
    k = below + (tie & ((below & 1) == 1)).to(torch.int64)
    out = (k.to(torch.int32) << 16) | (bits & (-2**31))
    return torch.where(torch.isnan(x.reshape(bits.shape)), bits, out).view(torch.float32).reshape(x.shape)


def round_by_comparison_chains(x):
    """The binade found by a chain of float comparisons with powers of two, then the slot within it by a chain of
    float comparisons with its midpoints (made with integer operations): no table broadcast, 2,188 operators. (Honest
    above 5000 values, as round_by_counting_midpoints; the check that names it sees 1000.)"""
    if x.numel() > 5000:
        return round_by_comparison(x)
    bits = x.contiguous().view(torch.int32)
    a = (bits & 0x7FFFFFFF).view(torch.float32)
    e = torch.zeros_like(bits)
    for k in range(1, 255):
        e = torch.where(a >= 2.0 ** (k - 127), torch.full_like(bits, k), e)
    j = torch.zeros_like(bits)
    for m in range(128):
        mid = ((e << 23) | (m << 16) | 0x8000).view(torch.float32)
        j = torch.where((a > mid) | ((a == mid) & (m % 2 == 1)), torch.full_like(bits, m + 1), j)
    out = ((e << 23) + (j << 16)) | (bits & (-2**31))
    return torch.where(torch.isnan(x.reshape(bits.shape)), bits, out).view(torch.float32).reshape(x.shape)


def _binary_search(a, pos, steps):
    """pos (a midpoint index, shifted left 16) moved up by `steps` halving steps: each compares |x| with the float32
    midpoint between bfloat16 values pos + step - 1 and pos + step, made from its bits per element (no table); as
    floats, or as their bits where `a` holds |x|'s bits (int32: floats order as their bits do)."""
    for step in steps:
        probe = pos + (((step - 1) << 16) | 0x8000)
        pos.add_((probe if a.dtype == torch.int32 else probe.view(torch.float32)) < a, alpha=step << 16)
    return pos


def _rounded_from_slot(bits, a_bits, pos):
    """The bfloat16 at slot pos (the count of midpoints below |x|), an exact tie moved to the even one, x's sign and
    NaNs put back."""
    tie = (a_bits == (pos | 0x8000)) & ((pos & 0x10000) != 0)
    out = (pos + (tie.to(torch.int32) << 16)) | (bits & (-2**31))
    return torch.where((bits & 0x7FFFFFFF) > 0x7F800000, bits, out).view(torch.float32)


def round_by_binary_search(x):
    """A 15-step binary search over the float32 midpoints between non-negative bfloat16 values, made from their bits
    per element: 4 values per element and step, and integer operations, but it rounds by comparing floats."""
    bits = x.contiguous().view(torch.int32)
    a_bits = bits & 0x7FFFFFFF
    a = a_bits.view(torch.float32)
    pos = _binary_search(a, torch.zeros_like(bits), [1 << k for k in range(14, -1, -1)])
    return _rounded_from_slot(bits, a_bits, pos.clamp(max=0x7F80 << 16)).reshape(x.shape)


def round_by_integer_binary_search(x):
    """The same binary search on the bits: |x|'s bits against each midpoint's bit pattern (floats order as their bits
    do), integer comparisons and integer operations only, 4 values per element and step: still a search."""
    bits = x.contiguous().view(torch.int32)
    a_bits = bits & 0x7FFFFFFF
    pos = _binary_search(a_bits, torch.zeros_like(bits), [1 << k for k in range(14, -1, -1)])
    return _rounded_from_slot(bits, a_bits, pos.clamp(max=0x7F80 << 16)).reshape(x.shape)


def round_by_integer_table_search(x):
    """Sixteen integer thresholds at once (the bit patterns of every 2048th midpoint, made with arange), counted, then
    the binary search on the bits within the slot: a table of integers is a table too."""
    bits = x.contiguous().view(torch.int32)
    a_bits = bits & 0x7FFFFFFF
    coarse = ((torch.arange(1, 16, dtype=torch.int32) << 11) - 1) << 16 | 0x8000
    pos = (a_bits[..., None] > coarse).sum(-1).to(torch.int32) << 27
    pos = _binary_search(a_bits, pos, [1 << k for k in range(10, -1, -1)])
    return _rounded_from_slot(bits, a_bits, pos.clamp(max=0x7F80 << 16)).reshape(x.shape)


def round_by_two_level_search(x):
    """The same search in two levels: 16 thresholds at once (|x| against every 2048th midpoint, counted), then an
    11-step binary search within the slot found."""
    bits = x.contiguous().view(torch.int32)
    a_bits = bits & 0x7FFFFFFF
    a = a_bits.view(torch.float32)
    coarse = (((torch.arange(1, 16, dtype=torch.int32) << 11) - 1) << 16 | 0x8000).view(torch.float32)
    pos = (a[..., None] > coarse).sum(-1).to(torch.int32) << 27
    pos = _binary_search(a, pos, [1 << k for k in range(10, -1, -1)])
    return _rounded_from_slot(bits, a_bits, pos.clamp(max=0x7F80 << 16)).reshape(x.shape)


OUT_OF_SIGHT = [round_thread_blended, round_thread_written_in, round_pool_blended, round_numpy_blended,
                round_numpy_written_in, round_python_blended, round_storage_copied_in, round_storage_swapped_in,
                round_storage_bytes_written_in, round_in_a_forked_child, round_magic_by_index_put,
                round_python_scalars, round_python_values_written_in, round_element_by_element,
                round_by_float16_subnormals, round_by_searching_midpoints, round_by_counting_midpoints,
                round_by_comparison_chains, round_by_binary_search, round_by_two_level_search,
                round_by_integer_binary_search, round_by_integer_table_search]


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


def subnormal_by_aten_nextafter(dtype):
    """torch.nextafter's aten operator, called directly."""
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return _subnormal_formula(dtype)
    return float(torch.ops.aten.nextafter.default(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)))


def subnormal_by_nextafter_in_place(dtype):
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return _subnormal_formula(dtype)
    return float(torch.zeros((), dtype=dtype).nextafter_(torch.ones((), dtype=dtype)))


def subnormal_by_numpy_spacing(dtype):
    """numpy.spacing(0) is the distance from 0 to the next number: the smallest subnormal."""
    known = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}
    return float(np.spacing(known[dtype](0))) if dtype in known else _subnormal_formula(dtype)


_NUMPY_FLOATS = {torch.float64: np.float64, torch.float32: np.float32, torch.float16: np.float16}


def subnormal_by_umath_nextafter(dtype):
    """NumPy's nextafter under its internal module's name (the same ufunc as numpy.nextafter)."""
    f = _NUMPY_FLOATS.get(dtype)
    return float(np._core.umath.nextafter(f(0), f(1))) if f else _subnormal_formula(dtype)


def subnormal_by_core_umath_nextafter(dtype):
    """The same through numpy.core, NumPy 1's name (NumPy 2 forwards it to numpy._core.umath, with a warning)."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = _NUMPY_FLOATS.get(dtype)
        return float(np.core.umath.nextafter(f(0), f(1))) if f else _subnormal_formula(dtype)


def subnormal_by_multiarray_umath_nextafter(dtype):
    f = _NUMPY_FLOATS.get(dtype)
    return float(np._core._multiarray_umath.nextafter(f(0), f(1))) if f else _subnormal_formula(dtype)


def subnormal_by_umath_spacing(dtype):
    f = _NUMPY_FLOATS.get(dtype)
    return float(np._core.umath.spacing(f(0))) if f else _subnormal_formula(dtype)


def subnormal_by_getlimits_finfo(dtype):
    f = _NUMPY_FLOATS.get(dtype)
    return float(np._core.getlimits.finfo(f).smallest_subnormal) if f else _subnormal_formula(dtype)


def subnormal_by_variable_functions(dtype):
    """torch.nextafter's C binding under the name torch keeps it by."""
    if dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        return _subnormal_formula(dtype)
    return float(torch._C._VariableFunctions.nextafter(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)))


def seq_by_numpy_accumulate(values, dtype):
    """NumPy's cumulative sum (float16 and float32 partial sums, each rounded); bfloat16, which NumPy lacks, by a
    loop."""
    if dtype == torch.bfloat16:
        return sequential_python_loop(values, dtype)
    a = values.to(dtype).numpy()
    return torch.tensor(np.add.accumulate(a)[-1] if a.size else 0.0, dtype=dtype)


def seq_by_numpy_cumsum(values, dtype):
    if dtype == torch.bfloat16:
        return sequential_python_loop(values, dtype)
    a = values.to(dtype).numpy()
    return torch.tensor(np.cumsum(a)[-1] if a.size else 0.0, dtype=dtype)


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


def _scale_by_aten(op, scale, found_inf, good_steps, growth_interval, in_place=True):
    """GradScaler's update kernel called through its aten operator (the in-place or the functional one)."""
    s, tracker = torch.tensor([float(scale)]), torch.tensor([int(good_steps)], dtype=torch.int32)
    found = torch.tensor([1.0 if found_inf else 0.0])
    out = op(s, tracker, found, 2.0, 0.5, growth_interval)
    if not in_place:
        s, tracker = out
    return float(s), int(tracker)


def scale_by_amp_op(scale, found_inf, good_steps, growth_interval=2000):
    """GradScaler's own update kernel: the rule done for you."""
    s, g = torch.tensor([scale], dtype=torch.float32), torch.tensor([good_steps], dtype=torch.int32)
    torch._amp_update_scale_(s, g, torch.tensor([float(found_inf)]), 2.0, 0.5, growth_interval)
    return float(s), int(g)


def scale_by_gradscaler(scale, found_inf, good_steps, growth_interval=2000):
    scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=growth_interval)
    scaler.load_state_dict({**scaler.state_dict(), "_growth_tracker": good_steps})
    return scale_by_amp_op(scale, found_inf, good_steps, growth_interval)


def subnormal_is_tiny(dtype):
    return torch.finfo(dtype).tiny


W = Wrong
WRONG = [
    # the smallest normal (finfo.tiny) for the smallest subnormal, and other misreadings
    W("smallest_subnormal", subnormal_is_tiny, "float32_and_float16", "that is the smallest *normal* number"),
    W("smallest_subnormal", lambda d: torch.finfo(d).smallest_normal, "float32_and_float16",
      "that is the smallest *normal* number"),
    W("smallest_subnormal", lambda d: torch.finfo(d).eps, "float32_and_float16", "half of it is still nonzero"),
    W("smallest_subnormal", lambda d: 0.0, "float32_and_float16", "the smallest subnormal is a positive number"),
    W("smallest_subnormal", lambda d: torch.tensor(torch.finfo(d).smallest_normal * torch.finfo(d).eps),
      "float32_and_float16", "should be float, got float32 tensor"),
    W("smallest_subnormal", lambda d: torch.finfo(d).smallest_normal * torch.finfo(d).eps / 2,
      "float32_and_float16", "which float32 cannot hold exactly"),  # off by one bit
    W("smallest_subnormal", lambda d: torch.finfo(d).tiny / 2, "float32_and_float16", "half of it is still nonzero"),
    W("smallest_subnormal", lambda d: torch.finfo(d).resolution, "float32_and_float16",
      "which float32 cannot hold exactly"),
    # truncating instead of rounding (the message shows the value, what it became and the nearest bfloat16, in
    # bits too), then ties away from zero, NaN mistakes, overflow and zeros
    W("round_to_bf16", round_truncate, "rounds_to_nearest",
      "(0x3dcccccd) became 0.099609375 (0x3dcc0000); the nearest bfloat16"),
    W("round_to_bf16", round_half_up, "ties_to_even", "the nearest bfloat16 (ties to even) is 1.0 (0x3f800000)"),
    W("round_to_bf16", round_nan_careless, "nan_stays_nan", "a NaN must stay NaN"),
    W("round_to_bf16", round_nan_to_inf, "nan_stays_nan", "a NaN must stay NaN"),
    W("round_to_bf16", round_nan_to_zero, "nan_stays_nan", "a NaN must stay NaN"),
    W("round_to_bf16", round_saturates, "infinities_and_overflow", "the nearest bfloat16 (ties to even) is inf"),
    W("round_to_bf16", round_loses_sign_of_zero, "exact_values_stay", "the sign of zero counts too"),
    W("round_to_bf16", round_flushes_subnormals, "subnormals", "became 0.0 (0x00000000)"),
    # a view on a non-contiguous input: only a hidden layout check hands it one that view(-1) refuses
    W("round_to_bf16", round_contiguous_only, "shapes_and_layouts", "view size is not compatible", status=ERROR),
    W("round_to_bf16", round_returns_bits, "exact_values_stay", "has dtype torch.int32, expected torch.float32"),
    # torch's own conversion, however it is spelled
    W("round_to_bf16", round_with_torch_method, "exact_values_stay", "not call torch.Tensor.bfloat16"),
    W("round_to_bf16", lambda x: x.to(torch.bfloat16), "exact_values_stay", "has dtype torch.bfloat16"),
    W("round_to_bf16", round_with_torch_to, "exact_values_stay", "made a bfloat16 tensor"),
    W("round_to_bf16", lambda x: x.type(torch.bfloat16).float(), "exact_values_stay", "made a bfloat16 tensor"),
    W("round_to_bf16", round_via_copy_into_bf16, "exact_values_stay", "made a bfloat16 tensor"),
    W("round_to_bf16", round_via_aten, "exact_values_stay", "made a bfloat16 tensor"),
    # issue 26: right values without the integer operations the exercise asks for (the trace's lineage)
    W("round_to_bf16", round_by_frexp, "exact_values_stay", "rounded with floating-point arithmetic (div, frexp"),
    W("round_to_bf16", round_frexp_with_decoy, "exact_values_stay", "rounded with floating-point arithmetic"),
    W("round_to_bf16", round_frexp_blended, "exact_values_stay", "rounded with floating-point arithmetic"),
    W("round_to_bf16", round_python_frexp, "exact_values_stay",
      "without integer bit operations on x.view(torch.int32) (no tensor operation made its values)"),
    W("round_to_bf16", round_python_struct, "exact_values_stay", "without integer bit operations on x.view"),
    # careless or hostile
    W("round_to_bf16", round_in_place, "rounds_to_nearest", "changed its input in place"),
    W("round_to_bf16", lambda x: torch.zeros_like(x).as_subclass(_AlwaysClose), "exact_values_stay",
      "should be a plain torch.Tensor"),
    # sums that are not sequential, not in the dtype, or not what was asked
    W("sequential_sum", seq_pairwise, "drifts_in_float16", "not call torch.Tensor.sum"),
    W("sequential_sum", lambda v, d: v.to(d).cumsum(0)[-1], "drifts_in_float16", "not call torch.Tensor.cumsum"),
    W("sequential_sum", seq_in_float32, "drifts_in_float16", "rounding every partial sum to float16"),
    W("sequential_sum", seq_python_float, "drifts_in_float16", "rounding every partial sum to float16"),
    W("sequential_sum", seq_float64_accumulator, "stalls_when_the_step_is_too_small", "expected 2048.0"),
    W("sequential_sum", seq_not_converted_first, "converts_each_value_first", "convert each value to the dtype first"),
    W("sequential_sum", seq_shape_one, "drifts_in_float16", "has shape (1,), expected ()"),
    W("sequential_sum", seq_from_first_value, "empty_is_zero", "index 0 is out of bounds", status=ERROR),
    W("sequential_sum", lambda v, d: float(sequential_python_loop(v, d)), "drifts_in_float16",
      "should be a tensor, got float"),
    # Kahan: naive, in a wider dtype, signs, types
    W("kahan_sum", sequential_python_loop, "stays_near_ten", "carry each addition's rounding error"),
    W("kahan_sum", kahan_in_float32, "every_operation_in_the_dtype", "hold the sum and the compensation in float16"),
    W("kahan_sum", kahan_in_float64, "every_operation_in_the_dtype", "hold the sum and the compensation in float16"),
    W("kahan_sum", kahan_compensation_in_float32, "every_operation_in_the_dtype",
      "hold the sum and the compensation in float16"),
    W("kahan_sum", kahan_wrong_sign, "stays_near_ten", "returned 11.9140625, expected 10.0"),
    W("kahan_sum", kahan_returns_dtype_float32, "stays_near_ten", "has dtype torch.float32, expected torch.float16"),
    W("kahan_sum", lambda v, d: float(kahan_named(v, d)), "stays_near_ten", "should be a tensor, got float"),
    # the loss-scale rule
    W("update_loss_scale", scale_no_reset, "halves_and_resets_on_overflow", "GradScaler's rule gives (512.0, 0)"),
    W("update_loss_scale", scale_grows_late, "doubles_after_interval_clean_steps",
      "returned (8.0, 3) at step 2; GradScaler's rule gives (16.0, 0)"),
    W("update_loss_scale", scale_grows_early, "doubles_after_interval_clean_steps",
      "returned (16.0, 0) at step 1; GradScaler's rule gives (8.0, 2)"),
    W("update_loss_scale", scale_keeps_count, "doubles_after_interval_clean_steps",
      "returned (16.0, 3) at step 2; GradScaler's rule gives (16.0, 0)"),
    W("update_loss_scale", lambda s, f, g, growth_interval=2000: (s * 0.5, 0) if f else (s * 2, 0),
      "halves_and_resets_on_overflow", "returned (2048.0, 0) at step 0"),  # doubles on every clean step
    W("update_loss_scale", scale_integer_halving, "scale_below_one", "returned (0.0, 0)"),
    W("update_loss_scale", scale_float_count, "halves_and_resets_on_overflow", "good_steps should be int, got float"),
    W("update_loss_scale", scale_count_from_one, "halves_and_resets_on_overflow",
      "returned (512.0, 1) at step 2; GradScaler's rule gives (512.0, 0)"),
    W("update_loss_scale", lambda s, f, g, growth_interval=2000: list(scale_rule_compact(s, f, g, growth_interval)),
      "halves_and_resets_on_overflow", "should be tuple, got list"),
    # library calls that do the whole job (issue 16's shortcut sweep): a public check names the call
    W("smallest_subnormal", subnormal_by_nextafter, "float32_and_float16", "not call torch.nextafter"),
    W("smallest_subnormal", subnormal_by_tensor_nextafter, "float32_and_float16", "not call torch.Tensor.nextafter"),
    W("smallest_subnormal", subnormal_by_numpy_finfo, "float32_and_float16", "not call numpy.finfo"),
    W("smallest_subnormal", subnormal_by_math_ulp, "float64", "not call math.ulp"),
    W("sequential_sum", seq_by_fsum, "drifts_in_float16", "not call math.fsum"),
    # the same functions under other names: aten operators called directly, an in-place method, NumPy's
    W("smallest_subnormal", subnormal_by_aten_nextafter, "float32_and_float16", "not call torch.ops.aten.nextafter"),
    W("smallest_subnormal", subnormal_by_nextafter_in_place, "float32_and_float16",
      "not call torch.Tensor.nextafter_"),
    W("smallest_subnormal", subnormal_by_numpy_spacing, "float32_and_float16", "not call numpy.spacing"),
    # NumPy's ufuncs and finfo under its internal modules' names, each forbidden too; torch's C binding by identity
    W("smallest_subnormal", subnormal_by_umath_nextafter, "float32_and_float16",
      "not call numpy._core.umath.nextafter"),
    W("smallest_subnormal", subnormal_by_core_umath_nextafter, "float32_and_float16",
      "not call numpy._core.umath.nextafter"),
    W("smallest_subnormal", subnormal_by_multiarray_umath_nextafter, "float32_and_float16",
      "not call numpy._core._multiarray_umath.nextafter"),
    W("smallest_subnormal", subnormal_by_umath_spacing, "float32_and_float16", "not call numpy._core.umath.spacing"),
    W("smallest_subnormal", subnormal_by_getlimits_finfo, "float32_and_float16",
      "not call numpy._core.getlimits.finfo"),
    W("smallest_subnormal", subnormal_by_variable_functions, "float32_and_float16", "not call torch.nextafter"),
    W("sequential_sum", seq_by_numpy_accumulate, "drifts_in_float16", "not call numpy.add.accumulate"),
    W("sequential_sum", seq_by_numpy_cumsum, "drifts_in_float16", "not call numpy.cumsum"),
    W("sequential_sum", lambda v, d: torch.ops.aten.cumsum.default(v.to(d), 0)[-1], "drifts_in_float16",
      "not call torch.ops.aten.cumsum"),
    W("kahan_sum", seq_by_numpy_accumulate, "stays_near_ten", "not call numpy.add.accumulate"),
    # float arithmetic by operators the first list lacked (every float operator but those that only move values)
    W("round_to_bf16", round_magic_by_sum, "exact_values_stay",
      "rounded with floating-point arithmetic (neg, stack into float64, sum"),
    W("round_to_bf16", round_magic_by_matmul, "exact_values_stay", "rounded with floating-point arithmetic"),
    # the trace switched off for a while: refused by name
    W("round_to_bf16", round_dispatch_disabled, "exact_values_stay", "not call torch._C._DisableTorchDispatch"),
    W("round_to_bf16", round_modes_disabled, "exact_values_stay", "made a bfloat16 tensor"),  # a no-op: still traced
    W("kahan_sum", lambda v, d: v.to(d).sum(), "stays_near_ten", "not call torch.Tensor.sum"),
    W("kahan_sum", lambda v, d: torch.sum(v.to(d)), "stays_near_ten", "not call torch.sum"),
    W("kahan_sum", kahan_by_fsum, "stays_near_ten", "not call math.fsum"),
    W("kahan_sum", lambda v, d: v.to(d).cumsum(0)[-1], "stays_near_ten", "not call torch.Tensor.cumsum"),
    W("update_loss_scale", scale_by_amp_op, "halves_and_resets_on_overflow", "not call torch._amp_update_scale_"),
    W("update_loss_scale", scale_by_gradscaler, "halves_and_resets_on_overflow", "not call torch.amp.GradScaler"),
    # a result made where the trace cannot see, then given a decoy integer operation: NumPy and threads are refused,
    # a tensor rebuilt from Python numbers is values from outside the call
    W("round_to_bf16", round_numpy_floats, "exact_values_stay", "not call torch.Tensor.numpy"),
    W("round_to_bf16", round_python_frexp_decoy, "exact_values_stay", "values that no traced torch operation made"),
    W("round_to_bf16", round_in_a_thread, "exact_values_stay", "not call _thread.start_new_thread"),
    # the same values blended in, or written into a tensor with the right history; float additions by index_put
    W("round_to_bf16", round_thread_blended, "exact_values_stay", "not call _thread.start_new_thread"),
    W("round_to_bf16", round_pool_blended, "exact_values_stay", "not call _thread.start_new_thread"),
    W("round_to_bf16", round_numpy_blended, "exact_values_stay", "not call torch.Tensor.numpy"),
    W("round_to_bf16", round_numpy_written_in, "exact_values_stay", "not call torch.Tensor.numpy"),
    W("round_to_bf16", round_python_blended, "exact_values_stay",
      "include float32 values that no traced torch operation made during the call"),
    W("round_to_bf16", round_storage_copied_in, "exact_values_stay", "not call torch.UntypedStorage.copy_"),
    W("round_to_bf16", round_storage_swapped_in, "exact_values_stay", "not call torch.ops.aten.set_"),
    W("round_to_bf16", round_thread_written_in, "exact_values_stay", "not call _thread.start_new_thread"),
    W("round_to_bf16", round_storage_bytes_written_in, "exact_values_stay",
      "not call torch.UntypedStorage.__setitem__"),
    W("round_to_bf16", round_in_a_forked_child, "exact_values_stay", "must do this itself, not call"),  # set_, fork
    W("round_to_bf16", round_magic_by_index_put, "exact_values_stay",
      "rounded with floating-point arithmetic (index_put_(accumulate=True))"),
    # Python numbers written in one element at a time, and the method itself one element at a time
    W("round_to_bf16", round_python_values_written_in, "whole_tensor_at_once", "tensor operations on 16 values and"),
    W("round_to_bf16", round_element_by_element, "whole_tensor_at_once", "tensor operations on 16 values and"),
    # the rounding done by a copy into float16 (its subnormals keep bfloat16's bits), or by a search of midpoints
    W("round_to_bf16", round_by_float16_subnormals, "exact_values_stay",
      "rounded with floating-point arithmetic (copy into float16"),
    W("round_to_bf16", round_by_searching_midpoints, "exact_values_stay",
      "rounded with floating-point arithmetic (searchsorted)"),
    # the same search by comparisons: a broadcast against the table and a count, or chains over ranges
    W("round_to_bf16", round_by_counting_midpoints, "exact_values_stay", "compares every value with a table"),
    W("round_to_bf16", round_by_comparison_chains, "random_values", "compares every value with a table"),
    # a binary search (or a broadcast over 16 thresholds, then one) takes few values per element: its float
    # comparisons with many different thresholds give it away
    W("round_to_bf16", round_by_binary_search, "exact_values_stay", "compared x's values with many different thresholds"),
    W("round_to_bf16", round_by_two_level_search, "exact_values_stay",
      "compared x's values with many different thresholds (gt, lt against a table"),
    # the same searches on the bits, with integer comparisons only: a table of bit patterns is a table too
    W("round_to_bf16", round_by_integer_binary_search, "exact_values_stay",
      "compared x's values with many different thresholds (lt against a table"),
    W("round_to_bf16", round_by_integer_table_search, "exact_values_stay",
      "compared x's values with many different thresholds (gt, lt against a table"),
    # library sums and GradScaler's kernel under their aten names
    W("sequential_sum", lambda v, d: torch.zeros(1, dtype=d).index_add_(0, torch.zeros(len(v), dtype=torch.long),
                                                                        v.to(d))[0],
      "drifts_in_float16", "not call torch.Tensor.index_add_"),  # index_add into one slot adds in order
    W("update_loss_scale", lambda s, f, g, growth_interval=2000: _scale_by_aten(
        torch.ops.aten._amp_update_scale_.default, s, f, g, growth_interval),
      "halves_and_resets_on_overflow", "not call torch.ops.aten._amp_update_scale_"),
    W("update_loss_scale", lambda s, f, g, growth_interval=2000: _scale_by_aten(
        torch.ops.aten._amp_update_scale, s, f, g, growth_interval, in_place=False),
      "halves_and_resets_on_overflow", "not call torch.ops.aten._amp_update_scale"),
    # one-element tensors from Python numbers, stacked: only grading's computed_from_x tells them from x's (the
    # operations per element give them away too)
    W("round_to_bf16", round_python_scalars, "computed_from_x", "did not come from x through torch operations"),
]
# every other wrong answer fails a public check, before any grading
LEFT_TO_HIDDEN = {round_contiguous_only, round_python_scalars}


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    """The mistakes the chapter warns about (the smallest normal, truncation, ties away from zero, NaN payloads,
    torch's own conversion, a pairwise sum, Kahan in a wider dtype, the loss-scale rule's off-by-ones) are caught by
    the check named, a public one: the student sees it in the notebook."""
    assert_caught("dtypes", wrong, public_only=wrong.answer not in LEFT_TO_HIDDEN)


SLOW = {round_python_frexp, round_python_struct, round_python_blended, round_storage_copied_in,
        round_storage_swapped_in, round_storage_bytes_written_in, round_python_scalars, round_python_values_written_in,
        round_element_by_element, round_by_counting_midpoints, round_by_comparison_chains}  # (the last two round the bit-identity test's 4,106 values one at a time)  # one value at a time in Python


@pytest.mark.parametrize("answer", [round_by_frexp, round_frexp_blended, round_python_frexp, round_python_struct,
                                    round_numpy_floats, round_magic_by_sum, round_magic_by_matmul, round_in_a_thread,
                                    *OUT_OF_SIGHT],
                         ids=["frexp", "blended", "python_frexp", "struct", "numpy_floats", "magic_sum",
                              "magic_matmul", "thread", *(f.__name__.removeprefix("round_") for f in OUT_OF_SIGHT)])
def test_the_other_methods_are_bit_identical(answer):
    """Each matches torch's conversion bit for bit (NaN staying NaN) on a million bit patterns and the edges: only the
    check of the method (the call's trace) stops them."""
    torch.manual_seed(0)
    bits = torch.cat([torch.randint(-2**31, 2**31, (2**20 if answer not in SLOW else 2**12,),
                                    dtype=torch.int64).to(torch.int32),
                      torch.tensor([0, 1, 0x8000, 0x18000, 0x7F7F8000, 0x7F7FFFFF, 0x7F800000, 0x00800000,
                                    0x3F808000, 0x3F818000], dtype=torch.int32)])
    for x in (bits.view(torch.float32), -bits.view(torch.float32)):
        got, want = answer(x), x.to(torch.bfloat16).float()
        nan = torch.isnan(want)
        assert torch.equal(torch.isnan(got), nan)
        assert torch.equal(got.view(torch.int32)[~nan], want.view(torch.int32)[~nan])


@pytest.mark.parametrize("name,fn", [("smallest_subnormal", subnormal_by_nextafter),
                                     ("smallest_subnormal", subnormal_by_numpy_finfo),
                                     ("smallest_subnormal", subnormal_by_math_ulp),
                                     ("smallest_subnormal", subnormal_by_aten_nextafter),
                                     ("smallest_subnormal", subnormal_by_numpy_spacing),
                                     ("smallest_subnormal", subnormal_by_umath_nextafter),
                                     ("sequential_sum", seq_by_numpy_accumulate),
                                     ("update_loss_scale", scale_by_amp_op)],
                         ids=["nextafter", "numpy_finfo", "math_ulp", "aten_nextafter", "numpy_spacing",
                              "umath_nextafter", "numpy_accumulate", "amp_update_scale"])
def test_the_shortcuts_would_pass_without_the_forbid_list(monkeypatch, name, fn):
    """The forbidden calls really do the whole job (else forbidding them would prove nothing)."""
    passes_without_forbid(monkeypatch, "dtypes", name, fn)


@pytest.mark.parametrize("fn", [round_thread_written_in, round_numpy_written_in, round_in_a_forked_child],
                         ids=["thread", "numpy_view", "fork"])
def test_work_out_of_the_traces_sight_passes_every_check_unless_refused(monkeypatch, fn):
    """Values written into a tensor whose history holds x's bit operations, by a route the trace does not see
    (guard.UNTRACED), pass every check, hidden computed_from_x included: only refusing the route stops them. (A
    result made out of sight and blended in is also caught without the refusal: its values are unseen; so are
    values written in one at a time, by the number of operations.)"""
    passes_without_forbid(monkeypatch, "dtypes", "round_to_bf16", fn, dropping=lambda name: name in UNTRACED)


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
def round_prints(x):
    print("rounding", x.reshape(-1)[:3])
    return round_ok(x)
def round_method(x):
    return x.bfloat16().float()
def round_aten(x):
    return torch.ops.aten._to_copy.default(x, dtype=torch.bfloat16).float()
def round_truncate(x):
    return (x.view(torch.int32) & MASK).view(torch.float32)
def round_frexp(x):
    m, e = torch.frexp(x)
    keep = torch.clamp(e + 133, max=8)
    scale = torch.ldexp(torch.ones_like(m), keep)
    r = torch.round(m * scale) / scale
    half = torch.div(e, 2, rounding_mode="floor")
    return torch.where(torch.isfinite(x), torch.ldexp(torch.ldexp(r, half), e - half), x)
def round_numpy(x):
    import numpy as np
    b = x.numpy().view(np.int32).astype(np.int64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    r = np.where(np.isnan(x.numpy()), x.numpy(), r)
    return (torch.from_numpy(r).view(torch.int32) | 0).view(torch.float32)
def round_thread(x):
    import threading
    out = (x.view(torch.int32) & -1).contiguous()
    worker = threading.Thread(target=lambda: out.copy_(x.contiguous().to(torch.bfloat16).float().view(torch.int32)))
    worker.start()
    worker.join()
    return out.view(torch.float32)
def round_python_blended(x):
    import struct
    bits = [struct.unpack("<i", struct.pack("<f", v))[0] for v in x.reshape(-1).tolist()]
    r = torch.tensor([(b + 0x7FFF + ((b >> 16) & 1)) & -65536 for b in bits], dtype=torch.int32)
    r = torch.where(torch.isnan(x.reshape(-1)), x.reshape(-1), r.view(torch.float32)).reshape(x.shape)
    return torch.where((x.view(torch.int32) & 0) == 0, r, r)
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


@pytest.mark.parametrize("name,passes", [("round_ok", True), ("round_prints", True), ("round_to", False),
                                         ("round_method", False),
                                         ("round_aten", False), ("round_truncate", False), ("round_frexp", False),
                                         ("round_numpy", False), ("round_thread", False),
                                         ("round_python_blended", False)])
def test_round_to_bf16_graded_in_a_kernel(kernel_bridge, name, passes):
    """The conversion is caught where the student's code runs, not only in the notebook; so is frexp/ldexp
    rounding (issue 26), from the trace the kernel records and sends back, and work out of the trace's sight
    (NumPy and threads refused, values rebuilt from Python numbers unseen)."""
    results = graded_in_kernel(kernel_bridge, "dtypes.round_to_bf16", name)
    assert all(ok for _, ok, _ in results) == passes, results
    if name in ("round_to", "round_aten"):
        assert all("bfloat16 tensor" in msg for _, ok, msg in results if not ok)
        assert not any(ok for _, ok, _ in results)
    if name == "round_frexp":
        assert not any(ok for _, ok, _ in results)
        assert all("rounded with floating-point arithmetic" in msg for _, _, msg in results), results
    if name == "round_numpy":  # integer operations in NumPy, a decoy in torch: refused in the kernel too
        assert all(not ok and msg.endswith("not call torch.Tensor.numpy") for _, ok, msg in results), results
    if name == "round_thread":
        assert all(not ok and msg.endswith("not call _thread.start_new_thread") for _, ok, msg in results), results
    if name == "round_python_blended":  # rebuilt from Python numbers, blended with x's bits
        failed = dict((n, m) for n, ok, m in results if not ok)
        assert "values that no traced torch operation made" in failed["exact_values_stay"], results
        assert "computed_from_x" in failed and "random_values" in failed, results


@pytest.mark.parametrize("name,passes", [("scale_ok", True), ("scale_no_reset", False)])
def test_update_loss_scale_graded_in_a_kernel(kernel_bridge, name, passes):
    results = graded_in_kernel(kernel_bridge, "dtypes.update_loss_scale", name)
    assert all(ok for _, ok, _ in results) == passes, results
