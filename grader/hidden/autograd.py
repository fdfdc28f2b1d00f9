"""Chapter 05 (autograd): hidden checks, run only at grading."""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from grader.exercises.autograd import (ACCUMULATE_STEP, DERIVE, GRADIENT_NORM_PENALTY, JACOBIAN, LINEAR_LOSS_GRAD,
                                       PENALTY_STEP_FLOPS, SILU, VJP, at_sizes_no_tensor_can_hold, batches,
                                       expect_accumulate, expect_computed, expect_jacobian, expect_linear_grad,
                                       expect_made_of_vjps, expect_no_trace, expect_one_backward, expect_penalty,
                                       expect_penalty_flops, expect_silu, expect_vjp)
from grader.expect import expect, expect_tensor, fail
from grader.guard import lineage_text
from grader.inputs import layouts, randint
from grader.scenario import run_scenario, tracing
from grader.scenarios import autograd as scenarios

# torch's own counter and what the real step is made of, bound at import (the oracle for penalty_step_flops).
_Counter, _grad, _mse_loss = FlopCounterMode, torch.autograd.grad, F.mse_loss
_Linear, _Tanh, _Sequential, _randn = torch.nn.Linear, torch.nn.Tanh, torch.nn.Sequential, torch.randn


@LINEAR_LOSS_GRAD.hidden
def random_shapes_and_layouts(linear_loss_grad):
    """random batch, input and output sizes (1 included), float32 and float64, non-contiguous inputs"""
    sizes = [(1, 3, 2), (5, 1, 1)] + [(randint(2, 9), randint(2, 6), randint(1, 4)) for _ in range(3)]
    for i, (b, d_in, d_out) in enumerate(sizes):
        dtype = torch.float64 if i % 2 else torch.float32
        x, w, t = (torch.randn(b, d_in, dtype=dtype), torch.randn(d_in, d_out, dtype=dtype),
                   torch.randn(b, d_out, dtype=dtype))
        for (name, xv), (_, wv), (_, tv) in zip(layouts(x), layouts(w), layouts(t)):
            expect_linear_grad(linear_loss_grad, xv, wv, tv,
                               f"x {tuple(x.shape)}, w {tuple(w.shape)}, {str(dtype)[6:]}, {name}")


@LINEAR_LOSS_GRAD.hidden
def about_one_matrix_product_of_work(linear_loss_grad):
    """the gradient is derived, not measured: no loss evaluated at nudged weights (finite differences), no forward
    pass per weight"""
    b, d_in, d_out = randint(12, 20), randint(20, 28), randint(16, 24)
    x, w, t = torch.randn(b, d_in), torch.randn(d_in, d_out), torch.randn(b, d_out)
    how = f"x ({b}, {d_in}), w ({d_in}, {d_out}), target ({b}, {d_out})"
    made = expect_linear_grad(linear_loss_grad, x, w, t, how).made
    # x.T @ (x @ w - target) produces b*d_in + 2*b*d_out + d_in*d_out values; a broadcast outer product summed over
    # the batch, b*d_in*d_out. Finite differences evaluate the loss 2*d_in*d_out times (each b*d_out values at least).
    unit = b * d_in * d_out
    allowed = 4 * unit + 10 * (b * d_in + b * d_out + d_in * d_out)
    expect(made <= allowed, f"linear_loss_grad({how})'s tensor operations produced {made:,} values, {made / unit:.0f} "
                            f"times the {unit:,} products of x.T @ r, where a derivation stays under "
                            f"{allowed / unit:.0f} times: the loss evaluated at nudged weights (finite differences), "
                            "or a forward pass per weight. Derive dL/dw by the chain rule and compute it once, with "
                            "matrix operations")


@LINEAR_LOSS_GRAD.hidden
def computed_from_its_arguments(linear_loss_grad):
    """the gradient's values are computed from x, w and target by torch operations, not from Python numbers"""
    b, d_in, d_out = randint(3, 8), randint(2, 6), randint(2, 4)
    x, w, t = torch.randn(b, d_in), torch.randn(d_in, d_out), torch.randn(b, d_out)
    want = (x.double().T @ (x.double() @ w.double() - t.double())).float()
    what = f"linear_loss_grad(x ({b}, {d_in}), w ({d_in}, {d_out}), target ({b}, {d_out}))"
    with tracing(lineage=True) as trace:
        got = run_scenario(scenarios.linear_grad_marked, linear_loss_grad, x.clone(), w.clone(), t.clone())
    expect_tensor(got, want, what, rtol=1e-5, atol=1e-5)
    expect_computed(trace.lineage, what, got)
    if scenarios.LINEAR_MARK not in trace.lineage:
        came = lineage_text(trace.lineage, 6) or "no tensor operation"
        fail(f"{what}: the result's values were not computed from target (and x and w) by torch operations (they "
             f"came from {came}): numbers computed in Python (.tolist(), .item()) and put back into tensors do not "
             f"count. {DERIVE}")


