"""Chapter 06 (modules): hidden checks, run only at grading: random sizes, other dtypes, modes and models."""
from __future__ import annotations

import math

import torch

from grader.exercises.modules import (ACTIVATION_SHAPES, CONCAT, CRUNCHER, GET_NUM_PARAMETERS, MY_SEQUENTIAL, QUADRATIC,
                                      RUNNING_MEAN, expect_concat, expect_count, expect_cruncher,
                                      expect_cruncher_structure, expect_empty_sequential, expect_independent_layers,
                                      expect_no_hooks, expect_normal_init, expect_quadratic, expect_quadratic_scale,
                                      expect_running_mean, expect_sequential, expect_shapes, loose, _Sequential)
from grader.expect import expect, expect_tensor, fail
from grader.inputs import randint
from grader.scenario import run_scenario
from grader.scenarios import common
from grader.scenarios import modules as scenarios

_register_forward_hook = torch.nn.Module.register_forward_hook


# ---------------------------------------------------------------- references

def reference_num_parameters(model: torch.nn.Module) -> int:
    """Elements of the distinct parameters (parameters() yields a shared one once), frozen ones included."""
    return sum(p.numel() for p in model.parameters())


def reference_activation_shapes(model: torch.nn.Module, x: torch.Tensor) -> dict[str, tuple[int, ...]]:
    """Output shape of every submodule's last call, by qualified name, through forward hooks removed afterwards."""
    shapes: dict[str, tuple[int, ...]] = {}
    handles = []
    try:
        for name, module in model.named_modules():
            if name:
                def record(module, inputs, output, name=name):
                    shapes[name] = tuple(output.shape)
                handles.append(_register_forward_hook(module, record))
        model(x)
    finally:
        for handle in handles:
            handle.remove()
    return shapes


# ---------------------------------------------------------------- random models

def random_chain(dim_in: int, depth: int) -> tuple[list, int]:
    """Specs of `depth` random modules that chain from dim_in; the output width."""
    specs, width = [], dim_in
    for _ in range(depth):
        kind = randint(0, 5)
        if kind <= 1:
            out = randint(1, 7)
            specs.append(["Linear", width, out] + ([{"bias": False}] if kind else []))
            width = out
        elif kind == 2:
            specs.append([["ReLU"], ["Tanh"], ["GELU"], ["Sigmoid"]][randint(0, 3)])
        elif kind == 3:
            specs.append(["LayerNorm", width])
        elif kind == 4:
            specs.append(["BatchNorm1d", width])
        else:
            out = randint(1, 6)
            specs.append(["Sequential", ["Linear", width, out], ["Tanh"]])
            width = out
    if not any(s[0] in ("Linear", "Sequential") for s in specs):
        out = randint(1, 6)
        specs.append(["Linear", width, out])
        width = out
    return specs, width


# ---------------------------------------------------------------- MySequential

@MY_SEQUENTIAL.hidden
def random_chains(MySequential):
    """random chains of Linear, activations, LayerNorm, BatchNorm1d (buffers) and nested Sequentials"""
    for seed in range(4):
        dim = randint(1, 6)
        specs, _ = random_chain(dim, randint(1, 6))
        expect_sequential(MySequential, specs, torch.randn(randint(2, 6), dim), f"{len(specs)} modules", seed)


@MY_SEQUENTIAL.hidden
def one_module(MySequential):
    """a single module: keys 0.weight and 0.bias"""
    expect_sequential(MySequential, [["Linear", 2, 3]], torch.randn(4, 2), "Linear(2, 3)", 5)


@MY_SEQUENTIAL.hidden
def no_modules(MySequential):
    """MySequential() returns its input unchanged and has no parameters"""
    expect_empty_sequential(MySequential, torch.randn(3, 4))


