"""Chapter 05 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail, each with a message a student can read."""
from __future__ import annotations

import functools
import inspect

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from grader import registry
from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, failures, ids


# ---------------------------------------------------------------- correct, written differently

def linear_grad_einsum(x, w, target):
    residual = torch.einsum("bi,io->bo", x, w) - target
    return torch.einsum("bi,bo->io", x, residual)


def linear_grad_addmm(x, w, target):
    return torch.mm(x.t(), torch.addmm(-target, x, w))


def linear_grad_rows(x, w, target):
    """One outer product per row of the batch, summed."""
    residual = x @ w - target
    total = torch.zeros_like(w)
    for i in range(x.shape[0]):
        total += torch.outer(x[i], residual[i])
    return total


def linear_grad_outer_broadcast(x, w, target):
    """Every row's outer product at once, broadcast, summed over the batch: batch*d_in*d_out values, no loop."""
    return (x.unsqueeze(2) * (x @ w - target).unsqueeze(1)).sum(0)


def linear_grad_columns(x, w, target):
    """One matrix-vector product per output column."""
    return torch.stack([x.T @ (x @ w[:, j] - target[:, j]) for j in range(w.shape[1])], dim=1)


def linear_grad_entries(x, w, target):
    """Entry by entry from the derived formula, the residual computed once (slow, but derived)."""
    residual = x @ w - target
    grad = torch.empty_like(w)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            grad[i, j] = (x[:, i] * residual[:, j]).sum()
    return grad


def linear_grad_rows_scaled_by_index(x, w, target):
    """One outer product per row, each times (i + 1) / (i + 1): a different Python number per row, none a value."""
    g = torch.zeros_like(w)
    for i in range(x.shape[0]):
        g += torch.outer(x[i], x[i] @ w - target[i]) * (i + 1) / (i + 1)
    return g


def linear_grad_running_mean(x, w, target):
    """The mean of the rows' outer products kept as a running mean (weights i / (i + 1), 1 / (i + 1)), times b."""
    g = torch.zeros_like(w)
    for i in range(x.shape[0]):
        g = g * (i / (i + 1)) + torch.outer(x[i], x[i] @ w - target[i]) / (i + 1)
    return g * x.shape[0]


def linear_grad_float64_printing(x, w, target):
    """In float64 and back, printing the residual on the way (printing takes Python numbers from tensors)."""
    residual = x.double() @ w.double() - target.double()
    print("residual:", residual[0])
    return (x.double().T @ residual).to(w.dtype)


def linear_grad_item_printing(x, w, target):
    """Derived, printing the loss with .item() and a residual row with .tolist() on the way (Python numbers)."""
    residual = x @ w - target
    print(f"loss {0.5 * (residual ** 2).sum().item():.4f}, first residual row {residual[0].tolist()}")
    return x.T @ residual


def vjp_backward(f, x, v):
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    y.backward(v)
    return x.grad.detach()


def vjp_grad(f, x, v):
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(f(x), x, grad_outputs=v)
    return g


def vjp_inputs(f, x, v):
    """torch.autograd.backward with inputs=, under enable_grad (works inside no_grad too)."""
    with torch.enable_grad():
        leaf = torch.zeros_like(x).copy_(x).requires_grad_()
        torch.autograd.backward(f(leaf), grad_tensors=v, inputs=[leaf])
    return leaf.grad


def jacobian_rows(f, x):
    y = f(x.detach())
    rows = []
    for i in range(y.numel()):
        v = torch.zeros(y.numel(), dtype=y.dtype)
        v[i] = 1
        rows.append(vjp_grad(f, x, v.view_as(y)))
    return torch.stack(rows).reshape(y.shape + x.shape)


def jacobian_eye(f, x):
    y = f(x)
    eye = torch.eye(y.numel(), dtype=y.dtype)
    return torch.stack([vjp_backward(f, x, e.reshape(y.shape)) for e in eye]).reshape(y.shape + x.shape)


def jacobian_one_graph(f, x):
    """One forward, then one backward per output element on the retained graph."""
    xr = x.detach().requires_grad_()
    y = f(xr).reshape(-1)
    rows = [torch.autograd.grad(y[i], xr, retain_graph=True)[0] for i in range(y.numel())]
    return torch.stack(rows).reshape(f(x).shape + x.shape)


def jacobian_batched(f, x):
    """Right values, but every row in one batched backward pass (issue 26): not one VJP per output element."""
    xr = x.detach().requires_grad_()
    y = f(xr)
    eye = torch.eye(y.numel(), dtype=y.dtype).reshape(y.numel(), *y.shape)
    (jac,) = torch.autograd.grad(y, xr, eye, is_grads_batched=True)
    return jac.reshape(y.shape + x.shape)