@VJP.hidden
def one_backward_pass_wide(vjp):
    """a VJP is one backward pass: f: (8,) -> (8, 50) must not be differentiated 400 times (no full Jacobian)"""
    x, v = torch.randn(8, dtype=torch.float64), torch.randn(8, 50, dtype=torch.float64)
    expect_one_backward(expect_vjp(vjp, "wide", x, v, "f: (8,) -> (8, 50)"), "f: (8,) -> (8, 50)")


@VJP.hidden
def leaves_no_trace(vjp):
    """the result carries no graph, x keeps no .grad and does not start requiring grad"""
    x, v = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    expect_no_trace(expect_vjp(vjp, "cumsum_tanh", x, v, "f: (3, 4) -> (3, 4)", watch_x=True), "f: (3, 4) -> (3, 4)")


@VJP.hidden
def any_shapes(vjp):
    """a 0-dim output (v a 0-dim tensor) from a 3-D x, and a 0-dim x"""
    x = torch.randn(2, 3, 2, dtype=torch.float64)
    expect_one_backward(expect_vjp(vjp, "total", x, torch.tensor(0.7, dtype=torch.float64),
                                   "f: (2, 3, 2) -> ()"), "f: (2, 3, 2) -> ()")
    expect_vjp(vjp, "square", torch.tensor(1.5, dtype=torch.float64), torch.tensor(-2.0, dtype=torch.float64),
               "f(x) = x ** 2 with x 0-dim")


@JACOBIAN.hidden
def random_shapes(jacobian):
    """(3, 4) inputs, wide outputs, 0-dim outputs and inputs, every named function"""
    expect_jacobian(jacobian, "cumsum_tanh", torch.randn(3, 4, dtype=torch.float64), "f: (3, 4) -> (3, 4)")
    expect_jacobian(jacobian, "wide", torch.randn(3, dtype=torch.float64), "f: (3,) -> (3, 50)")
    expect_jacobian(jacobian, "outer", torch.randn(2, 2, dtype=torch.float64), "f: (2, 2) -> (4, 4)")
    expect_jacobian(jacobian, "total", torch.randn(2, 3, 2, dtype=torch.float64), "f: (2, 3, 2) -> ()")
    expect_jacobian(jacobian, "square", torch.tensor(0.3, dtype=torch.float64), "f(x) = x ** 2 with x 0-dim")


@JACOBIAN.hidden
def built_from_vjps(jacobian):
    """the Jacobian comes from backward passes through f (reverse mode), and x is left as it was"""
    out = expect_jacobian(jacobian, "mixed", torch.randn(5, dtype=torch.float64), "f: (5,) -> (3,)", count_passes=True)
    expect_made_of_vjps(out, "f: (5,) -> (3,)")


@GRADIENT_NORM_PENALTY.hidden
def deeper_model(gradient_norm_penalty):
    """three layers, a bias-free one among them, another seed"""
    spec = [["Linear", 4, 6], ["Tanh"], ["Linear", 6, 5, {"bias": False}], ["Sigmoid"], ["Linear", 5, 3]]
    expect_penalty(gradient_norm_penalty, spec, 7, 6, "a 3-layer model")


@GRADIENT_NORM_PENALTY.hidden
def one_row_one_layer(gradient_norm_penalty):
    """a single Linear layer and a batch of one row"""
    expect_penalty(gradient_norm_penalty, [["Linear", 2, 3]], 11, 1, "one Linear(2, 3), one row")


@SILU.hidden
def differentiable_backward(SiLU, silu):
    """gradgradcheck: the backward is itself differentiable (needed for second derivatives)"""
    out = expect_silu(SiLU, silu, torch.randn(8, dtype=torch.float64), "x = randn(8), float64")
    expect(out["gradgradcheck"], f"gradgradcheck(silu, x) failed: {out['gradgradcheck_error']}")


@SILU.hidden
def large_values_and_shapes(SiLU, silu):
    """large magnitudes (no overflow to inf or NaN in forward or backward) and a 2-D input"""
    expect_silu(SiLU, silu, torch.tensor([-800.0, -80.0, -30.0, 0.0, 30.0, 80.0, 800.0], dtype=torch.float64),
                "large values")
    expect_silu(SiLU, silu, torch.randn(3, 4, dtype=torch.float64), "x of shape (3, 4)")


@ACCUMULATE_STEP.hidden
def adam_and_cross_entropy(accumulate_step):
    """3 micro-batches of 5 rows, cross-entropy, Adam, float64"""
    spec = [["Linear", 3, 6], ["ReLU"], ["Linear", 6, 4]]
    expect_accumulate(accumulate_step, spec, 3, "float64", "cross_entropy", "adam", 0.01,
                      batches(3, 5, 3, 0, classes=4, dtype=torch.float64), False,
                      "3 micro-batches of 5, cross-entropy, Adam(lr=0.01)")


