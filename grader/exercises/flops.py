"""Chapter 04 (flops): public checks. Hidden checks for the same exercises live in grader/hidden/flops.py.

Expected values come from literals, from torch's own FlopCounterMode (bound at import, before any
student code runs) and from properties (the ridge point, monotonicity); no function here computes
an answer from its arguments. transformer_flops is checked against FlopCounterMode on a real decoder-only
transformer built here (`_Decoder`), whose parts the counter also reports, so a wrong count can be told
which part went wrong.
"""
from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from grader.expect import describe, expect, expect_equal, factor_hint, fail
from grader.inputs import randint
from grader.registry import exercise

_Counter = FlopCounterMode  # torch's own FLOP counter: the oracle for matmul_flops, mlp_flops, transformer_flops
_Linear, _Sequential, _randn, _mm = nn.Linear, nn.Sequential, torch.randn, torch.mm
_Tensor = torch.Tensor
_Module, _ModuleList, _LayerNorm, _Embedding, _GELU = nn.Module, nn.ModuleList, nn.LayerNorm, nn.Embedding, nn.GELU
_ones, _zeros, _arange, _randint, _no_grad = torch.ones, torch.zeros, torch.arange, torch.randint, torch.no_grad
_bool, _long, _bmm = torch.bool, torch.long, torch.ops.aten.bmm
_get_threads, _set_threads = torch.get_num_threads, torch.set_num_threads

# Counting with torch's own counter is the shortcut for every counting exercise: refused while the student's function
# runs, under any name (entering the mode is refused on the class itself, so an alias bound by the notebook's imports
# is refused too), and so are the counter's per-op formulas (mm_flop(a_shape, b_shape) is 2mkn).
COUNTER = ("torch.utils.flop_counter.FlopCounterMode.__enter__", "torch.utils.flop_counter.FlopCounterMode")
FORMULAS = tuple(f"torch.utils.flop_counter.{name}" for name in ("mm_flop", "addmm_flop", "bmm_flop", "baddbmm_flop"))
MATMUL_FLOPS = exercise("flops.matmul_flops", points=1, forbid=(*COUNTER, *FORMULAS))
MLP_FLOPS = exercise("flops.mlp_flops", points=3, forbid=(*COUNTER, *FORMULAS))
MFU = exercise("flops.mfu", points=1)
TRAINING_DAYS = exercise("flops.training_days", points=2)
TRANSFORMER_FLOPS = exercise("flops.transformer_flops", points=3, forbid=(*COUNTER, *FORMULAS))
ARITHMETIC_INTENSITY = exercise("flops.arithmetic_intensity", points=1)
ROOFLINE = exercise("flops.roofline", points=2)


def close(got: float, want: float, rel: float = 1e-9) -> bool:
    return abs(got - want) <= rel * max(abs(want), 1e-300)


def expect_int(value: Any, what: str) -> int:
    """A Python int, exactly: not a bool, not a float holding a whole number, not a NumPy integer, not a
    subclass (only plain Python values cross from the student's kernel when grading, so the notebook refuses
    the rest too, and a subclass cannot lie about equality)."""
    if type(value) is int:
        return value
    if type(value) is float and math.isfinite(value) and value == int(value):
        fail(f"{what} should be a Python int, got the float {value!r}: floats hold every integer only up to "
             "2**53 (about 9e15), and FLOP counts go far beyond; count with ints")
    fail(f"{what} should be a Python int, got {describe(value)}")
    raise AssertionError("unreachable")


def expect_number(value: Any, what: str) -> float:
    """A finite Python float or int (or a plain one-element tensor). NumPy scalars and other subclasses are
    refused in the notebook as they are when grading, where only plain Python values cross from the kernel."""
    if type(value) is _Tensor and value.numel() == 1:
        value = value.item()
    if type(value) not in (int, float):
        hint = " (convert it with float(...))" if isinstance(value, (int, float)) and type(value) is not bool else ""
        fail(f"{what} should be a Python float, got {describe(value)}{hint}")
    if not math.isfinite(value):
        fail(f"{what} should be finite, got {value}")
    return float(value)


# ---------------------------------------------------------------- matmul_flops