def penalty_cat(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return torch.cat([g.reshape(-1) for g in grads]).norm()


def penalty_linalg(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def penalty_backward_cleaned(loss, params):
    """backward(create_graph=True) into .grad, read, then the .grad fields reset: allowed, if clumsy."""
    loss.backward(create_graph=True, inputs=params)
    grads = [p.grad for p in params]
    for p in params:
        p.grad = None
    return torch.stack([(g * g).sum() for g in grads]).sum().sqrt()


class SiLUSaveSigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_out):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad_out * (s + x * s * (1 - s))


def silu_save_sigmoid(x):
    return SiLUSaveSigmoid.apply(x)


class SiLUTanh(torch.autograd.Function):
    """sigmoid(x) = (1 + tanh(x / 2)) / 2, from which everything follows."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * (1 + torch.tanh(x / 2)) / 2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = (1 + torch.tanh(x / 2)) / 2
        return g * s * (1 + x - x * s)


def silu_tanh(x):
    return SiLUTanh.apply(x)


class SiLUSavesOutput(torch.autograd.Function):
    """Saves the input and the output: the derivative is y + s (1 - y)."""
    @staticmethod
    def forward(ctx, x):
        y = x * torch.sigmoid(x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * (y + s * (1 - y))


def silu_saves_output(x):
    return SiLUSavesOutput.apply(x)


class SiLUSetupContext(torch.autograd.Function):
    """The torch 2 style: forward without ctx, and setup_context."""
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s))


def silu_setup_context(x):
    return SiLUSetupContext.apply(x)


def accumulate_scaled(model, loss_fn, micro_batches, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()


def accumulate_manual(model, loss_fn, micro_batches, optimizer):
    params = list(model.parameters())
    total = [torch.zeros_like(p) for p in params]
    for x, y in micro_batches:
        grads = torch.autograd.grad(loss_fn(model(x), y), params)
        for t, g in zip(total, grads):
            t += g
    for p, t in zip(params, total):
        p.grad = t / len(micro_batches)
    optimizer.step()


def accumulate_divide_after(model, loss_fn, micro_batches, optimizer):
    model.zero_grad(set_to_none=False)
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p.grad.div_(len(micro_batches))
    optimizer.step()


def psf_closed_form(batch, dims):
    layers = [2 * batch * a * b for a, b in zip(dims, dims[1:])]
    s, first = sum(layers), layers[0]
    return {"forward": s, "backward": 2 * s - first, "double_backward": 6 * s - 4 * first, "total": 9 * s - 5 * first}


def psf_matmul_by_matmul(batch, dims):
    """Every matmul of each pass listed with the operands that need a gradient: a matmul's backward is one matmul of
    its size per such operand."""
    size = [2 * batch * a * b for a, b in zip(dims, dims[1:])]
    forward = sum(size)
    # the forward's matmuls h_(i-1) W_i^T: W_i always needs a gradient, h_(i-1) unless it is x
    backward = sum(s * (1 + (i > 0)) for i, s in enumerate(size))
    # the first backward's matmuls: g_i^T h_(i-1) (g_i depends on the parameters; h_(i-1) unless x) and, above the
    # first layer, g_i W_i (both do); the forward's matmuls are differentiated again too
    recorded = sum(s * (1 + (i > 0)) for i, s in enumerate(size)) + sum(2 * s for s in size[1:])
    double = backward + recorded
    return {"forward": forward, "backward": backward, "double_backward": double, "total": forward + backward + double}


def psf_per_layer(batch, dims):
    """Layer by layer, from the weights per layer: 1 forward, 1 or 2 backward, 2 or 6 double backward."""
    out = dict.fromkeys(("forward", "backward", "double_backward"), 0)
    for i, (a, b) in enumerate(zip(dims, dims[1:])):
        mm = 2 * batch * a * b
        out["forward"] += mm
        out["backward"] += mm if i == 0 else 2 * mm
        out["double_backward"] += 2 * mm if i == 0 else 6 * mm
    return {**out, "total": sum(out.values())}


CORRECT = [
    ("linear_loss_grad", [lambda x, w, target: x.T @ (x @ w - target)]), ("linear_loss_grad", [linear_grad_einsum]),
    ("linear_loss_grad", [linear_grad_addmm]), ("linear_loss_grad", [linear_grad_rows]),
    ("linear_loss_grad", [linear_grad_outer_broadcast]), ("linear_loss_grad", [linear_grad_columns]),
    ("linear_loss_grad", [linear_grad_entries]), ("linear_loss_grad", [linear_grad_float64_printing]),
    ("linear_loss_grad", [linear_grad_item_printing]), ("linear_loss_grad", [linear_grad_rows_scaled_by_index]),
    ("linear_loss_grad", [linear_grad_running_mean]),
    ("vjp", [vjp_backward]), ("vjp", [vjp_grad]), ("vjp", [vjp_inputs]),
    ("jacobian", [jacobian_rows]), ("jacobian", [jacobian_eye]), ("jacobian", [jacobian_one_graph]),
    ("gradient_norm_penalty", [penalty_cat]), ("gradient_norm_penalty", [penalty_linalg]),
    ("gradient_norm_penalty", [penalty_backward_cleaned]),
    ("silu", [SiLUSaveSigmoid, silu_save_sigmoid]), ("silu", [SiLUTanh, silu_tanh]),
    ("silu", [SiLUSavesOutput, silu_saves_output]), ("silu", [SiLUSetupContext, silu_setup_context]),
    ("accumulate_step", [accumulate_scaled]), ("accumulate_step", [accumulate_manual]),
    ("accumulate_step", [accumulate_divide_after]),
    ("penalty_step_flops", [psf_closed_form]), ("penalty_step_flops", [psf_matmul_by_matmul]),
    ("penalty_step_flops", [psf_per_layer]),
]


@pytest.mark.parametrize("name,objs", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, objs):
    assert_passes("autograd", name, *objs)


# ---------------------------------------------------------------- plausible but wrong

def linear_grad_autograd(x, w, target):
    w = w.detach().requires_grad_()
    (0.5 * ((x @ w - target) ** 2).sum()).backward()
    return w.grad


def linear_grad_func(x, w, target):
    return torch.func.grad(lambda w_: 0.5 * ((x @ w_ - target) ** 2).sum())(w)


def linear_grad_in_place(x, w, target):
    target.sub_(x @ w)  # the residual, written into the caller's target
    return -(x.T @ target)


class Liar(torch.Tensor):
    pass


def vjp_full_jacobian(f, x, v):
    y = f(x.detach())
    rows = []
    for i in range(y.numel()):
        xr = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(f(xr).reshape(-1)[i], xr)
        rows.append(g.reshape(-1))
    return (v.reshape(-1) @ torch.stack(rows)).reshape(x.shape)


def vjp_batched_jacobian(f, x, v):
    """The full Jacobian in one batched backward pass, then v^T J: one call, but m times the work."""
    return (v.reshape(-1) @ jacobian_batched(f, x).reshape(v.numel(), -1)).reshape(x.shape)


def vjp_sloppy(f, x, v):
    x.requires_grad_()
    f(x).backward(v)
    return x.grad


def vjp_keeps_graph(f, x, v):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(f(x), x, v, create_graph=True)[0]


def vjp_ignores_v(f, x, v):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(f(x).sum(), x)[0]


def vjp_atleast_1d(f, x, v):
    """Makes x and v at least 1-D "to be safe": a 0-dim x gets a (1,) result, a 0-dim f(x) a v of the wrong shape."""
    x = torch.atleast_1d(x.detach()).requires_grad_()
    (g,) = torch.autograd.grad(f(x), x, grad_outputs=torch.atleast_1d(v))
    return g


def jacobian_numel_rows(f, x):
    """Rows stacked as (f(x).numel(), *x.shape): right unless f(x) is 0-dim (or not 1-D)."""
    y = f(x.detach())
    return jacobian_rows(f, x).reshape(y.numel(), *x.shape)


def jacobian_transposed(f, x):
    j = jacobian_rows(f, x)
    y_dims = j.dim() - x.dim()
    return j.permute(*range(y_dims, j.dim()), *range(y_dims))


def jacobian_flat(f, x):
    return jacobian_rows(f, x).reshape(f(x).numel(), x.numel())


def jacobian_functional(f, x):
    return torch.autograd.functional.jacobian(f, x)


class SiLUByGLU(torch.autograd.Function):
    """SiLU is GLU of [x, x] (glu(a, b) = a * sigmoid(b)): forward with F.glu, backward with aten's glu_backward
    summed over its two halves, the library's derivative under another name."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.glu(torch.cat([x, x], -1), -1)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        a, b = torch.ops.aten.glu_backward(g, torch.cat([x, x], -1), -1).chunk(2, -1)
        return a + b


def jacobian_by_complex_step(f, x):
    """Complex-step differentiation, Im f(x + ih e_j) / h, exact to rounding for an analytic f: no autograd in the
    values; one backward pass per output element run only to be counted (v = 0, thrown away)."""
    x0, h = x.detach(), 1e-30
    cols = []
    for j in range(x0.numel()):
        step = torch.zeros(x0.numel(), dtype=torch.complex128)
        step[j] = 1j * h
        y = f(x0.to(torch.complex128) + step.reshape(x0.shape))
        cols.append((y.imag / h).reshape(-1))
    J = torch.stack(cols, -1).reshape(tuple(y.shape) + tuple(x0.shape)).to(x0.dtype)
    xr = x0.clone().requires_grad_()
    out = f(xr)
    for _ in range(out.numel()):
        torch.autograd.grad(out, xr, torch.zeros_like(out), retain_graph=True)
    return J


def jacobian_finite_differences(f, x, h=1e-6):
    """Central differences in float64: close to the truth, but no autograd at all."""
    y = f(x)
    cols = []
    for j in range(x.numel()):
        e = torch.zeros(x.numel(), dtype=x.dtype)
        e[j] = h
        cols.append(((f(x + e.view_as(x)) - f(x - e.view_as(x))) / (2 * h)).reshape(-1))
    return torch.stack(cols, dim=-1).reshape(y.shape + x.shape)


class SiLUBuiltin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return F.silu(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return g * s * (1 + x * (1 - s))


def silu_builtin(x):
    return SiLUBuiltin.apply(x)


class SiLUAliased(SiLUBuiltin):
    @staticmethod
    def forward(ctx, x):
        from torch.nn.functional import silu as library_silu  # another name for F.silu: refused all the same
        ctx.save_for_backward(x)
        return library_silu(x)


class SiLUModule(SiLUBuiltin):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.SiLU()(x)  # the module calls F.silu


class SiLUCore(SiLUBuiltin):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch._C._nn.silu(x)  # what F.silu calls


class SiLUAten(SiLUBuiltin):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.ops.aten.silu(x)  # the aten op F.silu ends in


class SiLUAtenBackward(torch.autograd.Function):
    """A forward of its own, but the library's derivative in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return torch.ops.aten.silu_backward(g, x)


def penalty_get_total_norm(loss, params):
    """torch's total-norm helper on create_graph gradients: the right value, but it runs under no_grad."""
    return torch.nn.utils.get_total_norm(torch.autograd.grad(loss, params, create_graph=True))


def vjp_func_grad(f, x, v):
    """The whole job in one call: torch.func.grad of <f(x), v>."""
    return torch.func.grad(lambda t: (f(t) * v).sum())(x.detach())


def jacobian_func_jacrev(f, x):
    return torch.func.jacrev(f)(x.detach())


def linear_grad_func_and_value(x, w, target):
    return torch.func.grad_and_value(lambda w_: 0.5 * ((x @ w_ - target) ** 2).sum())(w)[0]


def linear_grad_needs_contiguous(x, w, target):
    """Right on contiguous inputs; .view(-1) refuses a transposed x."""
    flat = x.view(-1).view(x.shape)
    return flat.T @ (flat @ w - target)


def _applies(cls):
    def silu(x):
        return cls.apply(x)
    return silu


def vjp_marks_the_callers_x(f, x, v):
    """Right values, but the caller's x now requires grad (and would collect .grad from a later backward)."""
    x.requires_grad_()
    (g,) = torch.autograd.grad(f(x), x, grad_outputs=v)
    return g.detach()


def silu_functional(x):
    return F.silu(x)  # never uses the Function


def silu_by_hand(x):
    return x * torch.sigmoid(x)  # right values, but autograd's own graph, not the Function


class SiLUWrongGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)  # forgot the x * s * (1 - s) term


def silu_wrong(x):
    return SiLUWrongGrad.apply(x)


class SiLUNoDouble(torch.autograd.Function):
    """Right first derivative, but saves sigmoid(x) computed without a graph: no second derivative."""
    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, g):
        x, s = ctx.saved_tensors
        return g * (s + x * s * (1 - s))


