"""Chapter 05 (autograd): public checks. Hidden checks for the same exercises live in grader/hidden/autograd.py."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from grader.expect import call, describe, expect, expect_tensor, expect_tensor_like, fail
from grader.registry import exercise
from grader.scenario import run_scenario
from grader.scenarios import autograd as scenarios
from grader.scenarios import common

# torch's own implementations, the references, bound before any student code runs.
_vjp = torch.autograd.functional.vjp
_jacobian = torch.autograd.functional.jacobian
_grad = torch.autograd.grad
_silu = F.silu
_sigmoid = torch.sigmoid
_mse, _ce = F.mse_loss, F.cross_entropy
_SGD, _Adam = torch.optim.SGD, torch.optim.Adam

FUNCTIONAL = ("torch.autograd.functional.vjp", "torch.autograd.functional.jacobian", "torch.func.vjp",
              "torch.func.jacrev", "torch.func.jacfwd")
LINEAR_LOSS_GRAD = exercise("autograd.linear_loss_grad", points=2,
                            forbid=("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward"))
VJP = exercise("autograd.vjp", points=2, forbid=FUNCTIONAL)
JACOBIAN = exercise("autograd.jacobian", points=2, forbid=FUNCTIONAL)
GRADIENT_NORM_PENALTY = exercise("autograd.gradient_norm_penalty", points=2)
SILU = exercise("autograd.silu", points=3, needs=("SiLU", "silu"))
ACCUMULATE_STEP = exercise("autograd.accumulate_step", points=3)


# ---------------------------------------------------------------- linear_loss_grad

def expect_linear_grad(linear_loss_grad, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, how: str) -> None:
    wr = w.detach().clone().requires_grad_()
    (0.5 * ((x @ wr - target) ** 2).sum()).backward()
    want = wr.grad.detach()
    what = f"linear_loss_grad({how})"
    got = call(linear_loss_grad, x, w, target, what=what)
    expect_tensor(got, want, what, rtol=1e-5 if x.dtype == torch.float32 else 1e-10, atol=1e-5)


@LINEAR_LOSS_GRAD.check
def one_output(linear_loss_grad):
    """x (4, 3), w (3, 1), target (4, 1): the gradient has w's shape, and equals autograd's"""
    x, w, t = torch.randn(4, 3), torch.randn(3, 1), torch.randn(4, 1)
    expect_linear_grad(linear_loss_grad, x, w, t, "x (4, 3), w (3, 1), target (4, 1)")


@LINEAR_LOSS_GRAD.check
def several_outputs_float64(linear_loss_grad):
    """x (8, 5), w (5, 2) in float64"""
    x, w, t = (torch.randn(8, 5, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64),
               torch.randn(8, 2, dtype=torch.float64))
    expect_linear_grad(linear_loss_grad, x, w, t, "x (8, 5), w (5, 2), target (8, 2), float64")


# ---------------------------------------------------------------- vjp and jacobian

def expect_vjp(vjp, name: str, x: torch.Tensor, v: torch.Tensor, how: str) -> dict:
    f = scenarios.FUNCTIONS[name]
    _, want = _vjp(f, x, v)
    out = run_scenario(scenarios.vjp_report, vjp, name, x, v)
    what = f"vjp(f, x, v) for {how}"
    expect_tensor(out["vjp"], want, what, rtol=1e-7, atol=1e-9)
    return out


@VJP.check
def elementwise_square(vjp):
    """f(x) = x ** 2: v^T J is 2 * x * v"""
    x, v = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    expect_vjp(vjp, "square", x, v, "f(x) = x ** 2, x of shape (5,)")


@VJP.check
def vector_to_fewer_outputs(vjp):
    """f: (6,) -> (3,) and f: (4,) -> (4, 4): v has f(x)'s shape, the result x's"""
    x = torch.randn(6, dtype=torch.float64)
    expect_vjp(vjp, "mixed", x, torch.randn(3, dtype=torch.float64), "f: (6,) -> (3,)")
    x = torch.randn(4, dtype=torch.float64)
    expect_vjp(vjp, "outer", x, torch.randn(4, 4, dtype=torch.float64), "f(x) = outer(x, cos x): (4,) -> (4, 4)")


def expect_jacobian(jacobian, name: str, x: torch.Tensor, how: str) -> dict:
    want = _jacobian(scenarios.FUNCTIONS[name], x)
    out = run_scenario(scenarios.jacobian_report, jacobian, name, x)
    what = f"jacobian(f, x) for {how}"
    got = out["jacobian"]
    if isinstance(got, torch.Tensor) and got.dim() == 2 and want.dim() == 2 and got.shape == want.shape[::-1] \
            and got.shape != want.shape:
        fail(f"{what} has shape {tuple(got.shape)}: rows and columns swapped; J[i, j] is d f_i / d x_j, "
             f"shape f(x).shape + x.shape = {tuple(want.shape)}")
    expect_tensor(got, want, what, rtol=1e-7, atol=1e-9)
    return out


@JACOBIAN.check
def square_is_diagonal(jacobian):
    """f(x) = x ** 2 has the Jacobian diag(2x)"""
    expect_jacobian(jacobian, "square", torch.randn(4, dtype=torch.float64), "f(x) = x ** 2, x of shape (4,)")


@JACOBIAN.check
def non_square(jacobian):
    """f: (6,) -> (3,) has a (3, 6) Jacobian: one row per output"""
    expect_jacobian(jacobian, "mixed", torch.randn(6, dtype=torch.float64), "f: (6,) -> (3,)")


@JACOBIAN.check
def matrix_input(jacobian):
    """x of shape (2, 3), f(x) of shape (2, 2): the Jacobian has shape (2, 2, 2, 3)"""
    expect_jacobian(jacobian, "matrix", torch.randn(2, 3, dtype=torch.float64), "f(x) = x @ x.T + x.sum()")


# ---------------------------------------------------------------- SiLU

def silu_grad(x: torch.Tensor) -> torch.Tensor:
    """d/dx x * sigmoid(x), computed here from its formula."""
    s = _sigmoid(x)
    return s * (1 + x * (1 - s))


def expect_silu(SiLU, silu, x: torch.Tensor, how: str) -> dict:
    g = torch.randn_like(x)
    out = run_scenario(scenarios.silu_report, SiLU, silu, x, g)
    expect(out["is_function"], f"SiLU should be a subclass of torch.autograd.Function, got {out['function_name']}")
    expect_tensor(out["y"], _silu(x), f"silu({how})", rtol=1e-10, atol=1e-12)
    expect(out["grad_fn"] == f"{out['function_name']}Backward",
           f"silu({how}).grad_fn is {out['grad_fn']}, not your SiLU's backward node: silu should return "
           "SiLU.apply(x), and SiLU.forward should compute without calling F.silu")
    expect_tensor(out["grad"], g * silu_grad(x), f"the gradient of silu({how}) from your backward",
                  rtol=1e-10, atol=1e-12)
    return out


@SILU.check
def forward_and_backward(SiLU, silu):
    """silu(x) equals F.silu, and your backward gives x * sigmoid(x)'s derivative"""
    expect_silu(SiLU, silu, torch.linspace(-6, 6, 25, dtype=torch.float64), "x = linspace(-6, 6, 25), float64")


