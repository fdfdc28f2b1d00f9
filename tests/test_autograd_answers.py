"""Chapter 05 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
from __future__ import annotations

import pytest
import torch

from grader.runner import run_exercise


# ---------------------------------------------------------------- correct, written differently

def linear_grad_einsum(x, w, target):
    residual = torch.einsum("bi,io->bo", x, w) - target
    return torch.einsum("bi,bo->io", x, residual)


def vjp_backward(f, x, v):
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    y.backward(v)
    return x.grad.detach()


def vjp_grad(f, x, v):
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(f(x), x, grad_outputs=v)
    return g


def jacobian_rows(f, x):
    y = f(x.detach())
    rows = []
    for i in range(y.numel()):
        v = torch.zeros(y.numel(), dtype=y.dtype)
        v[i] = 1
        rows.append(vjp_grad(f, x, v.view_as(y)))
    return torch.stack(rows).reshape(*y.shape, *x.shape)


def jacobian_batched(f, x):
    xr = x.detach().requires_grad_()
    y = f(xr)
    eye = torch.eye(y.numel(), dtype=y.dtype).reshape(y.numel(), *y.shape)
    (jac,) = torch.autograd.grad(y, xr, eye, is_grads_batched=True)
    return jac.reshape(*y.shape, *x.shape)


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


class SiLUExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x / (1 + torch.exp(-x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = 1 / (1 + torch.exp(-x))
        return g * s * (1 + x - x * s)


def silu_exp(x):
    return SiLUExp.apply(x)


def penalty_cat(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return torch.cat([g.reshape(-1) for g in grads]).norm()


def penalty_linalg(loss, params):
    grads = torch.autograd.grad(loss, params, create_graph=True)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def accumulate_scaled(model, loss_fn, micro_batches, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()


def accumulate_manual(model, loss_fn, micro_batches, optimizer):
    for p in model.parameters():
        p.grad = None
    total = [torch.zeros_like(p) for p in model.parameters()]
    for x, y in micro_batches:
        grads = torch.autograd.grad(loss_fn(model(x), y), list(model.parameters()))
        for t, g in zip(total, grads):
            t += g
    for p, t in zip(model.parameters(), total):
        p.grad = t / len(micro_batches)
    optimizer.step()
    optimizer.zero_grad()


CORRECT = [
    ("linear_loss_grad", [lambda x, w, target: x.T @ (x @ w - target)]), ("linear_loss_grad", [linear_grad_einsum]),
    ("vjp", [vjp_backward]), ("vjp", [vjp_grad]),
    ("jacobian", [jacobian_rows]), ("jacobian", [jacobian_batched]),
    ("silu", [SiLUSaveSigmoid, silu_save_sigmoid]), ("silu", [SiLUExp, silu_exp]),
    ("gradient_norm_penalty", [penalty_cat]), ("gradient_norm_penalty", [penalty_linalg]),
    ("accumulate_step", [accumulate_scaled]), ("accumulate_step", [accumulate_manual]),
]


@pytest.mark.parametrize("name,objs", CORRECT, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CORRECT)])
def test_correct_answers_pass_every_check(name, objs):
    r = run_exercise(f"autograd.{name}", *objs, hidden=True)
    failing = [(c.name, c.message) for c in r.checks if not c.passed]
    assert r.status == "passed" and not failing, failing


# ---------------------------------------------------------------- plausible but wrong

def linear_grad_autograd(x, w, target):
    w = w.detach().requires_grad_()
    (0.5 * ((x @ w - target) ** 2).sum()).backward()
    return w.grad


def vjp_full_jacobian(f, x, v):
    y = f(x.detach())
    rows = []
    for i in range(y.numel()):
        xr = x.detach().requires_grad_()
        (g,) = torch.autograd.grad(f(xr).reshape(-1)[i], xr)
        rows.append(g.reshape(-1))
    jac = torch.stack(rows)
    return (v.reshape(-1) @ jac).reshape(x.shape)


def vjp_sloppy(f, x, v):
    x.requires_grad_()
    f(x).backward(v)
    return x.grad


def jacobian_transposed(f, x):
    return jacobian_rows(f, x).reshape(-1, x.numel()).T.contiguous() if x.dim() == 1 and f(x).dim() == 1 \
        else jacobian_rows(f, x).movedim(0, -1)


def jacobian_functional(f, x):
    return torch.autograd.functional.jacobian(f, x)


class SiLUBuiltin(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.nn.functional.silu(x)

    @staticmethod
    def backward(ctx, g):
        return g  # wrong derivative


def silu_builtin(x):
    return torch.nn.functional.silu(x)  # never uses the Function


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


def accumulate_no_divide(model, loss_fn, micro_batches, optimizer):
    optimizer.zero_grad()
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    optimizer.step()


def accumulate_step_each(model, loss_fn, micro_batches, optimizer):
    for x, y in micro_batches:
        optimizer.zero_grad()
        (loss_fn(model(x), y) / len(micro_batches)).backward()
        optimizer.step()


def accumulate_stale(model, loss_fn, micro_batches, optimizer):
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad()


def accumulate_zero_inside(model, loss_fn, micro_batches, optimizer):
    for x, y in micro_batches:
        optimizer.zero_grad()
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()


WRONG = [
    ("linear_loss_grad", [linear_grad_autograd]),
    ("linear_loss_grad", [lambda x, w, target: (x @ w - target).T @ x]),
    ("linear_loss_grad", [lambda x, w, target: x.T @ (x @ w - target) / x.shape[0]]),
    ("vjp", [vjp_full_jacobian]), ("vjp", [vjp_sloppy]),
    ("vjp", [lambda f, x, v: torch.autograd.functional.vjp(f, x, v)[1]]),
    ("jacobian", [jacobian_transposed]), ("jacobian", [jacobian_functional]),
    ("silu", [SiLUBuiltin, silu_builtin]), ("silu", [SiLUWrongGrad, silu_wrong]),
    ("silu", [SiLUNoDouble, silu_no_double]),
    ("gradient_norm_penalty", [penalty_no_graph]), ("gradient_norm_penalty", [penalty_squared]),
    ("gradient_norm_penalty", [penalty_per_param]), ("gradient_norm_penalty", [penalty_backward]),
    ("accumulate_step", [accumulate_no_divide]), ("accumulate_step", [accumulate_step_each]),
    ("accumulate_step", [accumulate_stale]), ("accumulate_step", [accumulate_zero_inside]),
]


@pytest.mark.parametrize("name,objs", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_plausible_wrong_answers_fail(name, objs):
    r = run_exercise(f"autograd.{name}", *objs, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,objs", WRONG, ids=[f"{n}-{i}" for i, (n, _) in enumerate(WRONG)])
def test_wrong_answers_get_a_readable_message(name, objs):
    r = run_exercise(f"autograd.{name}", *objs)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600


def test_public_checks_catch_the_classic_mistakes():
    """Autograd in a by-hand gradient, F.silu in place of the Function, no create_graph, no division."""
    for name, objs in [WRONG[0], WRONG[8], WRONG[11], WRONG[15]]:
        assert run_exercise(f"autograd.{name}", *objs).status != "passed", name