def silu_no_double(x):
    return SiLUNoDouble.apply(x)


class SiLUAutogradInside(torch.autograd.Function):
    """Its backward differentiates x * sigmoid(x) with autograd instead of applying the formula."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            return torch.autograd.grad(xx * torch.sigmoid(xx), xx, g)[0]


def silu_autograd_inside(x):
    return SiLUAutogradInside.apply(x)


class SiLUCtxAttribute(torch.autograd.Function):
    """Keeps x as an attribute of ctx instead of save_for_backward."""
    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, g):
        s = torch.sigmoid(ctx.x)
        return g * s * (1 + ctx.x * (1 - s))


def silu_ctx_attribute(x):
    return SiLUCtxAttribute.apply(x)


class SiLUOverflow(torch.autograd.Function):
    """exp(-x) / (1 + exp(-x))^2: inf / inf = NaN for very negative x."""
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + torch.exp(-x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        e = torch.exp(-x)
        return g * (1 / (1 + e) + x * e / (1 + e) ** 2)


def silu_overflow(x):
    return SiLUOverflow.apply(x)


class NotAFunction:
    @staticmethod
    def forward(ctx, x):
        return x * torch.sigmoid(x)


def penalty_no_graph(loss, params):
    grads = torch.autograd.grad(loss, params)
    return torch.cat([g.reshape(-1) for g in grads]).norm()


def penalty_squared(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return sum((g ** 2).sum() for g in grads)


def penalty_per_param(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return sum(g.norm() for g in grads)


def penalty_backward(loss, params):
    loss.backward(create_graph=True)
    return torch.cat([p.grad.reshape(-1) for p in params]).norm()


def penalty_rms(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return torch.cat([g.reshape(-1) for g in grads]).pow(2).mean().sqrt()


def penalty_first_only(loss, params):
    return torch.autograd.grad(loss, params[0], create_graph=True)[0].norm()


def penalty_float(loss, params):
    return penalty_cat(loss, params).item()


class Penalty:
    def __getattr__(self, name):
        return self.__getattr__(name)


def accumulate_no_divide(model, loss_fn, micro_batches, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    optimizer.step()


def accumulate_step_each(model, loss_fn, micro_batches, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
        optimizer.step()


def accumulate_stale(model, loss_fn, micro_batches, optimizer):
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()


def accumulate_zero_inside(model, loss_fn, micro_batches, optimizer):
    for x, y in micro_batches:
        optimizer.zero_grad()
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()


def accumulate_by_rows(model, loss_fn, micro_batches, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(model(x), y) / x.shape[0]).backward()  # divides by the rows, not the number of micro-batches
    optimizer.step()


def accumulate_concatenated(model, loss_fn, micro_batches, optimizer):
    """The right step, but on the whole batch at once: no accumulation, all the activation memory."""
    optimizer.zero_grad()
    x = torch.cat([m[0] for m in micro_batches])
    y = torch.cat([m[1] for m in micro_batches])
    loss_fn(model(x), y).backward()
    optimizer.step()


def accumulate_zero_after(model, loss_fn, micro_batches, optimizer):
    """The right step, then .grad zeroed: the task says to leave the batch's gradient there."""
    accumulate_scaled(model, loss_fn, micro_batches, optimizer)
    optimizer.zero_grad()


def accumulate_one_backward(model, loss_fn, micro_batches, optimizer):
    """The right step from one backward of the summed losses: one forward per micro-batch, but every micro-batch's
    activations alive at once, as in the big batch accumulation exists to avoid."""
    optimizer.zero_grad()
    (sum(loss_fn(model(x), y) for x, y in micro_batches) / len(micro_batches)).backward()
    optimizer.step()


def accumulate_forwards_first(model, loss_fn, micro_batches, optimizer):
    """Every forward first, then each loss's backward: the same activations alive at once."""
    optimizer.zero_grad()
    losses = [loss_fn(model(x), y) / len(micro_batches) for x, y in micro_batches]
    for loss in losses:
        loss.backward()
    optimizer.step()


def jacobian_on_the_callers_x(f, x):
    """The right Jacobian, built on the caller's x itself: x left requiring grad, with a .grad."""
    x.requires_grad_()
    y = f(x)
    rows = []
    for i in range(y.numel()):
        x.grad = None
        y.reshape(-1)[i].backward(retain_graph=True)
        rows.append(x.grad.clone())
    return torch.stack(rows).reshape(y.shape + x.shape).detach()


class SiLUAtenBackwardFirstOrder(SiLUSaveSigmoid):
    """The formula where a second derivative is taken (gradgradcheck), the library's derivative everywhere else."""

    @staticmethod
    def backward(ctx, g):
        if torch.is_grad_enabled():
            return SiLUSaveSigmoid.backward(ctx, g)
        (x,) = ctx.saved_tensors
        return torch.ops.aten.silu_backward(g, x)


_SCRIPTED_SILU = torch.jit.script(torch.nn.SiLU())  # TorchScript calls aten's silu from C++, never through Python


class SiLUScripted(SiLUSaveSigmoid):
    """The library's SiLU in forward through a TorchScript module; the derivative's formula in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _SCRIPTED_SILU(x)


# ---- issue 26: a forbidden job done under another name, or a stated method skipped

ENGINE = torch.autograd.Variable._execution_engine  # what torch.autograd.grad and .backward call
_RUN_BACKWARD = ENGINE.run_backward                  # bound before the check


def _loss_and_leaf(x, w, target):
    leaf = w.detach().requires_grad_()
    return 0.5 * ((x @ leaf - target) ** 2).sum(), leaf


def linear_grad_engine(x, w, target):
    """The engine's own entry, under its private name (4 of 4 checks before issue 26)."""
    loss, leaf = _loss_and_leaf(x, w, target)
    return ENGINE.run_backward((loss,), (torch.ones_like(loss),), False, False, (leaf,), False)[0]


def linear_grad_engine_class(x, w, target):
    """The same C method, reached through the engine's class."""
    loss, leaf = _loss_and_leaf(x, w, target)
    return type(ENGINE).run_backward(ENGINE, (loss,), (torch.ones_like(loss),), False, False, (leaf,), False)[0]


def linear_grad_engine_partial(x, w, target):
    """An alias bound before the check, called by C code (a partial): no Python call a profile hook could see."""
    loss, leaf = _loss_and_leaf(x, w, target)
    return functools.partial(_RUN_BACKWARD, (loss,), (torch.ones_like(loss),))(False, False, (leaf,), False)[0]


def linear_grad_by_nodes(x, w, target):
    """Backpropagation by hand through autograd's own graph: each Node called directly, never the engine."""
    loss, leaf = _loss_and_leaf(x, w, target)
    pending, grad = [(loss.grad_fn, torch.ones_like(loss))], None
    while pending:
        node, g = pending.pop()
        if isinstance(node, torch.autograd.graph.Node) and type(node).__name__ == "AccumulateGrad":
            grad = g if grad is None else grad + g
            continue
        outs = node(g)
        outs = outs if isinstance(outs, tuple) else (outs,)
        pending += [(n, o) for (n, _), o in zip(node.next_functions, outs) if n is not None and o is not None]
    return grad


