"""Chapter 06 (modules): public checks. Hidden checks for the same exercises live in grader/hidden/modules.py.

Every exercise here is a class or takes a model, so every check runs a scenario (grader/scenarios/modules.py):
the scenario builds and drives the student's objects and reports plain data; the check computes what it
should be, here, with torch's own functions bound at import.
"""
from __future__ import annotations

import math

import torch

from grader.expect import (describe, expect, expect_equal, expect_tensor, expect_tensor_like, expect_type, factor_hint,
                           fail)
from grader.registry import exercise
from grader.runner import forbidden_message
from grader.scenario import Opaque, run_scenario
from grader.scenarios import common
from grader.scenarios import modules as scenarios

# The references, bound before any student code runs (a notebook that patches torch later changes nothing here).
_Sequential = torch.nn.Sequential
_backward = torch.autograd.backward
_cat = torch.cat
_einsum = torch.einsum
_Tensor = torch.Tensor

# Whole-job shortcuts, refused while the student's code runs, whatever name reaches them (grader/guard.py refuses by
# identity). parameters_to_vector (and the flattening helper under it, and the C function under that) counts the
# distinct parameters in one call; fx tracing with ShapeProp, or torch.export (and its private entry points, and
# dynamo's export), records every node's output shape without a hook; F.bilinear(x, x, W) is the quadratic form itself
# (the aten operators bilinear and _trilinear under it, refused at the dispatcher from any route).
# MySequential, Concat, Cruncher and RunningMean have no library call that does their job and passes the structural
# checks (an nn.Sequential base or child is refused by name and class); nn.Sequential cannot be forbidden anyway:
# the hidden checks' own models nest it.
COUNTING = ("torch.nn.utils.parameters_to_vector", "torch._utils._flatten_dense_tensors",
            "torch._C._nn.flatten_dense_tensors")
TRACING = ("torch.fx.Tracer.trace", "torch.fx.passes.shape_prop.ShapeProp.propagate", "torch.export.export",
           "torch.export._trace._export", "torch.export._trace._export_for_training", "torch._dynamo.export")
BILINEAR = ("torch.nn.functional.bilinear", "torch.bilinear", "torch._trilinear", "torch.ops.aten.bilinear",
            "torch.ops.aten._trilinear")

MY_SEQUENTIAL = exercise("modules.MySequential", points=3)
CONCAT = exercise("modules.Concat", points=2)
CRUNCHER = exercise("modules.Cruncher", points=3)
GET_NUM_PARAMETERS = exercise("modules.get_num_parameters", points=2, forbid=COUNTING)
RUNNING_MEAN = exercise("modules.RunningMean", points=3)
ACTIVATION_SHAPES = exercise("modules.activation_shapes", points=2, forbid=TRACING)
QUADRATIC = exercise("modules.Quadratic", points=3, forbid=BILINEAR)

CONTAINERS = ("torch.nn.modules.container.Sequential", "torch.nn.modules.container.ModuleList",
              "torch.nn.modules.container.ModuleDict")


def names(pairs) -> list[str]:
    return [name for name, _ in pairs]


def grads_of(model: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: None if p.grad is None else p.grad.detach() for name, p in model.named_parameters()}


def expect_module_call(got: dict, what: str) -> None:
    """The model is called the way nn.Module calls it: its class defines forward, and model(x) runs forward's hooks."""
    if got.get("no_forward"):
        fail(f"{what} has no method named forward: calling a module runs its forward (nn.Module.__call__ looks for "
             "that name), so name the method forward")
    expect(got.get("hooks_ran", 1) > 0, f"calling {what}(x) did not run the forward hook attached to it: your class "
                                        "replaces __call__, which skips nn.Module's (it runs forward with every hook "
                                        "around it); define forward instead of __call__")


def expect_input_kept(got: dict, what: str) -> None:
    expect(got.get("input_unchanged", True), f"{what} changed its input x in place; a module must leave its input "
                                             "as it is (work on new tensors)")


def loose(*wants: torch.Tensor | None) -> dict:
    """Tolerances for float32 results computed in another process: relative 1e-4, absolute 1e-4 of the largest
    value among `wants` (pass all of a model's gradients: one that should be 0, like a bias before BatchNorm, is
    rounding noise on the scale of the others). Threads and vector widths change the rounding of reductions,
    and BatchNorm over a few rows amplifies it; the mistakes the checks look for change values by far more."""
    scale = max((float(w.detach().abs().max()) for w in wants if w is not None and w.numel()), default=0.0)
    return {"rtol": 1e-4, "atol": 1e-6 + 1e-4 * scale}


def tolerance(want: torch.Tensor, dtype: torch.dtype) -> dict:
    """`loose` for float32 results; for float64 ones (against a float64 reference) nearly exact."""
    scale = float(want.detach().abs().max()) if want.numel() else 0.0
    return loose(want) if dtype != torch.float64 else {"rtol": 1e-9, "atol": 1e-12 + 1e-10 * scale}


def expect_grad(got, want: torch.Tensor, what: str, **tol) -> None:
    if got is None:
        fail(f"{what} is None: no gradient reached it (is it a registered nn.Parameter, and does forward use it "
             "directly, not through .data or .detach()?)")
    expect_tensor(got, want, what, **tol)


# ---------------------------------------------------------------- MySequential

