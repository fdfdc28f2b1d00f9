"""Chapter 05 (autograd): public checks. Hidden checks for the same exercises live in grader/hidden/autograd.py.

Most of these exercises need live objects (a function `f` to differentiate, a Function class, a model
and an optimizer), so their checks run scenarios (grader/scenarios/autograd.py): the scenario drives
the student's code on functions and models it builds from names, specs and seeds, and returns plain
data; the check below computes every expected value itself, with torch's own functions bound here at
import, and judges.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from grader.expect import (OWN_COUNTER, CheckFailure, at_sizes_no_tensor_can_hold, call, describe, expect, expect_equal,
                           expect_int, expect_tensor, expect_tensor_like, factor_hint, fail)
from grader.guard import MOVES, NUMBERS, UNSEEN, UNTRACED, entry_operator, lineage_text, unseen_values
from grader.registry import exercise
from grader.scenario import run_scenario, tracing
from grader.scenarios import autograd as scenarios
from grader.scenarios import common

# torch's own implementations, the references, bound before any student code runs.
_vjp = torch.autograd.functional.vjp
_jacobian = torch.autograd.functional.jacobian
_grad = torch.autograd.grad
_silu = F.silu
_sigmoid = torch.sigmoid
_isclose = torch.isclose
_isfinite = torch.isfinite
_as_tensor = torch.tensor
_LOSSES = {"mse": F.mse_loss, "cross_entropy": F.cross_entropy}
_OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}

# Whole-job shortcuts, refused while the student's code runs: torch's functional autograd gives a VJP, a Jacobian or
# a gradient in one call (torch.func.grad of (f(x) * v).sum() is a VJP); aten's silu and silu_backward are the
# library's SiLU and its derivative under other names, refused also where C++ calls them (TorchScript, autograd's
# engine running SiLU.backward): the SiLU checks watch every aten operator of their scenario (expect_silu). GLU of
# [x, x] is x * sigmoid(x): glu and glu_backward are SiLU and its derivative under another name, refused alike.
FUNCTIONAL = ("torch.autograd.functional.vjp", "torch.autograd.functional.jacobian", "torch.func.vjp",
              "torch.func.jacrev", "torch.func.jacfwd", "torch.func.grad", "torch.func.grad_and_value")
# linear_loss_grad is by hand: autograd under every name is refused, down to the engine's own entry (what
# torch.autograd.grad and .backward call; refused by identity, so an alias or the engine's class reaches it too) and
# forward mode's dual numbers; its checks also trace the call for backward passes and a recorded graph, whatever
# route reached the engine (a Node called by hand included). Nor is it finite differences (the loss at nudged
# weights): a hidden check weighs the values the call's tensor operations produce, which work out of the trace's sight
# would hide (NumPy, directly or through DLPack; another thread or process: guard.UNTRACED), so that is refused too.
# Python numbers (tolist, item) stay allowed, since printing a tensor takes them, but the result's values must come
# from the call's traced tensor operations (expect_computed; a hidden check marks target, whose mark they must carry).
# vjp and jacobian are judged by their traces too (the argument written, the backward passes counted): the same routes
# out of sight are refused.
LINEAR_LOSS_GRAD = exercise("autograd.linear_loss_grad", points=2,
                            forbid=("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
                                    "torch.autograd.Variable._execution_engine.run_backward",
                                    "torch.autograd.forward_ad.make_dual", "torch._make_dual", *FUNCTIONAL,
                                    *UNTRACED))
VJP = exercise("autograd.vjp", points=2, forbid=(*FUNCTIONAL, *UNTRACED))
JACOBIAN = exercise("autograd.jacobian", points=2, forbid=(*FUNCTIONAL, *UNTRACED))
GRADIENT_NORM_PENALTY = exercise("autograd.gradient_norm_penalty", points=2)
SILU = exercise("autograd.silu", points=3, needs=("SiLU", "silu"),
                forbid=("torch.nn.functional.silu", "torch._C._nn.silu", "torch._C._nn.silu_", "torch.ops.aten.silu",
                        "torch.ops.aten.silu_", "torch.ops.aten.silu_backward", "torch.nn.functional.glu",
                        "torch._C._nn.glu", "torch.ops.aten.glu", "torch.ops.aten.glu_backward"))
ACCUMULATE_STEP = exercise("autograd.accumulate_step", points=3)
# penalty_step_flops is arithmetic on sizes: torch's counter on a real step would do the job in one call, so it is
# refused while the student's function runs (the class and entering it, under any name), and so are its per-op
# formulas; a counter of one's own that runs a model is stopped by sizes no tensor can hold.
PENALTY_STEP_FLOPS = exercise("autograd.penalty_step_flops", points=3, counts=True,
                              forbid=("torch.utils.flop_counter.FlopCounterMode.__enter__",
                                      "torch.utils.flop_counter.FlopCounterMode",
                                      *(f"torch.utils.flop_counter.{name}" for name in ("mm_flop", "addmm_flop",
                                                                                        "bmm_flop", "baddbmm_flop")),
                                      OWN_COUNTER, *UNTRACED))


def _tolerance(dtype: torch.dtype) -> dict:
    return {"rtol": 1e-10, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-5, "atol": 1e-5}


# ---------------------------------------------------------------- linear_loss_grad

# Operators that make, copy, move or select values without computing any, a conversion included (guard.MOVES). A
# gradient worked out in Python numbers (.tolist(), .item()) and put back into a tensor (torch.tensor,
# g[i, j] = value, torch.stack of 0-dim tensors) reaches the result through these alone.
_MOVES = MOVES | {"to_copy"}
# The advice every way of not computing the gradient ends with.
DERIVE = "Derive dL/dw by the chain rule and compute it from x, w and target with torch's tensor operations"


def _floats(text: str) -> list[float]:
    """The number a NUMBERS entry names, in a list; none for text that is not one."""
    try:
        return [float(text)]
    except ValueError:
        return []


def _put_back(got: torch.Tensor, numbers: list[float]) -> int:
    """How many of got's elements equal one of the Python numbers its values took in (within the value check's
    tolerance): a computed gradient of random inputs matches none of its constants; one put back from Python, each."""
    if not numbers or not got.is_floating_point():
        return 0
    flat = got.detach().reshape(-1, 1)
    table = _as_tensor(numbers, dtype=torch.float64).to(got.dtype).reshape(1, -1)
    return int(_isclose(flat, table, **_tolerance(got.dtype)).any(1).sum())


def expect_computed(lineage: set[str], what: str, got: torch.Tensor) -> None:
    """The gradient's values came from tensor operations the trace saw (its lineage), not from Python numbers or
    NumPy put into a tensor: work out of the trace's sight is unmeasured, so finite differences could hide there.
    `got`: the result, whose values numbers worked out in Python and put back one by one equal."""
    ops = [entry_operator(e) for e in sorted(lineage)]
    if unseen := unseen_values(lineage):
        fail(f"{what}: {unseen}. {DERIVE}, inside the function")
    if not any(op not in (UNSEEN, NUMBERS) and op not in _MOVES for op, _ in ops):
        came = (f"its values came from {lineage_text(lineage, 6)} only" if lineage
                else "no tensor operation made its values")
        fail(f"{what} computed its values outside torch ({came}): numbers taken out with .tolist() or .item() and "
             f"put back into a tensor (torch.tensor(...), g[i, j] = value). {DERIVE} (matrix products)")
    size = got.numel()
    put_back = _put_back(got, [v for op, n in ops if op == NUMBERS for v in _floats(n)])
    if put_back > max(2, size // 2):
        fail(f"{what}: {put_back} of the result's {size} values are Python numbers the call put in (torch.tensor(v), "
             "torch.full((), v), t * 0 + v, g[i, j] = v, or a 0-dim tensor computed from such numbers alone): values "
             f"worked out outside torch's operations (with .tolist() or .item()) and put back one by one. {DERIVE} "
             "(matrix products)")


def expect_linear_grad(linear_loss_grad, x: torch.Tensor, w: torch.Tensor, target: torch.Tensor, how: str):
    """linear_loss_grad(x, w, target) equals autograd's gradient, computed here (float64 for the reference), the
    call used no autograd (no backward pass, no graph recorded) and its tensor operations computed the values (its
    trace, taken where the code ran, returned)."""
    wr = w.detach().double().requires_grad_()
    loss = 0.5 * ((x.detach().double() @ wr - target.detach().double()) ** 2).sum()
    (want,) = _grad(loss, wr)
    what = f"linear_loss_grad({how})"
    with tracing(lineage=True) as trace:
        got = call(linear_loss_grad, x, w, target, what=what)
    expect(trace.backward_passes == 0, f"{what} ran {trace.backward_passes} backward pass(es) through autograd's "
                                       "engine: derive the gradient by hand and compute it with matrix operations")
    expect(trace.graph_ops == 0, f"{what} built an autograd graph ({trace.graph_ops} operations on tensors that "
                                 "require grad): derive the gradient by hand; the inputs need no requires_grad")
    expect_tensor(got, want.to(w.dtype), what, **_tolerance(w.dtype))
    expect_computed(trace.lineage, what, got)
    return trace


@LINEAR_LOSS_GRAD.check
def one_output(linear_loss_grad):
    """x (4, 3), w (3, 1), target (4, 1): the gradient has w's shape, and equals autograd's"""
    x, w, t = torch.randn(4, 3), torch.randn(3, 1), torch.randn(4, 1)
    expect_linear_grad(linear_loss_grad, x, w, t, "x (4, 3), w (3, 1), target (4, 1)")


@LINEAR_LOSS_GRAD.check
def several_outputs_float64(linear_loss_grad):
    """x (8, 5), w (5, 2), target (8, 2) in float64"""
    x, w, t = (torch.randn(8, 5, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64),
               torch.randn(8, 2, dtype=torch.float64))
    expect_linear_grad(linear_loss_grad, x, w, t, "x (8, 5), w (5, 2), target (8, 2), float64")


@LINEAR_LOSS_GRAD.check
def non_contiguous_inputs(linear_loss_grad):
    """x, w and target may be non-contiguous views (transposed, sliced): the same gradient"""
    x = torch.randn(5, 6).T                     # (6, 5), transposed
    w = torch.randn(5, 8)[:, ::2]                # (5, 4), every other column
    t = torch.randn(4, 6).T                      # (6, 4), transposed
    expect_linear_grad(linear_loss_grad, x, w, t, "x = randn(5, 6).T, w = randn(5, 8)[:, ::2], target = randn(4, 6).T")


# ---------------------------------------------------------------- vjp and jacobian

def expect_vjp(vjp, name: str, x: torch.Tensor, v: torch.Tensor, how: str, watch_x: bool = False) -> dict:
    """The student's vjp on the named function equals torch.autograd.functional.vjp; the scenario's report. With
    `watch_x`, the call is traced and `x_written` says whether an operation wrote into x's memory while it ran (x is
    vjp_report's third argument, handed to vjp itself)."""
    _, want = _vjp(scenarios.FUNCTIONS[name], x, v)
    if watch_x:
        with tracing() as trace:
            out = run_scenario(scenarios.vjp_report, vjp, name, x, v)
        out["x_written"] = 2 in trace.written
    else:  # untraced: a trace slows every tensor operation of the call down
        out = run_scenario(scenarios.vjp_report, vjp, name, x, v)
    expect_tensor(out["vjp"], want, f"vjp(f, x, v) for {how}", rtol=1e-7, atol=1e-9)
    return out