def linear_grad_forward_mode(x, w, target):
    """Forward-mode autograd, one dual number per weight: autograd all the same."""
    import torch.autograd.forward_ad as fwAD
    grad = torch.zeros(w.shape, dtype=w.dtype)
    with fwAD.dual_level():
        for i in range(w.numel()):
            tangent = torch.zeros(w.numel(), dtype=w.dtype)
            tangent[i] = 1
            dual = fwAD.make_dual(w, tangent.reshape(w.shape))
            loss = 0.5 * ((x @ dual - target) ** 2).sum()
            grad.reshape(-1)[i] = fwAD.unpack_dual(loss).tangent
    return grad


def linear_grad_caught(x, w, target):
    """Tries autograd, and computes by hand when it is refused: the refusal counts all the same."""
    try:
        loss, leaf = _loss_and_leaf(x, w, target)
        return getattr(torch.autograd, "gr" + "ad")(loss, leaf)[0]
    except Exception:
        return x.T @ (x @ w - target)


def _python_column_loss(xs, ws, ts, j):
    """Output column j's share of 0.5 * ||x @ w - target||^2, in Python numbers."""
    total = 0.0
    for row, want in zip(xs, ts):
        r = sum(a * wk[j] for a, wk in zip(row, ws)) - want[j]
        total += 0.5 * r * r
    return total


def _python_nudged_losses(xs, ws, ts):
    """For each weight, the Python loss with it nudged up by 1 and down by 1 (central differences, exact here). Only
    output column j's terms change when w[i][j] moves, so the losses are of that column alone: the other columns'
    terms cancel in up - down, which is all the answers take (and each nudge costs one column, not every column)."""
    for i in range(len(ws)):
        for j in range(len(ws[0])):
            up, down = [row[:] for row in ws], [row[:] for row in ws]
            up[i][j] += 1.0
            down[i][j] -= 1.0
            yield i, j, _python_column_loss(xs, up, ts, j), _python_column_loss(xs, down, ts, j)


def _python_differences(xs, ws, ts):
    grad = [[0.0] * len(ws[0]) for _ in ws]
    for i, j, up, down in _python_nudged_losses(xs, ws, ts):
        grad[i][j] = (up - down) / 2
    return grad


def linear_grad_python_differences(x, w, target):
    """Finite differences in Python numbers (.tolist()), the result rebuilt with torch.tensor: no operator traced."""
    return torch.tensor(_python_differences(x.tolist(), w.tolist(), target.tolist()), dtype=x.dtype)


def linear_grad_item_differences(x, w, target):
    """The same, the numbers taken element by element with .item()."""
    def numbers(t):
        return [[t[i, j].item() for j in range(t.shape[1])] for i in range(t.shape[0])]
    return torch.tensor(_python_differences(numbers(x), numbers(w), numbers(target)), dtype=x.dtype)


def linear_grad_written_entries(x, w, target):
    """The Python differences written entry by entry into torch.zeros: zeros and copies, no arithmetic traced."""
    grad = _python_differences(x.tolist(), w.tolist(), target.tolist())
    g = torch.zeros(w.shape, dtype=x.dtype)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            g[i, j] = grad[i][j]
    return g


def linear_grad_lifted_differences(x, w, target):
    """Python losses, each difference taken by torch on 0-dim tensors made from them, written into zeros_like(w):
    arithmetic traced, but not on the arguments (0-dim tensors pass as Python scalars, w's mark as an allocation)."""
    g = torch.zeros_like(w)
    for i, j, up, down in _python_nudged_losses(x.tolist(), w.tolist(), target.tolist()):
        g[i, j] = (torch.tensor(up, dtype=torch.float64) - torch.tensor(down, dtype=torch.float64)) / 2
    return g


def linear_grad_stacked_differences(x, w, target):
    """The same differences of 0-dim tensors, stacked and reshaped to w's shape."""
    entries = [(torch.tensor(up, dtype=torch.float64) - torch.tensor(down, dtype=torch.float64)) / 2
               for _, _, up, down in _python_nudged_losses(x.tolist(), w.tolist(), target.tolist())]
    return torch.stack(entries).reshape(w.shape).to(w.dtype)


def jacobian_vmap(f, x):
    """torch.vmap over VJPs: one backward pass that stands for every row."""
    xr = x.detach().requires_grad_()
    y = f(xr)
    eye = torch.eye(y.numel(), dtype=y.dtype).reshape(y.numel(), *y.shape)
    rows = torch.vmap(lambda v: torch.autograd.grad(y, xr, v, retain_graph=True)[0])(eye)
    return rows.reshape(y.shape + x.shape)


def jacobian_two_batches(f, x):
    """Rows in two batched backward passes (half each): fewer passes than output elements."""
    xr = x.detach().requires_grad_()
    y = f(xr)
    eye = torch.eye(y.numel(), dtype=y.dtype).reshape(y.numel(), *y.shape)
    half = max(1, y.numel() // 2)
    parts = [torch.autograd.grad(y, xr, e, retain_graph=True, is_grads_batched=True)[0]
             for e in (eye[:half], eye[half:]) if len(e)]
    return torch.cat(parts).reshape(y.shape + x.shape)


def jacobian_private_jacrev(f, x):
    """torch.func.jacrev under its private module's name: the same function, refused by identity."""
    from torch._functorch.eager_transforms import jacrev
    return jacrev(f)(x.detach())


def vjp_borrows_x(f, x, v):
    """Uses the caller's x as scratch space and puts it back (x * 2 / 2 is exact): the values come back, but the
    caller's memory was written while the call ran."""
    x.mul_(2)
    x.div_(2)
    return vjp_grad(f, x, v)


def vjp_through_data(f, x, v):
    """Zeroes x through .data and copies it back: autograd never sees it, the trace does."""
    saved = x.detach().clone()
    x.data.zero_()
    x.data.copy_(saved)
    return vjp_grad(f, saved, v)


def vjp_writes_a_view(f, x, v):
    """Adds zero into a view of x: the same values, written into the caller's storage."""
    x.view(-1)[:1] += 0
    return vjp_grad(f, x, v)


def penalty_rebuilt(loss, params):
    """The right value, but a new leaf: no path back to the parameters."""
    return torch.tensor(float(penalty_cat(loss, params)), dtype=torch.float64, requires_grad=True)


def psf_no_second_backward(batch, dims):
    """Counts the forward and the first backward: the backward of loss + penalty left out."""
    right = psf_closed_form(batch, dims)
    return {**right, "double_backward": 0, "total": right["forward"] + right["backward"]}


def psf_first_backward_once(batch, dims):
    """The second pass priced as one more plain backward: the first backward's recorded graph is not differentiated."""
    right = psf_closed_form(batch, dims)
    return {**right, "double_backward": right["backward"], "total": right["forward"] + 2 * right["backward"]}


def psf_twice_the_graph(batch, dims):
    """The rule of thumb: two matmuls per matmul of both graphs, x's included."""
    right = psf_closed_form(batch, dims)
    double = 2 * (right["forward"] + right["backward"])
    return {**right, "double_backward": double, "total": right["forward"] + right["backward"] + double}


def psf_x_needs_a_gradient(batch, dims):
    """The plain backward right, but the second pass priced as if x needed a gradient."""
    right = psf_closed_form(batch, dims)
    double = 6 * right["forward"]
    return {**right, "double_backward": double, "total": right["forward"] + right["backward"] + double}


def psf_x_gradient_everywhere(batch, dims):
    """Every layer alike, x's gradient counted in both backward passes."""
    s = sum(2 * batch * a * b for a, b in zip(dims, dims[1:]))
    return {"forward": s, "backward": 2 * s, "double_backward": 6 * s, "total": 9 * s}


def psf_by_forwards(batch, dims):
    """Section 8's square-layer ratio, 9 - 5/depth forwards, applied to any widths: a float, and wrong."""
    right = psf_closed_form(batch, dims)
    depth = len(dims) - 1
    total = (9 - 5 / depth) * right["forward"]
    return {**right, "double_backward": total - right["forward"] - right["backward"], "total": total}


def psf_through_floats(batch, dims):
    """The right formula in floating point, rounded back to int: exact only below 2**53."""
    layers = [2.0 * batch * a * b for a, b in zip(dims, dims[1:])]
    s, first = sum(layers), layers[0]
    return {"forward": int(s), "backward": int(2 * s - first), "double_backward": int(6 * s - 4 * first),
            "total": int(9 * s - 5 * first)}


def psf_total_left_out(batch, dims):
    right = psf_closed_form(batch, dims)
    return {**right, "total": right["forward"] + right["backward"]}


def psf_one_row(batch, dims):
    """Counts one row of the batch."""
    return psf_closed_form(1, dims)


def psf_tuple(batch, dims):
    r = psf_closed_form(batch, dims)
    return r["forward"], r["backward"], r["double_backward"], r["total"]


def _tanh_mlp(dims, device):
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b, bias=False, device=device), nn.Tanh()]
    return nn.Sequential(*layers[:-1])