def reference_sequential(specs, x: torch.Tensor, g: torch.Tensor, seed: int, repeats=()) -> dict:
    """torch's own nn.Sequential over the same modules: its parameter names, state_dict keys, output, grads."""
    model = _Sequential(*scenarios.build_repeating(specs, seed, repeats))
    y = model(x)
    _backward([y], [g])
    return {"names": names(model.named_parameters()), "keys": list(model.state_dict()),
            "output": y.detach(), "grads": grads_of(model)}


def expect_sequential(MySequential, specs, x: torch.Tensor, how: str, seed: int = 0, *, structure: bool = True,
                      values: bool = True, grads: bool = True, repeats=()) -> dict:
    """MySequential(*modules) against nn.Sequential(*modules), the same modules (`repeats`: module j is module i for
    each (j, i), one object given twice): names and keys (`structure`), output (`values`), gradients (`grads`)."""
    g = torch.randn(_Sequential(*scenarios.build_repeating(specs, seed, repeats))(x).shape)
    want = reference_sequential(specs, x, g, seed, repeats)
    got = run_scenario(scenarios.sequential_report, MySequential, specs, x, g, seed, values or grads,
                       repeats=[list(r) for r in repeats])
    what = f"MySequential({how})"
    expect(not got.get("sequentials_built"), f"{what} builds a torch.nn.Sequential of its modules, which does the "
                                             "whole job; register the modules yourself and run them in order in "
                                             "forward")
    borrowed = got.get("borrowed") or {}
    expect(not borrowed, f"{what} takes {', '.join(f'{k} = torch.nn.{v}' for k, v in borrowed.items())} from "
                         "torch's containers, whose code then does the job: write forward yourself")
    ran = got.get("sequential_forward_ran") or []
    expect(not ran, f"{what} runs torch.nn.Sequential's forward (on a {' and a '.join(ran)}), whose code then does "
                    "the whole job: run the modules in order in forward yourself")
    if structure:
        base = next((c for c in got["classes"] if c in CONTAINERS), None)
        expect(base is None, f"{what} is a subclass of {base}: subclass nn.Module directly and register the "
                             "modules yourself")
        if want["names"] and not got["parameters"]:
            fail(f"{what}.parameters() is empty, so an optimizer would see nothing to train: the modules are not "
                 "registered (a plain Python list hides them). Register module i under the name str(i) with "
                 "add_module")
        expect(names(got["parameters"]) == want["names"],
               f"{what}: parameter names are {names(got['parameters'])}, expected {want['names']} "
               "(module i registered under the name str(i), in the order given)")
        expect(list(got["state_dict"]) == want["keys"],
               f"{what}: state_dict keys are {list(got['state_dict'])}, expected {want['keys']}")
        expect(all(got["kept"]), f"{what}: the modules given are not all its children (kept: {got['kept']}); "
                                 "register the very objects you are given, not copies")
    if values or grads:
        expect_module_call(got, what)
    if values:
        expect_input_kept(got, f"{what}(x)")
        expect_tensor(got["output"], want["output"], f"{what}(x) for x of shape {tuple(x.shape)} (the modules run "
                                                     "in the order given, each on the previous one's output)",
                      **loose(want["output"]))
    if grads:
        tol = loose(*want["grads"].values())
        for name, w in want["grads"].items():
            expect_grad(got["module_grads"].get(name), w, f"after backward through {what}, the gradient of "
                                                          f"module {name}", **tol)
    return got


SEQ_SPECS = [["Linear", 3, 4], ["ReLU"], ["Linear", 4, 2, {"bias": False}]]
SQUARE_SPECS = [["Linear", 4, 4], ["Tanh"], ["Linear", 4, 4, {"bias": False}], ["Sigmoid"], ["Linear", 4, 4]]


@MY_SEQUENTIAL.check
def registers_each_module_under_its_index(MySequential):
    """Linear, ReLU, Linear: parameters and state_dict keys 0.weight, 0.bias, 2.weight"""
    expect_sequential(MySequential, SEQ_SPECS, torch.randn(5, 3), "Linear(3, 4), ReLU(), Linear(4, 2, bias=False)",
                      values=False, grads=False)


@MY_SEQUENTIAL.check
def runs_the_modules_in_order(MySequential):
    """the output is the last module's output, each module fed the previous one's (square layers too)"""
    expect_sequential(MySequential, SQUARE_SPECS, torch.randn(6, 4), "five 4-wide modules", 1,
                      structure=False, grads=False)
    expect_sequential(MySequential, SEQ_SPECS, torch.randn(5, 3), "Linear(3, 4), ReLU(), Linear(4, 2, bias=False)",
                      structure=False, grads=False)


@MY_SEQUENTIAL.check
def gradients_reach_every_module(MySequential):
    """backward through it fills every module's .grad, as through nn.Sequential"""
    expect_sequential(MySequential, SQUARE_SPECS, torch.randn(6, 4), "five 4-wide modules", 2)


def expect_empty_sequential(MySequential, x: torch.Tensor) -> None:
    """MySequential() has no parameters and returns its input unchanged."""
    got = run_scenario(scenarios.sequential_report, MySequential, [], x, torch.randn(x.shape), 0)
    expect(not got["parameters"] and not got["state_dict"], "MySequential() should have no parameters and an empty "
                                                            f"state_dict, got {names(got['parameters'])}")
    expect_tensor(got["output"], x, f"MySequential()(x) for x of shape {tuple(x.shape)}: with no modules, the input "
                                    "unchanged", rtol=0, atol=0)


