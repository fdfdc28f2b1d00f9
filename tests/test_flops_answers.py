"""Chapter 04 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from grader.results import ERROR
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


def _mlp_measured(batch, dims, counter):
    """Forward and backward FLOPs of the bias-free MLP at these sizes, counted on the meta device."""
    model = nn.Sequential(*[nn.Linear(a, b, bias=False, device="meta") for a, b in zip(dims, dims[1:])])
    with counter() as fwd:
        out = model(torch.empty(batch, dims[0], device="meta"))
    with counter() as bwd:
        out.sum().backward()
    return fwd.flops, bwd.flops


def mlp_counted_small_and_scaled(batch, dims):
    """Its own counter on the real widths at batch 1, scaled by the batch (the count is linear in it): exact at any
    batch, and a model run."""
    forward, backward = _mlp_measured(1, dims, _MatmulCounter)
    return {"forward": forward * batch, "backward": backward * batch, "total": (forward + backward) * batch}


def mlp_from_a_small_run(batch, dims):
    """A model run on the meta device at batch 1 with widths of 1, no mode at all, then the formula: what a student
    who measures a small model and fits the count to it runs."""
    nn.Linear(1, 1, bias=False, device="meta")(torch.empty(1, 1, device="meta"))
    return mlp_formula(batch, dims)


def mlp_per_token_params(batch, dims):
    params = sum(a * b for a, b in zip(dims, dims[1:]))
    first = dims[0] * dims[1]
    return {"forward": 2 * batch * params, "backward": 4 * batch * params - 2 * batch * first,
            "total": 6 * batch * params - 2 * batch * first}


def transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, *, n_kv_heads=None, swiglu=False,
                            count_masked=True, logits=True):
    s, d, kv = seq_len, d_model, (n_kv_heads or n_heads) * (d_model // n_heads)
    pairs = s * s if count_masked else s * (s + 1) // 2
    per_layer = 4 * s * d * d + 4 * s * d * kv + 4 * pairs * d + (6 if swiglu else 4) * s * d * d_ff
    return n_layers * per_layer + (2 * s * d * vocab_size if logits else 0)


def transformer_loop(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, *, n_kv_heads=None, swiglu=False,
                     count_masked=True, logits=True):
    """Layer by layer, head by head, one matmul at a time; the causal half as a sum over the queries' rows."""
    mm = lambda m, k, n: 2 * m * k * n
    head_dim = d_model // n_heads
    kv_heads = n_kv_heads if n_kv_heads is not None else n_heads
    kept = math.comb(seq_len + 1, 2)   # keys seen by query 0, 1, ..., seq_len - 1: 1 + 2 + ... + seq_len
    total = 0
    for _ in range(n_layers):
        total += mm(seq_len, d_model, d_model) * 2                     # Q and O
        total += mm(seq_len, d_model, kv_heads * head_dim) * 2         # K and V
        for _ in range(n_heads):
            if count_masked:
                total += mm(seq_len, head_dim, seq_len) + mm(seq_len, seq_len, head_dim)
            else:
                total += 2 * mm(1, head_dim, 1) * kept
        total += mm(seq_len, d_model, d_ff) * (2 if swiglu else 1) + mm(seq_len, d_ff, d_model)
    return total + (mm(seq_len, d_model, vocab_size) if logits else 0)