def psf_flop_counter_on_meta(batch, dims):
    """The shortcut: torch's counter on the real step, on the meta device (shapes only). Refused."""
    model = _tanh_mlp(dims, "meta")
    params = list(model.parameters())
    x, y = torch.empty(batch, dims[0], device="meta"), torch.empty(batch, dims[-1], device="meta")
    counts = {}
    with FlopCounterMode(display=False) as c:
        loss = F.mse_loss(model(x), y)
    counts["forward"] = c.get_total_flops()
    with FlopCounterMode(display=False) as c:
        grads = torch.autograd.grad(loss, params, create_graph=True)
    counts["backward"] = c.get_total_flops()
    with FlopCounterMode(display=False) as c:
        torch.autograd.grad(loss + 0.1 * torch.stack([(g * g).sum() for g in grads]).sum().sqrt(), params)
    counts["double_backward"] = c.get_total_flops()
    return {**counts, "total": sum(counts.values())}


class _MatmulCounter(TorchDispatchMode):
    """A counter of one's own: 2mkn for every aten.mm it sees."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            (m, k), (_, n) = args[0].shape, args[1].shape
            self.flops += 2 * m * k * n
        return func(*args, **(kwargs or {}))


def psf_own_counter_on_meta(batch, dims):
    """The real step on the meta device under a counter of its own: right wherever the weights can exist."""
    model = _tanh_mlp(dims, "meta")
    params = list(model.parameters())
    x, y = torch.empty(batch, dims[0], device="meta"), torch.empty(batch, dims[-1], device="meta")
    counts = {}
    with _MatmulCounter() as c:
        loss = F.mse_loss(model(x), y)
    counts["forward"] = c.flops
    with _MatmulCounter() as c:
        grads = torch.autograd.grad(loss, params, create_graph=True)
    counts["backward"] = c.flops
    with _MatmulCounter() as c:
        torch.autograd.grad(loss + 0.1 * torch.stack([(g * g).sum() for g in grads]).sum().sqrt(), params)
    counts["double_backward"] = c.flops
    return {**counts, "total": sum(counts.values())}


W = Wrong
WRONG = [
    # linear_loss_grad: autograd (or torch.func) in a by-hand gradient is refused, naming the call
    W("linear_loss_grad", linear_grad_autograd, "one_output", "not call torch.Tensor.backward"),
    W("linear_loss_grad", linear_grad_func, "one_output", "not call torch.func.grad"),
    W("linear_loss_grad", linear_grad_func_and_value, "one_output", "not call torch.func.grad_and_value"),
    W("linear_loss_grad", lambda x, w, target: (x @ w - target).T @ x, "one_output",
      "has shape (1, 3), expected (3, 1)"),  # the transpose of the gradient
    W("linear_loss_grad", lambda x, w, target: x.T @ (x @ w - target) / x.shape[0], "one_output",
      "averaged instead of summed"),  # the mean's gradient, not the sum's
    W("linear_loss_grad", lambda x, w, target: 2 * x.T @ (x @ w - target), "one_output",
      "2.00× the expected value"),  # forgets the loss's 1/2
    W("linear_loss_grad", linear_grad_in_place, "one_output", "changed its input in place"),
    W("linear_loss_grad", lambda x, w, target: (x.T @ (x @ w - target)).float(), "several_outputs_float64",
      "has dtype torch.float32, expected torch.float64"),
    W("linear_loss_grad", lambda x, w, target: (x.T @ (x @ w - target)).as_subclass(Liar), "one_output",
      "should be a plain torch.Tensor, got the subclass Liar"),
    # .view on a transposed x: the answer itself raises
    W("linear_loss_grad", linear_grad_needs_contiguous, "non_contiguous_inputs", "view size is not compatible",
      status=ERROR),
    # issue 26: the engine under its private name, through its class, and an alias bound before the check that C code
    # calls: refused by identity; autograd's graph walked by hand is caught by the trace; forward mode is refused
    W("linear_loss_grad", linear_grad_engine, "one_output", "not call torch.autograd.Variable._execution_engine"),
    W("linear_loss_grad", linear_grad_engine_class, "one_output", "not call torch.autograd.Variable._execution_engine"),
    W("linear_loss_grad", linear_grad_engine_partial, "one_output",
      "not call torch.autograd.Variable._execution_engine"),
    W("linear_loss_grad", linear_grad_by_nodes, "one_output", "built an autograd graph"),
    W("linear_loss_grad", linear_grad_forward_mode, "one_output", "not call torch.autograd.forward_ad.make_dual"),
    W("linear_loss_grad", linear_grad_caught, "one_output", "not call torch.autograd.grad"),
    # finite differences in Python numbers, put back into a tensor: the result's lineage holds no traced arithmetic
    W("linear_loss_grad", linear_grad_python_differences, "one_output", "computed its values outside torch"),
    W("linear_loss_grad", linear_grad_item_differences, "one_output", "computed its values outside torch"),
    W("linear_loss_grad", linear_grad_written_entries, "one_output", "computed its values outside torch"),
    # vjp: one that builds the Jacobian (row by row or batched) is told so
    W("vjp", vjp_full_jacobian, "fewer_and_more_outputs_one_pass", "never build the Jacobian"),
    W("vjp", vjp_batched_jacobian, "fewer_and_more_outputs_one_pass", "that builds the Jacobian"),
    W("vjp", vjp_sloppy, "leaves_the_callers_x_alone", "left a gradient in x.grad"),
    W("vjp", vjp_keeps_graph, "leaves_the_callers_x_alone", "still requires grad"),
    W("vjp", vjp_marks_the_callers_x, "leaves_the_callers_x_alone", "set requires_grad on the caller's x"),
    W("vjp", vjp_ignores_v, "elementwise_square", "values differ"),
    W("vjp", vjp_atleast_1d, "zero_dim_input_and_output", "has shape (1,), expected ()"),
    # issue 26: the caller's x written while the call ran, its values put back: only the trace sees it
    W("vjp", vjp_borrows_x, "leaves_the_callers_x_alone", "wrote into the caller's x"),
    W("vjp", vjp_through_data, "leaves_the_callers_x_alone", "wrote into the caller's x"),
    W("vjp", vjp_writes_a_view, "leaves_the_callers_x_alone", "wrote into the caller's x"),
    # the whole job in one library call fails the first public check, naming the call
    W("vjp", lambda f, x, v: torch.autograd.functional.vjp(f, x, v)[1], "elementwise_square",
      "not call torch.autograd.functional.vjp"),
    W("vjp", lambda f, x, v: torch.func.vjp(f, x)[1](v)[0], "elementwise_square", "not call torch.func.vjp"),
    W("vjp", vjp_func_grad, "elementwise_square", "not call torch.func.grad"),
    # jacobian
    W("jacobian", jacobian_transposed, "non_square", "rows and columns are swapped"),
    W("jacobian", jacobian_flat, "matrix_input", "has shape (4, 6), expected f(x).shape + x.shape"),
    W("jacobian", jacobian_numel_rows, "zero_dim_input_or_output", "has shape (1, 3), expected f(x).shape + x.shape"),
    W("jacobian", jacobian_finite_differences, "made_of_vjps", "made no backward pass through f"),
    W("jacobian", jacobian_by_complex_step, "made_of_vjps", "computed in complex128: a complex step"),
    W("jacobian", jacobian_functional, "square_is_diagonal", "not call torch.autograd.functional.jacobian"),
    W("jacobian", jacobian_func_jacrev, "square_is_diagonal", "not call torch.func.jacrev"),
    # issue 26: right values from fewer backward passes than output elements (7 of 7 checks before), and jacrev
    # under its private module's name
    W("jacobian", jacobian_batched, "made_of_vjps", "ran 1 backward pass(es) (batched"),
    W("jacobian", jacobian_vmap, "made_of_vjps", "ran 1 backward pass(es) (batched"),
    W("jacobian", jacobian_two_batches, "made_of_vjps", "ran 2 backward pass(es) (batched"),
    W("jacobian", jacobian_private_jacrev, "square_is_diagonal", "not call torch.func.jacrev"),
    W("jacobian", jacobian_on_the_callers_x, "made_of_vjps", "left a gradient in x.grad"),
    # gradient_norm_penalty: no create_graph, the squared norm, one norm per parameter, .backward() into .grad
    W("gradient_norm_penalty", penalty_no_graph, "small_regression", "create_graph=True"),
    W("gradient_norm_penalty", penalty_squared, "small_regression", "the *squared* norm"),
    W("gradient_norm_penalty", penalty_per_param, "small_regression", "the sum of each parameter's gradient norm"),
    W("gradient_norm_penalty", penalty_backward, "small_regression", "left gradients in the parameters' .grad"),
    W("gradient_norm_penalty", penalty_rms, "small_regression", "values differ"),
    W("gradient_norm_penalty", penalty_first_only, "small_regression", "values differ"),
    W("gradient_norm_penalty", penalty_float, "small_regression", "should return a 0-dim tensor, got float"),
    W("gradient_norm_penalty", lambda loss, params: Penalty(), "small_regression", "RecursionError",
      status=ERROR),  # an object whose every attribute recurses: the answer's own code raises
    W("gradient_norm_penalty", penalty_get_total_norm, "small_regression", "not differentiable"),
    W("gradient_norm_penalty", penalty_rebuilt, "small_regression", "does not depend on parameter"),
    # silu
    W("silu", (SiLUBuiltin, silu_builtin), "forward_and_backward", "not call torch.nn.functional.silu"),
    W("silu", (SiLUByGLU, SiLUByGLU.apply), "forward_and_backward", "not call torch.nn.functional.glu"),
    W("silu", (SiLUBuiltin, silu_functional), "forward_and_backward", "not call torch.nn.functional.silu"),
    W("silu", (SiLUSaveSigmoid, silu_by_hand), "forward_and_backward", "not your SiLU's backward node"),
    W("silu", (SiLUWrongGrad, silu_wrong), "forward_and_backward", "from your backward"),
    W("silu", (SiLUNoDouble, silu_no_double), "second_derivative", "gradgradcheck(silu, x) failed"),
    W("silu", (SiLUAutogradInside, silu_autograd_inside), "backward_is_your_own", "recorded a graph"),
    W("silu", (SiLUCtxAttribute, silu_ctx_attribute), "backward_is_your_own", "saved nothing with ctx.save_for_backward"),
    W("silu", (SiLUOverflow, silu_overflow), "finite_up_to_800", "gave nan at x = -800"),
    W("silu", (NotAFunction, silu_by_hand), "forward_and_backward", "should be a subclass of torch.autograd.Function"),
    # the library's SiLU inside SiLU.forward, under other names (autograd.silu forbids F.silu and torch._C._nn.silu)
    W("silu", (SiLUAliased, _applies(SiLUAliased)), "forward_and_backward", "not call torch.nn.functional.silu"),
    W("silu", (SiLUModule, _applies(SiLUModule)), "forward_and_backward", "not call torch.nn.functional.silu"),
    W("silu", (SiLUCore, _applies(SiLUCore)), "forward_and_backward", "not call torch._C._nn.silu"),
    W("silu", (SiLUAten, _applies(SiLUAten)), "forward_and_backward", "not call torch.ops.aten.silu"),
    W("silu", (SiLUAtenBackward, _applies(SiLUAtenBackward)), "backward_is_your_own",
      "not call torch.ops.aten.silu_backward"),
    # ... where only a second derivative would have shown it, and from C++ (TorchScript): the checks watch every
    # aten operator the scenario runs
    W("silu", (SiLUAtenBackwardFirstOrder, _applies(SiLUAtenBackwardFirstOrder)), "backward_is_your_own",
      "not call torch.ops.aten.silu_backward"),
    W("silu", (SiLUScripted, _applies(SiLUScripted)), "forward_and_backward", "not call torch.ops.aten.silu"),
    # accumulate_step: no division by the number of micro-batches, a step per micro-batch, stale gradients,
    # zeroing between micro-batches
    W("accumulate_step", accumulate_no_divide, "four_micro_batches_sgd", "divide each micro-batch's loss"),
    W("accumulate_step", accumulate_step_each, "four_micro_batches_sgd", "took 4 optimizer steps"),
    W("accumulate_step", accumulate_stale, "stale_gradients_do_not_count", "zero the gradients first"),
    W("accumulate_step", accumulate_zero_inside, "four_micro_batches_sgd", "not between micro-batches"),
    W("accumulate_step", accumulate_by_rows, "four_micro_batches_sgd", "against one step on the concatenated batch"),
    W("accumulate_step", accumulate_concatenated, "four_micro_batches_sgd", "run it on one micro-batch"),
    W("accumulate_step", accumulate_zero_after, "four_micro_batches_sgd", "after the step, 0.weight.grad is None"),
    # the right step with every micro-batch's activations alive at once: a backward before each next forward
    W("accumulate_step", accumulate_one_backward, "four_micro_batches_sgd",
      "ran micro-batch 2's forward before backpropagating micro-batch 1's loss"),
    W("accumulate_step", accumulate_forwards_first, "adam_too",
      "ran micro-batch 2's forward before backpropagating micro-batch 1's loss"),
    # penalty_step_flops: a pass left out or mispriced, each told what it counted
    W("penalty_step_flops", psf_no_second_backward, "one_hidden_layer", "second backward pass is missing"),
    W("penalty_step_flops", psf_first_backward_once, "one_hidden_layer", "that is one plain backward"),
    W("penalty_step_flops", psf_twice_the_graph, "one_hidden_layer", "that is 2 x (forward + backward)"),
    W("penalty_step_flops", psf_x_needs_a_gradient, "one_hidden_layer", "gradients with respect to x"),
    W("penalty_step_flops", psf_x_gradient_everywhere, "one_hidden_layer", "counts the first layer's input gradient"),
    W("penalty_step_flops", psf_by_forwards, "one_hidden_layer", "should be a Python int, got the float"),
    W("penalty_step_flops", psf_through_floats, "shapes_no_tensor_can_hold", "FlopCounterMode counts"),
    W("penalty_step_flops", psf_total_left_out, "one_hidden_layer", "forward + backward + double_backward"),
    W("penalty_step_flops", psf_one_row, "one_hidden_layer", "for one row of the batch"),
    W("penalty_step_flops", psf_tuple, "one_hidden_layer", "should return a dict"),
    # the counter: torch's is refused by name; one's own runs out of room at sizes no tensor can hold
    W("penalty_step_flops", psf_flop_counter_on_meta, "one_hidden_layer",
      "not call torch.utils.flop_counter.FlopCounterMode"),
    W("penalty_step_flops", psf_own_counter_on_meta, "shapes_no_tensor_can_hold", "more than 2**63 elements"),
]


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    """Every check named here is public: the student meets each of these mistakes before grading."""
    assert_caught("autograd", wrong, public_only=True)


# ---------------------------------------------------------------- linear_loss_grad measured instead of derived

def linear_grad_finite_differences(x, w, target):
    """Central differences in float64: exact for a quadratic loss, so every value check passes."""
    x64, w64, t64 = x.double(), w.double(), target.double()

    def loss(weights):
        return 0.5 * ((x64 @ weights - t64) ** 2).sum()
    grad = torch.zeros_like(w64)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            nudge = torch.zeros_like(w64)
            nudge[i, j] = 1.0
            grad[i, j] = (loss(w64 + nudge) - loss(w64 - nudge)) / 2
    return grad.to(w.dtype)


def linear_grad_finite_differences_batched(x, w, target):
    """Every nudge at once: one batched forward pass, a handful of operations, no loop."""
    d_in, d_out = w.shape
    nudges = torch.eye(d_in * d_out, dtype=torch.float64).reshape(-1, d_in, d_out)

    def losses(weights):
        return 0.5 * ((x.double() @ weights - target.double()) ** 2).sum((1, 2))
    return ((losses(w.double() + nudges) - losses(w.double() - nudges)) / 2).reshape(d_in, d_out).to(w.dtype)


def linear_grad_residual_per_weight(x, w, target):
    """Derived, but the whole forward pass run again for each weight."""
    grad = torch.empty_like(w)
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            residual = x @ w - target
            grad[i, j] = (x[:, i] * residual[:, j]).sum()
    return grad


def linear_grad_numpy_differences(x, w, target):
    """Finite differences where the trace cannot see them: in NumPy."""
    import numpy as np
    xs, ws, ts = (np.asarray(a.detach(), dtype=np.float64) for a in (x, w, target))
    grad = np.zeros_like(ws)
    for i in range(ws.shape[0]):
        for j in range(ws.shape[1]):
            nudge = np.zeros_like(ws)
            nudge[i, j] = 1.0
            grad[i, j] = (((xs @ (ws + nudge) - ts) ** 2).sum() - ((xs @ (ws - nudge) - ts) ** 2).sum()) / 4
    return torch.tensor(grad, dtype=w.dtype)


def linear_grad_dlpack(x, w, target):
    """The same detour through DLPack, which asks the tensor itself rather than calling .numpy()."""
    import numpy as np
    xs, ws, ts = (np.from_dlpack(a.detach().contiguous()).astype(np.float64) for a in (x, w, target))
    return torch.tensor(xs.T @ (xs @ ws - ts), dtype=w.dtype)


def linear_grad_differences_in_a_thread(x, w, target):
    """The finite differences run in another thread, whose operations the calling thread's trace does not see."""
    import threading
    out = []
    worker = threading.Thread(target=lambda: out.append(linear_grad_finite_differences(x, w, target)))
    worker.start()
    worker.join()
    return out[0]


