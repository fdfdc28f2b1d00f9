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

from tests.answers import Wrong, assert_caught, assert_passes, failures, ids

W = Wrong

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
    """The shortcut: let torch count, on the meta device (shapes only, so any size runs). Refused."""
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


def transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    s, d = seq_len, d_model
    return n_layers * (8 * s * d * d + 4 * s * s * d + 4 * s * d * d_ff) + 2 * s * d * vocab_size


def transformer_loop(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    """Layer by layer, head by head, one matmul at a time."""
    mm = lambda m, k, n: 2 * m * k * n
    head_dim = d_model // n_heads
    total = 0
    for _ in range(n_layers):
        total += sum(mm(seq_len, d_model, d_model) for _ in "qkvo")
        for _ in range(n_heads):
            total += mm(seq_len, head_dim, seq_len) + mm(seq_len, seq_len, head_dim)
        total += mm(seq_len, d_model, d_ff) + mm(seq_len, d_ff, d_model)
    return total + mm(seq_len, d_model, vocab_size)


def transformer_per_token(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    """2 FLOPs per weight per token, plus attention's share, which grows with the context; times the tokens."""
    weights = n_layers * (4 * d_model**2 + 2 * d_model * d_ff) + d_model * vocab_size
    return seq_len * (2 * weights + 4 * n_layers * seq_len * d_model)


def roofline_branch(i, p, b):
    ridge = p / b
    return i * b if i < ridge else p


CORRECT = [
    ("matmul_flops", lambda m, k, n: 2 * m * k * n), ("matmul_flops", lambda m, k, n: m * n * (2 * k)),
    ("matmul_flops", lambda m, k, n: math.prod((m, k, n)) << 1),
    ("mlp_flops", mlp_loop), ("mlp_flops", mlp_formula),
    ("mlp_flops", mlp_per_token_params),
    ("mfu", lambda flops, seconds, peak: flops / seconds / peak),
    ("mfu", lambda flops, seconds, peak: (flops / peak) / seconds),
    ("mfu", lambda flops, seconds, peak: float(torch.tensor(flops, dtype=torch.float64) / seconds / peak)),
    ("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / SECONDS_PER_DAY),
    ("training_days", lambda n, d, g, p, m: (6 * n * d / (p * m) / g) / 3600 / 24),
    ("training_days", lambda n, d, g, p, m: 2 * 7 * (6 * n * d / (g * p * m)) / (2 * 7 * 86_400)),
    ("transformer_flops", transformer_closed_form), ("transformer_flops", transformer_loop),
    ("transformer_flops", transformer_per_token),
    ("arithmetic_intensity", lambda flops, nbytes: flops / nbytes),
    ("arithmetic_intensity", lambda flops, nbytes: float(flops) * (1.0 / float(nbytes))),
    ("roofline", lambda i, p, b: min(p, i * b)),
    ("roofline", lambda i, p, b: p if i >= p / b else i * b), ("roofline", roofline_branch),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, fn):
    assert_passes("flops", name, fn)


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


def _transformer(n_layers, d, n_heads, d_ff, vocab, s, *, two=2, attention=None, mlp=None, head=None, layers=None,
                 projections=4, embedding=0):
    """The right count with one part changed, for the named mistakes below."""
    attention = 2 * two * s * s * d if attention is None else attention
    mlp = 2 * two * s * d * d_ff if mlp is None else mlp
    head = two * s * d * vocab if head is None else head
    per_layer = projections * two * s * d * d + attention + mlp
    return (n_layers if layers is None else layers) * per_layer + head + embedding


# The named mistakes of the course's issue, each with the public check that catches it first and what its message
# says.
TRANSFORMER_WRONG = {
    "no factor 2 per multiply-add": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, two=1),
        "a_tiny_model", "a multiply-add is 2 FLOPs"),
    "attention scores and weighted sum forgotten": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, attention=0),
        "a_tiny_model", "weighted sum weights @ v are missing"),
    "the causal half, s^2 / 2": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, attention=2 * s * s * d),
        "a_tiny_model", "causal half"),
    "the causal half, s (s + 1) / 2": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, attention=2 * s * (s + 1) * d),
        "a_tiny_model", "causal half"),
    "unembedding forgotten": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, head=0),
        "a_tiny_model", "unembedding is missing"),
    "MLP of d_model x d_model": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, mlp=4 * s * d * d),
        "a_tiny_model", "d_model x d_model"),
    "MLP with d_ff = 4 d_model": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, mlp=16 * s * d * d),
        "a_tiny_model", "d_ff = 4 x d_model"),
    "per token, not per sequence": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s) // s,
        "a_tiny_model", "per token"),
    "one layer only": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, layers=1),
        "agrees_with_flop_counter", "one layer only"),
    "output projection forgotten": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, projections=3),
        "a_tiny_model", "four projections"),
    "the embedding counted as a matmul": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, embedding=2 * s * d * v),
        "a_tiny_model", "embedding counted as a matmul"),
    "forward and backward (6N)": W(
        "transformer_flops", lambda L, d, h, f, v, s: 3 * _transformer(L, d, h, f, v, s),
        "a_tiny_model", "training step"),
    "attention of one head only": W(
        "transformer_flops", lambda L, d, h, f, v, s: _transformer(L, d, h, f, v, s, attention=4 * s * s * (d // h)),
        "a_tiny_model", "one head only"),
    "a float": W(
        "transformer_flops", lambda L, d, h, f, v, s: float(_transformer(L, d, h, f, v, s)),
        "a_tiny_model", "Python int"),
}


def transformer_counted_on_meta(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    """The shortcut: let torch count (on the meta device, so any size runs)."""
    from grader.exercises.flops import _Decoder
    model = _Decoder(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, device="meta")
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, seq_len, dtype=torch.long, device="meta"))
    return counter.get_total_flops()


