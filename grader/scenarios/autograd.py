"""Chapter 05 scenarios: the student's autograd code driven on named test functions and models built here.

A Python function cannot cross to a grading kernel, so the test functions `f` for `vjp(f, x, v)` and
`jacobian(f, x)` live in this module (FUNCTIONS) and checks pass their names; the checks compute the
expected values from the same FUNCTIONS in the grading process. Models, losses and optimizers are named
by plain arguments too (a module spec and a seed, "mse", "sgd") and built here.

Everything a scenario relies on from torch is bound at import, before any student code ran: a notebook
that later replaces torch.autograd.grad (or torch.Tensor.backward, or torch.stack) cannot change what a
scenario measures. Scenarios report what they saw as data (values, counts, flags, error messages) and
decide nothing: the checks judge.
"""
import torch
import torch.nn.functional as F

from . import common

_Tensor = torch.Tensor
_autograd = torch.autograd
_Function = torch.autograd.Function
_grad = torch.autograd.grad
_backward = torch.autograd.backward
_gradcheck = torch.autograd.gradcheck
_gradgradcheck = torch.autograd.gradgradcheck
_saved_tensors_hooks = torch.autograd.graph.saved_tensors_hooks
_named_parameters = torch.nn.Module.named_parameters
_register_forward_pre_hook = torch.nn.Module.register_forward_pre_hook
_register_hook = torch.Tensor.register_hook
_register_step_post_hook = torch.optim.Optimizer.register_step_post_hook
_Sequential = torch.nn.Sequential
_equal = torch.equal
_functorch = getattr(torch._C, "_functorch", None)
_is_batched = getattr(_functorch, "is_batchedtensor", lambda t: False)
_is_legacy_batched = getattr(_functorch, "is_legacy_batchedtensor", lambda t: False)
_full_like = torch.full_like
_resize, _size = torch.Tensor.resize_, torch.Tensor.size
_stack, _outer, _tanh, _linspace = torch.stack, torch.outer, torch.tanh, torch.linspace
_LOSSES = {"mse": F.mse_loss, "cross_entropy": F.cross_entropy}
_OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


# ---------------------------------------------------------------- named test functions

def f_square(x):
    """Elementwise: f(x) has x's shape and a diagonal Jacobian."""
    return x ** 2


def f_mixed(x):
    """Any x to 3 outputs: a sum, a sum of squares, and sin(x) times x reversed, summed."""
    x = x.reshape(-1)
    return _stack([x.sum(), (x ** 2).sum(), (x.sin() * x.flip(0)).sum()])


def f_outer(x):
    """Any x of n elements to an (n, n) matrix."""
    x = x.reshape(-1)
    return _outer(x, x.cos())


def f_cumsum_tanh(x):
    """x's shape; each output depends on the elements before it along the last dimension."""
    return _tanh(x.cumsum(-1)) * x


def f_matrix(x):
    """(a, b) to (a, a)."""
    return x @ x.T + x.sum()


def f_wide(x):
    """x of n elements to an (n, 50) matrix: many more outputs than inputs."""
    return (x.reshape(-1, 1) * _linspace(-1, 1, 50, dtype=x.dtype)).sin()


def f_total(x):
    """Any x to a 0-dim scalar."""
    return (x * x.sin()).sum()


FUNCTIONS = {f.__name__[2:]: f for f in (f_square, f_mixed, f_outer, f_cumsum_tanh, f_matrix, f_wide, f_total)}


class _Counter:
    """How many backward passes went through a counting identity, and how many of them were batched
    (vmap, or autograd.grad(..., is_grads_batched=True): one call that stands for many rows)."""

    def __init__(self):
        self.backward = self.batched = 0


class _Count(_Function):
    """The identity, counting the backward passes that go through it (works under vmap too)."""
    generate_vmap_rule = True

    @staticmethod
    def forward(y, counter):
        return y.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.counter = inputs[1]

    @staticmethod
    def backward(ctx, g):
        ctx.counter.backward += 1
        ctx.counter.batched += bool(_is_batched(g) or _is_legacy_batched(g))
        return g, None