def expect_one_backward(out: dict, how: str) -> None:
    calls = out["backward_calls"]
    expect(calls == 1, f"vjp(f, x, v) for {how} ran {calls} backward passes through f; a vector-Jacobian product "
                       "is exactly one (pass v as the output gradient; never build the Jacobian)")
    expect(not out["batched_calls"], f"vjp(f, x, v) for {how} ran a batched backward pass (vmap or "
                                     "is_grads_batched): that builds the Jacobian, one row per output element; a "
                                     "vector-Jacobian product is one plain backward pass with v as the output gradient")


def expect_no_trace(out: dict, how: str) -> None:
    """What vjp leaves behind: a result without a graph, and the caller's x as it was."""
    expect(not out["vjp"].requires_grad, f"vjp(f, x, v) for {how} returned a tensor that still requires grad (it "
                                         "carries a graph); detach it")
    expect(out["x_grad"] is None, f"vjp(f, x, v) for {how} left a gradient in x.grad; work on a detached copy of x")
    expect(not out["x_requires_grad"], f"vjp(f, x, v) for {how} set requires_grad on the caller's x; work on a "
                                       "detached copy (x.detach().requires_grad_())")
    expect(out["x_unchanged"], f"vjp(f, x, v) for {how} changed x")
    expect(not out["x_written"], f"vjp(f, x, v) for {how} wrote into the caller's x (an in-place operation on x, "
                                 "or on a view or .data of it), even if its values came back: leave x untouched "
                                 "and differentiate a detached copy")