@MY_SEQUENTIAL.check
def no_modules_returns_x(MySequential):
    """MySequential() with no modules returns x unchanged"""
    expect_empty_sequential(MySequential, torch.randn(2, 5))


# ---------------------------------------------------------------- Concat

def expect_concat(Concat, spec1, spec2, x: torch.Tensor, how: str, seed: int = 0, same: bool = False,
                  training: bool = False) -> dict:
    """Concat(net1, net2) on x, in training mode or in eval mode, against cat([net1(x), net2(x)], dim=-1): output,
    registered parameters and each net's gradients."""
    net1, net2 = common.build_all([spec1, spec2], seed)
    if same:
        net2 = net1
    net1.train(training), net2.train(training)
    y1, y2 = net1(x), net2(x)
    want = _cat([y1, y2], dim=-1)
    g = torch.randn(want.shape)
    _backward([want], [g])
    got = run_scenario(scenarios.concat_report, Concat, spec1, spec2, x, g, seed, same, training)
    what = f"Concat({how}{', in training mode' if training else ''})"
    expect_module_call(got, what)
    expect_input_kept(got, f"{what}(x)")
    out = got["output"]
    if isinstance(out, _Tensor) and tuple(out.shape) != tuple(want.shape):
        hint = ""
        if tuple(out.shape) == tuple(y2.shape) or (x.shape[-1] == y1.shape[-1] and tuple(out.shape) == tuple(y1.shape)):
            hint = ": it looks like one net's output, or net2(net1(x)); a parallel block runs both nets on x"
        elif out.dim() == want.dim() and out.shape[0] == 2 * want.shape[0]:
            hint = ": concatenated along dim 0 (the batch); concatenate the features, dim=-1"
        elif out.dim() == want.dim():
            hint = ": concatenate along the last dimension (dim=-1), whatever the input's rank"
        fail(f"{what}(x) for x of shape {tuple(x.shape)} has shape {tuple(out.shape)}, expected "
             f"{tuple(want.shape)} = cat([net1(x), net2(x)], dim=-1){hint}")
    expect_tensor(out, want.detach(), f"{what}(x) for x of shape {tuple(x.shape)} (cat([net1(x), net2(x)], dim=-1))",
                  **loose(want))
    for i, registered in enumerate(got["registered"]):
        expect(registered, f"{what}.parameters() misses net{i + 1}'s parameters: store each net as a module "
                           "attribute (self.net1 = net1) or in an nn.ModuleList, not in a plain list, tuple or dict")
    want_grads = [grads_of(net1), grads_of(net2)]
    tol = loose(*want_grads[0].values(), *want_grads[1].values())
    for i, (want_net, grads) in enumerate(zip(want_grads, got["net_grads"])):
        for name, w in want_net.items():
            expect_grad(grads.get(name), w, f"after backward through {what}, the gradient of net{i + 1}.{name}",
                        **tol)
    return got


@CONCAT.check
def does_not_compose_the_nets(Concat):
    """two Linear(4, 4): both see x (a parallel block), output (batch, 8), not net2(net1(x))"""
    expect_concat(Concat, ["Linear", 4, 4], ["Linear", 4, 4], torch.randn(5, 4), "Linear(4, 4), Linear(4, 4)", 1)


@CONCAT.check
def concatenates_the_two_outputs(Concat):
    """Linear(3, 4) and Linear(3, 2) side by side: output (batch, 6) = cat([net1(x), net2(x)], dim=-1), in training
    mode and in eval mode"""
    for training in (True, False):
        expect_concat(Concat, ["Linear", 3, 4], ["Linear", 3, 2], torch.randn(5, 3), "Linear(3, 4), Linear(3, 2)",
                      training=training)


@CONCAT.check
def both_nets_are_registered(Concat):
    """both nets' parameters are in parameters() and receive gradients"""
    got = expect_concat(Concat, ["Sequential", ["Linear", 3, 5], ["Tanh"]], ["Linear", 3, 2], torch.randn(4, 3),
                        "Sequential(Linear(3, 5), Tanh()), Linear(3, 2)", 2)
    expect(len(got["parameters"]) == 4, f"Concat has {len(got['parameters'])} parameters, expected 4 "
                                        "(net1's weight and bias, net2's weight and bias)")


@CONCAT.check
def leading_dimensions(Concat):
    """x of shape (batch, seq, features): concatenated along the last dimension, not dim 1"""
    expect_concat(Concat, ["Linear", 4, 2], ["Linear", 4, 3], torch.randn(3, 2, 4), "Linear(4, 2), Linear(4, 3)", 5)


# ---------------------------------------------------------------- Cruncher

def cruncher_keys(num_layers: int) -> list[str]:
    return [f"layers.{i}.weight" for i in range(num_layers)] + ["final.weight"]