MEASURED = [  # the value checks pass all but the detours; about_one_matrix_product_of_work is hidden
    W("linear_loss_grad", linear_grad_finite_differences, "about_one_matrix_product_of_work", "finite differences"),
    W("linear_loss_grad", linear_grad_finite_differences_batched, "about_one_matrix_product_of_work",
      "finite differences"),
    W("linear_loss_grad", linear_grad_residual_per_weight, "about_one_matrix_product_of_work",
      "a forward pass per weight"),
    W("linear_loss_grad", linear_grad_numpy_differences, "one_output", "not call torch.Tensor.numpy"),
    W("linear_loss_grad", linear_grad_dlpack, "one_output", "not call torch.Tensor.__dlpack__"),
    W("linear_loss_grad", linear_grad_differences_in_a_thread, "one_output", "not call _thread.start_new_thread"),
]


@pytest.mark.parametrize("wrong", MEASURED, ids=ids(MEASURED))
def test_a_gradient_measured_instead_of_derived_fails(wrong):
    """Caught by about_one_matrix_product_of_work (the values the call's operations produced, weighed against one
    x.T @ r), by computed_from_its_arguments (the result's lineage lacks the mark put on target) or, for a detour
    that hides them, by the forbid list; those caught by a hidden check pass every other check."""
    result = assert_caught("autograd", wrong)
    if wrong.check in ("about_one_matrix_product_of_work", "computed_from_its_arguments"):
        assert [c.name for c in result.checks if not c.passed] == [wrong.check], failures(result)