@VJP.check
def elementwise_square(vjp):
    """f(x) = x ** 2: v^T J is 2 * x * v"""
    x, v = torch.randn(5, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    expect_vjp(vjp, "square", x, v, "f(x) = x ** 2, x of shape (5,)")


@VJP.check
def leaves_the_callers_x_alone(vjp):
    """the caller's x keeps no .grad and does not start requiring grad; the result carries no graph"""
    how = "f(x) = x ** 2, x of shape (3,)"
    expect_no_trace(expect_vjp(vjp, "square", torch.randn(3, dtype=torch.float64),
                               torch.randn(3, dtype=torch.float64), how, watch_x=True), how)


@VJP.check
def fewer_and_more_outputs_one_pass(vjp):
    """f: (6,) -> (3,) and f: (4,) -> (4, 4), each with one backward pass: v has f(x)'s shape, the result x's"""
    how = "f: (6,) -> (3,)"
    expect_one_backward(expect_vjp(vjp, "mixed", torch.randn(6, dtype=torch.float64),
                                   torch.randn(3, dtype=torch.float64), how), how)
    how = "f(x) = outer(x, cos x): (4,) -> (4, 4)"
    expect_one_backward(expect_vjp(vjp, "outer", torch.randn(4, dtype=torch.float64),
                                   torch.randn(4, 4, dtype=torch.float64), how), how)


@VJP.check
def zero_dim_input_and_output(vjp):
    """x may be 0-dim, and so may f(x) (then v is 0-dim): the result has x's shape"""
    expect_vjp(vjp, "square", torch.tensor(1.5, dtype=torch.float64), torch.tensor(-2.0, dtype=torch.float64),
               "f(x) = x ** 2 with x 0-dim")
    expect_vjp(vjp, "total", torch.randn(2, 3, dtype=torch.float64), torch.tensor(0.5, dtype=torch.float64),
               "f: (2, 3) -> () with v 0-dim")


def expect_jacobian(jacobian, name: str, x: torch.Tensor, how: str, count_passes: bool = False) -> dict:
    """The student's jacobian of the named function equals torch.autograd.functional.jacobian; the scenario's
    report. With `count_passes`, the call is traced and the report holds the backward passes it started (every
    route into autograd's engine) and f(x)'s size."""
    want = _jacobian(scenarios.FUNCTIONS[name], x)
    if count_passes:
        with tracing() as trace:
            out = run_scenario(scenarios.jacobian_report, jacobian, name, x)
        out["passes"], out["outputs"] = trace.backward_passes, math.prod(want.shape[:want.dim() - x.dim()])
        out["complex"] = sorted(d for d in trace.dtypes if d.startswith("complex"))
    else:
        out = run_scenario(scenarios.jacobian_report, jacobian, name, x)
    what = f"jacobian(f, x) for {how}"
    got = out["jacobian"]
    if isinstance(got, torch.Tensor) and got.shape != want.shape:
        y_shape, x_shape = tuple(want.shape[:want.dim() - x.dim()]), tuple(x.shape)
        if tuple(got.shape) == x_shape + y_shape:
            fail(f"{what} has shape {tuple(got.shape)} = x.shape + f(x).shape: rows and columns are swapped. "
                 f"J[i..., j...] is d f(x)[i...] / d x[j...], of shape f(x).shape + x.shape = {tuple(want.shape)}")
        if got.numel() == want.numel():
            fail(f"{what} has shape {tuple(got.shape)}, expected f(x).shape + x.shape = {tuple(want.shape)} "
                 f"(f(x) has shape {y_shape}, x {x_shape})")
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


@JACOBIAN.check
def zero_dim_input_or_output(jacobian):
    """a 0-dim f(x) or a 0-dim x: the shape is still f(x).shape + x.shape"""
    expect_jacobian(jacobian, "total", torch.randn(3, dtype=torch.float64), "f: (3,) -> ()")
    expect_jacobian(jacobian, "square", torch.tensor(-0.7, dtype=torch.float64), "f(x) = x ** 2 with x 0-dim")


def expect_made_of_vjps(out: dict, how: str) -> None:
    """The Jacobian came from backward passes through f (VJPs), one plain pass per element of f(x), and x is as
    it was: its values, no .grad, not made to require grad."""
    expect(out["backward_calls"] >= 1, f"jacobian(f, x) for {how} made no backward pass through f: build it from "
                                       "VJPs, one per output element (not from finite differences)")
    expect(not out.get("complex"), f"jacobian(f, x) for {how} computed in {', '.join(out.get('complex') or [])}: a "
                                   "complex step (Im f(x + ih e_j) / h) measures the derivative instead of taking it "
                                   "from backward passes; build J from one VJP per output element")
    passes, outputs = out["passes"], out["outputs"]
    batched = " (batched: is_grads_batched or vmap)" if out["batched_calls"] else ""
    expect(passes == outputs and not out["batched_calls"],
           f"jacobian(f, x) for {how} ran {passes} backward pass(es){batched} for the {outputs} elements of f(x): "
           "the exercise builds J from one VJP per output element, one plain backward pass each")
    expect(out["x_unchanged"], f"jacobian(f, x) for {how} changed x")
    expect(out["x_grad"] is None, f"jacobian(f, x) for {how} left a gradient in x.grad; work on a detached copy of x, "
                                  "as your vjp does")
    expect(not out["x_requires_grad"], f"jacobian(f, x) for {how} set requires_grad on the caller's x; work on a "
                                       "detached copy (x.detach().requires_grad_()), as your vjp does")


@JACOBIAN.check
def made_of_vjps(jacobian):
    """built from VJPs: backward passes through f, not finite differences; x is left as it was"""
    how = "f(x) = tanh(cumsum(x)) * x, x of shape (2, 3)"
    expect_made_of_vjps(expect_jacobian(jacobian, "cumsum_tanh", torch.randn(2, 3, dtype=torch.float64), how,
                                        count_passes=True), how)


# ---------------------------------------------------------------- gradient_norm_penalty

SPEC = [["Linear", 3, 4], ["Tanh"], ["Linear", 4, 2]]


def reference_penalty(spec, seed: int, x: torch.Tensor, y: torch.Tensor, h: float = 1e-6
                      ) -> tuple[torch.Tensor, list[torch.Tensor], float]:
    """The expected penalty, the norm of the loss's gradient, and its gradient with respect to each parameter,
    by central finite differences of that norm (float64): an oracle that needs no second derivative. Also
    the sum of the per-parameter norms (a classic mistake), for the message."""
    model = torch.nn.Sequential(*common.build_all(spec, seed)).double()
    params = list(model.parameters())

    def norm() -> float:
        grads = _grad(_LOSSES["mse"](model(x), y), params)
        return float(sum(float((g * g).sum()) for g in grads)) ** 0.5

    numeric = []
    for p in params:
        d = torch.zeros_like(p).reshape(-1)
        flat = p.detach().view(-1)  # the parameter's own storage: the model sees each nudge
        for i in range(flat.numel()):
            flat[i] += h
            plus = norm()
            flat[i] -= 2 * h
            minus = norm()
            flat[i] += h
            d[i] = (plus - minus) / (2 * h)
        numeric.append(d.reshape(p.shape))
    per_parameter = sum(float(g.norm()) for g in _grad(_LOSSES["mse"](model(x), y), params))
    return torch.tensor(norm(), dtype=torch.float64), numeric, per_parameter


def expect_penalty(gradient_norm_penalty, spec, seed: int, batch: int, how: str) -> None:
    x = torch.randn(batch, spec[0][1], dtype=torch.float64)
    y = torch.randn(batch, spec[-1][2], dtype=torch.float64)
    want, want_grads, per_parameter = reference_penalty(spec, seed, x, y)
    out = run_scenario(scenarios.penalty_report, gradient_norm_penalty, spec, seed, x, y)
    what = f"gradient_norm_penalty(loss, params) for {how}"
    penalty = out["penalty"]
    if not isinstance(penalty, torch.Tensor):
        fail(f"{what} should return a 0-dim tensor, got {describe(penalty)}")
    expect_tensor_like(penalty, (), torch.float64, None, what)
    w = float(want)
    if abs(float(penalty) - w * w) <= 1e-9 * w * w and abs(w - 1) > 1e-3:
        fail(f"{what} returned {float(penalty):.6g}, the *squared* norm; the L2 norm is its square root")
    if abs(float(penalty) - per_parameter) <= 1e-9 * per_parameter and len(want_grads) > 1:
        fail(f"{what} returned {float(penalty):.6g}, the sum of each parameter's gradient norm; the penalty is "
             "one norm over all the gradients together (the square root of the sum of all their squares)")
    expect_tensor(penalty, want, what, rtol=1e-9, atol=1e-12)
    expect(not any(out["grads_left"]), f"{what} left gradients in the parameters' .grad: use torch.autograd.grad, "
                                       "which returns them, instead of .backward(), which accumulates them")
    expect(out["requires_grad"], f"{what} is not differentiable: compute the gradients with create_graph=True so "
                                 "the penalty can be backpropagated")
    for i, (got, wg) in enumerate(zip(out["d_penalty"], want_grads)):
        expect(got is not None, f"{what} does not depend on parameter {i} through autograd: build the penalty from "
                                "the gradients returned with create_graph=True, with torch operations only")
        expect_tensor(got, wg, f"the gradient of your penalty with respect to parameter {i} (shape "
                               f"{tuple(wg.shape)})", rtol=1e-5, atol=1e-7)


@GRADIENT_NORM_PENALTY.check
def small_regression(gradient_norm_penalty):
    """a 2-layer model's MSE loss: the norm of its gradient, and the gradient of that norm"""
    expect_penalty(gradient_norm_penalty, SPEC, 0, 5, "a Linear(3, 4), Tanh, Linear(4, 2) model")


# ---------------------------------------------------------------- SiLU

def silu_grad(x: torch.Tensor) -> torch.Tensor:
    """d/dx x * sigmoid(x), computed here from its formula."""
    s = _sigmoid(x)
    return s * (1 + x * (1 - s))


def expect_silu(SiLU, silu, x: torch.Tensor, how: str) -> dict:
    """Forward equals F.silu; the output comes from the student's own Function, whose backward gives the
    derivative; the scenario's report."""
    g = torch.randn_like(x)
    with tracing():  # every aten operator seen, also those TorchScript or autograd's engine call from C++
        out = run_scenario(scenarios.silu_report, SiLU, silu, x, g)
    expect(out["is_function"], f"SiLU should be a subclass of torch.autograd.Function, got {out['function_name']}")
    expect_tensor(out["y"], _silu(x), f"silu({how})", rtol=1e-10, atol=1e-12)
    expect(out["own_node"], f"silu({how}).grad_fn is {out['grad_fn']}, not your SiLU's backward node: silu should "
                            "return SiLU.apply(x)")
    expect(out["backward_calls"] == 1, f"backpropagating through silu({how}) ran your SiLU.backward "
                                       f"{out['backward_calls']} times, expected once")
    grad = out["grad"]
    if isinstance(grad, torch.Tensor) and grad.shape == x.shape and not bool(_isfinite(grad).all()):
        bad = int((~_isfinite(grad)).nonzero()[0][0]) if grad.dim() == 1 else None
        at = f" at x = {float(x[bad]):g}" if bad is not None else ""
        fail(f"your backward gave {float(grad.reshape(-1)[~_isfinite(grad.reshape(-1))][0])}{at} for silu({how}): "
             "write the derivative so that it cannot overflow (sigmoid(x) stays in [0, 1]; exp(-x) does not)")
    expect_tensor(grad, g * silu_grad(x), f"the gradient of silu({how}) from your backward", rtol=1e-10, atol=1e-12)
    return out


@SILU.check
def forward_and_backward(SiLU, silu):
    """silu(x) equals F.silu, and your backward gives x * sigmoid(x)'s derivative"""
    expect_silu(SiLU, silu, torch.linspace(-6, 6, 25, dtype=torch.float64), "x = linspace(-6, 6, 25), float64")


@SILU.check
def backward_is_your_own(SiLU, silu):
    """forward saves x with ctx.save_for_backward; backward applies the derivative's formula, not autograd"""
    out = expect_silu(SiLU, silu, torch.randn(7, dtype=torch.float64), "x = randn(7), float64")
    expect(out["saved"], "your SiLU.forward saved nothing with ctx.save_for_backward: save the input tensor(s) "
                         "the backward needs that way (not as attributes of ctx)")
    expect(out["saved_in_backward"] == 0, "your SiLU.backward recorded a graph while it ran (it saved "
                                          f"{out['saved_in_backward']} tensors for a backward pass): it should "
                                          "compute grad_output times the derivative's formula, not differentiate "
                                          "x * sigmoid(x) with autograd")


@SILU.check
def passes_gradcheck(SiLU, silu):
    """torch.autograd.gradcheck agrees with finite differences in float64"""
    out = expect_silu(SiLU, silu, torch.randn(10, dtype=torch.float64), "x = randn(10), float64")
    expect(out["gradcheck"], f"gradcheck(silu, x) failed: {out['gradcheck_error']}")


@SILU.check
def second_derivative(SiLU, silu):
    """gradgradcheck passes: your backward is made of differentiable torch operations on what you saved"""
    out = expect_silu(SiLU, silu, torch.randn(6, dtype=torch.float64), "x = randn(6), float64")
    expect(out["gradgradcheck"], f"gradgradcheck(silu, x) failed: {out['gradgradcheck_error']}")


@SILU.check
def finite_up_to_800(SiLU, silu):
    """x from -800 to 800 in float64: forward and backward stay finite (no inf, no NaN)"""
    expect_silu(SiLU, silu, torch.tensor([-800.0, -300.0, -50.0, 0.0, 50.0, 300.0, 800.0], dtype=torch.float64),
                "x = [-800, -300, -50, 0, 50, 300, 800], float64")


# ---------------------------------------------------------------- accumulate_step

def batches(count: int, size: int, dim_in: int, dim_out: int, classes: int = 0,
            dtype: torch.dtype = torch.float32) -> list:
    out = []
    for _ in range(count):
        x = torch.randn(size, dim_in, dtype=dtype)
        y = torch.randint(0, classes, (size,)) if classes else torch.randn(size, dim_out, dtype=dtype)
        out.append((x, y))
    return out


def _reference_model(spec, seed: int, dtype: str) -> torch.nn.Module:
    return torch.nn.Sequential(*common.build_all(spec, seed)).to(_DTYPES[dtype])


def _grads(model: torch.nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    names, params = zip(*model.named_parameters())
    return dict(zip(names, (g.detach() for g in _grad(loss, list(params)))))


def reference_step(spec, seed: int, dtype: str, loss_name: str, optimizer_name: str, lr: float,
                   micro: list) -> tuple[dict, dict, dict]:
    """With torch in this process: the parameters after one step on the concatenated batch, its mean
    gradient, and the gradient of the last micro-batch alone (divided by their number), for messages."""
    loss_fn = _LOSSES[loss_name]
    model = _reference_model(spec, seed, dtype)
    last = {n: g / len(micro) for n, g in _grads(model, loss_fn(model(micro[-1][0]), micro[-1][1])).items()}
    x, y = torch.cat([m[0] for m in micro]), torch.cat([m[1] for m in micro])
    grads = _grads(model, loss_fn(model(x), y))
    opt = _OPTIMIZERS[optimizer_name](model.parameters(), lr=lr)
    for name, p in model.named_parameters():
        p.grad = grads[name].clone()
    opt.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}, grads, last


def _all_close(got: dict, want: dict, rtol: float, atol: float) -> bool:
    return all(isinstance(got.get(n), torch.Tensor) and got[n].shape == w.shape and got[n].dtype == w.dtype
               and bool(_isclose(got[n], w, rtol=rtol, atol=atol).all()) for n, w in want.items())


def expect_accumulate(accumulate_step, spec, seed: int, dtype: str, loss_name: str, optimizer_name: str, lr: float,
                      micro: list, stale: bool, how: str) -> None:
    want, want_grads, last = reference_step(spec, seed, dtype, loss_name, optimizer_name, lr, micro)
    out = run_scenario(scenarios.accumulate_report, accumulate_step, spec, seed, dtype, loss_name, optimizer_name,
                       lr, micro, stale)
    what = f"accumulate_step with {how}"
    k, rows = len(micro), micro[0][0].shape[0]
    tol = {"rtol": 1e-9, "atol": 1e-11} if dtype == "float64" else {"rtol": 1e-5, "atol": 1e-6}
    expect(out["steps"] == 1, f"{what} took {out['steps']} optimizer steps; accumulation takes exactly one, after "
                              "the backward of every micro-batch")
    expect(all(r <= rows for r in out["forward_rows"]),
           f"{what} ran the model on {max(out['forward_rows'], default=0)} rows at once; run it on one micro-batch "
           f"({rows} rows) at a time: that is what keeps activation memory at one micro-batch's")
    early = next((i for i, done in enumerate(out["backwards_before_forward"]) if done < i), None)
    expect(early is None, f"{what} ran micro-batch {early + 1 if early is not None else 0}'s forward before "
                          f"backpropagating micro-batch {early}'s loss: every micro-batch's activations were alive "
                          "at once, as in one big batch. Call backward on each micro-batch's loss (divided by the "
                          "number of micro-batches) before the next forward; the gradients add up in .grad")
    grads = out["grads"]
    if k > 1 and _all_close(grads, {n: g * k for n, g in want_grads.items()}, 1e-4, 1e-6):
        fail(f"{what}: the gradient is {k} times the batch's mean gradient: divide each micro-batch's loss "
             f"(or the summed gradient) by the number of micro-batches, {k}")
    if stale and _all_close(grads, {n: g + 100 for n, g in want_grads.items()}, 1e-4, 1e-4):
        fail(f"{what}: the gradients left in .grad before the call (100 everywhere) were added to the step: "
             "zero the gradients first")
    if k > 1 and _all_close(grads, last, 1e-4, 1e-6):
        fail(f"{what}: only the last micro-batch's gradient reached the step: zero the gradients once before the "
             "loop, not between micro-batches")
    for name, value in want.items():
        expect_tensor(out["parameters"][name], value, f"{what}: parameter {name} after the step, against one step "
                                                      "on the concatenated batch", **tol)
    for name, value in want_grads.items():
        expect(grads[name] is not None, f"{what}: after the step, {name}.grad is None; leave the whole batch's mean "
                                        "gradient in .grad (zero the gradients at the start of the step, not after it)")
        expect_tensor(grads[name], value, f"{what}: {name}.grad after the step (the whole batch's mean gradient)",
                      rtol=1e-4 if dtype == "float32" else 1e-9, atol=1e-6 if dtype == "float32" else 1e-11)


@ACCUMULATE_STEP.check
def four_micro_batches_sgd(accumulate_step):
    """4 micro-batches of 3 rows, MSE, SGD: the same step as one batch of 12"""
    expect_accumulate(accumulate_step, SPEC, 1, "float32", "mse", "sgd", 0.1, batches(4, 3, 3, 2), False,
                      "4 micro-batches of 3, MSE, SGD(lr=0.1)")


@ACCUMULATE_STEP.check
def adam_too(accumulate_step):
    """3 micro-batches of 2 rows, MSE, Adam: any optimizer steps once, on the whole batch's mean gradient"""
    expect_accumulate(accumulate_step, SPEC, 4, "float32", "mse", "adam", 0.01, batches(3, 2, 3, 2), False,
                      "3 micro-batches of 2, MSE, Adam(lr=0.01)")


@ACCUMULATE_STEP.check
def stale_gradients_do_not_count(accumulate_step):
    """gradients left in the model from before must not leak into the step"""
    expect_accumulate(accumulate_step, SPEC, 2, "float32", "mse", "sgd", 0.1, batches(2, 4, 3, 2), True,
                      "2 micro-batches of 4 and stale gradients in the model")


# ---------------------------------------------------------------- penalty_step_flops

PASSES = ("forward", "backward", "double_backward")
# What FlopCounterMode would count at sizes no tensor can hold (literals; tests/test_autograd_answers.py derives them
# from per-layer counts measured on real models). Odd widths past 2**32: a float rounds these counts.
PENALTY_HUGE = ({"forward": 110_680_464_674_185_543_788, "backward": 110_680_464_803_034_562_758,
                 "double_backward": 221_360_929_863_767_163_456, "total": 442_721_859_340_987_270_002},
                {"forward": 145_071_098_353_755_500_964_741_120, "backward": 222_442_350_809_091_768_145_936_384,
                 "double_backward": 599_627_206_528_856_070_654_263_296,
                 "total": 967_140_655_691_703_339_764_940_800})


def _double_backward_hint(got: int, want: dict[str, int], x_layer: int) -> str:
    """What a wrong double-backward count most likely left out or added, from the expected counts alone."""
    if got == 0:
        return (" (0: the step's second backward pass is missing; backpropagating loss + penalty differentiates the "
                "graph the forward recorded and the graph the first backward recorded)")
    if got == want["backward"]:
        return (" (that is one plain backward, through the forward's graph alone; the second pass also "
                "differentiates the graph the first backward recorded, with create_graph=True: price its matmuls "
                "too)")
    if got == 2 * (want["forward"] + want["backward"]):
        return (" (that is 2 x (forward + backward), two matmuls for every matmul of both graphs; but a matmul with "
                "x as an operand costs one, since x needs no gradient: the forward's first layer, and the first "
                "backward's weight gradient of that layer)")
    if got == want["double_backward"] + 4 * x_layer:
        return (" (that counts gradients with respect to x, which needs none: in the second pass, no matmul is run "
                "for x's gradient, nor for a gradient that only x's would need)")
    return factor_hint(got, want["double_backward"])


def expect_penalty_flops(penalty_step_flops, batch: int, dims: list[int], want: dict[str, int], how: str = "") -> None:
    """penalty_step_flops(batch, dims) returns exactly `want` (what FlopCounterMode counts for the real step), as a
    dict of Python ints whose total is the sum of the three passes."""
    what = f"penalty_step_flops({batch}, {how or dims})"
    got = penalty_step_flops(batch, list(dims))
    if type(got) is not dict:
        fail(f"{what} should return a dict, got {describe(got)}")
    expect_equal(sorted(map(str, got)), sorted((*PASSES, "total")), f"{what}'s keys")
    values = {key: expect_int(got[key], f"{what}[{key!r}]") for key in (*PASSES, "total")}
    x_layer = 2 * batch * dims[0] * dims[1]  # the size of the first layer's matmul, the one whose operand is x
    for key in PASSES:
        if values[key] == want[key]:
            continue
        hint = factor_hint(values[key], want[key])
        if key == "forward" and batch > 1 and values[key] * batch == want[key]:
            hint = " (that is for one row of the batch: every row goes through every layer)"
        elif key == "backward" and values[key] == want[key] + x_layer:
            hint = (" (that counts the first layer's input gradient, but x does not require grad, so autograd never "
                    "computes it)")
        elif key == "double_backward":
            hint = _double_backward_hint(values[key], want, x_layer)
        fail(f"{what}[{key!r}] is {values[key]:,}; FlopCounterMode counts {want[key]:,} for the real step{hint}")
    expect(values["total"] == sum(values[key] for key in PASSES),
           f"{what}['total'] is {values['total']:,}; it should be forward + backward + double_backward")


@PENALTY_STEP_FLOPS.check
def one_hidden_layer(penalty_step_flops):
    """batch 4, dims [3, 5, 2]: forward 200, backward 280, double backward 720, total 1,200"""
    expect_penalty_flops(penalty_step_flops, 4, [3, 5, 2],
                         {"forward": 200, "backward": 280, "double_backward": 720, "total": 1200})


@PENALTY_STEP_FLOPS.check
def one_layer_and_three(penalty_step_flops):
    """batch 2, dims [3, 4] (one layer: 48, 48, 96) and batch 3, dims [4, 6, 5, 2] (384, 624, 1,728)"""
    expect_penalty_flops(penalty_step_flops, 2, [3, 4],
                         {"forward": 48, "backward": 48, "double_backward": 96, "total": 192})
    expect_penalty_flops(penalty_step_flops, 3, [4, 6, 5, 2],
                         {"forward": 384, "backward": 624, "double_backward": 1728, "total": 2736})


@PENALTY_STEP_FLOPS.check
def shapes_no_tensor_can_hold(penalty_step_flops):
    """batch 3, dims [2**32 + 1, 2**32 + 3, 5], and batch 2**20, dims [7, 2**62, 8]: exact ints from the sizes alone

    A (2**32 + 3) x (2**32 + 1) weight has more than 2**64 elements, more than any tensor can have (the meta device
    included), so running the step under a counter fails; arithmetic on the sizes does not, in ints (a float rounds
    these counts)."""
    fn = at_sizes_no_tensor_can_hold(penalty_step_flops, "penalty_step_flops")
    expect_penalty_flops(fn, 3, [2**32 + 1, 2**32 + 3, 5], PENALTY_HUGE[0], "[2**32 + 1, 2**32 + 3, 5]")
    expect_penalty_flops(fn, 2**20, [7, 2**62, 8], PENALTY_HUGE[1], "[7, 2**62, 8]")