def expect_matmul(matmul_flops, m: int, k: int, n: int, want: int) -> None:
    what = f"matmul_flops({m}, {k}, {n})"
    got = expect_int(matmul_flops(m, k, n), what)
    expect(got == want, f"{what} returned {got}; an ({m}, {k}) @ ({k}, {n}) matmul takes {want} FLOPs "
                        "(a multiply and an add for each of the k terms of each of the m * n outputs)"
                        + factor_hint(got, want))


@MATMUL_FLOPS.check
def small_matmuls(matmul_flops):
    """(2, 3) @ (3, 4) is 48 FLOPs, (5, 1) @ (1, 7) is 70, (1, 1) @ (1, 1) is 2: a Python int each time"""
    expect_matmul(matmul_flops, 2, 3, 4, 48)
    expect_matmul(matmul_flops, 5, 1, 7, 70)
    expect_matmul(matmul_flops, 1, 1, 1, 2)


@MATMUL_FLOPS.check
def agrees_with_flop_counter(matmul_flops):
    """torch's FlopCounterMode counts the same for (64, 128) @ (128, 32) and (3, 50) @ (50, 7)"""
    for m, k, n in ((64, 128, 32), (3, 50, 7)):
        with _Counter(display=False) as counter:
            _mm(_randn(m, k), _randn(k, n))
        expect_matmul(matmul_flops, m, k, n, counter.get_total_flops())


# ---------------------------------------------------------------- mlp_flops

def counted(batch: int, dims: list[int]) -> dict[str, int]:
    """What FlopCounterMode counts for bias-free linear layers dims[0] -> dims[1] -> ..., forward and backward,
    with an input that does not require grad (the oracle: torch's own counter on a real model)."""
    model = _Sequential(*[_Linear(a, b, bias=False) for a, b in zip(dims, dims[1:])])
    x = _randn(batch, dims[0])
    with _Counter(display=False) as fwd:
        out = model(x)
    with _Counter(display=False) as bwd:
        out.sum().backward()
    f, b = fwd.get_total_flops(), bwd.get_total_flops()
    return {"forward": f, "backward": b, "total": f + b}


def _backward_hint(got: int, want: dict[str, int], batch: int, dims: list[int]) -> str:
    if got == want["backward"] + 2 * batch * dims[0] * dims[1]:  # the same as 2 x forward
        return (" (that is 2 x forward: it counts the first layer's input gradient, but the input does not "
                "require grad, so autograd never computes it)")
    return ""


def expect_mlp(mlp_flops, batch: int, dims: list[int], want: dict[str, int] | None = None) -> None:
    want = want or counted(batch, dims)
    what = f"mlp_flops({batch}, {dims})"
    got = mlp_flops(batch, list(dims))
    if type(got) is not dict:
        fail(f"{what} should return a dict, got {describe(got)}")
    expect_equal(sorted(map(str, got)), ["backward", "forward", "total"], f"{what}'s keys")
    values = {key: expect_int(got[key], f"{what}[{key!r}]") for key in ("forward", "backward", "total")}
    if values["forward"] != want["forward"]:
        hint = ""
        if batch > 1 and values["forward"] * batch == want["forward"]:
            hint = " (that is for one row of the batch: every row goes through every layer)"
        hint = hint or factor_hint(values["forward"], want["forward"])
        fail(f"{what}['forward'] is {values['forward']}; FlopCounterMode counts {want['forward']}{hint}")
    if values["backward"] != want["backward"]:
        fail(f"{what}['backward'] is {values['backward']}; FlopCounterMode counts {want['backward']}"
             + (_backward_hint(values["backward"], want, batch, dims)
                or factor_hint(values["backward"], want["backward"])))
    expect(values["total"] == values["forward"] + values["backward"],
           f"{what}['total'] is {values['total']}; it should be forward + backward")


@MLP_FLOPS.check
def one_hidden_layer(mlp_flops):
    """batch 4, dims [3, 5, 2]: forward 200, backward 280 (no input gradient for the first layer), total 480"""
    expect_mlp(mlp_flops, 4, [3, 5, 2], {"forward": 200, "backward": 280, "total": 480})


@MLP_FLOPS.check
def counts_what_flop_counter_counts(mlp_flops):
    """a single layer and a deeper stack, checked against FlopCounterMode on a real model"""
    expect_mlp(mlp_flops, 3, [10, 7])
    expect_mlp(mlp_flops, 8, [16, 32, 32, 4])