def expect_cruncher_structure(got: dict, dim: int, num_layers: int, what: str) -> None:
    keys = cruncher_keys(num_layers)
    state = got["state_dict"]
    expect(sorted(state) == sorted(keys), f"{what}: state_dict keys are {list(state)}, expected {keys}")
    for key in keys:
        shape = (dim, 1) if key == "final.weight" else (dim, dim)
        expect_tensor_like(state[key], shape, None, None, f"{what}: state_dict()[{key!r}]")
    expect(sorted(names(got["parameters"])) == sorted(keys),
           f"{what}: parameters are {names(got['parameters'])}, expected {keys} (each weight an nn.Parameter of a "
           "registered submodule)")
    frozen = [n for n, r in got["requires_grad"].items() if not r]
    expect(not frozen, f"{what}: parameters {frozen} do not require grad")
    layers = got["child_classes"].get("layers")
    expect(layers in (None, "torch.nn.modules.container.ModuleList"),
           f"{what}: self.layers is a {layers}; the exercise asks for an nn.ModuleList (it registers the layers and "
           "has no forward: you write the loop)")
    expect(not got["buffers"], f"{what} has buffers {names(got['buffers'])}; it should hold only the weights")


def cruncher_reference(state: dict, x: torch.Tensor, g: torch.Tensor, num_layers: int) -> tuple:
    """x @ W_0 @ ... @ W_{n-1} @ W_final, squeezed, in float64 from the student's weights; and its gradients."""
    weights = {k: v.detach().double().clone().requires_grad_() for k, v in state.items()}
    h = x.double()
    for i in range(num_layers):
        h = h @ weights[f"layers.{i}.weight"]
    y = (h @ weights["final.weight"]).squeeze(-1)
    _backward([y], [g.double()])
    return y.detach(), {k: w.grad for k, w in weights.items()}


def expect_cruncher(Cruncher, dim: int, num_layers: int, x: torch.Tensor, seed: int = 0, dtype=None,
                    grads: bool = True) -> dict:
    g = torch.randn(x.shape[0], dtype=x.dtype)
    got = run_scenario(scenarios.cruncher_report, Cruncher, dim, num_layers, x, g, seed, dtype)
    what = f"Cruncher({dim}, {num_layers})" + (f".to({dtype})" if dtype is not None else "")
    expect_cruncher_structure(got, dim, num_layers, what)
    expect_module_call(got, what)
    expect_input_kept(got, f"{what}(x)")
    want, want_grads = cruncher_reference(got["state_dict"], x, g, num_layers)
    expect_tensor(got["output"], want.to(x.dtype), f"{what}(x) for x of shape {tuple(x.shape)}: x @ layers.0.weight "
                  "@ ... @ final.weight, squeezed to (batch,), with your own weights", **tolerance(want, x.dtype))
    if grads:
        for key, w in want_grads.items():
            expect_grad(got["grads"].get(key), w.to(x.dtype), f"{what}: the gradient of {key}", **tolerance(w, x.dtype))
    return got


def expect_normal_init(w: torch.Tensor, std: float, what: str, rel: float, shape_test: bool = True,
                       rule: str = "randn(...) / sqrt(dim)") -> None:
    """Statistical: mean about 0, standard deviation `std` within `rel`, and (large tensors) the normal's shape."""
    w = w.detach().double().reshape(-1)
    n = w.numel()
    got_std = float(w.std())
    expect(abs(got_std / std - 1) <= rel, f"{what}: standard deviation {got_std:.4g}, expected {std:.4g} "
                                          f"({rule}); off by {abs(got_std / std - 1):.0%}"
                                          f"{factor_hint(got_std, std)}")
    expect(abs(float(w.mean())) <= 6 * std / math.sqrt(n) + 1e-3 * std,
           f"{what}: mean {float(w.mean()):.3g}, expected about 0")
    if shape_test:
        inside = float((w.abs() < std).double().mean())
        expect(0.66 <= inside <= 0.705, f"{what}: {inside:.1%} of the weights lie within one standard deviation; a "
                                        "normal distribution has 68.3% (a uniform one 57.7%): draw with torch.randn")


@CRUNCHER.check
def state_dict_keys_and_shapes(Cruncher):
    """Cruncher(8, 3): state_dict keys layers.0.weight .. layers.2.weight (8, 8) and final.weight (8, 1)"""
    got = run_scenario(scenarios.cruncher_report, Cruncher, 8, 3, torch.randn(5, 8), torch.randn(5), 0)
    expect_cruncher_structure(got, 8, 3, "Cruncher(8, 3)")


@CRUNCHER.check
def output_values_and_shape(Cruncher):
    """output (batch,) = x @ W_0 @ W_1 @ W_2 @ W_final with your own weights (no nonlinearity)"""
    expect_cruncher(Cruncher, 8, 3, torch.randn(5, 8), seed=1, grads=False)


@CRUNCHER.check
def gradients_reach_the_weights(Cruncher):
    """backward fills every weight's .grad, equal to autograd's through the same product"""
    expect_cruncher(Cruncher, 6, 2, torch.randn(4, 6), seed=2)


@CRUNCHER.check
def weights_are_randn_over_sqrt_dim(Cruncher):
    """Cruncher(512, 2): every weight has mean 0 and standard deviation 1/sqrt(512), normally distributed"""
    got = run_scenario(scenarios.cruncher_report, Cruncher, 512, 2, torch.randn(2, 512), torch.randn(2), 3)
    expect_cruncher_structure(got, 512, 2, "Cruncher(512, 2)")
    for key, w in got["state_dict"].items():
        big = key != "final.weight"
        expect_normal_init(w, 1 / math.sqrt(512), f"Cruncher(512, 2): {key}", 0.05 if big else 0.2, shape_test=big)


