"""Chapter 05 (autograd): hidden checks, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.autograd import (ACCUMULATE_STEP, GRADIENT_NORM_PENALTY, JACOBIAN, LINEAR_LOSS_GRAD, SILU, VJP,
                                       batches, expect_accumulate, expect_jacobian, expect_linear_grad,
                                       expect_penalty, expect_silu, expect_vjp)
from grader.expect import expect, expect_tensor
from grader.inputs import layouts, randint


@LINEAR_LOSS_GRAD.hidden
def random_shapes_and_layouts(linear_loss_grad):
    """random batch, input and output sizes, inputs in non-contiguous layouts"""
    for _ in range(4):
        b, d_in, d_out = randint(1, 9), randint(1, 6), randint(1, 4)
        x, w, t = torch.randn(b, d_in), torch.randn(d_in, d_out), torch.randn(b, d_out)
        for (name, xv), (_, wv) in zip(layouts(x), layouts(w)):
            expect_linear_grad(linear_loss_grad, xv, wv, t, f"x {tuple(x.shape)} ({name}), w {tuple(w.shape)}")


@VJP.hidden
def one_backward_pass(vjp):
    """a VJP is one backward pass: f: (8,) -> (8, 50) must not be differentiated 400 times (no full Jacobian)"""
    x, v = torch.randn(8, dtype=torch.float64), torch.randn(8, 50, dtype=torch.float64)
    out = expect_vjp(vjp, "wide", x, v, "f: (8,) -> (8, 50)")
    expect(out["backward_calls"] == 1, f"vjp(f, x, v) for f: (8,) -> (8, 50) ran {out['backward_calls']} backward "
                                       "passes; a vector-Jacobian product needs exactly one (never build the Jacobian)")


@VJP.hidden
def leaves_no_trace(vjp):
    """the result carries no graph and x keeps no .grad"""
    x, v = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    out = expect_vjp(vjp, "cumsum_tanh", x, v, "f: (3, 4) -> (3, 4)")
    expect(not out["vjp"].requires_grad, "vjp(f, x, v) returned a tensor that still requires grad; detach it")
    expect(out["x_grad"] is None, "vjp(f, x, v) left a gradient in x.grad; work on a detached copy of x")
    expect(out["x_unchanged"], "vjp(f, x, v) changed x")


@JACOBIAN.hidden
def random_shapes(jacobian):
    """(3, 4) inputs, wide outputs, every named function"""
    expect_jacobian(jacobian, "cumsum_tanh", torch.randn(3, 4, dtype=torch.float64), "f: (3, 4) -> (3, 4)")
    expect_jacobian(jacobian, "wide", torch.randn(3, dtype=torch.float64), "f: (3,) -> (3, 50)")
    expect_jacobian(jacobian, "outer", torch.randn(5, dtype=torch.float64), "f: (5,) -> (5, 5)")


@SILU.hidden
def differentiable_backward(SiLU, silu):
    """gradgradcheck: the backward is itself differentiable (needed for second derivatives)"""
    out = expect_silu(SiLU, silu, torch.randn(8, dtype=torch.float64), "x = randn(8), float64")
    expect(out["gradgradcheck"], f"gradgradcheck(silu, x) failed: {out['gradgradcheck_error']}")


@SILU.hidden
def large_values_and_shapes(SiLU, silu):
    """large magnitudes (no overflow to NaN) and a 2-D input"""
    expect_silu(SiLU, silu, torch.tensor([-80.0, -30.0, 0.0, 30.0, 80.0], dtype=torch.float64), "large values")
    expect_silu(SiLU, silu, torch.randn(3, 4, dtype=torch.float64), "x of shape (3, 4)")


@GRADIENT_NORM_PENALTY.hidden
def deeper_model(gradient_norm_penalty):
    """three layers, another seed"""
    spec = [["Linear", 4, 6], ["Tanh"], ["Linear", 6, 5], ["Sigmoid"], ["Linear", 5, 3]]
    expect_penalty(gradient_norm_penalty, spec, 7)


@ACCUMULATE_STEP.hidden
def adam_and_cross_entropy(accumulate_step):
    """3 micro-batches of 5 rows, cross-entropy, Adam (its step depends on the mean gradient's scale too)"""
    spec = [["Linear", 3, 6], ["ReLU"], ["Linear", 6, 4]]
    expect_accumulate(accumulate_step, spec, 3, "cross_entropy", "adam", 0.01, batches(3, 5, 3, 0, classes=4),
                      False, "3 micro-batches of 5, cross-entropy, Adam(lr=0.01)")


@ACCUMULATE_STEP.hidden
def one_micro_batch(accumulate_step):
    """a single micro-batch is an ordinary step"""
    spec = [["Linear", 3, 4], ["Tanh"], ["Linear", 4, 2]]
    expect_accumulate(accumulate_step, spec, 4, "mse", "sgd", 0.5, batches(1, 6, 3, 2), True,
                      "1 micro-batch of 6 and stale gradients")