def _counted(name):
    """FUNCTIONS[name] followed by a counting identity, and its counter."""
    f, counter = FUNCTIONS[name], _Counter()

    def counted(x):
        return _Count.apply(f(x), counter)
    counted.__name__ = name
    return counted, counter


def vjp_report(vjp, name, x, v):
    """The student's vjp(f, x, v) for the named f, on x itself (a trace of this call then tells whether anything
    wrote into x); how many backward passes through f it made; x afterwards."""
    f, counter = _counted(name)
    before = x.detach().clone()
    out = vjp(f, x, v)
    report = {"vjp": out, "backward_calls": counter.backward, "batched_calls": counter.batched, "x_grad": x.grad,
              "x_requires_grad": bool(x.requires_grad), "x_unchanged": bool(_equal(x.detach(), before))}
    del f, out, before
    return report


def jacobian_report(jacobian, name, x):
    """The student's jacobian(f, x) for the named f, how many backward passes through f it made, and the x it was
    handed afterwards (its values, .grad and requires_grad)."""
    f, counter = _counted(name)
    x_in = x.clone()
    out = jacobian(f, x_in)
    report = {"jacobian": out, "backward_calls": counter.backward, "batched_calls": counter.batched,
              "x_unchanged": bool(_equal(x_in.detach(), x)), "x_grad": x_in.grad,
              "x_requires_grad": bool(x_in.requires_grad)}
    del f, out, x_in
    return report


# ---------------------------------------------------------------- linear_loss_grad

# The lineage entry the mark below leaves on a float32 target (the check looks for it in the result's lineage).
LINEAR_MARK = "aten.resize_:float32"


def linear_grad_marked(linear_loss_grad, x, w, target):
    """linear_loss_grad(x, w, target) after marking target: an in-place resize to its own size changes nothing (it
    returns at once), but a result computed from target by torch operations has it in its lineage, and one rebuilt
    from Python numbers does not. Only target: every gradient reads it, and none is allocated from it (zeros_like(w)
    would carry w's mark into a tensor whose values Python wrote)."""
    _resize(target, _size(target))
    return linear_loss_grad(x, w, target)


# ---------------------------------------------------------------- SiLU

def _first_line(e):
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


class _AutogradAsAtImport:
    """While the block runs, torch.autograd.grad and .backward are the functions bound at import (gradcheck
    looks them up as it runs), also when the student's code it calls patches them: `guard(fn)` undoes, after
    each call of fn, whatever fn put there. At the end, the notebook's latest ones are put back as they were."""

    def __enter__(self):
        self.notebook = [_autograd.grad, _autograd.backward]
        _autograd.grad, _autograd.backward = _grad, _backward
        return self

    def guard(self, fn):
        def guarded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            finally:
                if _autograd.grad is not _grad:
                    self.notebook[0] = _autograd.grad
                if _autograd.backward is not _backward:
                    self.notebook[1] = _autograd.backward
                _autograd.grad, _autograd.backward = _grad, _backward
        return guarded

    def __exit__(self, *exc):
        _autograd.grad, _autograd.backward = self.notebook