@SILU.check
def passes_gradcheck(SiLU, silu):
    """torch.autograd.gradcheck agrees with finite differences in float64"""
    out = expect_silu(SiLU, silu, torch.randn(10, dtype=torch.float64), "x = randn(10), float64")
    expect(out["gradcheck"], f"gradcheck(silu, x) failed: {out['gradcheck_error']}")


# ---------------------------------------------------------------- gradient_norm_penalty

SPEC = [["Linear", 3, 4], ["Tanh"], ["Linear", 4, 2]]


def reference_penalty(spec, seed: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The expected penalty and its gradient, computed with torch in this process on the same model."""
    model = torch.nn.Sequential(*common.build_all(spec, seed)).double()
    torch.manual_seed(seed + 1)
    x = torch.randn(5, spec[0][1], dtype=torch.float64)
    y = torch.randn(5, spec[-1][2], dtype=torch.float64)
    params = list(model.parameters())
    grads = _grad(_mse(model(x), y), params, create_graph=True)
    penalty = torch.sqrt(sum((g ** 2).sum() for g in grads))
    return penalty.detach(), [g.detach() for g in _grad(penalty, params)]


def expect_penalty(gradient_norm_penalty, spec, seed: int) -> None:
    want, want_grads = reference_penalty(spec, seed)
    out = run_scenario(scenarios.penalty_report, gradient_norm_penalty, spec, seed)
    what = "gradient_norm_penalty(loss, params)"
    penalty = out["penalty"]
    if not isinstance(penalty, torch.Tensor):
        fail(f"{what} should return a 0-dim tensor, got {describe(penalty)}")
    expect_tensor_like(penalty, (), torch.float64, None, what)
    if abs(float(penalty) - float(want) ** 2) <= 1e-9 * float(want) ** 2 and abs(float(want) - 1) > 1e-6:
        fail(f"{what} returned {float(penalty):.6g}, the *squared* norm; the L2 norm is its square root")
    expect_tensor(penalty, want, what, rtol=1e-9, atol=1e-12)
    expect(out["requires_grad"], f"{what} is not differentiable: compute the gradients with create_graph=True so "
                                 "the penalty can be backpropagated")
    expect(not any(out["grads_left"]), f"{what} left gradients in the parameters' .grad: use torch.autograd.grad, "
                                       "which returns them, instead of .backward(), which accumulates them")
    for i, (got, w) in enumerate(zip(out["d_penalty"], want_grads)):
        expect_tensor(got, w, f"the gradient of your penalty with respect to parameter {i}", rtol=1e-7, atol=1e-10)


@GRADIENT_NORM_PENALTY.check
def small_regression(gradient_norm_penalty):
    """a 2-layer model's MSE loss: the norm of its gradient, and the gradient of that norm"""
    expect_penalty(gradient_norm_penalty, SPEC, 0)


# ---------------------------------------------------------------- accumulate_step

def batches(count: int, size: int, dim_in: int, dim_out: int, classes: int = 0) -> list:
    out = []
    for _ in range(count):
        x = torch.randn(size, dim_in, dtype=torch.float64)
        y = torch.randint(0, classes, (size,)) if classes else torch.randn(size, dim_out, dtype=torch.float64)
        out.append((x, y))
    return out


def reference_step(spec, seed: int, loss_name: str, optimizer_name: str, lr: float,
                   micro: list) -> dict[str, torch.Tensor]:
    """One optimizer step on the concatenated batch, with torch in this process."""
    model = torch.nn.Sequential(*common.build_all(spec, seed)).double()
    opt = (_SGD if optimizer_name == "sgd" else _Adam)(model.parameters(), lr=lr)
    x = torch.cat([m[0] for m in micro])
    y = torch.cat([m[1] for m in micro])
    loss = (_mse if loss_name == "mse" else _ce)(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def expect_accumulate(accumulate_step, spec, seed: int, loss_name: str, optimizer_name: str, lr: float,
                      micro: list, stale: bool, how: str) -> None:
    want = reference_step(spec, seed, loss_name, optimizer_name, lr, micro)
    got = run_scenario(scenarios.accumulate_report, accumulate_step, spec, seed, loss_name, optimizer_name, lr,
                       micro, stale)
    what = f"accumulate_step with {how}"
    for name, value in want.items():
        expect_tensor(got[name], value, f"{what}: parameter {name} after the step, against one step on the "
                                        "concatenated batch", rtol=1e-9, atol=1e-11)


@ACCUMULATE_STEP.check
def four_micro_batches_sgd(accumulate_step):
    """4 micro-batches of 3 rows, MSE, SGD: the same step as one batch of 12"""
    expect_accumulate(accumulate_step, SPEC, 1, "mse", "sgd", 0.1, batches(4, 3, 3, 2), False,
                      "4 micro-batches of 3, MSE, SGD(lr=0.1)")


@ACCUMULATE_STEP.check
def stale_gradients_do_not_count(accumulate_step):
    """gradients left in the model from before must not leak into the step"""
    expect_accumulate(accumulate_step, SPEC, 2, "mse", "sgd", 0.1, batches(2, 4, 3, 2), True,
                      "2 micro-batches of 4 and stale gradients in the model")