def linear_grad_laundered_thread(x, w, target):
    """The thread's result taken apart into 0-dim tensors (which a lineage lets pass, as it does Python scalars),
    stacked, and tied to target by adding zero: its lineage looks computed from the arguments."""
    grad = linear_grad_differences_in_a_thread(x, w, target)
    return torch.stack([torch.stack(row.unbind()) for row in grad.unbind()]) + 0 * target.sum()


def linear_grad_laundered_numbers(x, w, target):
    """Finite differences in Python numbers, each put into a 0-dim tensor (torch.tensor(v)), stacked, and tied to
    target by adding zero: traced arithmetic and target's mark, but one Python number per element."""
    grad = _python_differences(x.tolist(), w.tolist(), target.tolist())
    rows = [torch.stack([torch.tensor(v, dtype=x.dtype) for v in row]) for row in grad]
    return torch.stack(rows) + 0 * target.sum()


def linear_grad_laundered_full(x, w, target):
    """The same numbers put in by torch.full((), v), stacked, plus zero times target's sum."""
    grad = _python_differences(x.tolist(), w.tolist(), target.tolist())
    entries = [torch.full((), v, dtype=x.dtype) for row in grad for v in row]
    return torch.stack(entries).reshape(w.shape) + 0 * target.sum()


def linear_grad_laundered_operands(x, w, target):
    """The same numbers as operands torch wraps itself, t * 0 + v with t computed from target: no tensor made from
    a number at all, but one different number per element."""
    grad = _python_differences(x.tolist(), w.tolist(), target.tolist())
    tied = target.sum() * 0
    return torch.stack([torch.stack([tied + v for v in row]) for row in grad])


def linear_grad_laundered_shifted(x, w, target):
    """The operands again, shifted by one and back (t * 0 + v + 1 - 1): values a rounding away from the numbers."""
    grad = _python_differences(x.tolist(), w.tolist(), target.tolist())
    tied = target.sum() * 0
    return torch.stack([torch.stack([tied + v + 1 - 1 for v in row]) for row in grad])


_PUT_BACK = "are Python numbers the call put in"
LAUNDERED = [  # Python numbers (or another thread's values) put back one by one, tied to the arguments
    W("linear_loss_grad", linear_grad_laundered_numbers, "several_outputs_float64", _PUT_BACK),
    W("linear_loss_grad", linear_grad_laundered_full, "several_outputs_float64", _PUT_BACK),
    W("linear_loss_grad", linear_grad_laundered_operands, "several_outputs_float64", _PUT_BACK),
    W("linear_loss_grad", linear_grad_laundered_shifted, "several_outputs_float64", _PUT_BACK),
    # Python losses differenced on 0-dim tensors: traced arithmetic, but each element a 0-dim tensor computed from
    # Python numbers alone, a number too (target's mark never reaches the result either: computed_from_its_arguments)
    W("linear_loss_grad", linear_grad_lifted_differences, "several_outputs_float64", _PUT_BACK),
    W("linear_loss_grad", linear_grad_stacked_differences, "several_outputs_float64", _PUT_BACK),
]


@pytest.mark.parametrize("wrong", LAUNDERED, ids=ids(LAUNDERED))
def test_a_gradient_worked_out_in_python_and_laundered_fails(wrong):
    """Each has traced arithmetic, and most pass computed_from_its_arguments's mark (zero times target): what gives
    them away is that the result's values are the Python numbers its lineage took in (guard.NUMBERS)."""
    assert_caught("autograd", wrong, public_only=True)


def test_differences_in_a_thread_fail_even_where_threads_are_allowed(monkeypatch):
    """The thread hides the finite differences from the weighing of the work (about_one_matrix_product_of_work). The
    result it hands back has no traced history (expect_computed catches that), and taken apart into 0-dim tensors
    (views of a storage no traced operator made) it is still marked unseen: refusing the thread is not all that
    stops it."""
    from grader.guard import UNTRACED

    ex = registry.load(hidden=True).get("autograd.linear_loss_grad")
    monkeypatch.setattr(ex, "forbid", tuple(name for name in ex.forbid if name not in UNTRACED))
    assert_caught("autograd", W("linear_loss_grad", linear_grad_differences_in_a_thread, "one_output",
                                "computed its values outside torch"))
    assert_caught("autograd", W("linear_loss_grad", linear_grad_laundered_thread, "one_output",
                                "values that no traced torch operation made during the call"))


@pytest.mark.parametrize("answer", [jacobian_batched, jacobian_vmap, jacobian_two_batches],
                         ids=["is_grads_batched", "vmap", "two_batches"])
def test_the_batched_jacobians_are_right_in_every_value(answer):
    """Their Jacobians equal torch's for every named function: only the count of backward passes stops them."""
    from grader.scenarios.autograd import FUNCTIONS

    for name, f in FUNCTIONS.items():
        x = torch.randn(2, 3, dtype=torch.float64)
        torch.testing.assert_close(answer(f, x), torch.autograd.functional.jacobian(f, x), rtol=1e-9, atol=1e-12)