def transformer_counted_by_module_path(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    import torch.utils.flop_counter
    with torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
        pass
    return transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len) + counter.get_total_flops()


def transformer_through_floats(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    return int(float(transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len)))


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


def matmul_counted(m, k, n):
    with FlopCounterMode(display=False) as counter:
        torch.empty(m, k, device="meta") @ torch.empty(k, n, device="meta")
    return counter.get_total_flops()


def matmul_by_formula(m, k, n):
    import torch.utils.flop_counter
    return torch.utils.flop_counter.mm_flop([m, k], [k, n])


def matmul_through_floats(m, k, n):
    """A detour through floats: exact up to 2**53, wrong beyond."""
    return int(2.0 * m * k * n)


# whole-job shortcuts: torch's counter (any size runs on the meta device) and its formula; the first public check
# fails, naming the call, under the name the notebook imported it by and under its module path
SHORTCUTS = [
    W("matmul_flops", matmul_counted, "small_matmuls", "not call torch.utils.flop_counter.FlopCounterMode"),
    W("matmul_flops", matmul_by_formula, "small_matmuls", "not call torch.utils.flop_counter.mm_flop"),
    W("mlp_flops", mlp_counter_on_meta, "one_hidden_layer", "not call torch.utils.flop_counter.FlopCounterMode"),
    W("transformer_flops", transformer_counted_on_meta, "a_tiny_model",
      "must do this itself, not call torch.utils.flop_counter.FlopCounterMode"),
    W("transformer_flops", transformer_counted_by_module_path, "a_tiny_model",
      "must do this itself, not call torch.utils.flop_counter.FlopCounterMode"),
]