@ACCUMULATE_STEP.hidden
def one_micro_batch(accumulate_step):
    """a single micro-batch is an ordinary step"""
    spec = [["Linear", 3, 4], ["Tanh"], ["Linear", 4, 2]]
    expect_accumulate(accumulate_step, spec, 4, "float32", "mse", "sgd", 0.5, batches(1, 6, 3, 2), True,
                      "1 micro-batch of 6 and stale gradients")


@ACCUMULATE_STEP.hidden
def many_micro_batches_float64(accumulate_step):
    """8 micro-batches of 2 rows, a deeper model, SGD(lr=0.05), stale gradients, float64"""
    spec = [["Linear", 5, 8], ["Tanh"], ["Linear", 8, 8], ["ReLU"], ["Linear", 8, 3]]
    expect_accumulate(accumulate_step, spec, 5, "float64", "mse", "sgd", 0.05,
                      batches(8, 2, 5, 3, dtype=torch.float64), True, "8 micro-batches of 2, float64")


def counted_penalty_step(batch: int, dims: list[int]) -> dict[str, int]:
    """What FlopCounterMode counts in each pass of the notebook's penalty step on a real model: bias-free linear
    layers dims[0] -> dims[1] -> ... with tanh between them, MSE loss, an input that needs no gradient; the gradients
    with create_graph=True, their norm, then the gradient of loss + 0.1 * norm."""
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [_Linear(a, b, bias=False), _Tanh()]
    model = _Sequential(*layers[:-1])
    params = list(model.parameters())
    x, y = _randn(batch, dims[0]), _randn(batch, dims[-1])
    with _Counter(display=False) as forward:
        loss = _mse_loss(model(x), y)
    with _Counter(display=False) as backward:
        grads = _grad(loss, params, create_graph=True)
    penalty = sum((g * g).sum() for g in grads).sqrt()
    with _Counter(display=False) as double:
        _grad(loss + 0.1 * penalty, params)
    counts = {"forward": forward.get_total_flops(), "backward": backward.get_total_flops(),
              "double_backward": double.get_total_flops()}
    return {**counts, "total": sum(counts.values())}


@functools.lru_cache(maxsize=None)
def layer_weights(depth: int) -> dict[str, tuple[int, ...]]:
    """How many times each pass counts each layer's matmul size (2 * batch * d_in * d_out), measured: the real step
    with batch 1 and every width 1 (each layer's size is 2), then with one width 2 at a time. Width j is shared by
    layers j - 1 and j, so growing it adds 2 * (w[j - 1] + w[j]); solved layer by layer, the last width checks it."""
    base = counted_penalty_step(1, [1] * (depth + 1))
    weights: dict[str, list[int]] = {key: [] for key in base}
    for j in range(depth + 1):
        dims = [1] * (depth + 1)
        dims[j] = 2
        grown = counted_penalty_step(1, dims)
        for key, w in weights.items():
            shared = (grown[key] - base[key]) // 2
            if j < depth:
                w.append(shared - (w[-1] if w else 0))
            else:
                assert shared == w[-1], (key, depth, shared, w)  # the counts are linear in the layers' sizes
    assert all(base[key] == 2 * sum(w) for key, w in weights.items()), (base, weights)
    return {key: tuple(w) for key, w in weights.items()}


def extrapolated(batch: int, dims: list[int]) -> dict[str, int]:
    """The counts at any sizes, from the per-layer weights measured on real models of the same depth."""
    weights = layer_weights(len(dims) - 1)
    return {key: sum(c * 2 * batch * a * b for c, a, b in zip(w, dims, dims[1:])) for key, w in weights.items()}


@PENALTY_STEP_FLOPS.hidden
def agrees_with_flop_counter_on_random_models(penalty_step_flops):
    """random batches and widths, 1 to 5 layers: what FlopCounterMode counts on the real penalty step"""
    for depth in (1, 2, 3, 4, 5):
        batch, dims = randint(1, 9), [randint(1, 12) for _ in range(depth + 1)]
        expect_penalty_flops(penalty_step_flops, batch, dims, counted_penalty_step(batch, dims))


@PENALTY_STEP_FLOPS.hidden
def random_sizes_no_tensor_can_hold(penalty_step_flops):
    """random widths from 2**32 to 2**45 (a narrow input too), 1 to 4 layers: exact ints, as measured per layer"""
    fn = at_sizes_no_tensor_can_hold(penalty_step_flops, "penalty_step_flops")
    cases = [(randint(1, 2**24), [randint(2**32, 2**45) for _ in range(depth + 1)]) for depth in (1, 2, 3, 4)]
    cases.append((randint(1, 2**20), [randint(1, 9)] + [randint(2**32, 2**45) for _ in range(3)]))
    for batch, dims in cases:
        expect_penalty_flops(fn, batch, dims, extrapolated(batch, dims))