def transformer_per_token(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options):
    """2 FLOPs per weight per token, plus attention's share, which grows with the context; times the tokens."""
    kv = (options.get("n_kv_heads") or n_heads) * (d_model // n_heads)
    mlp_mats = 3 if options.get("swiglu") else 2
    weights = n_layers * (2 * d_model**2 + 2 * d_model * kv + mlp_mats * d_model * d_ff)
    weights += d_model * vocab_size if options.get("logits", True) else 0
    attention = 4 * n_layers * d_model * (seq_len * seq_len if options.get("count_masked", True)
                                          else seq_len * (seq_len + 1) // 2)
    return seq_len * 2 * weights + attention


def adamw_by_steps(num_params, weight_decay=True):
    decay = 1 if weight_decay else 0               # p *= 1 - lr * wd
    first = 3                                       # m += (1 - beta1) * (g - m)
    second = 4                                      # v = beta2 * v + (1 - beta2) * g * g
    update = 6                                      # sqrt(v), / sqrt(1 - beta2^t), + eps, m / that, * step size, p +
    return (decay + first + second + update) * num_params


def decode_by_bytes(batch, d_model, bytes_per_element):
    weights, activations = d_model * d_model, 2 * batch * d_model     # read once; input read, output written
    return 2 * batch * d_model * d_model / ((weights + activations) * bytes_per_element)


def ridge_by_formula(d_model, bytes_per_element, peak, bandwidth):
    ridge = peak / bandwidth
    if d_model / bytes_per_element <= ridge:
        return None
    return max(1, math.ceil(ridge * bytes_per_element * d_model / (2 * (d_model - ridge * bytes_per_element))))


def ridge_by_search(d_model, bytes_per_element, peak, bandwidth):
    """Double the batch until it reaches the ridge, then bisect: no formula to solve, exact rationals."""
    ridge = Fraction(peak) / Fraction(bandwidth)
    intensity = lambda b: Fraction(2 * b * d_model**2, bytes_per_element * (d_model**2 + 2 * b * d_model))
    if Fraction(d_model, bytes_per_element) <= ridge:
        return None
    high = 1
    while intensity(high) < ridge:
        high *= 2
    low = high // 2          # intensity(low) < ridge, or low == 0
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if intensity(mid) >= ridge else (mid, high)
    return high


def ridge_by_scan(d_model, bytes_per_element, peak, bandwidth):
    """Batch 1, 2, 3, ... until the intensity reaches the ridge: slow for a ridge far out, never wrong."""
    ridge = peak / bandwidth
    if d_model / bytes_per_element <= ridge:
        return None
    batch = 1
    while decode_by_bytes(batch, d_model, bytes_per_element) < ridge:
        batch += 1
    return batch


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
    ("adamw_step_flops", adamw_by_steps), ("adamw_step_flops", lambda n, weight_decay=True: (13 + weight_decay) * n),
    ("decode_intensity", decode_by_bytes),
    ("decode_intensity", lambda b, d, e: float(Fraction(2 * b * d, e * (d + 2 * b)))),
    ("ridge_batch", ridge_by_formula), ("ridge_batch", ridge_by_search), ("ridge_batch", ridge_by_scan),
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
                 projections=4, embedding=0, **options):
    """The right count with one part changed, for the named mistakes below (options are accepted and ignored: these
    mistakes are in the default convention, which the first checks ask for)."""
    attention = 2 * two * s * s * d if attention is None else attention
    mlp = 2 * two * s * d * d_ff if mlp is None else mlp
    head = two * s * d * vocab if head is None else head
    per_layer = projections * two * s * d * d + attention + mlp
    return (n_layers if layers is None else layers) * per_layer + head + embedding


# The named mistakes of the course's issue, each with the public check that catches it first and what its message
# says.
TRANSFORMER_WRONG = {
    "no factor 2 per multiply-add": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, two=1),
        "a_tiny_model", "a multiply-add is 2 FLOPs"),
    "attention scores and weighted sum forgotten": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, attention=0),
        "a_tiny_model", "weighted sum weights @ v are missing"),
    "the causal half, s^2 / 2": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, attention=2 * s * s * d),
        "a_tiny_model", "causal half"),
    "the causal half, s (s + 1) / 2": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s,
                                                                        attention=2 * s * (s + 1) * d),
        "a_tiny_model", "count_masked=False convention"),
    "unembedding forgotten": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, head=0),
        "a_tiny_model", "unembedding is missing"),
    "MLP of d_model x d_model": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, mlp=4 * s * d * d),
        "a_tiny_model", "d_model x d_model"),
    "MLP with d_ff = 4 d_model": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, mlp=16 * s * d * d),
        "a_tiny_model", "d_ff = 4 x d_model"),
    "per token, not per sequence": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s) // s,
        "a_tiny_model", "per token"),
    "one layer only": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, layers=1),
        "agrees_with_flop_counter", "one layer only"),
    "output projection forgotten": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, projections=3),
        "a_tiny_model", "four projections"),
    "the embedding counted as a matmul": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s, embedding=2 * s * d * v),
        "a_tiny_model", "embedding counted as a matmul"),
    "forward and backward (6N)": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: 3 * _transformer(L, d, h, f, v, s),
        "a_tiny_model", "training step"),
    "attention of one head only": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: _transformer(L, d, h, f, v, s,
                                                                        attention=4 * s * s * (d // h)),
        "a_tiny_model", "one head only"),
    "a float": W(
        "transformer_flops", lambda L, d, h, f, v, s, **o: float(_transformer(L, d, h, f, v, s)),
        "a_tiny_model", "Python int"),
}


