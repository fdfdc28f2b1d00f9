"""Chapter 05 scenarios: the student's autograd code driven on named test functions and models built here.

Functions cannot cross to a grading kernel, so the test functions live in this module (FUNCTIONS) and
checks name them. Everything a scenario relies on from torch is bound at import, before any student
code ran: a notebook that later replaces torch.autograd.grad cannot change what a scenario measures.
"""
import torch
import torch.nn.functional as F

from . import common

_grad = torch.autograd.grad
_gradcheck = torch.autograd.gradcheck
_gradgradcheck = torch.autograd.gradgradcheck
_Function = torch.autograd.Function
_manual_seed = torch.manual_seed
_LOSSES = {"mse": F.mse_loss, "cross_entropy": F.cross_entropy}
_OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def _mixed(x):
    return torch.stack([x.sum(), (x ** 2).sum(), (x.sin() * x.flip(0)).sum()])


# Named test functions: each maps a tensor to a tensor, built only from differentiable torch operations.
FUNCTIONS = {
    "square": lambda x: x ** 2,
    "mixed": lambda x: _mixed(x.reshape(-1)),
    "outer": lambda x: torch.outer(x.reshape(-1), x.reshape(-1).cos()),
    "cumsum_tanh": lambda x: torch.tanh(x.cumsum(-1)) * x,
    "matrix": lambda x: x @ x.T + x.sum(),
    "wide": lambda x: (x.reshape(-1, 1) * torch.linspace(-1, 1, 50, dtype=x.dtype)).sin(),
}


class _CountBackward(_Function):
    """Identity whose backward counts how often gradients flow through it."""
    calls = 0

    @staticmethod
    def forward(ctx, y):
        return y.view_as(y)

    @staticmethod
    def backward(ctx, g):
        _CountBackward.calls += 1
        return g


def _counted(name):
    f = FUNCTIONS[name]

    def counted(x):
        return _CountBackward.apply(f(x))
    return counted


def vjp_report(vjp, name, x, v):
    """The student's vjp(f, x, v) for the named f, and how many backward passes through f it made."""
    _CountBackward.calls = 0
    x_in = x.clone()
    out = vjp(_counted(name), x_in, v)
    return {"vjp": out, "backward_calls": _CountBackward.calls, "x_grad": x_in.grad,
            "x_unchanged": bool(torch.equal(x_in.detach(), x))}


def jacobian_report(jacobian, name, x):
    """The student's jacobian(f, x) for the named f."""
    _CountBackward.calls = 0
    out = jacobian(_counted(name), x.clone())
    return {"jacobian": out, "backward_calls": _CountBackward.calls}


def silu_report(SiLU, silu, x, g):
    """silu(x) forward and backward in float64, whose backward ran, and gradcheck / gradgradcheck."""
    xr = x.detach().clone().requires_grad_()
    y = silu(xr)
    node = type(getattr(y, "grad_fn", None)).__name__
    y.backward(g)
    report = {"y": y.detach(), "grad": xr.grad, "grad_fn": node, "function_name": getattr(SiLU, "__name__", ""),
              "is_function": isinstance(SiLU, type) and issubclass(SiLU, _Function)}
    small = x[:6].detach().clone().requires_grad_()
    for name, check in (("gradcheck", _gradcheck), ("gradgradcheck", _gradgradcheck)):
        try:
            report[name] = bool(check(silu, (small,), raise_exception=True))
            report[name + "_error"] = ""
        except Exception as e:  # the checker's own verdict, as data
            report[name] = False
            report[name + "_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return report


def _model_and_batch(spec, seed, batch, classes):
    model = torch.nn.Sequential(*common.build_all(spec, seed)).double()
    _manual_seed(seed + 1)
    x = torch.randn(batch, spec[0][1], dtype=torch.float64)
    y = torch.randint(0, classes, (batch,)) if classes else torch.randn(batch, spec[-1][2], dtype=torch.float64)
    return model, x, y


def penalty_report(gradient_norm_penalty, spec, seed):
    """The penalty of a regression loss, differentiated once more with a grad bound at import."""
    model, x, y = _model_and_batch(spec, seed, 5, 0)
    loss = F.mse_loss(model(x), y)
    params = list(model.parameters())
    penalty = gradient_norm_penalty(loss, params)
    report = {"penalty": penalty.detach() if isinstance(penalty, torch.Tensor) else penalty,
              "requires_grad": bool(getattr(penalty, "requires_grad", False)),
              "grads_left": [p.grad is not None for p in params]}
    if report["requires_grad"]:
        report["d_penalty"] = list(_grad(penalty, params, allow_unused=True))
    del model, loss, penalty, params
    return report


def accumulate_report(accumulate_step, spec, seed, loss_name, optimizer_name, lr, micro_batches, stale):
    """One call of the student's accumulate_step on a model built here; its parameters afterwards."""
    model = torch.nn.Sequential(*common.build_all(spec, seed)).double()
    optimizer = _OPTIMIZERS[optimizer_name](model.parameters(), lr=lr)
    if stale:  # gradients left over from something else: the step must not include them
        for p in model.parameters():
            p.grad = torch.full_like(p, 100.0)
    accumulate_step(model, _LOSSES[loss_name], list(micro_batches), optimizer)
    out = {name: p.detach().clone() for name, p in model.named_parameters()}
    del model, optimizer
    return out