def test_penalty_step_flops_literals_are_what_flop_counter_counts():
    """The public checks' literals: FlopCounterMode on the real step for the small sizes; for sizes no tensor can hold,
    the per-layer counts measured on real models (the hidden oracle), which agree with chapter 04's mlp_flops."""
    from grader.exercises.autograd import PENALTY_HUGE
    from grader.hidden.autograd import counted_penalty_step, extrapolated
    assert counted_penalty_step(4, [3, 5, 2]) == {"forward": 200, "backward": 280, "double_backward": 720,
                                                  "total": 1200}
    assert counted_penalty_step(2, [3, 4]) == {"forward": 48, "backward": 48, "double_backward": 96, "total": 192}
    assert counted_penalty_step(3, [4, 6, 5, 2]) == {"forward": 384, "backward": 624, "double_backward": 1728,
                                                     "total": 2736}
    assert extrapolated(3, [2**32 + 1, 2**32 + 3, 5]) == PENALTY_HUGE[0]
    assert extrapolated(2**20, [7, 2**62, 8]) == PENALTY_HUGE[1]
    # chapter 04's mlp_flops(2**20, [7, 2**62, 8]) for the forward and the backward
    assert (PENALTY_HUGE[1]["forward"], PENALTY_HUGE[1]["backward"]) == (
        145_071_098_353_755_500_964_741_120, 222_442_350_809_091_768_145_936_384)


def test_penalty_step_flops_oracle_extrapolates_what_it_measures():
    """The hidden oracle's per-layer counts, taken at width 1 and 2, give FlopCounterMode's count at other sizes."""
    from grader.hidden.autograd import counted_penalty_step, extrapolated
    for batch, dims in [(5, [7, 3, 9, 2]), (2, [11, 4]), (3, [2, 6, 6, 5, 3, 4])]:
        assert extrapolated(batch, dims) == counted_penalty_step(batch, dims)


def test_penalty_step_flops_shortcuts_do_the_whole_job():
    """Torch's counter on the meta device and a counter of one's own pass the small public checks' sizes: only the
    refusal and the sizes no tensor can hold stop them."""
    for answer in (psf_flop_counter_on_meta, psf_own_counter_on_meta):
        assert answer(4, [3, 5, 2]) == psf_closed_form(4, [3, 5, 2])
        assert answer(3, [4, 6, 5, 2]) == psf_closed_form(3, [4, 6, 5, 2])


@pytest.mark.parametrize("answer", [linear_grad_engine, linear_grad_engine_class, linear_grad_engine_partial,
                                    linear_grad_by_nodes, linear_grad_forward_mode],
                         ids=["engine", "engine_class", "engine_partial", "by_nodes", "forward_mode"])
def test_the_autograd_routes_give_the_right_gradient(answer):
    """Each returns autograd's gradient (transposed, sliced inputs too): only refusing autograd stops them."""
    x, t = torch.randn(6, 5, dtype=torch.float64).T, torch.randn(4, 5, dtype=torch.float64).T
    for w in (torch.randn(6, 8, dtype=torch.float64)[:, ::2], torch.randn(4, 6, dtype=torch.float64).T):
        torch.testing.assert_close(answer(x, w, t), x.T @ (x @ w - t))


def test_a_hanging_backward_times_out():
    class Hangs(SiLUSaveSigmoid):
        @staticmethod
        def backward(ctx, g):
            while True:
                pass

    r = run_exercise("autograd.silu", Hangs, lambda x: Hangs.apply(x), timeout=1)
    assert r.status == "timeout" and r.score == 0


def test_a_notebook_that_patches_autograd_grad_does_not_change_gradcheck():
    """gradcheck looks torch.autograd.grad up when it runs: the scenario runs it with the function as it was at import."""
    real = torch.autograd.grad

    def lying_grad(outputs, inputs, *args, **kwargs):
        return tuple(torch.zeros_like(t) for t in (inputs if isinstance(inputs, (tuple, list)) else (inputs,)))

    class Patching(SiLUSaveSigmoid):
        @staticmethod
        def forward(ctx, x):
            torch.autograd.grad = lying_grad
            return SiLUSaveSigmoid.forward(ctx, x)

    try:
        r = run_exercise("autograd.silu", Patching, lambda x: Patching.apply(x), hidden=True)
        assert torch.autograd.grad is lying_grad  # the notebook's patch is left as it was
    finally:
        torch.autograd.grad = real
    assert r.status == "passed", failures(r)


# ---------------------------------------------------------------- graded in a real kernel (issue 26)

KERNEL_CELL = '''
import torch
ENGINE = torch.autograd.Variable._execution_engine
def vjp_ok(f, x, v):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(f(x), x, grad_outputs=v)[0].detach()
def vjp_borrows_x(f, x, v):
    x.mul_(2)
    x.div_(2)
    return vjp_ok(f, x, v)
def jacobian_rows(f, x):
    y = f(x.detach())
    rows = [vjp_ok(f, x, torch.eye(y.numel(), dtype=y.dtype)[i].view_as(y)) for i in range(y.numel())]
    return torch.stack(rows).reshape(y.shape + x.shape)
def jacobian_batched(f, x):
    xr = x.detach().requires_grad_()
    y = f(xr)
    eye = torch.eye(y.numel(), dtype=y.dtype).reshape(y.numel(), *y.shape)
    return torch.autograd.grad(y, xr, eye, is_grads_batched=True)[0].reshape(y.shape + x.shape)
def grad_by_hand(x, w, target):
    return x.T @ (x @ w - target)
def grad_engine(x, w, target):
    w = w.detach().requires_grad_()
    loss = 0.5 * ((x @ w - target) ** 2).sum()
    return ENGINE.run_backward((loss,), (torch.ones_like(loss),), False, False, (w,), False)[0]
'''
# The same answers as in this process, as source the kernel runs.
KERNEL_CELL += "\n\n".join(inspect.getsource(answer) for answer in (
    accumulate_scaled, accumulate_one_backward, SiLUSaveSigmoid, SiLUScripted, linear_grad_finite_differences,
    linear_grad_numpy_differences))
KERNEL_CELL += "\n_SCRIPTED_SILU = torch.jit.script(torch.nn.SiLU())\n"
KERNEL_CELL += "silu_own, silu_scripted = SiLUSaveSigmoid.apply, SiLUScripted.apply\n"


@pytest.fixture(scope="module")
def kernel_bridge(grading_bridge):
    return grading_bridge([KERNEL_CELL], check_timeout=20)


IN_A_KERNEL = [
    ("linear_loss_grad", "grad_by_hand", ""),
    ("linear_loss_grad", "grad_engine", "not call torch.autograd.Variable._execution_engine.run_backward"),
    ("linear_loss_grad", "linear_grad_finite_differences", "finite differences"),
    ("linear_loss_grad", "linear_grad_numpy_differences", "not call torch.Tensor.numpy"),
    ("vjp", "vjp_ok", ""), ("vjp", "vjp_borrows_x", "wrote into the caller's x"),
    ("jacobian", "jacobian_rows", ""), ("jacobian", "jacobian_batched", "ran 1 backward pass(es) (batched"),
    ("accumulate_step", "accumulate_scaled", ""),
    ("accumulate_step", "accumulate_one_backward", "ran micro-batch 2's forward before backpropagating"),
    ("silu", "SiLUSaveSigmoid,silu_own", ""), ("silu", "SiLUScripted,silu_scripted", "not call torch.ops.aten.silu"),
]


@pytest.mark.parametrize("exercise,name,caught", IN_A_KERNEL, ids=[name.split(",")[0] for _, name, _ in IN_A_KERNEL])
def test_graded_in_a_kernel(kernel_bridge, exercise, name, caught):
    """Issue 26's cases where grading runs them: the engine refused by the kernel's guard, and the traces of vjp's,
    jacobian's and SiLU's scenarios and accumulate_step's hooks recorded in the kernel and judged here; the right
    answers pass every check there. `name`: the kernel's names of the exercise's objects, comma-separated."""
    from grader import registry
    from grader.autograde.bridge import RemoteFunction
    from grader.runner import run_check

    ex = registry.load(hidden=True).get(f"autograd.{exercise}")
    results = []
    for check in ex.checks:
        kernel_bridge.limit, kernel_bridge.deadline = 20, None
        r = run_check(ex, check, tuple(RemoteFunction(kernel_bridge, n, ex) for n in name.split(",")), timeout=None)
        results.append((check.name, r.status, r.message))
    if not caught:
        assert all(status == "passed" for _, status, _ in results), results
    else:
        assert any(status == "failed" and caught in message for _, status, message in results), results