@CRUNCHER.check
def zero_layers(Cruncher):
    """Cruncher(4, 0): no hidden layer, only final.weight (4, 1); the output is x @ final.weight, squeezed"""
    expect_cruncher(Cruncher, 4, 0, torch.randn(3, 4), seed=12)


def expect_independent_layers(Cruncher, dim: int, num_layers: int, seed: int) -> None:
    """Every layer has its own weight, drawn afresh: no two layers' weights are equal, hold the same values in another
    order or with other signs (one draw rearranged), or follow each other closely (one draw scaled or nudged)."""
    got = expect_cruncher(Cruncher, dim, num_layers, torch.randn(3, dim), seed=seed, grads=False)
    weights = [got["state_dict"][f"layers.{i}.weight"] for i in range(num_layers)]
    for i in range(num_layers):
        for j in range(i + 1, num_layers):
            what = f"Cruncher({dim}, {num_layers}): layers.{i}.weight"
            expect(not torch.equal(weights[i], weights[j]), f"{what} equals layers.{j}.weight; make a new layer for "
                                                            "each position")
            a, b = weights[i].double().flatten(), weights[j].double().flatten()
            expect(not torch.equal(a.abs().sort().values, b.abs().sort().values),
                   f"{what} holds the same values as layers.{j}.weight, rearranged: one draw shared by two layers; "
                   "draw each layer's weight afresh")
            r = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
            expect(abs(r) < 0.7, f"{what} and layers.{j}.weight are correlated (r = {r:.2f}): one draw shared by "
                                 "two layers; draw each layer's weight afresh")


@CRUNCHER.check
def each_layer_its_own_weight(Cruncher):
    """Cruncher(8, 3): each layer has its own freshly drawn weight (not one layer repeated)"""
    expect_independent_layers(Cruncher, 8, 3, 13)


# ---------------------------------------------------------------- get_num_parameters

def expect_count(get_num_parameters, name: str, args: list, expected: int, how: str, seed: int = 0) -> None:
    got = run_scenario(scenarios.count_report, get_num_parameters, name, args, seed)
    what = f"get_num_parameters({how})"
    expect_type(got["count"], int, what)
    if got["count"] != expected:
        fail(f"{what} returned {got['count']}, expected {expected}{factor_hint(got['count'], expected)}")
    expect(got["unchanged"], f"{what} changed the model's parameters (their names or requires_grad); only count them")


@GET_NUM_PARAMETERS.check
def plain_stack(get_num_parameters):
    """Linear(3, 4), ReLU, Linear(4, 2): 3*4 + 4 + 4*2 + 2 = 26"""
    expect_count(get_num_parameters, "spec", [["Sequential", ["Linear", 3, 4], ["ReLU"], ["Linear", 4, 2]]], 26,
                 "Sequential(Linear(3, 4), ReLU(), Linear(4, 2))")


@GET_NUM_PARAMETERS.check
def tied_embedding_and_head(get_num_parameters):
    """Embedding(10, 4) and a Linear(4, 10) head sharing its weight: 40 + the head's bias 10 = 50, not 90"""
    expect_count(get_num_parameters, "tied_lm", [10, 4, True], 50,
                 "an Embedding(10, 4) and a Linear(4, 10) whose weight is the embedding's")


@GET_NUM_PARAMETERS.check
def module_used_twice(get_num_parameters):
    """one Linear(4, 4) applied twice counts once: 20"""
    expect_count(get_num_parameters, "reused", [4, 2], 20, "Sequential(lin, ReLU(), lin) with lin = Linear(4, 4)")


@GET_NUM_PARAMETERS.check
def buffers_do_not_count(get_num_parameters):
    """Linear(3, 4), BatchNorm1d(4): 16 + 8 = 24 (running statistics are buffers, not parameters)"""
    expect_count(get_num_parameters, "spec", [["Sequential", ["Linear", 3, 4], ["BatchNorm1d", 4]]], 24,
                 "Sequential(Linear(3, 4), BatchNorm1d(4))")


@GET_NUM_PARAMETERS.check
def frozen_parameters_count(get_num_parameters):
    """a frozen layer's parameters (requires_grad=False) still count: 26"""
    expect_count(get_num_parameters, "frozen", [[["Linear", 3, 4], ["Linear", 4, 2]], [0]], 26,
                 "Sequential(Linear(3, 4) frozen, Linear(4, 2))")


@GET_NUM_PARAMETERS.check
def every_level_counts(get_num_parameters):
    """a parameter of the model's own beside modules nested three deep: 3 + 12 + 24 + 12 = 51"""
    expect_count(get_num_parameters, "nested", [3], 51,
                 "a model with its own scale (3) and body = Sequential(Linear(3, 3), Sequential(ReLU(), "
                 "Sequential(Linear(3, 6), LayerNorm(6)))): every level of the tree holds parameters")


# ---------------------------------------------------------------- RunningMean

