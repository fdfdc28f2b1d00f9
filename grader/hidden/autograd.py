"""Chapter 05 (autograd): hidden checks, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.autograd import (ACCUMULATE_STEP, GRADIENT_NORM_PENALTY, JACOBIAN, LINEAR_LOSS_GRAD, SILU, VJP,
                                       batches, expect_accumulate, expect_jacobian, expect_linear_grad,
                                       expect_made_of_vjps, expect_no_trace, expect_one_backward, expect_penalty,
                                       expect_silu, expect_vjp)
from grader.expect import expect
from grader.inputs import layouts, randint


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