# The conventions (issue 27): each option mishandled, right everywhere else.
def _attention(n_layers, d, s, pairs):
    return n_layers * 4 * pairs * d


def tf_kv_heads_ignored(L, d, h, f, v, s, *, n_kv_heads=None, **options):
    return transformer_closed_form(L, d, h, f, v, s, **options)


def tf_kv_heads_shrink_attention(L, d, h, f, v, s, **options):
    kv_heads = options.get("n_kv_heads") or h
    pairs = s * s if options.get("count_masked", True) else s * (s + 1) // 2
    return (transformer_closed_form(L, d, h, f, v, s, **options) - _attention(L, d, s, pairs)
            + _attention(L, kv_heads * (d // h), s, pairs))


def tf_kv_heads_shrink_q_and_o(L, d, h, f, v, s, **options):
    kv_width = (options.get("n_kv_heads") or h) * (d // h)
    return transformer_closed_form(L, d, h, f, v, s, **options) - L * 4 * s * d * d + L * 4 * s * d * kv_width


def tf_swiglu_two_matrices(L, d, h, f, v, s, *, swiglu=False, **options):
    return transformer_closed_form(L, d, h, f, v, s, **options)


def tf_count_masked_ignored(L, d, h, f, v, s, *, count_masked=True, **options):
    return transformer_closed_form(L, d, h, f, v, s, **options)


def tf_half_of_s_squared(L, d, h, f, v, s, **options):
    full = transformer_closed_form(L, d, h, f, v, s, **options)
    if options.get("count_masked", True):
        return full
    return full - _attention(L, d, s, s * (s + 1) // 2) + L * 2 * s * s * d   # s^2 / 2 pairs per head


def tf_diagonal_left_out(L, d, h, f, v, s, **options):
    full = transformer_closed_form(L, d, h, f, v, s, **options)
    if options.get("count_masked", True):
        return full
    return full - _attention(L, d, s, s * (s + 1) // 2) + _attention(L, d, s, s * (s - 1) // 2)


def tf_logits_ignored(L, d, h, f, v, s, *, logits=True, **options):
    return transformer_closed_form(L, d, h, f, v, s, **options)


def transformer_flops_first_signature(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len):
    """Today's convention only, in the exercise's first signature: no options accepted."""
    return transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len)


CONVENTION_WRONG = {
    "n_kv_heads ignored (K and V at full width)": W(
        "transformer_flops", tf_kv_heads_ignored, "conventions_by_hand", "n_kv_heads ignored"),
    "the attention matmuls shrunk with the KV heads": W(
        "transformer_flops", tf_kv_heads_shrink_attention, "conventions_by_hand", "shrunk with the K and V heads"),
    "Q and O shrunk with the KV heads": W(
        "transformer_flops", tf_kv_heads_shrink_q_and_o, "conventions_by_hand", "Q and O shrunk too"),
    "SwiGLU counted with two matrices": W(
        "transformer_flops", tf_swiglu_two_matrices, "conventions_by_hand", "has three matrices"),
    "count_masked ignored (the full scores)": W(
        "transformer_flops", tf_count_masked_ignored, "conventions_by_hand", "seq_len x seq_len scores counted"),
    "the kept half as s^2 / 2": W(
        "transformer_flops", tf_half_of_s_squared, "conventions_by_hand", "the mask keeps the diagonal too"),
    "the kept half without the diagonal": W(
        "transformer_flops", tf_diagonal_left_out, "conventions_by_hand", "the diagonal left out"),
    "logits=False ignored": W(
        "transformer_flops", tf_logits_ignored, "conventions_by_hand", "counted although logits=False"),
    "the first signature, no options": W(
        "transformer_flops", transformer_flops_first_signature, "conventions_by_hand", "unexpected keyword argument",
        status=ERROR),
}


def transformer_counted_on_meta(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options):
    """The shortcut: let torch count (on the meta device, so any size runs)."""
    from grader.exercises.flops import _Decoder
    model = _Decoder(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, device="meta", **options)
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, seq_len, dtype=torch.long, device="meta"))
    return counter.get_total_flops()


def transformer_counted_by_module_path(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options):
    import torch.utils.flop_counter
    with torch.utils.flop_counter.FlopCounterMode(display=False) as counter:
        pass
    return (transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options)
            + counter.get_total_flops())


def transformer_attention_by_sdpa_formula(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options):
    """Attention's matmuls from torch's SDPA formula, the rest by hand: a forbidden formula under another name."""
    from torch.utils.flop_counter import sdpa_flop_count
    shape = (1, n_heads, seq_len, d_model // n_heads)
    attention = n_layers * sdpa_flop_count(shape, shape, shape)
    rest = transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options)
    return rest - n_layers * 4 * seq_len * seq_len * d_model + attention


def matmul_by_conv_formula(m, k, n):
    """A matmul is a 1 x 1 convolution: torch's conv formula counts it (a forbidden formula under another name)."""
    from torch.utils.flop_counter import conv_flop_count
    return conv_flop_count([m, k, 1], [n, k, 1], [m, n, 1])


def transformer_through_floats(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options):
    return int(float(transformer_closed_form(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options)))


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


def matmul_by_unwrapped_formula(m, k, n):
    """mm_flop's raw formula, reached through the registry's functools.wraps attribute instead of its name."""
    from torch.utils.flop_counter import flop_registry
    return flop_registry[torch.ops.aten.mm].__wrapped__((m, k), (k, n))


def matmul_through_floats(m, k, n):
    """A detour through floats: exact up to 2**53, wrong beyond."""
    return int(2.0 * m * k * n)


def decode_counted(batch, d_model, bytes_per_element):
    """The shortcut: torch's counter on a real Linear (meta: any size that fits a tensor). Refused."""
    dtype = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}[bytes_per_element]
    layer = nn.Linear(d_model, d_model, bias=False, device="meta", dtype=dtype)
    x = torch.empty(batch, d_model, device="meta", dtype=dtype)
    with FlopCounterMode(display=False) as counter:
        out = layer(x)
    return counter.get_total_flops() / (layer.weight.nbytes + x.nbytes + out.nbytes)


def ridge_without_none(d_model, bytes_per_element, peak, bandwidth):
    """The formula, with None where the crossing comes out negative: a division by zero where d / bytes equals the
    ridge (approached, never reached)."""
    ridge = peak / bandwidth
    crossing = ridge * bytes_per_element * d_model / (2 * (d_model - ridge * bytes_per_element))
    return max(1, math.ceil(crossing)) if crossing > 0 else None


def ridge_scan_to_a_million(d_model, bytes_per_element, peak, bandwidth):
    """What a search from batch 1 that stops at 10**6 returns: the right batch up to a million, None beyond it
    (worked out here by the formula, in exact fractions, so the test does not run the million steps)."""
    ridge = Fraction(peak) / Fraction(bandwidth)
    e, d = bytes_per_element, d_model
    if Fraction(d, e) <= ridge:
        return None
    batch = max(1, math.ceil(ridge * e * d / (2 * (d - ridge * e))))
    return batch if batch <= 10**6 else None


# whole-job shortcuts: torch's counter (any size runs on the meta device) and its formula; the first public check
# fails, naming the call, under the name the notebook imported it by and under its module path
SHORTCUTS = [
    W("matmul_flops", matmul_counted, "small_matmuls", "not call torch.utils.flop_counter.FlopCounterMode"),
    W("matmul_flops", matmul_by_formula, "small_matmuls", "not call torch.utils.flop_counter.mm_flop"),
    W("matmul_flops", matmul_by_unwrapped_formula, "small_matmuls", "not call torch.utils.flop_counter.mm_flop"),
    W("mlp_flops", mlp_counter_on_meta, "one_hidden_layer", "not call torch.utils.flop_counter.FlopCounterMode"),
    W("transformer_flops", transformer_counted_on_meta, "a_tiny_model",
      "must do this itself, not call torch.utils.flop_counter.FlopCounterMode"),
    W("transformer_flops", transformer_counted_by_module_path, "a_tiny_model",
      "must do this itself, not call torch.utils.flop_counter.FlopCounterMode"),
    W("transformer_flops", transformer_attention_by_sdpa_formula, "a_tiny_model",
      "not call torch.utils.flop_counter.sdpa_flop_count"),
    W("matmul_flops", matmul_by_conv_formula, "small_matmuls", "not call torch.utils.flop_counter.conv_flop_count"),
    W("decode_intensity", decode_counted, "batch_one_is_near_one", "not call torch.utils.flop_counter.FlopCounterMode"),
    # a counter of one's own, run at a size that fits and scaled up (exact, since the count is linear in the batch):
    # a dispatch mode is refused in a count; a run with no mode at all is in the trace of the call at sizes no tensor
    # can hold
    W("mlp_flops", mlp_counted_small_and_scaled, "one_hidden_layer",
      "not call torch.utils._python_dispatch.TorchDispatchMode.__enter__"),
    W("mlp_flops", mlp_from_a_small_run, "shapes_no_tensor_can_hold", "ran tensor operations (mm"),
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
    W("transformer_flops", lambda L, d, h, f, v, s, **o: 2 * s * (L * (4 * d * d + 2 * d * f + 9 * d + f + 4 * d)
                                                                  + 2 * v * d + s * d + 2 * d),
      "a_tiny_model", "returned 3,752; by hand it is 2,688"),
    # adamw_step_flops: the textbook's per-element bias correction of m (15), the decay always or never counted, every
    # fused operation (lerp, addcmul, addcdiv) counted as one FLOP, a float, the forward pass's 2 per parameter
    W("adamw_step_flops", lambda n, weight_decay=True: (14 + weight_decay) * n, "a_thousand_parameters",
      "the bias correction of the first moment"),
    W("adamw_step_flops", lambda n, weight_decay=True: 14 * n, "a_thousand_parameters",
      "with weight_decay=False torch skips the decay"),
    W("adamw_step_flops", lambda n, weight_decay=True: 13 * n, "a_thousand_parameters",
      "one FLOP per parameter missing"),
    W("adamw_step_flops", lambda n, weight_decay=True: (7 + weight_decay) * n, "a_thousand_parameters",
      "returned 8,000 (8 per parameter); torch.optim.AdamW runs 14,000 (14 per parameter)"),
    W("adamw_step_flops", lambda n, weight_decay=True: float((13 + weight_decay) * n), "a_thousand_parameters",
      "should be a Python int, got the float"),
    W("adamw_step_flops", lambda n, weight_decay=False: (13 + weight_decay) * n, "a_thousand_parameters",
      "weight_decay defaults to True"),
    W("adamw_step_flops", lambda n, weight_decay=True: 2 * n, "a_thousand_parameters",
      "returned 2,000 (2 per parameter)"),
    # decode_intensity: the weights' bytes only, the activations' only, the output forgotten, upside down, one FLOP
    # per multiply-add, bits, floor division, a NumPy float
    W("decode_intensity", lambda B, d, e: 2 * B * d * d / (e * d * d), "batch_one_is_near_one",
      "the weights' bytes only"),
    W("decode_intensity", lambda B, d, e: 2 * B * d * d / (e * 2 * B * d), "batch_one_is_near_one",
      "the activations' bytes only"),
    W("decode_intensity", lambda B, d, e: 2 * B * d * d / (e * (d * d + B * d)), "batch_one_is_near_one",
      "the output forgotten"),
    W("decode_intensity", lambda B, d, e: e * (d * d + 2 * B * d) / (2 * B * d * d), "batch_one_is_near_one",
      "upside down"),
    W("decode_intensity", lambda B, d, e: B * d * d / (e * (d * d + 2 * B * d)), "batch_one_is_near_one",
      "yours is 0.5× the expected value"),
    W("decode_intensity", lambda B, d, e: 2 * B * d * d / (8 * e * (d * d + 2 * B * d)), "batch_one_is_near_one",
      "yours is 0.125× the expected value"),
    W("decode_intensity", lambda B, d, e: 2 * B * d * d // (e * (d * d + 2 * B * d)), "batch_one_is_near_one",
      "returned 0;"),
    W("decode_intensity", lambda B, d, e: np.float64(decode_by_bytes(B, d, e)), "batch_one_is_near_one",
      "should be a Python float, got float64"),
    # ridge_batch: floor instead of ceiling, a strict > at the ridge, no None (a negative batch, a division by zero),
    # the weights' bytes only (no d_model in it), a float, bits
    W("ridge_batch", lambda d, e, p, b: None if d / e <= p / b else
      max(1, math.floor(p / b * e * d / (2 * (d - p / b * e)))), "an_h100_in_bf16", "still below the ridge"),
    W("ridge_batch", lambda d, e, p, b: None if d / e <= p / b else
      math.floor(p / b * e * d / (2 * (d - p / b * e))) + 1, "exactly_at_the_ridge", "already reaches it"),
    W("ridge_batch", lambda d, e, p, b: math.ceil(p / b * e * d / (2 * (d - p / b * e))),
      "too_narrow_to_reach_the_ridge", "return None"),
    W("ridge_batch", ridge_without_none, "exactly_at_the_ridge", "division by zero", status=ERROR),
    # a search from batch 1 that gives up at a million says "never" where the crossing is later
    W("ridge_batch", ridge_scan_to_a_million, "a_crossing_past_a_million", "returned None; batch 2,785,637 reaches"),
    W("ridge_batch", lambda d, e, p, b: math.ceil(p / b * e / 2), "an_h100_in_bf16", "still below the ridge"),
    W("ridge_batch", lambda d, e, p, b: None if d / e <= p / b else
      float(ridge_by_formula(d, e, p, b)), "an_h100_in_bf16", "should be a Python int, got the float"),
    W("ridge_batch", lambda d, e, p, b: ridge_by_formula(d, 8 * e, p, b), "an_h100_in_bf16", "already reaches it"),
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
    assert [c.name for c in r.checks if not c.passed] == ["huge_shapes_exactly", "beyond_any_tensor_with_conventions"]


def test_transformer_oracles_agree():
    """The public check's literals (the tiny model, the 70B shape) are what FlopCounterMode counts on a real
    model, and the hidden closed form agrees with it."""
    from grader.exercises.flops import counted_transformer
    from grader.hidden.flops import transformer_parts
    assert counted_transformer(1, 6, 3, 7, 10, 4) == transformer_parts(1, 6, 3, 7, 10, 4)
    assert transformer_parts(1, 6, 3, 7, 10, 4) == {"total": 2688, "projections": 1152, "attention": 384, "mlp": 672,
                                                    "unembedding": 480, "kv": 576, "left_out": 0}
    shape = (80, 8192, 64, 28672, 128256, 8192)
    assert counted_transformer(*shape, device="meta") == transformer_parts(*shape)
    assert transformer_parts(*shape)["total"] == 1_160_706_321_809_408


def test_the_counted_oracle_is_counted_once_and_leaves_the_checks_draws_alone(monkeypatch):
    """counted_transformer counts each shape once per process (a worker grades every student at the same shapes),
    hands out copies, and leaves torch's generator where it was, counted or remembered: the draws after it, and so a
    student's grade, do not depend on who was graded before. Caught: a cache keyed without an option (fused and
    unfused would share counts), a shared dict a caller could change, a first count that moves the generator."""
    from grader.exercises.flops import counted_transformer
    monkeypatch.setattr(counted_transformer, "answers", {})
    torch.manual_seed(7)
    first = counted_transformer(1, 6, 3, 7, 10, 4)
    after_counting = torch.rand(3)
    torch.manual_seed(7)
    again = counted_transformer(1, 6, 3, 7, 10, 4)
    assert torch.equal(torch.rand(3), after_counting) and again == first and len(counted_transformer.answers) == 1
    again["total"] = 0
    assert counted_transformer(1, 6, 3, 7, 10, 4)["total"] == 2688
    fused = counted_transformer(1, 6, 3, 7, 10, 4, fused=True)
    gqa = counted_transformer(2, 8, 4, 7, 10, 4, n_kv_heads=2)
    assert len(counted_transformer.answers) == 3 and gqa["kv"] < counted_transformer(2, 8, 4, 7, 10, 4)["kv"]
    assert fused["total"] == first["total"] and len(counted_transformer.answers) == 4


def test_transformer_stub_is_not_implemented():
    def transformer_flops(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, *, n_kv_heads=None, swiglu=False,
                          count_masked=True, logits=True):
        raise NotImplementedError
    assert run_exercise("flops.transformer_flops", transformer_flops, hidden=True).status == "not_implemented"


@pytest.mark.parametrize("mistake", list(CONVENTION_WRONG))
def test_convention_mistakes_are_named(mistake):
    """Each option mishandled fails conventions_by_hand first (every earlier check asks for the defaults), with a
    message that names the mistake."""
    wrong = CONVENTION_WRONG[mistake]
    result = assert_caught("flops", wrong, public_only=True)
    assert next(c.name for c in result.checks if not c.passed) == wrong.check, failures(result)


def test_convention_oracles_agree():
    """The conventions check's literals are what FlopCounterMode counts on the real tiny model built with each
    option, and the hidden closed form agrees; so do the literals at sizes no tensor can hold."""
    from grader.exercises.flops import _TINY_BY_OPTION, counted_transformer
    from grader.hidden.flops import transformer_parts
    for options, want in _TINY_BY_OPTION:
        assert counted_transformer(1, 6, 3, 7, 10, 4, **options) == want == transformer_parts(1, 6, 3, 7, 10, 4,
                                                                                               **options)
    for fused in (False, True):
        shape, options = (2, 12, 6, 20, 17, 9), {"n_kv_heads": 2, "swiglu": True, "count_masked": False}
        assert counted_transformer(*shape, fused=fused, **options) == transformer_parts(*shape, **options)
    assert transformer_parts(1, 2**32, 16, 3, 5, 2)["total"] == 295_147_905_437_050_863_616
    assert transformer_parts(2, 64, 4, 100, 1000, 2**33)["total"] == 37_778_933_965_223_394_017_280
    assert transformer_parts(1, 2**32, 16, 3, 5, 2, n_kv_heads=4, swiglu=True, count_masked=False,
                             logits=False)["total"] == 184_467_440_943_253_946_368


def test_adamw_oracle_counts_torchs_own_update():
    """The oracle's count is what the per-parameter rule says, on both of torch's implementations, and it fails
    loudly on an operation it has no count for."""
    from grader.exercises.flops import _ElementwiseCounter, counted_adamw
    for foreach in (False, True):
        assert counted_adamw([5, 7], True, foreach=foreach) == 14 * 12
        assert counted_adamw([5, 7], False, foreach=foreach) == 13 * 12
    with _ElementwiseCounter() as counter:
        torch.randn(4).exp()
    assert counter.unknown == {"aten.exp.default"} and counter.flops == 0


def test_intensity_and_ridge_literals_agree_with_the_oracles():
    """decode_intensity's literals are FlopCounterMode on a real Linear over its tensors' bytes; ridge_batch's are
    the exact smallest batches, none of them borderline for float arithmetic."""
    from grader.exercises.flops import measured_intensity
    from grader.hidden.flops import decode_intensity, ridge_batch_exact
    assert measured_intensity(1, 8192, 2) == Fraction(8192, 8194)
    assert measured_intensity(512, 4096, 2) == Fraction(2048, 5)
    assert measured_intensity(512, 4096, 4) == Fraction(1024, 5)
    assert decode_intensity(2**40, 2**33, 1) == 8_556_510_721.992218
    for args, want in (((8192, 2, 989.5e12, 3.35e12), 319), ((4096, 2, 989.5e12, 3.35e12), 346),
                       ((591, 2, 989.5e12, 3.35e12), 687_994), ((2**33, 2, 989.5e12, 3.35e12), 296),
                       ((2**33, 1, 989.5e12, 3.35e12), 148), ((400, 2, 1e12, 1e10), 200)):
        batch, margin = ridge_batch_exact(*args)
        assert batch == want and (margin > 1e-9 or margin == 0), (args, batch, margin)
    for args in ((512, 2, 989.5e12, 3.35e12), (590, 2, 989.5e12, 3.35e12), (200, 2, 1e12, 1e10)):
        assert ridge_batch_exact(*args)[0] is None


# ---------------------------------------------------------------- counting by running a model (issue 26)

class _MatmulCounter(TorchDispatchMode):
    """The issue's shortcut: a dispatch mode adding 2mkn for every mm, addmm and bmm that runs (not torch's counter,
    so no name refuses it)."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        operands = {torch.ops.aten.mm.default: (0, 1), torch.ops.aten.addmm.default: (1, 2),
                    torch.ops.aten.bmm.default: (0, 1)}.get(func)
        if operands is not None:
            a, b = (args[i] for i in operands)
            self.flops += 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1)
        return out


def matmul_run_on_meta(m, k, n):
    with _MatmulCounter() as counter:
        torch.empty(m, k, device="meta") @ torch.empty(k, n, device="meta")
    return counter.flops


def mlp_run_on_meta(batch, dims):
    model = nn.Sequential(*[nn.Linear(a, b, bias=False, device="meta") for a, b in zip(dims, dims[1:])])
    with _MatmulCounter() as fwd:
        out = model(torch.empty(batch, dims[0], device="meta"))
    with _MatmulCounter() as bwd:
        out.sum().backward()
    return {"forward": fwd.flops, "backward": bwd.flops, "total": fwd.flops + bwd.flops}


def transformer_run_on_meta(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, **options):
    from grader.exercises.flops import _Decoder
    model = _Decoder(n_layers, d_model, n_heads, d_ff, vocab_size, seq_len, device="meta", **options)
    with _MatmulCounter() as counter:
        model(torch.zeros(1, seq_len, dtype=torch.long, device="meta"))
    return counter.flops


def adamw_by_the_graders_oracle(num_params, weight_decay=True):
    """A real AdamW step counted by the public checks' own counter: right wherever the parameters can exist."""
    from grader.exercises.flops import counted_adamw
    return counted_adamw([num_params], weight_decay)


def decode_run_on_meta(batch, d_model, bytes_per_element):
    dtype = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}[bytes_per_element]
    layer = nn.Linear(d_model, d_model, bias=False, device="meta", dtype=dtype)
    x = torch.empty(batch, d_model, device="meta", dtype=dtype)
    with _MatmulCounter() as counter:
        out = layer(x)
    return counter.flops / (layer.weight.nbytes + x.nbytes + out.nbytes)


def ridge_by_running(d_model, bytes_per_element, peak, bandwidth):
    """A search whose intensities come from a model run on the meta device."""
    if d_model / bytes_per_element <= peak / bandwidth:
        return None
    batch = 1
    while decode_run_on_meta(batch, d_model, bytes_per_element) < peak / bandwidth:
        batch *= 2
    low = batch // 2
    while batch - low > 1:
        mid = (low + batch) // 2
        reached = decode_run_on_meta(mid, d_model, bytes_per_element) >= peak / bandwidth
        low, batch = (low, mid) if reached else (mid, batch)
    return batch


_OWN_COUNTER = "not call torch.utils._python_dispatch.TorchDispatchMode.__enter__"
RUN_A_MODEL = [
    W("matmul_flops", matmul_run_on_meta, "small_matmuls", _OWN_COUNTER),
    W("mlp_flops", mlp_run_on_meta, "one_hidden_layer", _OWN_COUNTER),
    W("transformer_flops", transformer_run_on_meta, "a_tiny_model", _OWN_COUNTER),
    W("adamw_step_flops", adamw_by_the_graders_oracle, "a_thousand_parameters", _OWN_COUNTER),
    W("decode_intensity", decode_run_on_meta, "batch_one_is_near_one", _OWN_COUNTER),
    W("ridge_batch", ridge_by_running, "an_h100_in_bf16", _OWN_COUNTER),
]


@pytest.mark.parametrize("wrong", RUN_A_MODEL, ids=ids(RUN_A_MODEL))
def test_a_counter_of_ones_own_is_refused(wrong):
    """A counter of one's own (a dispatch mode adding 2mkn per matmul; no name of torch's counter in it) is refused
    in every check: entering a dispatch mode is refused in a count. (Public checks only: at the hidden checks' sizes
    a run on the meta device takes minutes where it runs at all.)"""
    result = run_exercise(f"flops.{wrong.exercise}", wrong.answer, hidden=False)
    failed = {c.name: c for c in result.checks if not c.passed}
    assert len(failed) == len(result.checks), failures(result)
    assert wrong.says in failed[wrong.check].message and len(failed[wrong.check].message) < 600


def test_without_the_refusal_a_counter_of_ones_own_fails_only_at_sizes_no_tensor_can_hold(monkeypatch):
    """The refusal is not all that stops it: with dispatch modes allowed, the same counter passes every public check
    but the one at sizes no tensor can hold, which fails it saying why."""
    from tests.answers import passes_without_forbid

    for wrong in RUN_A_MODEL[:2]:
        with pytest.raises(AssertionError, match="shapes_no_tensor_can_hold.*more than 2\\*\\*63 elements"):
            passes_without_forbid(monkeypatch, "flops", wrong.exercise, wrong.answer, hidden=False,
                                  dropping=lambda name: "dispatch" in name.lower())


def test_new_stubs_are_not_implemented():
    def adamw_step_flops(num_params, weight_decay=True):
        raise NotImplementedError

    def decode_intensity(batch, d_model, bytes_per_element):
        raise NotImplementedError

    def ridge_batch(d_model, bytes_per_element, peak_flop_per_sec, bandwidth_bytes_per_sec):
        raise NotImplementedError
    for fn in (adamw_step_flops, decode_intensity, ridge_batch):
        assert run_exercise(f"flops.{fn.__name__}", fn, hidden=True).status == "not_implemented"