def expect_running_mean_layout(got: dict, num_features: int, what: str) -> None:
    for name in ("mean", "count"):
        where = got["where"][name]
        if where == "parameter":
            fail(f"{what}: `{name}` is registered as a parameter, so parameters() lists it and an optimizer would "
                 f"train it; register it with self.register_buffer({name!r}, ...)")
        if where == "attribute":
            fail(f"{what}: `{name}` is a plain tensor attribute: state_dict() does not save it and .to() does not "
                 f"move it; register it with self.register_buffer({name!r}, ...)")
        expect(where == "buffer", f"{what} has no buffer named `{name}`")
    expect(not got["parameters"], f"{what} has parameters {names(got['parameters'])}; it should have none")
    buffers = dict(got["buffers"])
    expect(buffers.get("mean") == (num_features,), f"{what}: buffer `mean` has shape {buffers.get('mean')}, "
                                                   f"expected ({num_features},)")
    expect(buffers.get("count") == (), f"{what}: buffer `count` has shape {buffers.get('count')}, expected () "
                                       "(a 0-dim tensor)")
    expect(sorted(got["state_dict"]) == ["count", "mean"],
           f"{what}: state_dict keys are {list(got['state_dict'])}, expected ['mean', 'count'] (both persistent)")
    start = got["start"]
    expect_tensor(start["mean"], torch.zeros(num_features), f"{what}: `mean` before any input")
    expect(start["count"].dtype == torch.int64, f"{what}: `count` has dtype {start['count'].dtype}, expected "
                                                "torch.int64 (an exact count of rows)")
    expect(int(start["count"]) == 0, f"{what}: `count` before any input is {int(start['count'])}, expected 0")


def expect_running_mean(RunningMean, num_features: int, steps: list, how: str) -> dict:
    """Drive RunningMean through (mode, batch) steps; after each, mean, count and output against the exact mean."""
    got = run_scenario(scenarios.running_mean_report, RunningMean, num_features, steps)
    what = f"RunningMean({num_features})"
    expect_running_mean_layout(got, num_features, what)
    expect_module_call(got, what)
    seen: list[torch.Tensor] = []
    history = []
    for (mode, x), step in zip(steps, got["steps"]):
        history.append(f"{mode} {x.shape[0]} rows")
        if mode == "train":
            seen.append(x)
        rows = torch.cat(seen) if seen else torch.zeros(0, num_features)
        mean = rows.double().mean(0).float() if seen else torch.zeros(num_features)
        after = f"{what} after {', '.join(history)} ({how})"
        expect_module_call(step, what)
        expect_input_kept(step, f"{after}: forward")
        count_dtype, mean_dtype = getattr(step["count"], "dtype", None), getattr(step["mean"], "dtype", None)
        expect(count_dtype == torch.int64,
               f"{after}: `count` has dtype {count_dtype}, expected torch.int64 (as at first): an update made "
               "it a float (a float tensor added to it, or assigned); keep an exact count, self.count += N")
        expect(mean_dtype == torch.float32,
               f"{after}: `mean` has dtype {mean_dtype}, expected torch.float32 (as the buffer was made)")
        if step["mean_has_graph"] or step["mean_requires_grad"]:
            fail(f"{after}: buffer `mean` is part of the autograd graph (requires_grad or grad_fn set); update it "
                 "under torch.no_grad()")
        if mode == "eval":
            hint = " (updated in eval mode? only training mode updates mean and count)"
        elif len(seen) > 1:
            hint = (" (the mean of every row seen in training mode, not of the last batch, not an average of batch "
                    "means)")
        else:
            hint = ""
        expect_equal(int(step["count"]), rows.shape[0], f"{after}: count{hint if mode == 'eval' else ''}")
        expect_tensor(step["mean"], mean, f"{after}: mean{hint}", rtol=1e-5, atol=1e-6)
        expect_tensor(step["output"], (x - mean).detach(), f"{after}: the output, x - mean (the mean after this "
                      "batch's update)", rtol=1e-5, atol=1e-5)
    return got


@RUNNING_MEAN.check
def buffers_not_parameters(RunningMean):
    """RunningMean(3): buffers mean (3,) = 0 and count () = 0 (int64), both in state_dict, no parameters"""
    got = run_scenario(scenarios.running_mean_report, RunningMean, 3, [])
    expect_running_mean_layout(got, 3, "RunningMean(3)")


@RUNNING_MEAN.check
def exact_mean_in_training(RunningMean):
    """batches of 4, 2 and 1 rows in training mode: the mean of all 7 rows, count 7"""
    steps = [("train", torch.randn(4, 3) + 2), ("train", torch.randn(2, 3) - 1), ("train", torch.randn(1, 3) * 3)]
    expect_running_mean(RunningMean, 3, steps, "training mode")


@RUNNING_MEAN.check
def frozen_in_eval_mode(RunningMean):
    """in eval mode the mean and count stay as they are, and the output uses the stored mean"""
    steps = [("train", torch.randn(5, 2) + 1), ("train", torch.randn(3, 2)), ("eval", torch.randn(4, 2) * 10),
             ("eval", torch.randn(2, 2) - 5)]
    expect_running_mean(RunningMean, 2, steps, "then eval mode")


@RUNNING_MEAN.check
def buffers_move_with_to(RunningMean):
    """.to(torch.float64) converts mean (count stays int64); .to("meta") moves both"""
    got = run_scenario(scenarios.running_mean_to_report, RunningMean, 3)
    expect(got["float64"] == {"mean": "torch.float64", "count": "torch.int64"},
           f"RunningMean(3).to(torch.float64): mean and count have dtypes {got['float64']}, expected "
           "{'mean': 'torch.float64', 'count': 'torch.int64'} (registered buffers follow .to())")
    expect(got["meta"] == {"mean": "meta", "count": "meta"},
           f"RunningMean(3).to('meta'): mean and count are on {got['meta']}, expected both on meta")