WRONG = [
    # matmul_flops: a multiply-add counted once; k forgotten; a float; a detour through floats (inexact
    # past 2**53); a NumPy integer; a lying int subclass
    W("matmul_flops", lambda m, k, n: m * k * n, "small_matmuls", "a multiply and an add"),
    W("matmul_flops", lambda m, k, n: 2 * m * n, "small_matmuls", "for each of the k terms"),
    W("matmul_flops", lambda m, k, n: float(2 * m * k * n), "small_matmuls", "should be a Python int, got the float"),
    W("matmul_flops", matmul_through_floats, "exact_beyond_float_precision", "returned 272591755604285685760"),
    W("matmul_flops", lambda m, k, n: np.array([2 * m * k * n])[0], "small_matmuls",
      "should be a Python int, got int64"),
    W("matmul_flops", lambda m, k, n: _LyingInt(0), "small_matmuls", "should be a Python int, got _LyingInt"),
    # mlp_flops: the first layer's input gradient (the course's issue; backward = 2 x forward gives the same
    # numbers), the batch forgotten, one layer only, floats, NumPy ints, 0-d tensors, total = forward, lying ints
    W("mlp_flops", mlp_first_input_grad, "one_hidden_layer", "it counts the first layer's input gradient"),
    W("mlp_flops", mlp_twice_forward, "one_hidden_layer", "it counts the first layer's input gradient"),
    W("mlp_flops", mlp_no_batch, "one_hidden_layer", "that is for one row of the batch"),
    W("mlp_flops", mlp_first_layer_only, "one_hidden_layer", "['forward'] is 120; FlopCounterMode counts 200"),
    W("mlp_flops", mlp_ends_only, "one_hidden_layer", "['forward'] is 48; FlopCounterMode counts 200"),
    W("mlp_flops", mlp_floats, "one_hidden_layer", "should be a Python int, got the float"),
    W("mlp_flops", mlp_numpy_ints, "one_hidden_layer", "should be a Python int, got int64"),
    W("mlp_flops", mlp_tensors, "one_hidden_layer", "should be a Python int, got int64 tensor"),
    W("mlp_flops", mlp_total_is_forward, "one_hidden_layer", "it should be forward + backward"),
    W("mlp_flops", lambda b, d: {k: _LyingInt(0) for k in ("forward", "backward", "total")}, "one_hidden_layer",
      "should be a Python int, got _LyingInt"),
    W("mlp_flops", lambda b, d: list(mlp_loop(b, d).values()), "one_hidden_layer", "should return a dict, got list"),
    # mfu: upside down (the source notes' formula, named in the course's issue), a percentage, seconds forgotten, a
    # NumPy scalar, a string, a liar
    W("mfu", lambda flops, seconds, peak: peak / (flops / seconds), "half_of_the_peak", "upside down"),
    W("mfu", lambda flops, seconds, peak: 100 * flops / seconds / peak, "half_of_the_peak", "a percentage"),
    W("mfu", lambda flops, seconds, peak: flops / peak, "half_of_the_peak",
      "returned 1; achieved FLOP/s over peak FLOP/s is 0.5"),
    W("mfu", lambda flops, seconds, peak: np.float64(flops / seconds / peak), "half_of_the_peak",
      "should be a Python float, got float64"),
    W("mfu", lambda flops, seconds, peak: f"{100 * flops / seconds / peak:.0f}%", "half_of_the_peak",
      "should be a Python float, got str"),
    W("mfu", lambda flops, seconds, peak: _LyingFloat(0.0), "half_of_the_peak",
      "should be a Python float, got _LyingFloat"),
    # training_days: 6ND over a week of seconds (the course's issue), 2ND, GPUs or MFU forgotten, MFU
    # multiplied, hours, seconds
    W("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / (7 * SECONDS_PER_DAY), "llama_scale",
      "that is the number of weeks"),
    W("training_days", lambda n, d, g, p, m: 2 * n * d / (g * p * m) / SECONDS_PER_DAY, "llama_scale",
      "that is 2ND, the forward pass only"),
    W("training_days", lambda n, d, g, p, m: 6 * n * d / (p * m) / SECONDS_PER_DAY, "llama_scale",
      "the GPUs share the work"),
    W("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p) / SECONDS_PER_DAY, "llama_scale",
      "divide by the MFU too"),
    W("training_days", lambda n, d, g, p, m: 6 * n * d * m / (g * p) / SECONDS_PER_DAY, "llama_scale",
      "returned 35.982; the run takes 143.93 days"),
    W("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m) / 3600, "llama_scale", "that is hours"),
    W("training_days", lambda n, d, g, p, m: 6 * n * d / (g * p * m), "llama_scale",
      "returned 1.2435e+07; the run takes 143.93 days"),
    # arithmetic_intensity: inverted, floor division, bits instead of bytes
    W("arithmetic_intensity", lambda flops, nbytes: nbytes / flops, "flops_per_byte", "upside down"),
    W("arithmetic_intensity", lambda flops, nbytes: flops // nbytes, "flops_per_byte",
      "returned 170; expected 170.667"),
    W("arithmetic_intensity", lambda flops, nbytes: flops / (8 * nbytes), "flops_per_byte",
      "yours is 0.125× the expected value"),
    # roofline: max instead of min, intensity / bandwidth, no roof, no slope, the ridge point wrong
    W("roofline", lambda i, p, b: max(p, i * b), "memory_bound_below_the_ridge", "take the smaller of the two limits"),
    W("roofline", lambda i, p, b: min(p, i / b), "compute_bound_above_the_ridge", "the work is compute-bound"),
    W("roofline", lambda i, p, b: i * b, "compute_bound_above_the_ridge", "nothing runs faster than the peak"),
    W("roofline", lambda i, p, b: p, "memory_bound_below_the_ridge", "memory delivers only intensity x bandwidth"),
    W("roofline", lambda i, p, b: p if i >= b / p else i * b, "memory_bound_below_the_ridge",
      "memory delivers only intensity x bandwidth"),
    W("roofline", lambda i, p, b: p if i >= p else i * b, "compute_bound_above_the_ridge",
      "nothing runs faster than the peak"),
    W("roofline", lambda i, p, b: p if i >= 2 * p / b else i * b, "the_ridge_point",
      "nothing runs faster than the peak"),
    W("roofline", lambda i, p, b: p if i >= 0.5 * p / b else i * b, "the_ridge_point",
      "memory delivers only intensity x bandwidth"),
    W("roofline", lambda i, p, b: min(p, i * b) if i > 0 else p, "the_ridge_point",
      "falls from 1e+12 to 1e+10 as the intensity grows"),
    # transformer_flops beyond the named mistakes (TRANSFORMER_WRONG): a detour through floats (inexact past 2**53,
    # a hidden check's sizes), all parameters x 2 per token (embeddings and all)
    W("transformer_flops", transformer_through_floats, "huge_shapes_exactly", "the count is 168,347,328,704,148,060"),
    W("transformer_flops", lambda L, d, h, f, v, s: 2 * s * (L * (4 * d * d + 2 * d * f + 9 * d + f + 4 * d)
                                                             + 2 * v * d + s * d + 2 * d),
      "a_tiny_model", "returned 3,752; by hand it is 2,688"),
]
FLOAT_DETOURS = {matmul_through_floats, transformer_through_floats}  # wrong only past 2**53: left to the hidden checks


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    """Every wrong answer but the detours through floats fails the public check named, before any grading."""
    assert_caught("flops", wrong, public_only=wrong.answer not in FLOAT_DETOURS)


# ---------------------------------------------------------------- transformer_flops: which check, which message

@pytest.mark.parametrize("mistake", list(TRANSFORMER_WRONG))
def test_transformer_mistakes_are_named(mistake):
    """Each named mistake fails the public checks first in the check listed, with a message that names it."""
    wrong = TRANSFORMER_WRONG[mistake]
    result = assert_caught("flops", wrong, public_only=True)
    assert next(c.name for c in result.checks if not c.passed) == wrong.check, failures(result)


@pytest.mark.parametrize("wrong", SHORTCUTS, ids=ids(SHORTCUTS))
def test_counting_shortcuts_are_refused_by_name(wrong):
    """torch's counter (FlopCounterMode, on the meta device any size runs) and its mm_flop formula do the whole job
    of the counts: a public check fails, naming the call; the counter works afterwards."""
    assert_caught("flops", wrong, public_only=True)
    with FlopCounterMode(display=False) as counter:
        torch.randn(2, 3) @ torch.randn(3, 4)
    assert counter.get_total_flops() == 48


def test_mlp_at_a_real_size_is_public():
    """The text says to count with arithmetic: a public check asks for a size no CPU runs (the literals agree with
    FlopCounterMode on the meta device)."""
    assert mlp_counter_on_meta(2048, [8192, 32768, 8192]) == {
        "forward": 2_199_023_255_552, "backward": 3_298_534_883_328, "total": 5_497_558_138_880}
    r = run_exercise("flops.mlp_flops", mlp_loop)
    assert any(c.name == "a_real_size_by_arithmetic" and c.passed for c in r.checks)


def test_transformer_floats_fail_a_hidden_check():
    r = run_exercise("flops.transformer_flops", transformer_through_floats, hidden=True)
    assert [c.name for c in r.checks if not c.passed] == ["huge_shapes_exactly"]


def test_transformer_oracles_agree():
    """The public check's literals (the tiny model, the 70B shape) are what FlopCounterMode counts on a real
    model, and the hidden closed form agrees with it."""
    from grader.exercises.flops import counted_transformer
    from grader.hidden.flops import transformer_parts
    assert counted_transformer(1, 6, 3, 7, 10, 4) == transformer_parts(1, 6, 3, 7, 10, 4)
    assert transformer_parts(1, 6, 3, 7, 10, 4) == {"total": 2688, "projections": 1152, "attention": 384, "mlp": 672,
                                                    "unembedding": 480}
    shape = (80, 8192, 64, 28672, 128256, 8192)
    assert counted_transformer(*shape, device="meta") == transformer_parts(*shape)
    assert transformer_parts(*shape)["total"] == 1_160_706_321_809_408


def test_transformer_stub_is_not_implemented():
    def transformer_flops(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
        raise NotImplementedError
    assert run_exercise("flops.transformer_flops", transformer_flops, hidden=True).status == "not_implemented"
