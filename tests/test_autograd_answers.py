"""Chapter 05 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail, each with a message a student can read."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from grader.runner import run_exercise


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


CORRECT = [
    ("linear_loss_grad", [lambda x, w, target: x.T @ (x @ w - target)]), ("linear_loss_grad", [linear_grad_einsum]),
    ("linear_loss_grad", [linear_grad_addmm]), ("linear_loss_grad", [linear_grad_rows]),
    ("vjp", [vjp_backward]), ("vjp", [vjp_grad]), ("vjp", [vjp_inputs]),
    ("jacobian", [jacobian_rows]), ("jacobian", [jacobian_eye]), ("jacobian", [jacobian_one_graph]),
    ("jacobian", [jacobian_batched]),
    ("gradient_norm_penalty", [penalty_cat]), ("gradient_norm_penalty", [penalty_linalg]),
    ("gradient_norm_penalty", [penalty_backward_cleaned]),
    ("silu", [SiLUSaveSigmoid, silu_save_sigmoid]), ("silu", [SiLUTanh, silu_tanh]),
    ("silu", [SiLUSavesOutput, silu_saves_output]), ("silu", [SiLUSetupContext, silu_setup_context]),
    ("accumulate_step", [accumulate_scaled]), ("accumulate_step", [accumulate_manual]),
    ("accumulate_step", [accumulate_divide_after]),
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


WRONG = [
    ("linear_loss_grad", [linear_grad_autograd]),
    ("linear_loss_grad", [linear_grad_func]),
    ("linear_loss_grad", [lambda x, w, target: (x @ w - target).T @ x]),
    ("linear_loss_grad", [lambda x, w, target: x.T @ (x @ w - target) / x.shape[0]]),
    ("linear_loss_grad", [lambda x, w, target: 2 * x.T @ (x @ w - target)]),
    ("linear_loss_grad", [linear_grad_in_place]),
    ("linear_loss_grad", [lambda x, w, target: (x.T @ (x @ w - target)).float()]),
    ("linear_loss_grad", [lambda x, w, target: (x.T @ (x @ w - target)).as_subclass(Liar)]),
    ("vjp", [vjp_full_jacobian]), ("vjp", [vjp_batched_jacobian]), ("vjp", [vjp_sloppy]),
    ("vjp", [vjp_keeps_graph]), ("vjp", [vjp_ignores_v]),
    ("vjp", [lambda f, x, v: torch.autograd.functional.vjp(f, x, v)[1]]),
    ("vjp", [lambda f, x, v: torch.func.vjp(f, x)[1](v)[0]]),
    ("jacobian", [jacobian_transposed]), ("jacobian", [jacobian_flat]), ("jacobian", [jacobian_functional]),
    ("jacobian", [jacobian_finite_differences]),
    ("gradient_norm_penalty", [penalty_no_graph]), ("gradient_norm_penalty", [penalty_squared]),
    ("gradient_norm_penalty", [penalty_per_param]), ("gradient_norm_penalty", [penalty_backward]),
    ("gradient_norm_penalty", [penalty_rms]), ("gradient_norm_penalty", [penalty_first_only]),
    ("gradient_norm_penalty", [penalty_float]), ("gradient_norm_penalty", [lambda loss, params: Penalty()]),
    ("silu", [SiLUBuiltin, silu_builtin]), ("silu", [SiLUBuiltin, silu_functional]),
    ("silu", [SiLUSaveSigmoid, silu_by_hand]), ("silu", [SiLUWrongGrad, silu_wrong]),
    ("silu", [SiLUNoDouble, silu_no_double]), ("silu", [SiLUAutogradInside, silu_autograd_inside]),
    ("silu", [SiLUCtxAttribute, silu_ctx_attribute]), ("silu", [SiLUOverflow, silu_overflow]),
    ("silu", [NotAFunction, silu_by_hand]),
    # the library's SiLU inside SiLU.forward, under other names (autograd.silu forbids F.silu and torch._C._nn.silu)
    ("silu", [SiLUAliased, _applies(SiLUAliased)]), ("silu", [SiLUModule, _applies(SiLUModule)]),
    ("silu", [SiLUCore, _applies(SiLUCore)]), ("silu", [SiLUAten, _applies(SiLUAten)]),
    ("silu", [SiLUAtenBackward, _applies(SiLUAtenBackward)]),
    # the rest of the whole-job shortcuts (autograd.vjp/jacobian/linear_loss_grad forbid torch.func's transforms)
    ("vjp", [vjp_func_grad]), ("jacobian", [jacobian_func_jacrev]), ("linear_loss_grad", [linear_grad_func_and_value]),
    ("linear_loss_grad", [linear_grad_needs_contiguous]), ("gradient_norm_penalty", [penalty_get_total_norm]),
    ("vjp", [vjp_marks_the_callers_x]), ("vjp", [vjp_atleast_1d]), ("jacobian", [jacobian_numel_rows]),
    ("accumulate_step", [accumulate_no_divide]), ("accumulate_step", [accumulate_step_each]),
    ("accumulate_step", [accumulate_stale]), ("accumulate_step", [accumulate_zero_inside]),
    ("accumulate_step", [accumulate_by_rows]), ("accumulate_step", [accumulate_concatenated]),
    ("accumulate_step", [accumulate_zero_after]),
]
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(WRONG)]


@pytest.mark.parametrize("name,objs", WRONG, ids=IDS)
def test_plausible_wrong_answers_fail(name, objs):
    r = run_exercise(f"autograd.{name}", *objs, hidden=True)
    assert r.status in ("failed", "error") and r.score < r.points


@pytest.mark.parametrize("name,objs", WRONG, ids=IDS)
def test_wrong_answers_get_a_readable_message(name, objs):
    r = run_exercise(f"autograd.{name}", *objs, hidden=True)
    for c in r.checks:
        if not c.passed:
            assert c.message and "Traceback" not in c.message and len(c.message) < 600, c.message


def test_public_checks_catch_the_classic_mistakes():
    """Autograd in a by-hand gradient, a VJP that builds the Jacobian (row by row or batched), F.silu in place
    of the Function, autograd inside backward, no create_graph, the squared norm, no division by the number
    of micro-batches, a step per micro-batch, stale gradients, zeroing between micro-batches."""
    classic = [linear_grad_autograd, vjp_full_jacobian, vjp_batched_jacobian, silu_functional, silu_autograd_inside,
               penalty_no_graph, penalty_squared, accumulate_no_divide, accumulate_step_each, accumulate_stale,
               accumulate_zero_inside]
    for name, objs in WRONG:
        if objs[-1] in classic:
            assert run_exercise(f"autograd.{name}", *objs).status != "passed", objs[-1].__name__


@pytest.mark.parametrize("wrong,hint", [
    (accumulate_no_divide, "divide"), (accumulate_step_each, "optimizer steps"), (accumulate_stale, "zero the"),
    (accumulate_zero_inside, "between micro-batches"), (accumulate_concatenated, "one micro-batch"),
])
def test_accumulation_mistakes_are_named(wrong, hint):
    r = run_exercise("autograd.accumulate_step", wrong)
    assert any(hint in c.message for c in r.checks if not c.passed), [c.message for c in r.checks]


def test_vjp_that_builds_the_jacobian_is_told_so():
    for wrong in (vjp_full_jacobian, vjp_batched_jacobian):
        r = run_exercise("autograd.vjp", wrong)
        assert any("Jacobian" in c.message for c in r.checks if not c.passed), [c.message for c in r.checks]


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
    assert r.status == "passed", [(c.name, c.message) for c in r.checks if not c.passed]


def test_a_penalty_cut_off_from_the_graph_is_told_so():
    def rebuilt(loss, params):  # right value, but a new leaf: no path back to the parameters
        return torch.tensor(float(penalty_cat(loss, params)), dtype=torch.float64, requires_grad=True)

    r = run_exercise("autograd.gradient_norm_penalty", rebuilt)
    assert r.status == "failed" and "does not depend on parameter" in r.checks[0].message, r.checks[0].message


@pytest.mark.parametrize("wrong,hint", [
    (penalty_squared, "squared"), (penalty_per_param, "each parameter"), (penalty_no_graph, "create_graph"),
    (penalty_get_total_norm, "not differentiable"),
    (penalty_backward, ".grad"), (silu_autograd_inside, "recorded a graph"), (silu_ctx_attribute, "save_for_backward"),
    (silu_by_hand, "backward node"), (jacobian_transposed, "swapped"),
])
def test_classic_mistakes_are_named(wrong, hint):
    name, objs = next((n, o) for n, o in WRONG if o[-1] is wrong)
    r = run_exercise(f"autograd.{name}", *objs, hidden=True)
    assert any(hint in c.message for c in r.checks if not c.passed), [c.message for c in r.checks]


@pytest.mark.parametrize("objs,check,words", [
    ([SiLUAliased, _applies(SiLUAliased)], "forward_and_backward", "not call torch.nn.functional.silu"),
    ([SiLUModule, _applies(SiLUModule)], "forward_and_backward", "not call torch.nn.functional.silu"),
    ([SiLUCore, _applies(SiLUCore)], "forward_and_backward", "not call torch._C._nn.silu"),
    ([SiLUAten, _applies(SiLUAten)], "forward_and_backward", "not call torch.ops.aten.silu"),
    ([SiLUAtenBackward, _applies(SiLUAtenBackward)], "second_derivative", "calls torch.ops.aten.silu_backward"),
], ids=["aliased", "module", "core", "aten", "aten-backward"])
def test_the_library_silu_is_refused_under_any_name(objs, check, words):
    failed = {c.name: c.message for c in run_exercise("autograd.silu", *objs).checks if not c.passed}
    assert words in failed.get(check, ""), failed


def test_a_vjp_that_marks_the_callers_x_fails_a_public_check():
    """The task says to leave x without requires_grad: leaves_the_callers_x_alone says so before grading."""
    failed = {c.name: c.message for c in run_exercise("autograd.vjp", vjp_marks_the_callers_x).checks if not c.passed}
    assert "set requires_grad on the caller's x" in failed.get("leaves_the_callers_x_alone", ""), failed


@pytest.mark.parametrize("name,wrong,call", [
    ("vjp", vjp_func_grad, "torch.func.grad"), ("jacobian", jacobian_func_jacrev, "torch.func.jacrev"),
    ("linear_loss_grad", linear_grad_func_and_value, "torch.func.grad_and_value"),
    ("vjp", lambda f, x, v: torch.autograd.functional.vjp(f, x, v)[1], "torch.autograd.functional.vjp"),
    ("jacobian", jacobian_functional, "torch.autograd.functional.jacobian"),
], ids=["vjp-func-grad", "jacobian-jacrev", "linear-grad-and-value", "vjp-functional", "jacobian-functional"])
def test_whole_job_shortcuts_fail_naming_the_call(name, wrong, call):
    """A library call that does the whole exercise fails the first public check, with a message that names it."""
    failed = [c.message for c in run_exercise(f"autograd.{name}", wrong).checks if not c.passed]
    assert failed and f"not call {call}" in failed[0], failed


@pytest.mark.parametrize("name,wrong,check", [
    ("vjp", [vjp_atleast_1d], "zero_dim_input_and_output"),
    ("jacobian", [jacobian_numel_rows], "zero_dim_input_or_output"),
    ("jacobian", [jacobian_finite_differences], "made_of_vjps"),
    ("silu", [SiLUNoDouble, silu_no_double], "second_derivative"),
    ("silu", [SiLUOverflow, silu_overflow], "finite_up_to_800"),
    ("linear_loss_grad", [linear_grad_needs_contiguous], "non_contiguous_inputs"),
], ids=["vjp-0-dim", "jacobian-0-dim", "jacobian-finite-differences", "silu-no-second-derivative", "silu-overflow",
        "linear-grad-non-contiguous"])
def test_stated_requirements_fail_a_public_check(name, wrong, check):
    """What the exercise's text asks (0-dim shapes, VJPs, gradgradcheck, finite up to +-800) is checked in the
    student's notebook, not only at grading."""
    failed = {c.name: c.message for c in run_exercise(f"autograd.{name}", *wrong).checks if not c.passed}
    assert check in failed, failed