# ---------------------------------------------------------------- activation_shapes

def expect_shapes(got_shapes, want: dict[str, tuple[int, ...]], what: str) -> None:
    if isinstance(got_shapes, Opaque) or not isinstance(got_shapes, dict):
        fail(f"{what} should return a dict from names (str) to shapes (tuples of ints), got {describe(got_shapes)}")
    if "" in got_shapes:
        fail(f"{what} includes the model itself (name ''); list its submodules only")
    missing = [n for n in want if n not in got_shapes]
    extra = [n for n in got_shapes if n not in want]
    if missing or extra:
        def some(names: list[str]) -> str:
            return (f"{names[:4]}" + (f" and {len(names) - 4} more" if len(names) > 4 else "")) if names else "none"
        fail(f"{what}: {len(got_shapes)} names, expected {len(want)}: missing {some(missing)}, unexpected "
             f"{some(extra)}; use the qualified names of named_modules(), nested ones included")
    for name, shape in want.items():
        value = got_shapes[name]
        if isinstance(value, torch.Size):
            fail(f"{what}[{name!r}] is a torch.Size; return plain tuples of ints: tuple(output.shape)")
        expect(type(value) is tuple and all(type(v) is int for v in value),
               f"{what}[{name!r}] should be a tuple of ints, got {describe(value)}")
        expect(value == shape, f"{what}[{name!r}] is {value}, expected {shape}")


def expect_no_hooks(got: dict, what: str) -> None:
    expect_input_kept(got, what)
    expect(got["hooks"] == 0, f"{what} left {got['hooks']} hook(s) attached to the model: remove every hook you "
                              "register (handle.remove()), in a finally block so an error cannot skip it")
    expect(got["global_hooks"] == 0, f"{what} left {got['global_hooks']} global module hook(s) registered; remove "
                                     "them (handle.remove())")


NESTED = ["Sequential", ["Linear", 3, 8], ["ReLU"], ["Sequential", ["Linear", 8, 8], ["Tanh"]], ["Linear", 8, 2]]
NESTED_SHAPES = {"0": (5, 8), "1": (5, 8), "2": (5, 8), "2.0": (5, 8), "2.1": (5, 8), "3": (5, 2)}
NESTED_HOW = "Sequential(Linear(3, 8), ReLU(), Sequential(Linear(8, 8), Tanh()), Linear(8, 2)), x of shape (5, 3)"


@ACTIVATION_SHAPES.check
def nested_sequential(activation_shapes):
    """every submodule by qualified name, nested ones too ('2', '2.0', '2.1'), shapes as tuples of ints"""
    got = run_scenario(scenarios.shapes_report, activation_shapes, "spec", [NESTED], torch.randn(5, 3), 0)
    expect_shapes(got["shapes"], NESTED_SHAPES, f"activation_shapes({NESTED_HOW})")


@ACTIVATION_SHAPES.check
def hooks_are_removed(activation_shapes):
    """no hook is left attached to any submodule afterwards"""
    got = run_scenario(scenarios.shapes_report, activation_shapes, "spec", [NESTED], torch.randn(5, 3), 0)
    expect_no_hooks(got, f"activation_shapes({NESTED_HOW})")


@ACTIVATION_SHAPES.check
def hooks_are_removed_when_forward_raises(activation_shapes):
    """a forward that raises: the error comes out of activation_shapes, and no hook is left behind"""
    broken = ["Sequential", ["Linear", 3, 4], ["ReLU"], ["Linear", 5, 2]]
    got = run_scenario(scenarios.raising_report, activation_shapes, "spec", [broken], torch.randn(2, 3), 0)
    what = "activation_shapes(Sequential(Linear(3, 4), ReLU(), Linear(5, 2)), x of shape (2, 3))"
    expect(got["raised"] == "RuntimeError", f"{what}: the model's forward raises RuntimeError (4 features into "
           f"Linear(5, 2)), which should come out of activation_shapes; got {got['raised'] or 'no exception'}")
    expect_no_hooks(got, what)


SCALED_SHAPES = {"0": (4, 6), "1": (4, 6), "2": (4, 6), "2.0": (4, 6), "2.1": (4, 6), "3": (4, 2)}


@ACTIVATION_SHAPES.check
def shapes_come_from_forward_hooks(activation_shapes):
    """each submodule's output is read by a forward hook: no replaced forward or __call__"""
    got = run_scenario(scenarios.shapes_report, activation_shapes, "scaled", [3, 6, 2], torch.randn(4, 3), 0)
    what = ("activation_shapes(Sequential(Linear(3, 6), Scaled(2.0), Sequential(Scaled(0.5), ReLU()), Linear(6, 2)), "
            "x of shape (4, 3))")
    expect(not got["unhooked"], f"{what}: the Scaled module(s) {got['unhooked']} ran with no forward hook attached; "
                                "read each output in a forward hook (module.register_forward_hook), as the exercise "
                                "asks, not by replacing forward or __call__")
    expect_shapes(got["shapes"], SCALED_SHAPES, what)
    expect_no_hooks(got, what)


@ACTIVATION_SHAPES.check
def shared_and_unused_modules(activation_shapes):
    """a module called twice keeps its last call's shape; a module never called is absent"""
    got = run_scenario(scenarios.shapes_report, activation_shapes, "twice", [5, 3], torch.randn(7, 5), 0)
    what = ("activation_shapes(a model whose Linear(5, 5) 'shared' runs on 7 rows then on 3, beside an unused "
            "Linear 'unused', x of shape (7, 5))")
    expect_shapes(got["shapes"], {"shared": (3, 5)}, what)
    expect_no_hooks(got, what)