@MY_SEQUENTIAL.hidden
def a_module_given_twice(MySequential):
    """one module object given twice, (layer, Tanh(), layer): it runs twice, as in nn.Sequential"""
    # children() and named_children() yield a module once however often it is registered: a forward that loops over
    # them runs the layer once. The layers are square so that only the values tell.
    dim = randint(2, 6)
    specs = [["Linear", dim, dim], ["Tanh"], ["Linear", dim, dim]]
    expect_sequential(MySequential, specs, torch.randn(randint(2, 6), dim),
                      f"layer, Tanh(), layer: one Linear({dim}, {dim}) object given twice, which nn.Sequential runs "
                      "twice (children() yields it once)", 8, repeats=[(2, 0)])
    specs = [["Linear", dim, dim], ["ReLU"], ["Linear", dim, dim], ["Sigmoid"], ["Linear", dim, dim], ["Tanh"]]
    expect_sequential(MySequential, specs, torch.randn(randint(2, 6), dim),
                      "a, ReLU(), b, Sigmoid(), a, Tanh(): one object a given twice, around another layer b", 9,
                      repeats=[(4, 0)])


@MY_SEQUENTIAL.hidden
def eleven_modules_or_more(MySequential):
    """12 modules: they run in the order given, module 10 after module 9 (names sorted as text put "10" before "2")"""
    dim = randint(2, 5)
    specs = [["Linear", dim, dim] if i % 2 == 0 else [["Tanh"], ["Sigmoid"], ["GELU"]][i % 3] for i in range(12)]
    expect_sequential(MySequential, specs, torch.randn(randint(2, 6), dim), f"12 modules, Linear({dim}, {dim}) "
                      "and activations in turn; names sorted as text would run '10' right after '1'", 10)


@MY_SEQUENTIAL.hidden
def eval_reaches_every_module(MySequential):
    """model.eval() switches every module to eval mode (Dropout becomes the identity)"""
    specs = [["Linear", 4, 6], ["Dropout", 0.5], ["ReLU"], ["Linear", 6, 3], ["Dropout", 0.5]]
    x = torch.randn(8, 4)
    got = run_scenario(scenarios.sequential_eval_report, MySequential, specs, x, 6)
    expect(not any(got["children_training"]), f"after MySequential(...).eval(), modules still in training mode: "
                                              f"{got['children_training']} (unregistered modules do not follow)")
    want = _Sequential(*common.build_all(specs, 6)).eval()(x).detach()
    expect_tensor(got["output"], want, "MySequential(Linear, Dropout, ReLU, Linear, Dropout).eval()(x)", **loose(want))