@MLP_FLOPS.check(timeout=10)
def a_real_size_by_arithmetic(mlp_flops):
    """batch 2048, dims [8192, 32768, 8192]: forward 2,199,023,255,552, backward 3,298,534,883,328, by arithmetic

    Far too large to run on a CPU, and FlopCounterMode is refused inside mlp_flops: count with arithmetic.
    (2 x 2048 x 8192 x 32768 = 1,099,511,627,776 FLOPs per layer; the second layer's input gradient adds one more.)"""
    expect_mlp(mlp_flops, 2048, [8192, 32768, 8192],
               {"forward": 2_199_023_255_552, "backward": 3_298_534_883_328, "total": 5_497_558_138_880})


# ---------------------------------------------------------------- mfu

def expect_mfu(mfu, flops: float, seconds: float, peak: float, want: float) -> None:
    what = f"mfu({flops:g}, {seconds:g}, {peak:g})"
    got = expect_number(mfu(flops, seconds, peak), what)
    if close(got, want):
        return
    hint = ""
    if got != 0 and close(1 / got, want, 1e-6):
        hint = " (upside down: MFU is achieved FLOP/s divided by the peak, never the other way)"
    elif close(got, 100 * want, 1e-6):
        hint = " (a percentage: return the fraction, 0.5 rather than 50)"
    hint = hint or factor_hint(got, want)
    fail(f"{what} returned {got:g}; achieved FLOP/s over peak FLOP/s is {want:g}{hint}")


@MFU.check
def half_of_the_peak(mfu):
    """1e15 FLOPs in 2 s on a 1e15 FLOP/s device is MFU 0.5 (a fraction, not a percentage)"""
    expect_mfu(mfu, 1e15, 2.0, 1e15, 0.5)


@MFU.check
def an_h100_step(mfu):
    """6e14 FLOPs in 1.2 s on an H100's 989.5 TFLOP/s dense bf16 peak: MFU 0.50531"""
    expect_mfu(mfu, 6e14, 1.2, 989.5e12, 0.5053057099545225)


# ---------------------------------------------------------------- training_days

def _days_hint(got: float, want: float, gpus: int, mfu: float) -> str:
    if close(got * 7, want, 1e-6):
        return " (that is the number of weeks: divide by the 86,400 seconds of a day, not a week's 604,800)"
    if close(got * 3, want, 1e-6):
        return " (that is 2ND, the forward pass only: training costs 6ND)"
    if close(got, 24 * want, 1e-6):
        return " (that is hours: divide by the 86,400 seconds of a day, not 3,600)"
    if gpus > 1 and close(got, gpus * want, 1e-6):
        return " (the GPUs share the work: divide by their number too)"
    if mfu != 1 and close(got, mfu * want, 1e-6):
        return " (each GPU delivers MFU x its peak: divide by the MFU too)"
    return ""


def expect_days(training_days, n: float, d: float, gpus: int, peak: float, mfu: float, want: float) -> None:
    what = f"training_days({n:g}, {d:g}, {gpus}, {peak:g}, {mfu:g})"
    got = expect_number(training_days(n, d, gpus, peak, mfu), what)
    if not close(got, want, 1e-6):
        fail(f"{what} returned {got:.5g}; the run takes {want:.5g} days"
             + (_days_hint(got, want, gpus, mfu) or factor_hint(got, want)))


@TRAINING_DAYS.check
def llama_scale(training_days):
    """70e9 parameters on 15e12 tokens, 1024 H100s at 989.5e12 FLOP/s and MFU 0.5: 143.93 days"""
    expect_days(training_days, 70e9, 15e12, 1024, 989.5e12, 0.5, 143.92659381842682)


@TRAINING_DAYS.check
def one_day_exactly(training_days):
    """6 x 1.2e9 x 1.8e7 = 1.296e17 FLOPs on one GPU of peak 3e12 FLOP/s at MFU 0.5 take 86,400 s: 1 day"""
    expect_days(training_days, 1.2e9, 1.8e7, 1, 3e12, 0.5, 1.0)


@TRAINING_DAYS.check
def two_weeks_on_eight_gpus(training_days):
    """7e9 parameters on 91.19232e9 tokens, 8 H100s at MFU 0.4: exactly two weeks, 14 days"""
    expect_days(training_days, 7e9, 91.19232e9, 8, 989.5e12, 0.4, 14.0)


# ---------------------------------------------------------------- transformer_flops