# ---------------------------------------------------------------- Quadratic

def expect_quadratic_structure(got: dict, in_features: int, out_features: int, what: str) -> None:
    shape = (out_features, in_features, in_features)
    if any(name == "W" for name, _ in got["buffers"]):
        fail(f"{what}: W is a buffer, not a parameter: it would get no gradient and no optimizer would train it; "
             "make it an nn.Parameter")
    expect(got["parameters"] == [("W", shape)], f"{what}: parameters are {got['parameters']}, expected "
                                                f"[('W', {shape})] (self.W = nn.Parameter(...))")
    expect(got["requires_grad"]["W"], f"{what}: W does not require grad")
    expect(list(got["state_dict"]) == ["W"], f"{what}: state_dict keys are {list(got['state_dict'])}, expected ['W']")
    extra = names(got["buffers"]) + got["children"]
    expect(not extra, f"{what} registers {extra} besides W; it should hold W and nothing else")


def quadratic_reference(W: torch.Tensor, x: torch.Tensor, g: torch.Tensor) -> tuple:
    """y[b, k] = sum_ij W[k, i, j] x[b, i] x[b, j] in float64, and the gradients of (y * g).sum() for W and x."""
    Wr = W.detach().double().clone().requires_grad_()
    xr = x.detach().double().clone().requires_grad_()
    y = _einsum("kij,bi,bj->bk", Wr, xr, xr)
    _backward([y], [g.double()])
    return y.detach(), Wr.grad, xr.grad


def expect_quadratic(Quadratic, in_features: int, out_features: int, x: torch.Tensor, seed: int = 0, dtype=None,
                     grads: bool = True) -> dict:
    g = torch.randn(x.shape[0], out_features, dtype=x.dtype)
    got = run_scenario(scenarios.quadratic_report, Quadratic, in_features, out_features, x, g, seed, dtype)
    what = f"Quadratic({in_features}, {out_features})" + (f".to({dtype})" if dtype is not None else "")
    expect_quadratic_structure(got, in_features, out_features, what)
    expect_module_call(got, what)
    # An alias bound before the check (`from torch import bilinear`) escapes the forbidden list; its graph does not.
    expect("TrilinearBackward0" not in got.get("graph", ()),
           forbidden_message(QUADRATIC, "torch.nn.functional.bilinear (its graph shows aten's _trilinear)"))
    expect_input_kept(got, f"{what}(x)")
    W = got["parameter_values"]["W"]
    y, dW, dx = quadratic_reference(W, x, g)
    expect_tensor(got["output"], y.to(x.dtype), f"{what}(x) for x of shape {tuple(x.shape)}: y[b, k] = "
                  "sum_ij W[k, i, j] x[b, i] x[b, j], with your own W", **tolerance(y, x.dtype))
    if grads:
        expect_grad(got["grads"]["W"], dW.to(x.dtype), f"{what}: the gradient of W", **tolerance(dW, x.dtype))
        expect_grad(got["x_grad"], dx.to(x.dtype), f"{what}: the gradient of the input x", **tolerance(dx, x.dtype))
    return got


@QUADRATIC.check
def parameter_W(Quadratic):
    """Quadratic(3, 2) has one parameter, W of shape (2, 3, 3), and nothing else"""
    got = run_scenario(scenarios.quadratic_report, Quadratic, 3, 2, torch.randn(4, 3), torch.randn(4, 2), 0)
    expect_quadratic_structure(got, 3, 2, "Quadratic(3, 2)")


@QUADRATIC.check
def values(Quadratic):
    """y[b, k] = sum_ij W[k, i, j] x[b, i] x[b, j] for your W, in (3 -> 2) and (4 -> 4)"""
    expect_quadratic(Quadratic, 3, 2, torch.randn(5, 3), seed=1, grads=False)
    expect_quadratic(Quadratic, 4, 4, torch.randn(3, 4), seed=2, grads=False)


@QUADRATIC.check
def gradients_for_W_and_x(Quadratic):
    """backward gives W and x autograd's gradients (W used directly, not through .data)"""
    expect_quadratic(Quadratic, 3, 2, torch.randn(5, 3), seed=3)


def expect_quadratic_scale(Quadratic, in_features: int, out_features: int, seed: int) -> None:
    """W is drawn randn(out_features, in_features, in_features) / in_features."""
    got = run_scenario(scenarios.quadratic_report, Quadratic, in_features, out_features,
                       torch.randn(2, in_features), torch.randn(2, out_features), seed)
    what = f"Quadratic({in_features}, {out_features})"
    expect(names(got["parameters"]) == ["W"], f"{what}: parameters are {names(got['parameters'])}, expected ['W']")
    expect_normal_init(got["parameter_values"]["W"], 1 / in_features, f"{what}: W", 0.05,
                       rule="randn(out_features, in_features, in_features) / in_features")


@QUADRATIC.check
def initial_scale(Quadratic):
    """Quadratic(40, 12): W = randn(12, 40, 40) / 40 (standard deviation 1/40, normally distributed)"""
    expect_quadratic_scale(Quadratic, 40, 12, 10)