@MY_SEQUENTIAL.hidden
def follows_to_float64(MySequential):
    """MySequential(...).to(torch.float64) converts every module's parameters"""
    specs = [["Linear", 3, 5], ["Tanh"], ["Linear", 5, 2]]
    x = torch.randn(4, 3, dtype=torch.float64)
    got = run_scenario(scenarios.sequential_dtype_report, MySequential, specs, x, 7)
    expect(all(d == "torch.float64" for d in got["dtypes"]), f"after MySequential(...).to(torch.float64) the "
                                                             f"modules' parameters have dtypes {got['dtypes']}")
    want = _Sequential(*common.build_all(specs, 7)).to(torch.float64)(x).detach()
    expect_tensor(got["output"], want, "MySequential(Linear(3, 5), Tanh(), Linear(5, 2)).to(float64)(x)",
                  rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- Concat

@CONCAT.hidden
def three_dim_input(Concat):
    """x of shape (batch, seq, features): concatenated along the last dimension, not dim 1"""
    expect_concat(Concat, ["Linear", 3, 4], ["Linear", 3, 5], torch.randn(2, 5, 3), "Linear(3, 4), Linear(3, 5)", 3)
    expect_concat(Concat, ["Linear", 3, 4], ["Linear", 3, 4], torch.randn(2, 4, 3), "Linear(3, 4), Linear(3, 4)", 4)


@CONCAT.hidden
def random_nets(Concat):
    """random chains on both sides, random batch sizes"""
    for seed in range(3):
        dim = randint(1, 6)
        spec1, _ = random_chain(dim, randint(1, 4))
        spec2, _ = random_chain(dim, randint(1, 4))
        expect_concat(Concat, ["Sequential", *spec1], ["Sequential", *spec2], torch.randn(randint(2, 6), dim),
                      "two random Sequentials", 10 + seed)


@CONCAT.hidden
def same_net_twice(Concat):
    """Concat(net, net): the net's output twice, its gradient the sum of both halves'"""
    got = expect_concat(Concat, ["Linear", 3, 2], ["Linear", 3, 2], torch.randn(4, 3), "net, net", 20, same=True)
    expect(len(got["parameters"]) == 2, f"Concat(net, net) has {len(got['parameters'])} parameters; a shared net's "
                                        "weight and bias are listed once")


@CONCAT.hidden
def eval_reaches_both_nets(Concat):
    """Concat(...).eval() switches both nets to eval mode (their Dropout becomes the identity)"""
    got = expect_concat(Concat, ["Sequential", ["Linear", 4, 6], ["Dropout", 0.5]], ["Dropout", 0.5],
                        torch.randn(6, 4), "Sequential(Linear(4, 6), Dropout(0.5)), Dropout(0.5)", 21)
    expect(got["nets_training"] == [False, False], f"after Concat(...).eval(), the nets' training flags are "
                                                   f"{got['nets_training']}; register both nets as submodules")


# ---------------------------------------------------------------- Cruncher

@CRUNCHER.hidden
def no_hidden_layers(Cruncher):
    """Cruncher(5, 0): only the head, final.weight (5, 1)"""
    expect_cruncher(Cruncher, 5, 0, torch.randn(3, 5), seed=4)


@CRUNCHER.hidden
def random_sizes(Cruncher):
    """random dim, depth and batch (batch 1 included)"""
    for seed, batch in zip(range(5, 9), (1, 2, 5, 7)):
        dim, layers = randint(1, 12), randint(1, 4)
        expect_cruncher(Cruncher, dim, layers, torch.randn(batch, dim), seed=seed)


@CRUNCHER.hidden
def follows_to_float64(Cruncher):
    """Cruncher(6, 3).to(torch.float64) runs in float64 (its weights are registered parameters)"""
    expect_cruncher(Cruncher, 6, 3, torch.randn(4, 6, dtype=torch.float64), seed=9, dtype=torch.float64)


@CRUNCHER.hidden
def layers_are_independent(Cruncher):
    """each layer has its own weight (not one layer repeated), drawn afresh"""
    expect_independent_layers(Cruncher, 16, 4, 10)


@CRUNCHER.hidden
def init_scale_other_dim(Cruncher):
    """Cruncher(300, 3): standard deviation 1/sqrt(300) for every layer"""
    got = run_scenario(scenarios.cruncher_report, Cruncher, 300, 3, torch.randn(2, 300), torch.randn(2), 11)
    expect_cruncher_structure(got, 300, 3, "Cruncher(300, 3)")
    for i in range(3):
        expect_normal_init(got["state_dict"][f"layers.{i}.weight"], 1 / math.sqrt(300),
                           f"Cruncher(300, 3): layers.{i}.weight", 0.05)


# ---------------------------------------------------------------- get_num_parameters

def expect_reference_count(get_num_parameters, name: str, args: list, how: str, seed: int) -> None:
    want = reference_num_parameters(scenarios.build_model(name, args, seed))
    expect_count(get_num_parameters, name, args, want, how, seed)


@GET_NUM_PARAMETERS.hidden
def random_tied_models(get_num_parameters):
    """tied embeddings of random sizes, with and without a head bias; a layer used three times"""
    for seed in range(3):
        vocab, dim, bias = randint(2, 50), randint(1, 16), bool(randint(0, 1))
        expect_reference_count(get_num_parameters, "tied_lm", [vocab, dim, bias],
                               f"a tied Embedding({vocab}, {dim}) and head (bias={bias})", seed)
    expect_reference_count(get_num_parameters, "reused", [7, 3], "one Linear(7, 7) used three times", 3)


@GET_NUM_PARAMETERS.hidden
def random_stacks_with_buffers(get_num_parameters):
    """random chains with LayerNorm and BatchNorm1d (buffers), some layers frozen"""
    for seed in range(3):
        specs, _ = random_chain(randint(1, 8), randint(2, 6))
        expect_reference_count(get_num_parameters, "spec", [["Sequential", *specs]], f"{len(specs)} random modules",
                               seed)
        frozen = [i for i in range(len(specs)) if randint(0, 1)]
        expect_reference_count(get_num_parameters, "frozen", [specs, frozen],
                               f"{len(specs)} random modules, {len(frozen)} of them frozen", seed)


@GET_NUM_PARAMETERS.hidden
def nested_other_widths(get_num_parameters):
    """a parameter of the model's own beside modules nested three deep, random widths"""
    for seed in range(2):
        dim = randint(1, 9)
        expect_reference_count(get_num_parameters, "nested", [dim], f"a model with its own scale ({dim}) and modules "
                               "nested three deep", seed)


@GET_NUM_PARAMETERS.hidden
def named_model_with_an_unused_layer(get_num_parameters):
    """a residual tower, and a model with a layer its forward never calls (still a parameter)"""
    expect_reference_count(get_num_parameters, "tower", [3, 8, 16, 2, 4], "a tower of 2 residual blocks", 0)
    expect_reference_count(get_num_parameters, "twice", [5, 2], "a Linear used twice beside an unused Linear(5, 3)", 0)


# ---------------------------------------------------------------- RunningMean

@RUNNING_MEAN.hidden
def random_train_and_eval_sequences(RunningMean):
    """random widths and batch sizes, eval before any training, train again after eval"""
    for _ in range(3):
        features = randint(1, 6)
        steps = [("eval", torch.randn(randint(1, 4), features))]
        for _ in range(randint(3, 6)):
            mode = "train" if randint(0, 2) else "eval"
            steps.append((mode, torch.randn(randint(1, 6), features) * randint(1, 5) + randint(-3, 3)))
        steps.append(("train", torch.randn(randint(1, 3), features)))
        expect_running_mean(RunningMean, features, steps, "a random sequence")


@RUNNING_MEAN.hidden
def one_row_at_a_time(RunningMean):
    """ten batches of one row each: the mean of the ten rows"""
    steps = [("train", torch.randn(1, 4) * 3 + i) for i in range(10)]
    expect_running_mean(RunningMean, 4, steps, "one row at a time")


@RUNNING_MEAN.hidden
def restored_from_state_dict(RunningMean):
    """a fresh RunningMean loading a trained one's state_dict gives the same eval output, and trained further it
    goes on from there: all its state is in the buffers"""
    batches = [torch.randn(3, 5) + 1, torch.randn(6, 5) - 2]
    x, more = torch.randn(4, 5), torch.randn(5, 5) * 3
    got = run_scenario(scenarios.running_mean_reload_report, RunningMean, 5, batches, x, more)
    mean = torch.cat(batches).double().mean(0).float()
    expect_tensor(got["mean"], mean, "after load_state_dict, a fresh RunningMean(5)'s mean", rtol=1e-5, atol=1e-6)
    expect(int(got["count"]) == 9, f"after load_state_dict, a fresh RunningMean(5)'s count is {int(got['count'])}, "
                                   "expected 9")
    expect_tensor(got["output"], x - mean, "the reloaded RunningMean(5) in eval mode: x - mean", rtol=1e-5, atol=1e-5)
    resumed, all_rows = got["resumed"], torch.cat([*batches, more]).double().mean(0).float()
    what = "a RunningMean(5) reloaded after 9 rows, then trained on 5 more"
    expect(int(resumed["count"]) == 14, f"{what}: count is {int(resumed['count'])}, expected 14: keep all the state "
                                        "in the buffers (a Python attribute is not in state_dict)")
    expect_tensor(resumed["mean"], all_rows, f"{what}: the mean (of all 14 rows)", rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- activation_shapes

def expect_reference_shapes(activation_shapes, name: str, args: list, x: torch.Tensor, how: str, seed: int) -> None:
    want = reference_activation_shapes(scenarios.build_model(name, args, seed), x)
    got = run_scenario(scenarios.shapes_report, activation_shapes, name, args, x, seed)
    what = f"activation_shapes({how}, x of shape {tuple(x.shape)})"
    expect_shapes(got["shapes"], want, what)
    expect_no_hooks(got, what)


@ACTIVATION_SHAPES.hidden
def named_submodules(activation_shapes):
    """a residual tower: names like blocks.1.ff.0 and head.out, sequence inputs (batch, seq, features)"""
    expect_reference_shapes(activation_shapes, "tower", [3, 8, 16, 2, 4], torch.randn(2, 5, 3),
                            "a tower of 2 residual blocks", 0)


@ACTIVATION_SHAPES.hidden
def shared_and_unused_other_sizes(activation_shapes):
    """a module called twice keeps its last call's shape; a module never called is absent"""
    expect_reference_shapes(activation_shapes, "twice", [4, 2], torch.randn(6, 4),
                            "a Linear(4, 4) run on 6 rows then on 2, beside an unused Linear", 0)


@ACTIVATION_SHAPES.hidden
def random_nested_sequentials(activation_shapes):
    """random chains with nested Sequentials, random batch sizes"""
    for seed in range(3):
        dim = randint(1, 6)
        specs, _ = random_chain(dim, randint(1, 6))
        expect_reference_shapes(activation_shapes, "spec", [["Sequential", *specs]], torch.randn(randint(2, 5), dim),
                                f"{len(specs)} random modules", seed)


def expect_modes_kept(before: dict[str, bool], after: dict[str, bool], what: str) -> None:
    """Every module's training flag (by qualified name, the model itself "") after the call as it was before."""
    def mode(training) -> str:
        return "training" if training else "eval"
    changed = [name for name in before if after.get(name) != before[name]]
    if changed:
        shown = ", ".join(f"{repr(name) if name else 'the model itself'} ({mode(before[name])} -> "
                          f"{mode(after.get(name))})" for name in changed[:4])
        more = f" and {len(changed) - 4} more" if len(changed) > 4 else ""
        fail(f"{what} changed the train/eval mode of {shown}{more}: a function that inspects a model must leave it "
             "as the caller left it; run model(x) in whatever mode it is in (no model.eval() or model.train())")


MODES_MODEL = ["Sequential", ["Linear", 3, 6], ["BatchNorm1d", 6], ["ReLU"], ["Sequential", ["Linear", 6, 6],
                                                                             ["Dropout", 0.5]], ["Linear", 6, 2]]
MODES_SHAPES_HOW = ("Sequential(Linear(3, 6), BatchNorm1d(6), ReLU(), Sequential(Linear(6, 6), Dropout(0.5)), "
                    "Linear(6, 2))")


@ACTIVATION_SHAPES.hidden
def leaves_train_and_eval_mode_as_they_were(activation_shapes):
    """the model in training mode, in eval mode, or mixed: afterwards every submodule is in the mode the caller left
    it in (a function that inspects a model must not change it)"""
    x = torch.randn(randint(2, 6), 3)
    want = reference_activation_shapes(scenarios.build_model("spec", [MODES_MODEL], 0), x)
    for training, eval_modules, how in [(True, [], "in training mode"), (False, [], "in eval mode"),
                                        (True, ["1", "3.1"], "in training mode, its BatchNorm '1' and Dropout '3.1' "
                                                             "in eval mode")]:
        got = run_scenario(scenarios.shapes_report, activation_shapes, "spec", [MODES_MODEL], x, 0, training,
                           eval_modules)
        what = f"activation_shapes({MODES_SHAPES_HOW} {how}, x of shape {tuple(x.shape)})"
        expect_shapes(got["shapes"], want, what)
        expect_modes_kept(got["modes"]["before"], got["modes"]["after"], what)


# ---------------------------------------------------------------- Quadratic

@QUADRATIC.hidden
def random_sizes(Quadratic):
    """random in/out sizes and batches (batch 1 included)"""
    for seed, batch in zip(range(4, 8), (1, 2, 4, 6)):
        n_in, n_out = randint(1, 6), randint(1, 6)
        expect_quadratic(Quadratic, n_in, n_out, torch.randn(batch, n_in), seed=seed)


@QUADRATIC.hidden
def follows_to_float64(Quadratic):
    """Quadratic(4, 3).to(torch.float64) computes in float64"""
    expect_quadratic(Quadratic, 4, 3, torch.randn(5, 4, dtype=torch.float64), seed=8, dtype=torch.float64)


@QUADRATIC.hidden
def init_scale(Quadratic):
    """Quadratic(48, 16): W = randn(16, 48, 48) / 48 (standard deviation 1/48)"""
    expect_quadratic_scale(Quadratic, 48, 16, 9)