def silu_report(SiLU, silu, x, g):
    """silu(x), then backward with g: the output's node (the student's Function's or not), how many tensors it
    saved with save_for_backward, how often its backward ran, how many tensors operations saved while it ran
    (more than 0: it ran autograd inside), the gradient; then gradcheck and gradgradcheck on 6 elements."""
    is_function = isinstance(SiLU, type) and issubclass(SiLU, _Function)
    node_class = SiLU.__dict__.get("_backward_cls") if is_function else None
    xr = x.detach().clone().requires_grad_()
    y = silu(xr)
    node = y.grad_fn if isinstance(y, _Tensor) else None
    report = {"is_function": is_function, "function_name": getattr(SiLU, "__name__", type(SiLU).__name__),
              "y": y.detach() if isinstance(y, _Tensor) else y,
              "grad_fn": None if node is None else type(node).__name__,
              "own_node": node is not None and node_class is not None and type(node) is node_class,
              "saved": None, "backward_calls": 0, "saved_in_backward": 0, "grad": None}
    if report["own_node"]:
        report["saved"] = len(node.saved_tensors)
        node.register_hook(lambda grad_inputs, grad_outputs: report.update(backward_calls=report["backward_calls"] + 1))

    def pack(t):  # called for every tensor an operation saves for a later backward pass
        report["saved_in_backward"] += 1
        return t

    if isinstance(y, _Tensor) and y.requires_grad:
        with _saved_tensors_hooks(pack, lambda t: t):  # a backward without create_graph records nothing
            _backward(y, g)
        report["grad"] = xr.grad
    small = x.reshape(-1)[:6].detach().clone().requires_grad_()
    for name, check in (("gradcheck", _gradcheck), ("gradgradcheck", _gradgradcheck)):
        try:
            with _AutogradAsAtImport() as autograd:
                report[name] = bool(check(autograd.guard(silu), (small,), raise_exception=True))
            report[name + "_error"] = ""
        except Exception as e:  # the checker's own verdict, as data
            report[name], report[name + "_error"] = False, _first_line(e)
    del y, node, xr, small
    return report


# ---------------------------------------------------------------- models built from specs

def _model(spec, seed, dtype):
    """nn.Sequential of the modules a list of specs describes, seeded, in the named dtype."""
    return _Sequential(*common.build_all(spec, seed)).to(_DTYPES[dtype])


def penalty_report(gradient_norm_penalty, spec, seed, x, y):
    """The student's penalty of a float64 model's MSE loss on (x, y), and its gradient with respect to the
    parameters, taken with the torch.autograd.grad bound at import; which parameters were left a .grad."""
    model = _model(spec, seed, "float64")
    params = [p for _, p in _named_parameters(model)]
    loss = _LOSSES["mse"](model(x), y)
    penalty = gradient_norm_penalty(loss, params)
    report = {"penalty": penalty.detach() if isinstance(penalty, _Tensor) else penalty,
              "requires_grad": bool(getattr(penalty, "requires_grad", False)),
              "grads_left": [p.grad is not None for p in params], "d_penalty": None}
    if report["requires_grad"] and isinstance(penalty, _Tensor) and penalty.dim() == 0:
        report["d_penalty"] = list(_grad(penalty, params, allow_unused=True))
    del model, params, loss, penalty
    return report


def _rows(args):
    """The number of rows of a forward pass's first argument (-1 when it has none)."""
    return int(args[0].shape[0]) if args and isinstance(args[0], _Tensor) and args[0].dim() else -1


def accumulate_report(accumulate_step, spec, seed, dtype, loss_name, optimizer_name, lr, micro_batches, stale):
    """One call of the student's accumulate_step on a model and optimizer built here: the parameters and
    gradients afterwards, the rows each forward pass of the model saw and how many backward passes had reached the
    model before it, and how many optimizer steps it took."""
    model = _model(spec, seed, dtype)
    params = dict(_named_parameters(model))
    optimizer = _OPTIMIZERS[optimizer_name](list(params.values()), lr=lr)
    if stale:  # gradients left over from something else: the step must not include them
        for p in params.values():
            p.grad = _full_like(p, 100.0)
    rows, steps, backwards, before = [], [], [], []

    def forward(module, args):
        rows.append(_rows(args))
        before.append(len(backwards))

    _register_forward_pre_hook(model, forward)
    _register_step_post_hook(optimizer, lambda opt, args, kwargs: steps.append(1))
    first = next(iter(params.values()))  # the first layer's weight: every backward pass through the model ends there
    _register_hook(first, lambda grad: backwards.append(1))
    accumulate_step(model, _LOSSES[loss_name], list(micro_batches), optimizer)
    report = {"parameters": {n: p.detach().clone() for n, p in params.items()},
              "grads": {n: None if p.grad is None else p.grad.detach().clone() for n, p in params.items()},
              "forward_rows": rows, "steps": len(steps), "backwards_before_forward": before}
    del model, params, optimizer
    return report