class _Block(_Module):
    """One pre-norm decoder block, written out: Q, K, V (one fused Linear or three) and O projections, explicit
    `q @ k.transpose` scores over the full seq x seq matrix with the causal half masked, softmax, the weighted sum,
    and a GELU MLP d_model -> d_ff -> d_model."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, fused: bool, bias: bool, device: str) -> None:
        super().__init__()
        self.n_heads, self.fused = n_heads, fused
        self.ln1, self.ln2 = _LayerNorm(d_model, device=device), _LayerNorm(d_model, device=device)
        if fused:
            self.qkv = _Linear(d_model, 3 * d_model, bias=bias, device=device)
        else:
            self.q, self.k, self.v = (_Linear(d_model, d_model, bias=bias, device=device) for _ in range(3))
        self.o = _Linear(d_model, d_model, bias=bias, device=device)
        self.mlp = _Sequential(_Linear(d_model, d_ff, bias=bias, device=device), _GELU(),
                               _Linear(d_ff, d_model, bias=bias, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(d, dim=-1) if self.fused else (self.q(h), self.k(h), self.v(h))
        q, k, v = (t.reshape(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.n_heads)        # (b, heads, s, s): every pair
        future = _ones(s, s, dtype=_bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)    # causal by masking, not by skipping
        attended = (weights @ v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(attended)
        return x + self.mlp(self.ln2(x))


class _Decoder(_Module):
    """A decoder-only transformer: token and position embeddings, `n_layers` blocks, a final LayerNorm and the
    unembedding to `vocab` logits (its weight tied to the token embedding's, or its own)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab: int, seq: int, *,
                 fused: bool = False, bias: bool = True, tied: bool = False, device: str = "cpu") -> None:
        super().__init__()
        self.embed, self.pos = _Embedding(vocab, d_model, device=device), _Embedding(seq, d_model, device=device)
        self.blocks = _ModuleList([_Block(d_model, n_heads, d_ff, fused, bias, device) for _ in range(n_layers)])
        self.ln_f = _LayerNorm(d_model, device=device)
        self.head = _Linear(d_model, vocab, bias=False, device=device)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(_arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def counted_transformer(n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab: int, seq: int, *,
                        fused: bool = False, bias: bool = True, tied: bool = False,
                        device: str = "cpu") -> dict[str, int]:
    """What FlopCounterMode counts for one forward pass of one sequence of `seq` tokens through `_Decoder`: the
    total and its parts (the oracle: torch's counter on a real model; on the meta device only shapes exist, so
    real sizes cost nothing)."""
    model = _Decoder(n_layers, d_model, n_heads, d_ff, vocab, seq, fused=fused, bias=bias, tied=tied, device=device)
    if device == "meta":
        tokens = _zeros(1, seq, dtype=_long, device=device)
    else:
        tokens = _randint(0, vocab, (1, seq))
    threads = _get_threads()
    _set_threads(1)  # tiny matmuls: one thread is fastest, and a busy machine's other cores are not waited for
    try:
        with _no_grad(), _Counter(display=False) as counter:
            model(tokens)
    finally:
        _set_threads(threads)
    counts = counter.get_flop_counts()
    total = counter.get_total_flops()
    attention = sum(n for op, n in counts["Global"].items() if op is _bmm)   # activations x activations
    mlp = sum(sum(ops.values()) for name, ops in counts.items() if name.endswith(".mlp"))
    head = sum(sum(ops.values()) for name, ops in counts.items() if name.endswith(".head"))
    return {"total": total, "attention": attention, "mlp": mlp, "unembedding": head,
            "projections": total - attention - mlp - head}


def _transformer_hint(got: int, want: dict[str, int], shape: tuple[int, ...]) -> str:
    """The named mistake a wrong count matches, from the parts the counter reported (each test needs the shape to
    tell the mistakes apart, so several shapes are checked)."""
    n_layers, d_model, n_heads, d_ff, _, seq = shape
    total, attention, mlp, head = want["total"], want["attention"], want["mlp"], want["unembedding"]
    if 2 * got == total:
        return " (half of it: a multiply-add is 2 FLOPs, a multiply and an add)"
    if 3 * total == got:
        return " (3 x the forward pass: that is a training step, forward and backward; count the forward pass only)"
    if seq > 1 and got * seq == total:
        return f" (that is per token: return the FLOPs of the whole sequence of {seq} tokens)"
    if attention and got == total - attention:
        return (" (the attention scores q @ k^T and the weighted sum weights @ v are missing: the two matmuls "
                "with no weights, whose cost grows with seq_len^2)")
    if seq > 1 and (2 * got == 2 * total - attention or 2 * seq * got == 2 * seq * total - (seq - 1) * attention):
        return (" (only the causal half of the scores counted: the model computes every one of the seq_len x seq_len "
                "scores and masks the future ones, and FlopCounterMode counts the full matmuls)")
    if n_heads > 1 and got * n_heads == total * n_heads - attention * (n_heads - 1):
        return (" (the attention matmuls of one head only: each of the n_heads heads computes its own seq_len x seq_len "
                "scores from d_model // n_heads dimensions)")
    if got == total - head:
        return " (the unembedding is missing: the final d_model -> vocab_size matmul that makes the logits)"
    if got == total + head:
        return " (the embedding counted as a matmul: it looks up one row per token, no arithmetic)"
    if got == total - want["projections"] // 4:
        return " (one of the four projections is missing: Q, K, V and the output projection O after the weighted sum)"
    if d_ff != d_model and got * d_ff == (total - mlp) * d_ff + mlp * d_model:
        return " (the MLP counted as d_model x d_model matrices: its two matrices are d_model x d_ff and d_ff x d_model)"
    if d_ff != 4 * d_model and got * d_ff == (total - mlp) * d_ff + mlp * 4 * d_model:
        return " (the MLP counted with d_ff = 4 x d_model: use the d_ff given)"
    if n_layers > 1 and got * n_layers == total - head + n_layers * head:
        return " (one layer only: every one of the n_layers blocks does the same work)"
    return factor_hint(got, total)


def expect_transformer(transformer_flops, shape: tuple[int, ...], want: dict[str, int] | None = None,
                       what_counts: str = "FlopCounterMode counts") -> None:
    want = want or counted_transformer(*shape)
    what = f"transformer_flops{shape}"
    got = expect_int(transformer_flops(*shape), what)
    if got != want["total"]:
        fail(f"{what} returned {got:,}; {what_counts} {want['total']:,} for one sequence of {shape[-1]} tokens"
             + _transformer_hint(got, want, shape))


@TRANSFORMER_FLOPS.check
def a_tiny_model(transformer_flops):
    """1 layer, d_model 6, 3 heads, d_ff 7, vocab 10, 4 tokens: 1,152 + 384 + 672 + 480 = 2,688 FLOPs

    Q, K, V and O projections 1,152, scores and weighted sum 384, MLP 672, unembedding 480."""
    expect_transformer(transformer_flops, (1, 6, 3, 7, 10, 4),
                       {"total": 2688, "projections": 1152, "attention": 384, "mlp": 672, "unembedding": 480},
                       "by hand it is")


@TRANSFORMER_FLOPS.check
def agrees_with_flop_counter(transformer_flops):
    """small decoder-only transformers built here (explicit attention matmuls, causal mask), counted by FlopCounterMode

    Pre-norm blocks with LayerNorm, fused or separate Q, K, V, a GELU MLP, tied or untied unembedding."""
    shapes = [(2, 12, 3, 20, 17, 9), (3, 8, 2, 48, 5, 16), (1, 6, 1, 7, 50, 2)]
    for _ in range(3):
        heads = randint(1, 4)
        shapes.append((randint(1, 3), heads * randint(1, 6), heads, randint(1, 40), randint(2, 40), randint(2, 12)))
    for i, shape in enumerate(shapes):
        expect_transformer(transformer_flops, shape, counted_transformer(*shape, fused=i % 2 == 1, tied=i % 3 == 0))


@TRANSFORMER_FLOPS.check(timeout=10)
def a_70b_shape_at_once(transformer_flops):
    """Llama 3 70B's sizes (80 layers, d_model 8192, 64 heads, d_ff 28672, vocab 128256), 8192 tokens: an exact int

    1,160,706,321,809,408 FLOPs in this chapter's block, computed by arithmetic at once: far too big a model to run."""
    expect_transformer(transformer_flops, (80, 8192, 64, 28672, 128256, 8192), {
        "total": 1_160_706_321_809_408, "projections": 351_843_720_888_320, "attention": 175_921_860_444_160,
        "mlp": 615_726_511_554_560, "unembedding": 17_214_228_922_368}, "counted on the meta device, it is")


# ---------------------------------------------------------------- arithmetic_intensity and roofline

def expect_intensity(arithmetic_intensity, flops: float, nbytes: float, want: float) -> None:
    what = f"arithmetic_intensity({flops}, {nbytes})"
    got = expect_number(arithmetic_intensity(flops, nbytes), what)
    if not close(got, want):
        hint = " (upside down: FLOPs per byte, not bytes per FLOP)" if got and close(1 / got, want, 1e-6) else ""
        hint = hint or factor_hint(got, want)
        fail(f"{what} returned {got:g}; expected {want:g} FLOPs per byte{hint}")


@ARITHMETIC_INTENSITY.check
def flops_per_byte(arithmetic_intensity):
    """an n x n x n float32 matmul, 2n^3 FLOPs on 3 x 4n^2 bytes, has intensity n / 6: 1024 -> 170.67"""
    expect_intensity(arithmetic_intensity, 2 * 1024**3, 3 * 4 * 1024**2, 1024 / 6)
    expect_intensity(arithmetic_intensity, 2 * 4096**3, 3 * 4 * 4096**2, 4096 / 6)


@ARITHMETIC_INTENSITY.check
def elementwise_add(arithmetic_intensity):
    """a float32 add, 1 FLOP per 12 bytes (two reads, one write), has intensity 1/12: below 1, not 0"""
    expect_intensity(arithmetic_intensity, 1_000_000, 12_000_000, 1 / 12)


def expect_roofline(roofline, intensity: float, peak: float, bandwidth: float, want: float) -> None:
    what = f"roofline({intensity:g}, {peak:g}, {bandwidth:g})"
    got = expect_number(roofline(intensity, peak, bandwidth), what)
    if not close(got, want):
        hint = ""
        if got > peak * (1 + 1e-9):
            hint = " (above the peak: nothing runs faster than the peak, so take the smaller of the two limits)"
        elif close(got, peak) and want < peak:
            hint = (f" (the peak, but below the ridge point, {peak / bandwidth:g} FLOP/byte, memory delivers only "
                    "intensity x bandwidth: take the smaller of the two limits)")
        elif close(want, peak) and got < peak:
            hint = f" (past the ridge point, {peak / bandwidth:g} FLOP/byte, the work is compute-bound: it runs at the peak)"
        hint = hint or factor_hint(got, want)
        fail(f"{what} returned {got:g}; the attainable FLOP/s is {want:g}{hint}")


@ROOFLINE.check
def memory_bound_below_the_ridge(roofline):
    """below the ridge point bandwidth x intensity limits: 10 FLOP/byte at 3.35e12 B/s is 3.35e13 FLOP/s"""
    expect_roofline(roofline, 10, 989.5e12, 3.35e12, 3.35e13)
    expect_roofline(roofline, 0.25, 1e12, 1e11, 2.5e10)


@ROOFLINE.check
def compute_bound_above_the_ridge(roofline):
    """above the ridge point the peak limits: 1000 FLOP/byte on the same device reaches only 989.5e12"""
    expect_roofline(roofline, 1000, 989.5e12, 3.35e12, 989.5e12)
    expect_roofline(roofline, 50, 1e12, 1e11, 1e12)


@ROOFLINE.check
def the_ridge_point(roofline):
    """peak 1e12 FLOP/s and bandwidth 1e11 B/s put the ridge at 10 FLOP/byte: 9.9 gives 9.9e11, 10.1 the
    peak; the line never falls as the intensity grows"""
    for intensity, want in ((10, 1e12), (5, 5e11), (9.9, 9.9e11), (10.1, 1e12), (20, 1e12)):
        expect_roofline(roofline, intensity, 1e12, 1e11, want)
    previous = -1.0
    for i in (0.0, 0.1, 1.0, 2.0, 4.0, 8.0, 9.99, 10.0, 10.01, 16.0, 100.0, 1e4):
        got = expect_number(roofline(i, 1e12, 1e11), f"roofline({i:g}, 1e+12, 1e+11)")
        expect(got >= previous, f"roofline(intensity, 1e+12, 1e+11) falls from {previous:g} to {got:g} as the "
                                f"intensity grows to {i:g}")
        previous = got
