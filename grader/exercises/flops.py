"""Chapter 04 (flops): public checks. Hidden checks for the same exercises live in grader/hidden/flops.py.

Expected values come from literals, from torch's own FlopCounterMode (bound at import, before any
student code runs), from a real torch.optim.AdamW step whose elementwise operations are counted here, and
from properties (the ridge point, monotonicity); no function here computes an answer from its arguments.
transformer_flops is checked against FlopCounterMode on a real decoder-only transformer built here
(`_Decoder`, with each FLOP convention the exercise takes as an option), whose parts the counter also
reports, so a wrong count can be told which part went wrong.

Counting is arithmetic on sizes: every counting exercise is also asked about sizes whose tensors could not
exist, not even on the meta device (more than 2**63 elements), so running a model under a counter, torch's
or one's own, cannot pass; a formula can.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from grader.expect import (OWN_COUNTER, CheckFailure, at_sizes_no_tensor_can_hold, describe, expect, expect_equal, expect_int,
                           factor_hint, fail)
from grader.inputs import randint
from grader.oracle import once_per_process
from grader.guard import UNTRACED
from grader.registry import exercise

_Counter = FlopCounterMode  # torch's own FLOP counter: the oracle for matmul_flops, mlp_flops, transformer_flops
_Linear, _Sequential, _randn, _mm = nn.Linear, nn.Sequential, torch.randn, torch.mm
_Tensor = torch.Tensor
_Module, _ModuleList, _LayerNorm, _Embedding, _GELU = nn.Module, nn.ModuleList, nn.LayerNorm, nn.Embedding, nn.GELU
_ones, _zeros, _arange, _randint, _no_grad = torch.ones, torch.zeros, torch.arange, torch.randint, torch.no_grad
_bool, _long, _bmm, _cat, _silu = torch.bool, torch.long, torch.ops.aten.bmm, torch.cat, nn.functional.silu
_empty, _AdamW, _Parameter = torch.empty, torch.optim.AdamW, nn.Parameter
_get_threads, _set_threads = torch.get_num_threads, torch.set_num_threads
_DTYPE_OF_BYTES = {2: torch.bfloat16, 4: torch.float32, 8: torch.float64}

# Counting with torch's own counter is the shortcut for every counting exercise: refused while the student's function
# runs, under any name (entering the mode is refused on the class itself, so an alias bound by the notebook's imports
# is refused too), and so are the counter's per-op formulas (mm_flop(a_shape, b_shape) is 2mkn; sdpa_flop_count is
# attention's two matmuls; conv_flop_count is a matmul's count for a 1 x 1 convolution). A counter of one's own that
# runs a model (a TorchDispatchMode on the meta device), at the sizes asked or at small ones scaled up, is stopped by
# sizes no tensor can hold and the trace of that call (see shapes_no_tensor_can_hold), and so is the work out of the
# trace's sight (guard.UNTRACED: another thread, dispatch switched off).
COUNTER = ("torch.utils.flop_counter.FlopCounterMode.__enter__", "torch.utils.flop_counter.FlopCounterMode")
FORMULAS = tuple(f"torch.utils.flop_counter.{name}" for name in ("mm_flop", "addmm_flop", "bmm_flop", "baddbmm_flop",
                                                                   "sdpa_flop_count", "conv_flop_count"))
COUNTING = (*COUNTER, *FORMULAS, OWN_COUNTER, *UNTRACED)
MATMUL_FLOPS = exercise("flops.matmul_flops", points=1, counts=True, forbid=COUNTING)
MLP_FLOPS = exercise("flops.mlp_flops", points=3, counts=True, forbid=COUNTING)
MFU = exercise("flops.mfu", points=1)
TRAINING_DAYS = exercise("flops.training_days", points=2)
TRANSFORMER_FLOPS = exercise("flops.transformer_flops", points=4, counts=True, forbid=COUNTING)
ARITHMETIC_INTENSITY = exercise("flops.arithmetic_intensity", points=1)
ROOFLINE = exercise("flops.roofline", points=2)
ADAMW_STEP_FLOPS = exercise("flops.adamw_step_flops", points=2, counts=True, forbid=COUNTING)
DECODE_INTENSITY = exercise("flops.decode_intensity", points=2, counts=True, forbid=COUNTING)
RIDGE_BATCH = exercise("flops.ridge_batch", points=2, counts=True, forbid=COUNTING)


def close(got: float, want: float, rel: float = 1e-9) -> bool:
    return abs(got - want) <= rel * max(abs(want), 1e-300)


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


@MATMUL_FLOPS.check
def shapes_no_tensor_can_hold(matmul_flops):
    """(2**33, 2**31) @ (2**31, 3) and (3, 2**40) @ (2**40, 2**40): exact ints from the sizes alone

    No tensor of these sizes can exist, not even on the meta device, so running a matmul under a counter fails;
    2 x m x k x n on Python ints does not."""
    matmul_flops = at_sizes_no_tensor_can_hold(matmul_flops, "matmul_flops")
    expect_matmul(matmul_flops, 2**33, 2**31, 3, 110_680_464_442_257_309_696)
    expect_matmul(matmul_flops, 3, 2**40, 2**40, 7_253_554_917_687_775_048_237_056)


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


@MLP_FLOPS.check
def shapes_no_tensor_can_hold(mlp_flops):
    """batch 3, dims [2**32, 2**32, 5], and batch 2**20, dims [7, 2**62, 8]: exact ints from the sizes alone

    A 2**32 x 2**32 weight has 2**64 elements, more than any tensor can have (the meta device included), so running
    the layers under a counter fails; arithmetic on the sizes does not."""
    mlp_flops = at_sizes_no_tensor_can_hold(mlp_flops, "mlp_flops")
    expect_mlp(mlp_flops, 3, [2**32, 2**32, 5], {"forward": 110_680_464_571_106_328_576,
                                                   "backward": 110_680_464_699_955_347_456,
                                                   "total": 221_360_929_271_061_676_032})
    expect_mlp(mlp_flops, 2**20, [7, 2**62, 8], {"forward": 145_071_098_353_755_500_964_741_120,
                                                  "backward": 222_442_350_809_091_768_145_936_384,
                                                  "total": 367_513_449_162_847_269_110_677_504})


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

# The options transformer_flops takes, with their defaults: the convention the exercise started with (every score
# of the seq x seq matrix counted, as many K and V heads as query heads, a two-matrix GELU MLP, the logits counted).
DEFAULTS = {"n_kv_heads": None, "swiglu": False, "count_masked": True, "logits": True}


class _SwiGLU(_Module):
    """SwiGLU's MLP: down(silu(gate(x)) * up(x)), three matrices where GELU's MLP has two."""

    def __init__(self, d_model: int, d_ff: int, bias: bool, device: str) -> None:
        super().__init__()
        self.gate = _Linear(d_model, d_ff, bias=bias, device=device)
        self.up = _Linear(d_model, d_ff, bias=bias, device=device)
        self.down = _Linear(d_ff, d_model, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(_silu(self.gate(x)) * self.up(x))


class _Block(_Module):
    """One pre-norm decoder block, written out: Q, K, V (one fused Linear or three; K and V of n_kv_heads heads, each
    shared by a group of query heads) and O projections, the scores and weighted sum as explicit matmuls, and an MLP
    (GELU, d_model -> d_ff -> d_model, or SwiGLU's three matrices). With count_masked the scores are the full
    seq x seq matrix with the future masked; without it, each query is scored against the keys it may see only
    (row by row), so the matmuls that run are the causal half, diagonal included."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, fused: bool, bias: bool, device: str, *,
                 n_kv_heads: int | None = None, swiglu: bool = False, count_masked: bool = True) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.fused, self.count_masked = fused, count_masked
        self.head_dim = d_model // n_heads
        self.kv_width = self.n_kv_heads * self.head_dim
        self.ln1, self.ln2 = _LayerNorm(d_model, device=device), _LayerNorm(d_model, device=device)
        if fused:
            self.qkv = _Linear(d_model, d_model + 2 * self.kv_width, bias=bias, device=device)
        else:
            self.q = _Linear(d_model, d_model, bias=bias, device=device)
            self.k, self.v = (_Linear(d_model, self.kv_width, bias=bias, device=device) for _ in range(2))
        self.o = _Linear(d_model, d_model, bias=bias, device=device)
        self.mlp = (_SwiGLU(d_model, d_ff, bias, device) if swiglu else
                    _Sequential(_Linear(d_model, d_ff, bias=bias, device=device), _GELU(),
                                _Linear(d_ff, d_model, bias=bias, device=device)))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """(b, heads, s, head_dim) each: every score and the future masked, or only the scores a token may see."""
        s = q.shape[2]
        if self.count_masked:
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)           # (b, heads, s, s): every pair
            future = _ones(s, s, dtype=_bool, device=q.device).triu(1)
            return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v  # causal by masking, not skipping
        rows = []
        for i in range(s):                                                      # query i sees keys 0..i only
            scores = q[:, :, i:i + 1] @ k[:, :, :i + 1].transpose(-2, -1) / math.sqrt(self.head_dim)
            rows.append(scores.softmax(dim=-1) @ v[:, :, :i + 1])
        return _cat(rows, dim=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.ln1(x)
        if self.fused:
            q, k, v = self.qkv(h).split([d, self.kv_width, self.kv_width], dim=-1)
        else:
            q, k, v = self.q(h), self.k(h), self.v(h)
        q = q.reshape(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        group = self.n_heads // self.n_kv_heads                                  # query heads per K, V head
        k, v = (t.reshape(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2).repeat_interleave(group, dim=1)
                for t in (k, v))
        attended = self.attend(q, k, v).transpose(1, 2).reshape(b, s, d)
        x = x + self.o(attended)
        return x + self.mlp(self.ln2(x))


class _Decoder(_Module):
    """A decoder-only transformer: token and position embeddings, `n_layers` blocks, a final LayerNorm and, with
    `logits`, the unembedding to `vocab` logits (its weight tied to the token embedding's, or its own)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab: int, seq: int, *,
                 fused: bool = False, bias: bool = True, tied: bool = False, device: str = "cpu",
                 n_kv_heads: int | None = None, swiglu: bool = False, count_masked: bool = True,
                 logits: bool = True) -> None:
        super().__init__()
        self.logits = logits
        self.embed, self.pos = _Embedding(vocab, d_model, device=device), _Embedding(seq, d_model, device=device)
        self.blocks = _ModuleList([_Block(d_model, n_heads, d_ff, fused, bias, device, n_kv_heads=n_kv_heads,
                                          swiglu=swiglu, count_masked=count_masked) for _ in range(n_layers)])
        self.ln_f = _LayerNorm(d_model, device=device)
        self.head = _Linear(d_model, vocab, bias=False, device=device)
        if tied:
            self.head.weight = self.embed.weight

    def hidden(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(_arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.hidden(tokens)
        return self.head(x) if self.logits else x


def _module_flops(counts: dict, suffixes: tuple[str, ...]) -> int:
    return sum(sum(ops.values()) for name, ops in counts.items() if name.endswith(suffixes))


@once_per_process
def counted_transformer(n_layers: int, d_model: int, n_heads: int, d_ff: int, vocab: int, seq: int, *,
                        fused: bool = False, bias: bool = True, tied: bool = False, device: str = "cpu",
                        **options: Any) -> dict[str, int]:
    """What FlopCounterMode counts for one forward pass of one sequence of `seq` tokens through `_Decoder` built with
    the exercise's `options`: the total and its parts (the oracle: torch's counter on a real model; on the meta device
    only shapes exist, so real sizes cost nothing). `kv` is the K and V projections' share of `projections`;
    `left_out` is what the unembedding would have cost, measured apart, when `logits` is False."""
    model = _Decoder(n_layers, d_model, n_heads, d_ff, vocab, seq, fused=fused, bias=bias, tied=tied, device=device,
                     **options)
    if device == "meta":
        tokens = _zeros(1, seq, dtype=_long, device=device)
    else:
        tokens = _randint(0, vocab, (1, seq))
    threads = _get_threads()
    _set_threads(1)  # tiny matmuls: one thread is fastest, and a busy machine's other cores are not waited for
    try:
        with _no_grad(), _Counter(display=False) as counter:
            model(tokens)
        left_out = 0
        if not model.logits:
            with _no_grad(), _Counter(display=False) as apart:
                model.head(_zeros(1, seq, d_model, device=device))
            left_out = apart.get_total_flops()
    finally:
        _set_threads(threads)
    counts = counter.get_flop_counts()
    total = counter.get_total_flops()
    attention = sum(n for op, n in counts["Global"].items() if op is _bmm)   # activations x activations
    mlp = _module_flops(counts, (".mlp",))
    head = _module_flops(counts, (".head",))
    kv = _module_flops(counts, (".k", ".v"))
    if fused:  # the fused layer's output columns: d_model for Q, then K's and V's kv_width each
        block = model.blocks[0]
        kv += _module_flops(counts, (".qkv",)) * 2 * block.kv_width // (d_model + 2 * block.kv_width)
    return {"total": total, "attention": attention, "mlp": mlp, "unembedding": head,
            "projections": total - attention - mlp - head, "kv": kv, "left_out": left_out}


def _convention_hint(got: int, want: dict[str, int], shape: tuple[int, ...], options: dict[str, Any]) -> str:
    """The named mistake with one of the options, from the parts the counter reported."""
    n_heads, seq = shape[2], shape[5]
    total, attention, mlp, kv = want["total"], want["attention"], want["mlp"], want["kv"]
    kv_heads = options.get("n_kv_heads") or n_heads
    if kv_heads != n_heads:
        if got * kv_heads == total * kv_heads + kv * (n_heads - kv_heads):
            return (f" (n_kv_heads ignored: K and V project to n_kv_heads x head_dim = {kv_heads} x "
                    f"{shape[1] // n_heads} columns each, one K and V head shared by each group of query heads)")
        if got * n_heads == total * n_heads - attention * (n_heads - kv_heads):
            return (" (the scores and weighted sum shrunk with the K and V heads: each of the n_heads query heads "
                    "still scores every key it may see and mixes the values; only K and V's projections shrink)")
        if got * n_heads == total * n_heads - (want["projections"] - kv) * (n_heads - kv_heads):
            return (" (Q and O shrunk too: grouped-query attention keeps n_heads query heads, so Q and the output "
                    "projection stay d_model x d_model; only K and V's shrink)")
    if options.get("swiglu") and 3 * got == 3 * total - mlp:
        return (" (SwiGLU's MLP has three matrices: gate and up, both d_model x d_ff, and down, d_ff x d_model; "
                "counted like GELU's two)")
    if options.get("count_masked") is False and seq > 1:
        if got * (seq + 1) == total * (seq + 1) + attention * (seq - 1):
            return (" (every one of the seq_len x seq_len scores counted: with count_masked=False count only the "
                    "pairs the causal mask keeps, seq_len (seq_len + 1) / 2 per head, each token with itself and "
                    "every earlier one)")
        if got * (seq + 1) == total * (seq + 1) - attention:
            return (f" (seq_len^2 / 2 pairs: the mask keeps the diagonal too, seq_len (seq_len + 1) / 2 pairs per head, "
                    f"{seq * (seq + 1) // 2} for {seq} tokens, not {seq * seq / 2:g})")
        if got * (seq + 1) == total * (seq + 1) - 2 * attention:
            return " (the diagonal left out: each token attends to itself too, seq_len (seq_len + 1) / 2 pairs per head)"
    if options.get("logits") is False and got == total + want["left_out"]:
        return " (the unembedding counted although logits=False: leave out the final d_model -> vocab_size matmul)"
    return ""


def _transformer_hint(got: int, want: dict[str, int], shape: tuple[int, ...], options: dict[str, Any]) -> str:
    """The named mistake a wrong count matches, from the parts the counter reported (each test needs the shape to
    tell the mistakes apart, so several shapes are checked)."""
    n_layers, d_model, n_heads, d_ff, _, seq = shape
    total, attention, mlp, head = want["total"], want["attention"], want["mlp"], want["unembedding"]
    convention = _convention_hint(got, want, shape, options)
    if convention:
        return convention
    if 2 * got == total:
        return " (half of it: a multiply-add is 2 FLOPs, a multiply and an add)"
    if 3 * total == got:
        return " (3 x the forward pass: that is a training step, forward and backward; count the forward pass only)"
    if seq > 1 and got * seq == total:
        return f" (that is per token: return the FLOPs of the whole sequence of {seq} tokens)"
    if attention and got == total - attention:
        return (" (the attention scores q @ k^T and the weighted sum weights @ v are missing: the two matmuls "
                "with no weights, whose cost grows with seq_len^2)")
    if options.get("count_masked", True) and seq > 1 and (
            2 * got == 2 * total - attention or 2 * seq * got == 2 * seq * total - (seq - 1) * attention):
        return (" (only the causal half of the scores counted: the model computes every one of the seq_len x seq_len "
                "scores and masks the future ones, and FlopCounterMode counts the full matmuls; the half is the "
                "count_masked=False convention)")
    if n_heads > 1 and got * n_heads == total * n_heads - attention * (n_heads - 1):
        return (" (the attention matmuls of one head only: each of the n_heads heads computes its own seq_len x seq_len "
                "scores from d_model // n_heads dimensions)")
    if head and got == total - head:
        return " (the unembedding is missing: the final d_model -> vocab_size matmul that makes the logits)"
    if got == total + head:
        return " (the embedding counted as a matmul: it looks up one row per token, no arithmetic)"
    if got == total - want["projections"] // 4:
        return " (one of the four projections is missing: Q, K, V and the output projection O after the weighted sum)"
    if d_ff != d_model and got * d_ff == (total - mlp) * d_ff + mlp * d_model:
        return " (the MLP counted as d_model x d_model matrices: its matrices are d_model x d_ff and d_ff x d_model)"
    if d_ff != 4 * d_model and got * d_ff == (total - mlp) * d_ff + mlp * 4 * d_model:
        return " (the MLP counted with d_ff = 4 x d_model: use the d_ff given)"
    if n_layers > 1 and got * n_layers == total - head + n_layers * head:
        return " (one layer only: every one of the n_layers blocks does the same work)"
    return factor_hint(got, total)


def transformer_call(shape: tuple[int, ...], options: dict[str, Any]) -> str:
    """How the check called transformer_flops, as the student would write it."""
    return f"transformer_flops({', '.join(map(str, shape))}{''.join(f', {k}={v!r}' for k, v in options.items())})"


def expect_transformer(transformer_flops, shape: tuple[int, ...], want: dict[str, int] | None = None,
                       what_counts: str = "FlopCounterMode counts", **options: Any) -> None:
    want = want or counted_transformer(*shape, **options)
    what = transformer_call(shape, options)
    got = expect_int(transformer_flops(*shape, **options), what)
    if got != want["total"]:
        fail(f"{what} returned {got:,}; {what_counts} {want['total']:,} for one sequence of {shape[-1]} tokens"
             + _transformer_hint(got, want, shape, options))


@TRANSFORMER_FLOPS.check
def a_tiny_model(transformer_flops):
    """1 layer, d_model 6, 3 heads, d_ff 7, vocab 10, 4 tokens: 1,152 + 384 + 672 + 480 = 2,688 FLOPs

    Q, K, V and O projections 1,152, scores and weighted sum 384, MLP 672, unembedding 480."""
    expect_transformer(transformer_flops, (1, 6, 3, 7, 10, 4),
                       {"total": 2688, "projections": 1152, "attention": 384, "mlp": 672, "unembedding": 480,
                        "kv": 576, "left_out": 0}, "by hand it is")


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
        "mlp": 615_726_511_554_560, "unembedding": 17_214_228_922_368, "kv": 175_921_860_444_160, "left_out": 0},
        "counted on the meta device, it is")


# The tiny model (1 layer, d_model 6, 3 heads, d_ff 7, vocab 10, 4 tokens) under each option, by hand: one K and V
# head of 2 columns (K and V 192 instead of 576); SwiGLU's three 6 x 7 matrices (1,008); the 10 of 16 pairs per head
# the causal mask keeps (240 instead of 384); no unembedding (480 left out, measured for the hint).
_TINY_BY_OPTION = [
    ({"n_kv_heads": 1}, {"total": 2304, "projections": 768, "attention": 384, "mlp": 672, "unembedding": 480,
                         "kv": 192, "left_out": 0}),
    ({"swiglu": True}, {"total": 3024, "projections": 1152, "attention": 384, "mlp": 1008, "unembedding": 480,
                        "kv": 576, "left_out": 0}),
    ({"count_masked": False}, {"total": 2544, "projections": 1152, "attention": 240, "mlp": 672, "unembedding": 480,
                               "kv": 576, "left_out": 0}),
    ({"logits": False}, {"total": 2208, "projections": 1152, "attention": 384, "mlp": 672, "unembedding": 0,
                         "kv": 576, "left_out": 480}),
    ({"n_kv_heads": 1, "swiglu": True, "count_masked": False, "logits": False},
     {"total": 2016, "projections": 768, "attention": 240, "mlp": 1008, "unembedding": 0, "kv": 192, "left_out": 480}),
]


@TRANSFORMER_FLOPS.check
def conventions_by_hand(transformer_flops):
    """the tiny model under each convention, by hand: n_kv_heads=1, swiglu=True, count_masked=False, logits=False

    2,304, 3,024, 2,544 and 2,208 FLOPs for one option each, 2,016 for all four together; the defaults still give
    2,688 when passed explicitly (n_kv_heads=None or 3, swiglu=False, count_masked=True, logits=True)."""
    for options, want in _TINY_BY_OPTION:
        expect_transformer(transformer_flops, (1, 6, 3, 7, 10, 4), want, "by hand it is", **options)
    tiny = {"total": 2688, "projections": 1152, "attention": 384, "mlp": 672, "unembedding": 480, "kv": 576,
            "left_out": 0}
    for defaults in (DEFAULTS, {**DEFAULTS, "n_kv_heads": 3}):
        expect_transformer(transformer_flops, (1, 6, 3, 7, 10, 4), tiny, "by hand it is", **defaults)


@TRANSFORMER_FLOPS.check
def conventions_agree_with_flop_counter(transformer_flops):
    """grouped K and V heads, SwiGLU, only the kept scores, no logits: small real models, counted by FlopCounterMode

    Each option alone on one model, then random mixes. The kept-scores model scores each query against the keys it
    may see only, row by row, so FlopCounterMode counts the matmuls that count_masked=False describes."""
    shape = (2, 12, 6, 20, 17, 9)
    for options in ({"n_kv_heads": 2}, {"n_kv_heads": 1}, {"swiglu": True}, {"count_masked": False},
                    {"logits": False}):
        expect_transformer(transformer_flops, shape, counted_transformer(*shape, **options), **options)
    for i in range(3):
        kv_heads = randint(1, 3)
        heads = kv_heads * randint(1, 3)
        shape = (randint(1, 3), heads * randint(1, 4), heads, randint(1, 30), randint(2, 30), randint(2, 10))
        options = {"n_kv_heads": kv_heads, "swiglu": randint(0, 1) == 1, "count_masked": randint(0, 1) == 1,
                   "logits": randint(0, 1) == 1}
        expect_transformer(transformer_flops, shape, counted_transformer(*shape, fused=i % 2 == 1, **options),
                           **options)


@TRANSFORMER_FLOPS.check
def shapes_no_tensor_can_hold(transformer_flops):
    """d_model 2**32, and a context of 2**33 tokens: exact ints from the sizes alone

    A 2**32 x 2**32 projection, or a 2**33 x 2**33 score matrix, has more than 2**63 elements: no tensor of that size
    can exist, not even on the meta device, so a model run under a counter fails while arithmetic does not."""
    transformer_flops = at_sizes_no_tensor_can_hold(transformer_flops, "transformer_flops")
    expect_transformer(transformer_flops, (1, 2**32, 16, 3, 5, 2), {
        "total": 295_147_905_437_050_863_616, "projections": 295_147_905_179_352_825_856, "attention": 68_719_476_736,
        "mlp": 103_079_215_104, "unembedding": 85_899_345_920, "kv": 147_573_952_589_676_412_928, "left_out": 0},
        "the count is")
    expect_transformer(transformer_flops, (2, 64, 4, 100, 1000, 2**33), {
        "total": 37_778_933_965_223_394_017_280, "projections": 562_949_953_421_312,
        "attention": 37_778_931_862_957_161_709_568, "mlp": 439_804_651_110_400, "unembedding": 1_099_511_627_776_000,
        "kv": 281_474_976_710_656, "left_out": 0}, "the count is")
    expect_transformer(transformer_flops, (1, 2**32, 16, 3, 5, 2), {
        "total": 184_467_440_943_253_946_368, "projections": 184_467_440_737_095_516_160, "attention": 51_539_607_552,
        "mlp": 154_618_822_656, "unembedding": 0, "kv": 36_893_488_147_419_103_232, "left_out": 85_899_345_920},
        "the count is", n_kv_heads=4, swiglu=True, count_masked=False, logits=False)


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


# ---------------------------------------------------------------- adamw_step_flops

# FLOPs per element of the elementwise operations an optimizer step runs, each add, subtract, multiply, divide and
# square root one FLOP: lerp(a, b, w) = a + w (b - a) is 3; addcmul(a, t1, t2, value) = a + value t1 t2 and
# addcdiv(a, t1, t2, value) = a + value t1 / t2 are 3 with value != 1, as AdamW passes them. Operations on 0-d tensors
# (the step counter) and on Python floats (the bias corrections, the step size) are not per parameter, so not counted.
ELEMENTWISE_FLOPS = {"add": 1, "sub": 1, "mul": 1, "div": 1, "sqrt": 1, "lerp": 3, "addcmul": 3, "addcdiv": 3}


class _ElementwiseCounter(TorchDispatchMode):
    """Counts ELEMENTWISE_FLOPS per element of every operation on tensors of one or more dimensions (torch's
    FlopCounterMode counts matmuls only, and an optimizer step runs none). An operation it has no count for is
    recorded in `unknown`, so a change in torch's AdamW fails loudly instead of counting wrong."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.unknown: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        first = args[0] if args else None
        selves = first if isinstance(first, (list, tuple)) else [first]
        elements = sum(t.numel() for t in selves if isinstance(t, _Tensor) and t.dim() > 0)
        if elements:
            name = func.overloadpacket.__name__.removeprefix("_foreach_").rstrip("_")
            if name in ELEMENTWISE_FLOPS:
                self.flops += ELEMENTWISE_FLOPS[name] * elements
            else:
                self.unknown.add(str(func))
        return out


def counted_adamw(sizes: list[int], weight_decay: bool, foreach: bool = False) -> int:
    """The elementwise FLOPs of one step of torch.optim.AdamW on parameters of `sizes` elements (the oracle: the
    operations torch's own AdamW runs, counted by ELEMENTWISE_FLOPS). The first step, which creates the moments,
    runs untimed before the counted one."""
    params = [_Parameter(_randn(n)) for n in sizes]
    optimizer = _AdamW(params, lr=1e-3, weight_decay=0.01 if weight_decay else 0.0, foreach=foreach)
    for p in params:
        p.grad = _randn(p.shape)
    optimizer.step()
    with _ElementwiseCounter() as counter:
        optimizer.step()
    if counter.unknown:
        raise RuntimeError(f"the AdamW oracle met operations it has no FLOP count for: {sorted(counter.unknown)} "
                           "(grader/exercises/flops.py, ELEMENTWISE_FLOPS)")
    return counter.flops


def _adamw_hint(got: int, want: int, n: int, weight_decay: bool) -> str:
    if n and got == want + n:
        return (" (one FLOP per parameter too many: the bias correction of the first moment? torch folds "
                "1 / (1 - beta1^t) into the step size, a Python float, and divides only sqrt(v) per element)"
                if weight_decay else
                " (one FLOP per parameter too many: with weight_decay=False torch skips the decay p *= 1 - lr wd)")
    if n and got == want - n:
        return (" (one FLOP per parameter missing: the decoupled weight decay p *= 1 - lr wd, the square root, the "
                "division of sqrt(v) by sqrt(1 - beta2^t), or the + eps?")
    return factor_hint(got, want)


def expect_adamw(adamw_step_flops, n: int, weight_decay: bool, want: int) -> None:
    what = f"adamw_step_flops({n}, weight_decay={weight_decay})"
    got = expect_int(adamw_step_flops(n, weight_decay=weight_decay), what)
    if got != want:
        fail(f"{what} returned {got:,} ({got / n:g} per parameter); torch.optim.AdamW runs {want:,} "
             f"({want // n} per parameter)" + _adamw_hint(got, want, n, weight_decay))


@ADAMW_STEP_FLOPS.check
def a_thousand_parameters(adamw_step_flops):
    """1,000 parameters, with and without weight decay: counted by hand from the update rule torch runs; a Python int"""
    expect_adamw(adamw_step_flops, 1000, True, 14_000)
    expect_adamw(adamw_step_flops, 1000, False, 13_000)
    got = expect_int(adamw_step_flops(1000), "adamw_step_flops(1000)")
    expect(got == 14_000, f"adamw_step_flops(1000) returned {got:,}; weight_decay defaults to True (AdamW's default "
                          "decay is 0.01), so it should count the decay: 14,000")


@ADAMW_STEP_FLOPS.check
def counts_what_torch_adamw_runs(adamw_step_flops):
    """torch.optim.AdamW stepping real parameters, with and without weight decay: its elementwise operations counted

    One FLOP per element for each add, multiply, divide or square root; lerp, addcmul and addcdiv are three each."""
    for sizes in ([12, 30], [7], [randint(1, 200) for _ in range(randint(1, 5))]):
        for weight_decay in (True, False):
            expect_adamw(adamw_step_flops, sum(sizes), weight_decay, counted_adamw(sizes, weight_decay))


@ADAMW_STEP_FLOPS.check
def shapes_no_tensor_can_hold(adamw_step_flops):
    """2**64 + 3 parameters: an exact int (no tensor, meta included, has that many elements)"""
    adamw_step_flops = at_sizes_no_tensor_can_hold(adamw_step_flops, "adamw_step_flops")
    expect_adamw(adamw_step_flops, 2**64 + 3, True, 258_254_417_031_933_722_666)
    expect_adamw(adamw_step_flops, 2**64 + 3, False, 239_807_672_958_224_171_047)


# ---------------------------------------------------------------- decode_intensity and ridge_batch

def measured_intensity(batch: int, d_model: int, bytes_per_element: int) -> Fraction:
    """FLOPs per byte of a real bias-free nn.Linear(d_model, d_model) on a (batch, d_model) input (the oracle): the
    FLOPs FlopCounterMode counts over the bytes of the weight and the input, read once, and the output, written once.
    On the meta device only shapes exist, so any size that fits a tensor costs nothing."""
    dtype = _DTYPE_OF_BYTES[bytes_per_element]
    layer = _Linear(d_model, d_model, bias=False, device="meta", dtype=dtype)
    x = _empty(batch, d_model, device="meta", dtype=dtype)
    with _Counter(display=False) as counter:
        out = layer(x)
    return Fraction(counter.get_total_flops(), layer.weight.nbytes + x.nbytes + out.nbytes)


def measurable_intensity(batch: int, d_model: int, bytes_per_element: int) -> float | None:
    """measured_intensity where a meta tensor of these sizes can exist (for hints), else None."""
    if bytes_per_element not in _DTYPE_OF_BYTES or max(d_model, batch) * d_model * bytes_per_element >= 2**62:
        return None
    return float(measured_intensity(batch, d_model, bytes_per_element))


def _intensity_hint(got: float, batch: int, d: int, b: int) -> str:
    """The named mistake a wrong intensity matches: bytes of the weights only, of the activations only, the output
    forgotten, or upside down (the ratios follow from which bytes were left out, whatever the right count is)."""
    flops = 2 * batch * d * d
    for nbytes, why in ((b * d * d, "the weights' bytes only: the input is read and the output written too"),
                        (2 * b * batch * d, "the activations' bytes only: the d_model x d_model weights are read too"),
                        (b * (d * d + batch * d), "the output forgotten: batch x d_model elements written to memory")):
        if close(got, flops / nbytes, 1e-6):
            return f" ({why})"
    want = measurable_intensity(batch, d, b)
    if want is not None and got and close(1 / got, want, 1e-6):
        return " (upside down: FLOPs per byte, not bytes per FLOP)"
    return ""


def expect_decode(decode_intensity, batch: int, d: int, b: int, want: float) -> None:
    what = f"decode_intensity({batch}, {d}, {b})"
    got = expect_number(decode_intensity(batch, d, b), what)
    if not close(got, want):
        fail(f"{what} returned {got:.6g}; a ({batch}, {d}) @ ({d}, {d}) matmul in {b}-byte elements does {want:.6g} "
             "FLOPs per byte" + (_intensity_hint(got, batch, d, b) or factor_hint(got, want)))


@DECODE_INTENSITY.check
def batch_one_is_near_one(decode_intensity):
    """batch 1, d_model 8192, bfloat16: 0.99976 FLOP/byte; batch 512, d_model 4096: 409.6; float32 halves both"""
    expect_decode(decode_intensity, 1, 8192, 2, 8192 / 8194)
    expect_decode(decode_intensity, 512, 4096, 2, 409.6)
    expect_decode(decode_intensity, 1, 8192, 4, 4096 / 8194)
    expect_decode(decode_intensity, 512, 4096, 4, 204.8)


@DECODE_INTENSITY.check
def agrees_with_a_real_linear(decode_intensity):
    """random sizes in float32, bfloat16 and float64: FlopCounterMode on a real nn.Linear, over its tensors' bytes

    The FLOPs counted for one forward call, over the bytes of its weight and input (read) and output (written)."""
    for _ in range(8):
        batch, d, b = randint(1, 4096), randint(1, 8192), (2, 4, 8)[randint(0, 2)]
        expect_decode(decode_intensity, batch, d, b, float(measured_intensity(batch, d, b)))


@DECODE_INTENSITY.check
def shapes_no_tensor_can_hold(decode_intensity):
    """batch 3 and batch 2**40 on d_model 2**33 (a 2**66-element weight): 2.99999999790 and 8,556,510,721.99 FLOP/byte"""
    decode_intensity = at_sizes_no_tensor_can_hold(decode_intensity, "decode_intensity")
    expect_decode(decode_intensity, 3, 2**33, 2, 2.999999997904524)
    expect_decode(decode_intensity, 2**40, 2**33, 1, 8_556_510_721.992218)


def ridge(peak: float, bandwidth: float) -> Fraction:
    """The ridge point, peak / bandwidth, exactly (a float is an exact binary fraction)."""
    return Fraction(peak) / Fraction(bandwidth)


def expect_ridge_batch(ridge_batch, d: int, b: int, peak: float, bandwidth: float, want: int | None) -> None:
    what = f"ridge_batch({d}, {b}, {peak:g}, {bandwidth:g})"
    got = ridge_batch(d, b, peak, bandwidth)
    at = float(ridge(peak, bandwidth))
    if want is None:
        expect(got is None, f"{what} returned {describe(got)}; no batch reaches the ridge, {at:.6g} FLOP/byte: as the "
                            f"batch grows the intensity only approaches d_model / bytes_per_element = {d / b:g}, so "
                            "return None")
        return
    if got is None:
        fail(f"{what} returned None; batch {want:,} reaches the ridge, {at:.6g} FLOP/byte (the intensity approaches "
             f"d_model / bytes_per_element = {d / b:g}, which is above it)")
    got = expect_int(got, what)
    if got != want:
        hint = ""
        if 1 <= got < want:
            reached = measurable_intensity(got, d, b)
            hint = ": at that batch the intensity is still below the ridge (memory-bound)" if reached is None else \
                f": at batch {got:,} the intensity is {reached:.6g}, still below the ridge (memory-bound)"
        elif got > want >= 1:
            before = measurable_intensity(got - 1, d, b)
            shown = "" if before is None else f", with intensity {before:.6g}"
            hint = f": batch {got - 1:,} already reaches it{shown}; return the smallest batch"
        fail(f"{what} returned {got:,}; the smallest batch whose intensity reaches the ridge, {at:.6g} FLOP/byte, is "
             f"{want:,}{hint}")


@RIDGE_BATCH.check
def an_h100_in_bf16(ridge_batch):
    """an H100 SXM (989.5 TFLOP/s, 3.35 TB/s) in bfloat16: batch 319 at d_model 8192, 346 at d_model 4096"""
    expect_ridge_batch(ridge_batch, 8192, 2, 989.5e12, 3.35e12, 319)
    expect_ridge_batch(ridge_batch, 4096, 2, 989.5e12, 3.35e12, 346)


@RIDGE_BATCH.check
def too_narrow_to_reach_the_ridge(ridge_batch):
    """d_model 512 or 590 in bfloat16 never reach the H100's ridge (None); 591 just does, at batch 687,994

    The intensity approaches d_model / bytes_per_element as the batch grows: 295 < 295.37 < 295.5."""
    expect_ridge_batch(ridge_batch, 512, 2, 989.5e12, 3.35e12, None)
    expect_ridge_batch(ridge_batch, 590, 2, 989.5e12, 3.35e12, None)
    expect_ridge_batch(ridge_batch, 591, 2, 989.5e12, 3.35e12, 687_994)


@RIDGE_BATCH.check
def a_crossing_past_a_million(ridge_batch):
    """d_model 591 in bfloat16 at 989.82 TFLOP/s and 3.35 TB/s: batch 2,785,637 (a search that stops at a million
    says None)"""
    expect_ridge_batch(ridge_batch, 591, 2, 989.82e12, 3.35e12, 2_785_637)


@RIDGE_BATCH.check
def exactly_at_the_ridge(ridge_batch):
    """ridge 100 FLOP/byte (1e12 FLOP/s, 1e10 B/s), 2-byte elements: d_model 400 reaches it at batch 200, 200 never

    At batch 200 the intensity equals the ridge, where the roofline's two limits meet, so it already attains the peak;
    d_model 200 only approaches it as the batch grows (None)."""
    expect_ridge_batch(ridge_batch, 400, 2, 1e12, 1e10, 200)
    expect_ridge_batch(ridge_batch, 200, 2, 1e12, 1e10, None)


@RIDGE_BATCH.check
def the_smallest_batch_on_random_devices(ridge_batch):
    """random widths, element sizes and devices: the batch returned reaches the ridge, the one before it does not

    Both intensities measured with FlopCounterMode on a real nn.Linear."""
    for _ in range(6):
        b = (2, 4, 8)[randint(0, 2)]
        peak, bandwidth = randint(1, 2000) * 1e12, randint(500, 8000) * 1e9
        at = ridge(peak, bandwidth)
        d = int(at * b * (1 + randint(5, 300) / 100)) + 1  # wide enough to reach it
        got = expect_int(ridge_batch(d, b, peak, bandwidth), f"ridge_batch({d}, {b}, {peak:g}, {bandwidth:g})")
        what = f"ridge_batch({d}, {b}, {peak:g}, {bandwidth:g}) returned {got:,}"
        expect(got >= 1, f"{what}; a batch is at least 1")
        reached = measured_intensity(got, d, b)
        expect(reached >= at, f"{what}, but at that batch the intensity is {float(reached):.6g}, below the ridge "
                              f"{float(at):.6g} FLOP/byte")
        if got > 1:
            before = measured_intensity(got - 1, d, b)
            expect(before < at, f"{what}, but batch {got - 1:,} already reaches the ridge {float(at):.6g} FLOP/byte "
                                f"(intensity {float(before):.6g}): return the smallest batch")


@RIDGE_BATCH.check
def shapes_no_tensor_can_hold(ridge_batch):
    """d_model 2**33 on an H100 SXM (a 2**66-element weight): batch 296 in bfloat16, 148 in 1-byte elements"""
    ridge_batch = at_sizes_no_tensor_can_hold(ridge_batch, "ridge_batch")
    expect_ridge_batch(ridge_batch, 2**33, 2, 989.5e12, 3.35e12, 296)
    expect_ridge_batch(ridge_batch, 2**33, 1, 989.5e12, 3.35e12, 148)
