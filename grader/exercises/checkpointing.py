"""Chapter 08 (checkpointing): public checks. Hidden checks for the same exercises live in grader/hidden/checkpointing.py.

Every exercise here drives live objects (an optimizer, a model and its RNGs, files, autograd), so each check
runs a scenario (grader/scenarios/checkpointing.py) where the student's code lives, and judges the data it
hands back here: every expected value is computed in this module, from the formula or with torch's own code.
"""
from __future__ import annotations

import math
import os
from typing import Any

import torch

from grader.expect import describe, expect, expect_raises, expect_tensor, fail
from grader.guard import NUMPY_EXITS
from grader.registry import exercise
from grader.runner import forbidden_message
from grader.scenario import run_scenario
from grader.scenarios import checkpointing as scenarios
from grader.scenarios import common

# torch's own functions, the references, bound before any student code runs.
_equal = torch.equal
_sqrt = torch.sqrt
_manual_seed = torch.manual_seed
_Tensor = torch.Tensor

# Whole-job shortcuts, refused while the student's code runs. AdaGrad: torch's own Adagrad, whose step (inherited or
# called on an inner optimizer) or functional kernels do the update (with eps=0 and initial_accumulator_value=eps it
# is even this formula). AdaGrad is a class, which the runner passes on unwrapped, so its checks refuse these
# around the scenario themselves (a grading kernel refuses them there too). atomic_save: torch's private atomic
# writers (torch._dynamo.aot_compile.atomic_write_binary is the whole recipe) are recognised by who asked for the
# rename, since importing their modules to refuse them by name would cost seconds; checkpoint_sequential does
# the whole of checkpointed_forward (but leaves the last segment plain).
# (torch.optim._functional.adagrad is torch.optim.adagrad.adagrad: refusing its code refuses every alias. Its private
# helpers are refused too: handed a sum of squares with eps already in it and eps=0, they put eps inside the root.)
ADAGRAD_SHORTCUTS = ("torch.optim.Adagrad.step", "torch.optim._functional.adagrad", "torch._fused_adagrad_",
                     "torch.optim.adagrad._single_tensor_adagrad", "torch.optim.adagrad._multi_tensor_adagrad",
                     "torch.optim.adagrad._fused_adagrad")
ADAGRAD = exercise("checkpointing.adagrad", points=3, needs=("AdaGrad",), forbid=ADAGRAD_SHORTCUTS)
SAVE_CHECKPOINT = exercise("checkpointing.save_checkpoint", points=4, needs=("save_checkpoint", "load_checkpoint"))
ATOMIC_SAVE = exercise("checkpointing.atomic_save", points=3)
CHECKPOINT_INTERVAL = exercise("checkpointing.checkpoint_interval", points=2)
SAFE_LOAD = exercise("checkpointing.safe_load", points=2)
LOAD_MATCHING = exercise("checkpointing.load_matching", points=3)
# checkpointed_forward's checks count the activations torch keeps: activations kept in NumPy would hide from them.
# (torch.utils.checkpoint itself switches dispatch modes, so guard.UNTRACED as a whole cannot be refused here.)
# Activations kept outside torch's memory (NumPy arrays, Python lists, bytes of a saved file) would not be counted as
# kept: no checkpointing needs those exits.
CHECKPOINTED_FORWARD = exercise("checkpointing.checkpointed_forward", points=3,
                                forbid=("torch.utils.checkpoint.checkpoint_sequential", *NUMPY_EXITS,
                                        "torch.Tensor.tolist", "torch.save"))


def bit_equal(a: Any, b: Any) -> bool:
    return (isinstance(a, _Tensor) and isinstance(b, _Tensor) and a.dtype == b.dtype and a.shape == b.shape
            and _equal(a, b))


def difference(a: _Tensor, b: _Tensor) -> str:
    """How two tensors of one shape differ, for messages."""
    if not isinstance(a, _Tensor) or a.shape != b.shape:
        return f"got {describe(a)}"
    diff = (a.double() - b.double()).abs()
    return f"{int((diff > 0).sum())} of {b.numel()} values differ, largest difference {float(diff.max()):.3g}"


# ---------------------------------------------------------------- AdaGrad

def adagrad_reference(groups: list[dict], kwargs: dict, grads: list[list], eps_outside: bool = False) -> list[dict]:
    """Every parameter and its g2 after each step, from the formula, in float64:
    g2 += grad ** 2; p -= lr * grad / sqrt(g2 + eps) (with eps_outside: / (sqrt(g2) + eps), torch's Adagrad)."""
    settings, params, g2 = [], [], []
    for g in groups:
        lr, eps = g.get("lr", kwargs["lr"]), g.get("eps", kwargs["eps"])
        for t in g["params"]:
            settings.append((lr, eps))
            params.append(t.double().clone())
            g2.append(None)
    out = []
    for step in grads:
        for i, grad in enumerate(step):
            if grad is None:
                continue
            grad = grad.double()
            g2[i] = grad * grad if g2[i] is None else g2[i] + grad * grad
            lr, eps = settings[i]
            denominator = _sqrt(g2[i]) + eps if eps_outside else _sqrt(g2[i] + eps)
            params[i] = params[i] - lr * grad / denominator
        out.append({"params": [p.clone() for p in params], "g2": [None if s is None else s.clone() for s in g2]})
    return out


def _labels(groups: list[dict]) -> list[str]:
    group_of = [gi for gi, g in enumerate(groups) for _ in g["params"]]
    return [f"parameter {i} (group {gi})" for i, gi in enumerate(group_of)]


def _close(a: Any, b: _Tensor, rtol: float, atol: float) -> bool:
    return isinstance(a, _Tensor) and a.shape == b.shape and bool(((a.double() - b).abs() <= atol + rtol * b.abs()).all())


def expect_adagrad(AdaGrad, groups: list[dict], kwargs: dict, grads: list[list], how: str,
                   rtol: float = 1e-5, atol: float = 1e-6) -> dict:
    """Step the student's AdaGrad through `grads`; parameters and state["g2"] must follow the formula."""
    out = run_scenario(scenarios.adagrad_steps, AdaGrad, groups, kwargs, grads)
    expect(out["is_optimizer"], "AdaGrad should subclass torch.optim.Optimizer and call "
                                "super().__init__(params, defaults)")
    want = adagrad_reference(groups, kwargs, grads)
    outside = adagrad_reference(groups, kwargs, grads, eps_outside=True)
    labels = _labels(groups)
    dtypes = [t.dtype for g in groups for t in g["params"]]
    for k, (got, w, alt) in enumerate(zip(out["steps"], want, outside)):
        for i, label in enumerate(labels):
            what = f"AdaGrad with {how}: {label} after step {k + 1}"
            p, expected = got["params"][i], w["params"][i]
            if not _close(p, expected, rtol, atol) and _close(p, alt["params"][i], rtol, atol):
                fail(f"{what} matches lr * grad / (sqrt(g2) + eps), with eps outside the square root (torch's "
                     "Adagrad); this AdaGrad adds it inside: lr * grad / sqrt(g2 + eps)")
            expect_tensor(p, expected.to(dtypes[i]), what, rtol=rtol, atol=atol)
            g2, expected_g2 = got["g2"][i], w["g2"][i]
            if expected_g2 is None:
                if g2 is not None and not (isinstance(g2, _Tensor) and not bool(g2.any())):
                    fail(f"{what}: state['g2'] is {describe(g2)} with nonzero values, but this parameter has had "
                         "no gradient yet (a parameter whose .grad is None is skipped)")
            elif g2 is None:
                fail(f"{what}: its state has no 'g2': keep the running sum of squared gradients in "
                     "self.state[p]['g2']")
            else:
                expect_tensor(g2, expected_g2.to(dtypes[i]), f"{what}: state['g2']", rtol=rtol, atol=atol)
    return out


def expect_adagrad_resume(AdaGrad, groups: list[dict], kwargs: dict, grads: list[list], split: int, how: str,
                          rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Reloading the state_dict into a fresh AdaGrad after `split` steps continues bit for bit."""
    out = run_scenario(scenarios.adagrad_resume, AdaGrad, groups, kwargs, grads, split)
    if out["error"]:
        fail(f"AdaGrad with {how}: {out['error']}")
    want = adagrad_reference(groups, kwargs, grads)[-1]
    for i, label in enumerate(_labels(groups)):
        whole, resumed = out["whole"]["params"][i], out["resumed"]["params"][i]
        expect_tensor(whole, want["params"][i].to(whole.dtype) if isinstance(whole, _Tensor) else want["params"][i],
                      f"AdaGrad with {how}: {label} after {len(grads)} steps", rtol=rtol, atol=atol)
        if not bit_equal(resumed, whole):
            fail(f"AdaGrad with {how}: a fresh AdaGrad given load_state_dict(state_dict()) after step {split} ends "
                 f"{len(grads) - split} steps later with {label} unlike the uninterrupted run "
                 f"({difference(resumed, whole)}): keep all the state in self.state[p] (state_dict saves only that)")


def expect_adagrad_state_dict(out: dict, groups: list[dict], kwargs: dict, how: str) -> None:
    """state_dict(): {"state": {index: {"g2": tensor}}, "param_groups": [{"lr", "eps", "params": [indices]}]}."""
    sd = out["state_dict"]
    what = f"AdaGrad with {how}: state_dict()"
    if not isinstance(sd, dict) or set(sd) != {"state", "param_groups"}:
        fail(f"{what} should be a dict with the keys 'state' and 'param_groups' (torch.optim.Optimizer's own "
             f"state_dict), got {describe(sd) if not isinstance(sd, dict) else sorted(map(str, sd))}")
    count = 0
    for gi, (group, g) in enumerate(zip(sd["param_groups"], groups)):
        want_lr, want_eps = g.get("lr", kwargs["lr"]), g.get("eps", kwargs["eps"])
        expect(isinstance(group, dict) and group.get("lr") == want_lr and group.get("eps") == want_eps,
               f"{what}['param_groups'][{gi}] should hold lr={want_lr} and eps={want_eps}, got "
               f"{ {k: v for k, v in group.items() if k != 'params'} if isinstance(group, dict) else describe(group)}")
        expect(group.get("params") == list(range(count, count + len(g["params"]))),
               f"{what}['param_groups'][{gi}]['params'] should be the indices "
               f"{list(range(count, count + len(g['params'])))}, got {group.get('params')!r}")
        count += len(g["params"])
    for index, state in sd["state"].items():
        expect(isinstance(state, dict) and isinstance(state.get("g2"), _Tensor),
               f"{what}['state'][{index}] should hold the tensor 'g2', got {describe(state)}")


def _grads(shapes: list[tuple[int, ...]], steps: int, missing: set[tuple[int, int]] = frozenset(),
           scale: float = 1.0, dtype: torch.dtype = torch.float32) -> list[list]:
    """Random gradients, one list per step; (step, parameter) pairs in `missing` get None."""
    return [[None if (k, i) in missing else torch.randn(s, dtype=dtype) * scale for i, s in enumerate(shapes)]
            for k in range(steps)]


@ADAGRAD.check
def one_parameter(AdaGrad):
    """one parameter, three steps: p and state["g2"] follow g2 += grad**2; p -= lr * grad / sqrt(g2 + eps)"""
    groups = [{"params": [torch.randn(2, 3)]}]
    expect_adagrad(AdaGrad, groups, {"lr": 0.1, "eps": 1e-10}, _grads([(2, 3)], 3), "lr=0.1, eps=1e-10")


@ADAGRAD.check
def eps_inside_the_square_root(AdaGrad):
    """eps = 0.25 and small gradients: eps goes inside the square root"""
    groups = [{"params": [torch.randn(4)]}]
    expect_adagrad(AdaGrad, groups, {"lr": 0.5, "eps": 0.25}, _grads([(4,)], 2, scale=0.1), "lr=0.5, eps=0.25")


@ADAGRAD.check
def groups_and_missing_grads(AdaGrad):
    """two param groups, the second with its own lr and eps; a parameter whose .grad is None is left alone"""
    groups = [{"params": [torch.randn(3), torch.randn(2, 2)]}, {"params": [torch.randn(5)], "lr": 0.01, "eps": 1e-4}]
    grads = _grads([(3,), (2, 2), (5,)], 3, missing={(1, 1), (0, 2)})
    out = expect_adagrad(AdaGrad, groups, {"lr": 0.1, "eps": 1e-8}, grads,
                         "two groups (lr=0.1, eps=1e-8; lr=0.01, eps=1e-4) and some .grad None")
    expect_adagrad_state_dict(out, groups, {"lr": 0.1, "eps": 1e-8}, "two groups")


@ADAGRAD.check
def state_dict_round_trip(AdaGrad):
    """state_dict() saved after 2 of 4 steps and loaded into a fresh AdaGrad: the same end as 4 straight steps"""
    groups = [{"params": [torch.randn(3, 2)]}, {"params": [torch.randn(4)], "lr": 0.3}]
    expect_adagrad_resume(AdaGrad, groups, {"lr": 0.1, "eps": 1e-10}, _grads([(3, 2), (4,)], 4), 2,
                          "two groups (lr=0.1; lr=0.3)")


def expect_in_place(AdaGrad, shapes: list[tuple[int, ...]], steps: int) -> None:
    """The optimizer steps the tensors it was given and leaves their .grad as it was."""
    groups = [{"params": [torch.randn(s) for s in shapes]}]
    grads = _grads(shapes, steps)
    out = run_scenario(scenarios.adagrad_steps, AdaGrad, groups, {"lr": 0.1, "eps": 1e-10}, grads)
    expect(out["same_objects"], "AdaGrad's param_groups no longer hold the parameters it was given: update them "
                                "in place (p.sub_ under torch.no_grad())")
    moved = [i for i, same in enumerate(out["same_storage"]) if not same]
    expect(not moved, f"AdaGrad.step() gave parameter {moved[0] if moved else ''} new storage (p.data = ...): update "
                      "it in place (p.sub_ or p -= ... under torch.no_grad()), so that whatever shares its memory, "
                      "such as a state_dict() taken before the step, sees the step")
    for k, step in enumerate(out["steps"]):
        for i, g in enumerate(grads[k]):
            expect(bit_equal(step["grads"][i], g),
                   f"AdaGrad.step() changed parameter {i}'s .grad at step {k + 1}; read it, do not modify it")


@ADAGRAD.check
def updates_in_place_grad_untouched(AdaGrad):
    """the very tensors it was given are updated in place, and their .grad is left as it was"""
    expect_in_place(AdaGrad, [(2, 2), (3,)], 2)


@ADAGRAD.check
def step_with_a_closure(AdaGrad):
    """step(closure) calls the closure once with gradients enabled and returns its loss; step() returns None"""
    values = torch.randn(5)
    kwargs = {"lr": 0.1, "eps": 1e-10}
    out = run_scenario(scenarios.adagrad_closure, AdaGrad, values, kwargs)
    what = "AdaGrad.step(closure), where the closure backpropagates (p * p).sum() and returns it,"
    if out["calls"] == [False]:
        fail(f"{what} called the closure with gradients disabled (step runs under torch.no_grad()), so its backward "
             "failed: call it inside `with torch.enable_grad():`")
    if out["error"]:
        fail(f"{what} raised {out['error']}")
    expect(len(out["calls"]) == 1, f"{what} called the closure {len(out['calls'])} times; call it once, before the "
                                   "update, and return what it returns")
    loss = (values.double() ** 2).sum()
    expect(isinstance(out["returned"], _Tensor) and bool((out["returned"].double() - loss).abs() <= 1e-5 * loss),
           f"{what} returned {describe(out['returned'])}; return the closure's loss ({float(loss):.4g})")
    want = adagrad_reference([{"params": [values]}], kwargs, [[2 * values]])[-1]["params"][0]
    expect_tensor(out["after"], want.float(), f"{what}: p after the step (the closure's gradient, 2p, applied)",
                  rtol=1e-5, atol=1e-6)
    expect(out["plain_returned_type"] == "NoneType",
           f"AdaGrad.step() without a closure returned a {out['plain_returned_type']}; return None")


# ---------------------------------------------------------------- save_checkpoint / load_checkpoint

DROPOUT_MLP = ["Sequential", ["Linear", 4, 16], ["ReLU"], ["Dropout", 0.25], ["Linear", 16, 2]]
PLAIN_MLP = ["Sequential", ["Linear", 4, 8], ["Tanh"], ["Linear", 8, 2]]
EVERYTHING = ("save and restore the model's and the optimizer's state_dict, and the states of torch's RNG "
              "(torch.get_rng_state), numpy's (np.random.get_state) and random's (random.getstate), each whole: "
              "the last fields of numpy's and random's hold a normal kept for the next call")


def run_resume(save_checkpoint, load_checkpoint, spec: list, optimizer: str, sources: tuple[str, ...], n: int, m: int,
               seed: int, early_save: int | None = None, gpus: int = 0) -> dict:
    """The resume scenario; with `gpus`, save and load run on that many simulated GPUs (their generators too)."""
    x0, y0 = torch.randn(8, 4), torch.randn(8, 2)
    return run_scenario(scenarios.resume_run, save_checkpoint, load_checkpoint, spec, optimizer, x0, y0,
                        list(sources), n, m, seed, early_save, gpus)


def describe_training(spec: list, optimizer: str, sources: tuple[str, ...], n: int, m: int) -> str:
    dropout = " with dropout" if any(isinstance(s, list) and s and s[0] == "Dropout" for s in spec) else ""
    drawn = f"batches drawn from {' + '.join(sources)}" if sources else "fixed batches"
    return f"an MLP{dropout}, {optimizer}, {drawn}: {n} steps, save, load into fresh objects, {m} more steps"


def expect_resumed(out: dict, spec: list, optimizer: str, sources: tuple[str, ...], n: int, m: int, hint: str) -> None:
    """load_checkpoint returned n, and the resumed parameters equal the uninterrupted ones bit for bit."""
    how = describe_training(spec, optimizer, sources, n, m)
    if out["load_error"]:
        error, hint = out["load_error"], ""
        if "numpy" in error:
            hint = (": the checkpoint holds a numpy array (numpy's RNG state), which weights_only=True refuses; store "
                    "it as a tensor (torch.from_numpy) or a list")
        elif "elsewhere-" in error or error.startswith("FileNotFoundError"):
            hint = (": it was given the file moved to another folder after the save, as a copy on another machine "
                    "would be; read everything from the file at the path it is given")
        fail(f"{how}: load_checkpoint raised {error}{hint}")
    if out["start_type"] != "int":
        fail(f"{how}: load_checkpoint returned {describe(out['start'])} ({out['start_type']}); return the saved "
             "iteration as an int")
    if out["start"] != n:
        fail(f"{how}: load_checkpoint returned {out['start']} for a checkpoint saved with iteration={n} (after {n} "
             f"steps); return the saved iteration itself, so that range(load_checkpoint(...), total) runs the "
             f"{m} remaining steps")
    if not out.get("params_kept", True):
        fail(f"{how}: after load_checkpoint the model's parameters are no longer the ones the optimizer holds "
             "(load_state_dict(..., assign=True) replaces them), so the optimizer steps tensors the model dropped: "
             "load into the model's own tensors, in place (load_state_dict without assign)")
    for name, want in out["whole"].items():
        got = out["resumed"].get(name)
        if not bit_equal(got, want):
            fail(f"{how}: after resuming, {name} differs from {n + m} uninterrupted steps "
                 f"({difference(got, want) if got is not None else 'missing'}); {hint}")


@SAVE_CHECKPOINT.check
def resumes_bit_identically(save_checkpoint, load_checkpoint):
    """dropout, Adam, batches from torch + numpy + random: save after 3 steps, resume, 3 more = 6 straight, bit for bit"""
    sources = ("torch", "numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, DROPOUT_MLP, "adam", sources, 3, 3, 0)
    expect_resumed(out, DROPOUT_MLP, "adam", sources, 3, 3, EVERYTHING)


@SAVE_CHECKPOINT.check
def every_rng_restored(save_checkpoint, load_checkpoint):
    """batches from torch's RNG only, then numpy's only, then random's only: each RNG state is restored"""
    for source, call in [("torch", "torch.get_rng_state() / torch.set_rng_state()"),
                         ("numpy", "np.random.get_state() / np.random.set_state()"),
                         ("random", "random.getstate() / random.setstate()")]:
        out = run_resume(save_checkpoint, load_checkpoint, PLAIN_MLP, "adam", (source,), 2, 2, 1)
        expect_resumed(out, PLAIN_MLP, "adam", (source,), 2, 2,
                       f"the batches come from {source}'s RNG alone: save and restore its state with {call}")


@SAVE_CHECKPOINT.check
def optimizer_state_and_iteration(save_checkpoint, load_checkpoint):
    """fixed batches, Adam: the optimizer's state and the iteration are restored"""
    out = run_resume(save_checkpoint, load_checkpoint, PLAIN_MLP, "adam", (), 2, 2, 2)
    expect_resumed(out, PLAIN_MLP, "adam", (), 2, 2,
                   "with no randomness at all, what is missing is the model's or the optimizer's state: save "
                   "optimizer.state_dict() (Adam's moment estimates and step count) and load it back")


@SAVE_CHECKPOINT.check
def one_file_that_loads_with_weights_only(save_checkpoint, load_checkpoint):
    """one file at path, read by torch.load(path, weights_only=True), holds the model, the optimizer and every RNG"""
    out = run_resume(save_checkpoint, load_checkpoint, DROPOUT_MLP, "adam", ("numpy",), 1, 1, 3)
    expect_one_loadable_file(out)


def expect_one_loadable_file(out: dict) -> None:
    if out["listing"] != [out["file"]]:
        fail(f"save_checkpoint(model, optimizer, iteration, '<folder>/{out['file']}') left the folder holding "
             f"{out['listing']}: write exactly one file, at path")
    if out["weights_only_error"]:
        fail(f"torch.load(path, weights_only=True) refuses the checkpoint: {out['weights_only_error']}. Keep to "
             "tensors, numbers, strings, None and lists/tuples/dicts of them: numpy's state holds a numpy array, "
             "so store it as a tensor (torch.from_numpy) or a list")
    expect_file_holds_the_states(out)


def _encodings(x: Any) -> list[bytes]:
    """A value's numbers as bytes: as stored, as float64 and, for integers, modulo 2**32 as uint32, so that a
    state is found in the file whatever dtype, container or key holds it."""
    if isinstance(x, bytes):
        return [x]
    if not isinstance(x, _Tensor) or x.is_complex() or x.layout != torch.strided:
        return []
    try:
        flat = x.detach().reshape(-1).contiguous()
        out = [flat.view(torch.uint8).numpy().tobytes(), flat.to(torch.float64).numpy().astype("<f8").tobytes()]
        if not flat.is_floating_point():
            out.append((flat.to(torch.int64) % 2**32).numpy().astype("<u4").tobytes())
    except (RuntimeError, TypeError, ValueError):  # a dtype with no such view: it holds no state of ours
        return []
    return out


def expect_file_holds_the_states(out: dict) -> None:
    """The file itself holds every state as it was at the save (model, optimizer, RNGs), in any layout: one kept
    in memory instead is lost with the process."""
    in_file = [e for leaf in out["in_file"] for e in _encodings(leaf)]
    at = out["at_save"]
    wanted = [(f"the model's {name}", "model.state_dict()", t) for name, t in at["model"].items()]
    wanted += [(f"the optimizer's {key}", "optimizer.state_dict()", t) for key, t in at["optimizer"].items()]
    wanted += [("torch's RNG state", "torch.get_rng_state()", at["torch"]),
               ("numpy's RNG state", "np.random.get_state() (its array as a tensor or a list)", at["numpy"]),
               ("random's state", "random.getstate()", at["random"])]
    wanted += [(f"GPU {i}'s CUDA RNG state", "torch.cuda.get_rng_state_all()", t) for i, t in enumerate(at["cuda"])]
    for what, call, state in wanted:
        if not any(e in blob for e in _encodings(state) for blob in in_file):
            fail(f"torch.load(path, weights_only=True) reads a checkpoint in which {what}, as it was at the save, "
                 f"is nowhere (in no tensor, list or string of the file): write {call} into the file itself; a run "
                 "resumed after a crash or on another machine has only the file")


@SAVE_CHECKPOINT.check
def cuda_generators_restored(save_checkpoint, load_checkpoint):
    """on a machine with 2 GPUs (simulated), each GPU's generator state is saved in the file and restored too"""
    sources = ("torch", "numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, DROPOUT_MLP, "adam", sources, 2, 2, 4, gpus=2)
    expect_resumed(out, DROPOUT_MLP, "adam", sources, 2, 2, EVERYTHING)
    expect_cuda_generators_restored(out, 2)
    expect_file_holds_the_states(out)


def expect_cuda_generators_restored(out: dict, gpus: int) -> None:
    """After load_checkpoint, every simulated GPU's generator is back at its state at the save: dropout on a GPU
    draws from those, not from torch.get_rng_state()'s."""
    wrong = [i for i, (got, want) in enumerate(zip(out["cuda_after_load"], out["at_save"]["cuda"]))
             if not bit_equal(got, want)]
    if not wrong:
        return
    what = (f"on a machine with CUDA ({gpus} GPUs, simulated), load_checkpoint left the CUDA generator of "
            f"GPU{'s' if len(wrong) > 1 else ''} {', '.join(map(str, wrong))} unlike it was at the save")
    if 0 not in wrong:
        fail(f"{what}: only the current GPU's was restored. Save and restore every GPU's: "
             "torch.cuda.get_rng_state_all() / torch.cuda.set_rng_state_all()")
    fail(f"{what}. When torch.cuda.is_available() (ask it inside the functions), the checkpoint must hold the CUDA "
         "generators' states, torch.cuda.get_rng_state_all(), and load_checkpoint restore them with "
         "torch.cuda.set_rng_state_all(): dropout on a GPU draws from them, not from torch's CPU generator")


# ---------------------------------------------------------------- atomic_save

def payload(step: int, size: int = 5) -> dict:
    return {"weights": torch.randn(size), "step": step}


def run_atomic(atomic_save, ops: list[tuple[str, dict]], existing: dict | None, subfolder: str = "",
               name: str = "model.pt", as_pathlib: bool = False) -> dict:
    return run_scenario(scenarios.atomic_run, atomic_save, ops, existing, subfolder, name, as_pathlib)


def _same_payload(loaded: Any, want: dict) -> bool:
    return (isinstance(loaded, dict) and set(loaded) == set(want)
            and all(bit_equal(loaded[k], v) if isinstance(v, _Tensor) else loaded[k] == v for k, v in want.items()))


def expect_atomic(out: dict, ops: list[tuple[str, dict]], existing: dict | None, how: str) -> None:
    """Each op's outcome: a save replaced the file and left nothing else; a crash kept the old bytes during and after
    the call, propagated, and left nothing else."""
    name = os.path.basename(out["path"])
    current = existing
    for k, ((kind, data), op) in enumerate(zip(ops, out["ops"])):
        what = f"{how}, call {k + 1} of atomic_save"
        expect_own_rename(op)
        if kind == "full" and op["kind"] == "save":  # where no file size limit can be set: an ordinary save
            kind = "save"
        if kind == "save":
            if op["raised"]:
                fail(f"{what} (an ordinary save) raised {op['raised']['text']}")
            expect(op["returned"] == "NoneType", f"{what} returned a {op['returned']}; return None")
            loaded = (op["loaded"] or {}).get("value")
            expect(_same_payload(loaded, data),
                   f"{what}: afterwards torch.load(path, weights_only=True) gives "
                   f"{(op['loaded'] or {}).get('error') or describe(loaded)}, not the object just saved")
            current = data
        else:
            old = "the old file" if op["before"] is not None else "no file"
            crash = ("InterruptDuringSave (a KeyboardInterrupt, as Ctrl-C raises)" if kind == "interrupt"
                     else "CrashDuringSave")
            if kind == "full" and op["raised"] is None:
                broken = "" if op["after"] == op["before"] else f", and {name} no longer holds the old file"
                fail(f"{what}: no file could grow past 64 KiB during this call (a full disk), yet atomic_save "
                     f"returned normally{broken}: a failed write must raise. os.write may write only part of what "
                     "it is given (check what it returns, or write through a file object, whose write raises); "
                     "then remove the temporary file and let the error propagate")
            if op["raised"] is None:
                fail(f"{what}: pickling the object raised {crash}, but atomic_save returned normally: let the "
                     "exception propagate (remove the temporary file, then re-raise)")
            if not op["raised"]["crash"]:
                fail(f"{what}: pickling the object raised {crash}, but atomic_save raised "
                     f"{op['raised']['text']}: re-raise the original exception")
            for seen in op["during"]:
                if seen["bytes"] != op["before"]:
                    now = "no file" if seen["bytes"] is None else f"{len(seen['bytes'])} bytes"
                    was = "no file" if op["before"] is None else f"its old {len(op['before'])} bytes"
                    fail(f"{what}: while atomic_save was writing, {name} held {now} instead of {was}: you are "
                         "writing into path itself, so a crash at that moment destroys the old file. Write a "
                         "temporary file and os.replace it onto path once it is complete")
            if op["after"] != op["before"]:
                fail(f"{what}: after the failed save {name} is not {old} byte for byte: a failed save must leave "
                     "path as it was")
        want_listing = [] if current is None else [name]
        if op["listing"] != want_listing:
            after = {"crash": "the failed", "full": "the failed", "interrupt": "the interrupted"}.get(kind, "the")
            cleanup = ("remove the temporary file however the save ends (try/finally, or except BaseException: a "
                       "KeyboardInterrupt is not an Exception)" if kind == "interrupt"
                       else "remove the temporary file when the save fails")
            fail(f"{what}: after {after} save the folder holds {op['listing']}, expected {want_listing}: {cleanup}, "
                 "and write no other file")


def expect_own_rename(op: dict) -> None:
    """No rename was made by a library's function (torch's, fsspec's atomic writers): a helper that writes files
    atomically is the whole job."""
    for event in op["events"]:
        by = event[3] if event[0] == "rename" and len(event) > 3 else ""
        library = bool(event[5]) if event[0] == "rename" and len(event) > 5 else False
        if by == "torch" or by.startswith("torch.") or library:
            fail(forbidden_message(ATOMIC_SAVE, by) + ": write the temporary file, fsync it and os.replace it "
                 "yourself")


def expect_published_by_rename(out: dict, how: str) -> None:
    """Each successful save renamed a temporary file of path's folder onto path, after an fsync of that file
    complete."""
    path = os.path.normpath(out["path"])
    for k, op in enumerate(out["ops"]):
        if op["kind"] != "save" or op["raised"]:
            continue
        what = f"{how}, call {k + 1} of atomic_save"
        renames = [(i, e) for i, e in enumerate(op["events"]) if e[0] == "rename" and os.path.normpath(e[2]) == path]
        if not renames:
            fail(f"{what}: no os.replace(temporary, path) was seen: write a temporary file, then os.replace it "
                 "onto path (an atomic rename: readers see the old file or the new one, never half of one)")
        i, src = renames[-1][0], renames[-1][1][1]
        if os.path.normpath(src) == path:
            fail(f"{what}: os.replace(path, path) renames nothing: the new bytes were written into path itself, so "
                 "a failure half way destroys the old file. Write a temporary file, then os.replace it onto path")
        if os.path.dirname(os.path.normpath(src)) != os.path.dirname(path):
            fail(f"{what}: the temporary file was {src!r}, outside path's folder: os.replace is atomic only within "
                 "one filesystem (and fails across two), so create the temporary file next to path")
        syncs = [e for e in op["events"][:i] if e[0] == "fsync"]
        if not syncs:
            fail(f"{what}: no os.fsync before os.replace: flush the temporary file and os.fsync(f.fileno()) so its "
                 "bytes are on disk before the rename makes it the checkpoint (os.sync() writes out every file of the "
                 "machine, and POSIX lets it return before they are on disk: fsync the one file)")
        expect_synced_when_complete(syncs, renames[-1][1], what)


def expect_synced_when_complete(syncs: list[tuple], rename: tuple, what: str) -> None:
    """Some fsync before the rename was of the very file renamed onto path, with every byte of it written: an fsync
    of an empty or half-written temporary file, or of another file (the folder), leaves the checkpoint's bytes
    in the cache."""
    renamed = rename[4] if len(rename) > 4 else None
    if renamed is None:  # the renamed file could not be looked at: any fsync before the rename will do
        return
    seen = [e[1] for e in syncs if len(e) > 1 and e[1] is not None]
    if any(tuple(s) == tuple(renamed) for s in seen):
        return
    same_file = [s for s in seen if tuple(s[:2]) == tuple(renamed[:2])]
    if same_file:
        fail(f"{what}: the temporary file was fsynced when it held {same_file[-1][2]} bytes, and written after "
             f"that ({renamed[2]} bytes when renamed): os.fsync after the last write (torch.save, then "
             "f.flush() and os.fsync(f.fileno())), or the bytes written since may still be only in the cache")
    fail(f"{what}: the os.fsync before os.replace was not of the temporary file renamed onto path (the folder, or "
         "another file): os.fsync(f.fileno()) of the temporary file itself, after writing it")


@ATOMIC_SAVE.check
def replaces_the_file(atomic_save):
    """saving over an existing file: torch.load reads the new object, and the folder holds only that file"""
    existing = payload(0)
    ops = [("save", payload(1)), ("save", payload(2, 7))]
    out = run_atomic(atomic_save, ops, existing)
    expect_atomic(out, ops, existing, "a folder holding model.pt")


@ATOMIC_SAVE.check
def crash_keeps_the_old_file(atomic_save):
    """a crash mid-save: the old file survives byte for byte, the exception propagates, no temporary file is left"""
    existing = payload(0)
    ops = [("crash", payload(1, 100)), ("save", payload(2)), ("crash", payload(3))]
    out = run_atomic(atomic_save, ops, existing)
    expect_atomic(out, ops, existing, "a folder holding model.pt")


@ATOMIC_SAVE.check
def an_interrupt_keeps_the_old_file(atomic_save):
    """Ctrl-C mid-save (a KeyboardInterrupt, not an Exception): the old file survives, the interrupt propagates, no
    temporary file is left"""
    existing = payload(0)
    ops = [("interrupt", payload(1, 100)), ("save", payload(2)), ("interrupt", payload(3))]
    out = run_atomic(atomic_save, ops, existing)
    expect_atomic(out, ops, existing, "a folder holding model.pt")


@ATOMIC_SAVE.check
def a_full_disk_keeps_the_old_file(atomic_save):
    """the disk fills up while the new file is written (no file may grow past 64 KiB): the old file survives, the
    error propagates, no temporary file is left"""
    existing = payload(0)
    ops = [("full", payload(1, 100_000)), ("save", payload(2)), ("full", payload(3, 100_000))]
    out = run_atomic(atomic_save, ops, existing)
    expect_atomic(out, ops, existing, "a folder holding model.pt")


@ATOMIC_SAVE.check
def a_path_and_no_file_yet(atomic_save):
    """path given as a pathlib.Path, with no file there yet: the first save creates it, a crash then keeps it"""
    ops = [("crash", payload(0)), ("save", payload(1)), ("crash", payload(2))]
    out = run_atomic(atomic_save, ops, None, as_pathlib=True)
    expect_atomic(out, ops, None, "a pathlib.Path in an empty folder")


@ATOMIC_SAVE.check
def temporary_in_the_same_folder(atomic_save):
    """the new file is written next to path, fsynced once complete, then os.replace'd onto path"""
    existing = payload(0)
    ops = [("save", payload(1))]
    out = run_atomic(atomic_save, ops, existing)
    expect_atomic(out, ops, existing, "a folder holding model.pt")
    expect_published_by_rename(out, "a folder holding model.pt")


# ---------------------------------------------------------------- checkpoint_interval

def expect_seconds(value: Any, what: str) -> float:
    """A Python number (int or float, not a bool, a tensor or a NumPy scalar), finite and positive."""
    if type(value) not in (int, float):
        hint = "; return a Python float (math.sqrt)" if isinstance(value, _Tensor) or \
            type(value).__module__ == "numpy" else ""
        fail(f"{what} should be a Python float, got {describe(value)}{hint}")
    if not math.isfinite(value) or value <= 0:
        fail(f"{what} should be a positive number of seconds, got {value!r}")
    return float(value)


def interval_of(checkpoint_interval, save: float, mtbf: float) -> float:
    what = f"checkpoint_interval({save!r}, {mtbf!r})"
    return expect_seconds(checkpoint_interval(save, mtbf), what)


def expect_interval(got: float, want: float, save: float, mtbf: float, rel: float = 1e-6) -> None:
    """got is want, sqrt(2 * save * mtbf) in seconds; a known slip is named."""
    what = f"checkpoint_interval({save!r}, {mtbf!r})"
    if math.isclose(got, want, rel_tol=rel):
        return
    slips = [(want / math.sqrt(2), "sqrt(save_seconds * mtbf_seconds): the factor 2 under the root is missing"),
             (want - save, "sqrt(2 * save_seconds * mtbf_seconds) - save_seconds, Daly's higher-order correction: "
                           "this exercise asks for the first-order optimum itself"),
             (want / 60, "the interval in minutes: return seconds, the unit of the arguments"),
             (want / 3600, "the interval in hours: return seconds, the unit of the arguments"),
             (float(round(want)), "the interval rounded to whole seconds: return it as it is")]
    for value, slip in slips:
        if math.isclose(got, value, rel_tol=rel):
            fail(f"{what} returned {got:.6g} = {slip}; expected {want:.6g}")
    fail(f"{what} returned {got!r}, expected {want!r} (seconds)")


def first_order_waste(interval: float, save: float, mtbf: float) -> float:
    """The fraction of time lost, to first order: saving (save / interval) and, per failure, half an interval of
    work done again (interval / (2 * mtbf))."""
    return save / interval + interval / (2 * mtbf)


@CHECKPOINT_INTERVAL.check
def one_minute_save_one_failure_a_day(checkpoint_interval):
    """a 60 s save and a failure a day (MTBF 86,400 s): checkpoint every 3,219.9 s, sqrt(2 * 60 * 86,400)"""
    for save, mtbf, want in [(60, 86400, 3219.937887599697), (10, 3600, 268.32815729997475), (1, 2, 2.0),
                             (0.5, 50.0, 7.0710678118654755)]:
        expect_interval(interval_of(checkpoint_interval, save, mtbf), want, save, mtbf)


@CHECKPOINT_INTERVAL.check
def minimizes_the_waste(checkpoint_interval):
    """it minimizes the time lost, save/T + T/(2 MTBF) (saving, and work redone after failures): 1% off loses more"""
    for save, mtbf in [(30, 7200), (300, 604800), (2.5, 1e6)]:
        got = interval_of(checkpoint_interval, save, mtbf)
        waste = first_order_waste(got, save, mtbf)
        for other in (got * 0.99, got / 0.99):
            if first_order_waste(other, save, mtbf) < waste:
                fail(f"checkpoint_interval({save!r}, {mtbf!r}) returned {got:.6g} s, but checkpointing every "
                     f"{other:.6g} s wastes less: {first_order_waste(other, save, mtbf):.6g} of the time against {waste:.6g} "
                     "(save / interval spent saving, interval / (2 * mtbf) redone after failures)")


@CHECKPOINT_INTERVAL.check
def grows_as_square_roots(checkpoint_interval):
    """4x the MTBF, or a save 4x as long, doubles the interval"""
    save, mtbf = 45.0, 36000.0
    base = interval_of(checkpoint_interval, save, mtbf)
    for args, change in [((save, 4 * mtbf), "4x the MTBF"), ((4 * save, mtbf), "a save 4x as long")]:
        got = interval_of(checkpoint_interval, *args)
        expect(math.isclose(got / base, 2.0, rel_tol=1e-6),
               f"checkpoint_interval{args} / checkpoint_interval({save!r}, {mtbf!r}) = {got / base:.6g}: with "
               f"{change} the interval should double (it grows as the square root of each)")


@CHECKPOINT_INTERVAL.check
def refuses_non_positive_times(checkpoint_interval):
    """a save time or an MTBF of zero or below raises ValueError"""
    for args in [(0, 3600), (-5, 3600), (10, 0), (10, -1.0)]:
        expect_raises(ValueError, lambda args=args: checkpoint_interval(*args), f"checkpoint_interval{args}")


# ---------------------------------------------------------------- safe_load

def expect_same_data(got: Any, want: Any, what: str) -> None:
    """Loaded data equals what was saved: tensors bit for bit (dtype and shape too), containers item by item."""
    if isinstance(want, _Tensor):
        expect(bit_equal(got, want), f"{what} should be {describe(want)} equal to the one saved, got "
                                     f"{describe(got)}{'' if not isinstance(got, _Tensor) else ' with other values'}")
    elif isinstance(want, dict):
        expect(isinstance(got, dict) and list(got) == list(want),
               f"{what} should be a dict with the keys {list(want)}, got {describe(got) if not isinstance(got, dict) else list(got)}")
        for k, v in want.items():
            expect_same_data(got[k], v, f"{what}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        expect(type(got) is type(want) and len(got) == len(want),
               f"{what} should be a {type(want).__name__} of {len(want)} items, got {describe(got)}")
        for i, (a, b) in enumerate(zip(got, want)):
            expect_same_data(a, b, f"{what}[{i}]")
    else:
        expect(type(got) is type(want) and got == want, f"{what} should be {want!r}, got {describe(got)}")


def expect_loads(safe_load, payloads: list[tuple[str, Any]], what: list[str]) -> None:
    out = run_scenario(scenarios.safe_load_run, safe_load, [k for k, _ in payloads], [d for _, d in payloads], [])
    for (kind, data), got, label in zip(payloads, out["loaded"], what):
        if got["error"]:
            fail(f"safe_load on a file holding {label} raised {got['error']}")
        expect_same_data(got["value"], data, f"safe_load(path) for {label}")


def expect_refuses(safe_load, hostile: list[tuple[str, str]], force_default_off: bool = False) -> None:
    """Each hostile file makes safe_load raise without running its code, while an ordinary file still loads."""
    ordinary = torch.randn(4)
    out = run_scenario(scenarios.safe_load_run, safe_load, ["plain"], [ordinary], hostile, force_default_off)
    if out["loaded"][0]["error"]:
        fail(f"safe_load raised {out['loaded'][0]['error']} on an ordinary file holding a tensor: it must load "
             "ordinary files and refuse only the ones that would run code")
    expect_same_data(out["loaded"][0]["value"], ordinary, "safe_load(path) for a file holding a tensor")
    for (layout, how), got in zip(hostile, out["hostile"]):
        where = "whose object" if layout == "top" else "holding a state_dict and an object that"
        call = "os.mkdir(marker)" if how == "mkdir" else "a function that writes a marker file"
        label = f"a file {where} calls {call} when unpickled"
        if got["ran_code"] and force_default_off:
            fail(f"with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 in the environment (it turns torch.load's default into "
                 f"weights_only=False), safe_load ran the code hidden in {label}: pass weights_only=True "
                 "explicitly, so no default and no environment variable can change it")
        if got["ran_code"]:
            fail(f"safe_load ran the code hidden in {label}: the marker exists. Load with "
                 "torch.load(path, weights_only=True), and never fall back to weights_only=False")
        if got["raised"] is None:
            fail(f"safe_load returned normally on {label}: it must raise (weights_only=True refuses it with "
                 "pickle.UnpicklingError; let that propagate)")
        if got["raised"].split(":", 1)[0] != "UnpicklingError":
            fail(f"safe_load raised {got['raised']} on {label}: let torch's own pickle.UnpicklingError propagate "
                 "(a caller catches that one), do not turn it into another exception")


def optimizer_state_like() -> dict:
    """What torch.optim.Adam's state_dict() looks like: int keys, tensors, floats, a tuple, bools, None."""
    return {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4, 3), "exp_avg_sq": torch.rand(4, 3)},
                      1: {"step": torch.tensor(3.0), "exp_avg": torch.randn(4), "exp_avg_sq": torch.rand(4)}},
            "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": 0, "amsgrad": False,
                              "foreach": None, "params": [0, 1]}]}


@SAFE_LOAD.check
def loads_tensors_and_state_dicts(safe_load):
    """a tensor, a model's state_dict (an OrderedDict) and an optimizer's state_dict load as they were saved"""
    payloads = [("plain", torch.randn(3, 4)),
                ("ordered", {"0.weight": torch.randn(4, 3), "0.bias": torch.randn(4), "2.weight": torch.randn(2, 4)}),
                ("plain", optimizer_state_like())]
    expect_loads(safe_load, payloads, ["a tensor", "a model's state_dict", "an optimizer's state_dict"])


@SAFE_LOAD.check
def refuses_code(safe_load):
    """a pickle that would run code when loaded makes safe_load raise, and the code never runs"""
    expect_refuses(safe_load, [("top", "mkdir"), ("nested", "mark")])


@SAFE_LOAD.check
def refuses_code_whatever_the_default(safe_load):
    """with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 set (torch.load's default turned off), the code still never runs"""
    expect_refuses(safe_load, [("nested", "mark")], force_default_off=True)


def expect_loads_on_cpu(safe_load, data: Any, label: str) -> None:
    """A file whose tensors were saved on a GPU (tagged cuda:0) loads onto the CPU."""
    out = run_scenario(scenarios.safe_load_run, safe_load, ["gpu"], [data], [])
    got = out["loaded"][0]
    what = f"safe_load on a file written on a GPU ({label}, tensors tagged cuda:0)"
    if got["error"]:
        fail(f"{what} raised {got['error']}: pass map_location=\"cpu\" so that it loads on any machine")
    if got["devices"]:
        fail(f"{what} put tensors on {', '.join(got['devices'])}: pass map_location=\"cpu\"")
    expect_same_data(got["value"], data, f"{what}")


@SAFE_LOAD.check
def loads_a_gpu_file_onto_the_cpu(safe_load):
    """a checkpoint saved on a GPU loads onto the CPU, on any machine (map_location="cpu")"""
    expect_loads_on_cpu(safe_load, {"weight": torch.randn(3, 2), "step": 4}, "a dict with a tensor")


# ---------------------------------------------------------------- load_matching

PRETRAINED = ["Sequential", ["Linear", 4, 8], ["ReLU"], ["Linear", 8, 3]]
NEW_HEAD = ["Sequential", ["Linear", 4, 8], ["ReLU"], ["Linear", 8, 5]]


def trained_state(spec: list, seed: int) -> dict[str, _Tensor]:
    """A state_dict, as a plain dict of tensors, of the model spec builds from seed (standing for a trained one)."""
    return {k: v.detach().clone() for k, v in common.build(spec, seed).state_dict().items()}


def expect_matching(load_matching, spec: list, seed: int, source: dict[str, _Tensor], how: str,
                    ordered: bool = True) -> None:
    own = common.build(spec, seed).state_dict()
    want = [k for k, v in own.items() if k in source and tuple(source[k].shape) == tuple(v.shape)]
    out = run_scenario(scenarios.matching_run, load_matching, spec, seed, source, ordered)
    what = f"load_matching(model, state_dict) for {how}"
    names = out["names"]
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        fail(f"{what} returned {describe(names)}; return a list of the names copied")
    names = list(names)
    if names != want:
        extra = [n for n in names if n not in want]
        if extra:
            fail(f"{what} returned {names}, which names {extra}: those were not copied (a name missing from the "
                 f"model or the state_dict, or a shape that differs); expected {want}")
        if sorted(names) == sorted(want):
            fail(f"{what} returned {names}: list them in the order of model.state_dict(), {want}")
        fail(f"{what} returned {names}, expected {want}: every entry whose name and shape match is copied")
    for k, v in own.items():
        got = out["after"].get(k)
        if k in want:
            expect_tensor(got, source[k].to(v.dtype), f"{what}: the model's {k} after the call (copied from the "
                                                      "state_dict)", rtol=0, atol=0)
        elif not bit_equal(got, out["before"][k]):
            reason = "the state_dict has no such entry" if k not in source else \
                f"its shape {tuple(v.shape)} differs from the state_dict's {tuple(source[k].shape)}"
            fail(f"{what}: the model's {k} changed although {reason}; leave it untouched")
    expect(out["same_objects"], f"{what} replaced the model's parameters or buffers with new objects: copy the values "
                                "into them in place (tensor.copy_ under torch.no_grad(), or load_state_dict), so an "
                                "optimizer made before still holds them")
    for k in want:
        if not bit_equal(out["after_source_changed"][k], out["after"][k]):
            fail(f"{what}: the model's {k} shares memory with the state_dict (changing the state_dict afterwards "
                 "changed the model): copy the values, do not assign the tensor")
    expect(not out["moved"], f"{what} gave the model's {', '.join(out['moved'][:4])} new memory (`.data = ...` or "
                             "`set_`): copy the values into the memory they have, in place (tensor.copy_ under "
                             "torch.no_grad(), or load_state_dict), so views and state_dict() entries taken before "
                             "see them")
    for k, v in source.items():
        expect(bit_equal(out["source_after"].get(k), v), f"{what} changed the state_dict it was given (entry {k}); "
                                                         "leave it as it is")
    expect(all(out["requires_grad"].values()), f"{what} changed requires_grad; freezing is a separate step")


@LOAD_MATCHING.check
def copies_matching_names_and_shapes(load_matching):
    """a 3-class model's state_dict into a 5-class model: the body is copied, the head (other shapes) is not"""
    expect_matching(load_matching, NEW_HEAD, 0, trained_state(PRETRAINED, 1),
                    "a Linear(4, 8) -> ReLU -> Linear(8, 3) state_dict into Linear(4, 8) -> ReLU -> Linear(8, 5)")


@LOAD_MATCHING.check
def missing_and_extra_keys(load_matching):
    """names the model lacks and names the state_dict lacks: no error, only the common entries are copied"""
    source = trained_state(PRETRAINED, 2)
    del source["0.bias"]
    source["3.weight"] = torch.randn(5, 8)
    source["encoder.weight"] = torch.randn(8, 4)
    expect_matching(load_matching, NEW_HEAD, 3, source, "a state_dict without 0.bias and with 3.weight and "
                                                        "encoder.weight")


BATCHNORM_NET = ["Sequential", ["Linear", 3, 5], ["BatchNorm1d", 5], ["ReLU"], ["Linear", 5, 2]]


@LOAD_MATCHING.check
def buffers_and_other_dtypes(load_matching):
    """BatchNorm's buffers are copied like parameters, and float64 entries are converted to the model's float32"""
    source = {k: (v.double() if v.is_floating_point() else v) for k, v in trained_state(BATCHNORM_NET, 6).items()}
    source["1.running_mean"] = torch.randn(5, dtype=torch.float64)
    source["1.num_batches_tracked"] = torch.tensor(9)
    source["3.weight"] = torch.randn(5, 2, dtype=torch.float64)  # the transposed shape: not copied
    expect_matching(load_matching, BATCHNORM_NET, 7, source, "a float64 state_dict into Linear -> BatchNorm1d -> "
                                                             "ReLU -> Linear (float32), with a transposed head")


@LOAD_MATCHING.check
def same_shapes_everywhere(load_matching):
    """the same architecture: every entry is copied, into the model's own tensors"""
    expect_matching(load_matching, PRETRAINED, 4, trained_state(PRETRAINED, 5), "the same architecture")


# ---------------------------------------------------------------- checkpointed_forward

def tanh_blocks(n: int, width: int = 6) -> list[list]:
    return [["Sequential", ["Linear", width, width], ["Tanh"]] for _ in range(n)]


def plain_reference(specs: list[list], seed: int, x: _Tensor, g: _Tensor, x_requires_grad: bool) -> dict:
    """The blocks of `specs` (built from seed) run one after the other, backward(g): output and gradients."""
    blocks = common.build_all(specs, seed)
    xin = x.detach().clone().requires_grad_(x_requires_grad)
    _manual_seed(seed + 1)
    h = xin
    for block in blocks:
        h = block(h)
    h.backward(g)
    return {"y": h.detach(), "x_grad": None if xin.grad is None else xin.grad.detach(),
            "grads": {f"{i}.{name}": p.grad.detach() for i, b in enumerate(blocks) for name, p in b.named_parameters()}}


def _widths(spec: list) -> list[int]:
    """The in and out features of every Linear in a module spec, in order."""
    if spec and spec[0] == "Linear":
        return [spec[1], spec[2]]
    return [w for item in spec[1:] if isinstance(item, list) for w in _widths(item)]


def balanced(n: int, segments: int) -> list[int]:
    return [n // segments + (i < n % segments) for i in range(segments)]


def _runs(calls: list[int]) -> list[list[int]]:
    """Calls split where the block index does not go up by one: each run is one recomputed segment."""
    runs: list[list[int]] = []
    for c in calls:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


def expect_checkpointed(checkpointed_forward, specs: list[list], seed: int, segments: int, how: str,
                        as_sequential: bool = False, x_requires_grad: bool = True, batch: int = 5,
                        check_recompute: bool = True, check_kept: bool = False) -> None:
    x = torch.randn(batch, _widths(specs[0])[0])
    g = torch.randn(batch, _widths(specs[-1])[-1])
    want = plain_reference(specs, seed, x, g, x_requires_grad)
    container = "nn.Sequential" if as_sequential else "list"
    what = f"checkpointed_forward({len(specs)} blocks ({how}) as a {container}, x, segments={segments})"
    out = run_scenario(scenarios.checkpoint_run, checkpointed_forward, specs, seed, x, g, segments, as_sequential,
                       x_requires_grad)
    y = out["y"]
    if not isinstance(y, _Tensor):
        fail(f"{what} returned {describe(y)}, not a tensor")
    if not out["requires_grad"]:
        fail(f"{what} returned a tensor that does not require grad: the output must stay connected to the "
             "parameters' graph (use_reentrant=False keeps it so even when x does not require grad)")
    expect_tensor(y, want["y"], f"{what}: the output, against running the blocks in order", rtol=1e-5, atol=1e-6)
    masks = (" (the blocks have dropout: keep preserve_rng_state=True, so the recomputation draws the forward's "
             "masks)") if "Dropout" in repr(specs) else ""
    if x_requires_grad:
        expect_tensor(out["x_grad"], want["x_grad"], f"{what}: the gradient with respect to x{masks}", rtol=1e-5,
                      atol=1e-6)
    for name, grad in want["grads"].items():
        got = out["grads"].get(name)
        if got is None:
            fail(f"{what}: block parameter {name} got no gradient; with use_reentrant=False the parameters get "
                 "gradients even when x does not require grad")
        expect_tensor(got, grad, f"{what}: the gradient of block parameter {name}{masks}", rtol=1e-5, atol=1e-6)
    n = len(specs)
    if out["forward_calls"] != list(range(n)):
        fail(f"{what}: during the forward the blocks ran in the order {out['forward_calls']}; each should run once, "
             f"in order: {list(range(n))}")
    if check_recompute:
        expect_recomputed(out["backward_calls"], n, segments, what)
    if check_kept:
        expect_kept_boundaries(out["kept"], n, segments, batch * _widths(specs[-1])[-1] * 4, what)


def expect_kept_boundaries(kept: int, n: int, segments: int, activation: int, what: str) -> None:
    """After the forward, of the tensors it made only the inputs of segments 2..s and the output stay alive: s
    activations (blocks of one width), one more allowed (a copy of x), and 8 KiB per segment for RNG states."""
    if kept > (segments + 1) * (activation + 8192):
        fail(f"{what}: once it returned, {kept / activation:.1f} activations of the tensors it made were still "
             f"alive ({kept:,} bytes; one activation is {activation:,}). Checkpointing keeps only each later "
             f"segment's input and the output, {segments} here, where a plain forward keeps one per block or more "
             f"({n}+): "
             "something keeps the segments' insides anyway (a context_fn policy that saves them, a list that "
             "holds them)")


def expect_recomputed(calls: list[int], n: int, segments: int, what: str) -> None:
    if not calls:
        fail(f"{what}: no block ran again during backward, so nothing was checkpointed: run each segment through "
             "torch.utils.checkpoint.checkpoint(run_segment, h, use_reentrant=False)")
    missing = sorted(set(range(n)) - set(calls))
    if missing:
        fail(f"{what}: blocks {missing} were not recomputed during backward: every segment is checkpointed, the "
             "last one too")
    if sorted(calls) != list(range(n)):
        fail(f"{what}: during backward the blocks ran {calls}; each block should be recomputed exactly once")
    sizes = [len(r) for r in _runs(calls)][::-1]
    if len(sizes) != segments or max(sizes) - min(sizes) > 1:
        fail(f"{what}: backward recomputed {len(sizes)} segment(s) of {sizes} blocks (first to last); {n} blocks in "
             f"{segments} segments should have sizes that differ by at most one, such as {balanced(n, segments)}")


@CHECKPOINTED_FORWARD.check
def same_output_and_gradients(checkpointed_forward):
    """7 blocks in 3 segments (3 + 2 + 2): the output and every gradient equal the plain forward's"""
    expect_checkpointed(checkpointed_forward, tanh_blocks(7), 0, 3, "Linear + Tanh", check_recompute=False)


@CHECKPOINTED_FORWARD.check
def blocks_are_recomputed(checkpointed_forward):
    """during backward every block runs once more, segment by segment, in segments of balanced sizes"""
    expect_checkpointed(checkpointed_forward, tanh_blocks(7), 1, 3, "Linear + Tanh")
    expect_checkpointed(checkpointed_forward, tanh_blocks(6), 2, 4, "Linear + Tanh", as_sequential=True)


@CHECKPOINTED_FORWARD.check
def one_segment_and_one_per_block(checkpointed_forward):
    """segments=1 (one checkpoint around everything) and segments=len(blocks) (one per block)"""
    expect_checkpointed(checkpointed_forward, tanh_blocks(5), 3, 1, "Linear + Tanh")
    expect_checkpointed(checkpointed_forward, tanh_blocks(5), 4, 5, "Linear + Tanh")


@CHECKPOINTED_FORWARD.check
def keeps_only_segment_boundaries(checkpointed_forward):
    """8 blocks in 2 segments: the forward leaves 2 activations alive (a boundary and the output), not one a block"""
    expect_checkpointed(checkpointed_forward, tanh_blocks(8, 64), 9, 2, "Linear(64, 64) + Tanh", batch=256,
                        check_kept=True)


@CHECKPOINTED_FORWARD.check
def dropout_draws_the_same_mask(checkpointed_forward):
    """blocks with dropout: the recomputation draws the forward's masks (preserve_rng_state=True), same gradients"""
    specs = [["Sequential", ["Linear", 6, 6], ["ReLU"], ["Dropout", 0.5]] for _ in range(4)]
    expect_checkpointed(checkpointed_forward, specs, 8, 2, "Linear + ReLU + Dropout", batch=8)


@CHECKPOINTED_FORWARD.check
def input_without_grad(checkpointed_forward):
    """x that does not require grad: the parameters still get their gradients"""
    expect_checkpointed(checkpointed_forward, tanh_blocks(4), 5, 2, "Linear + Tanh, x.requires_grad False",
                        x_requires_grad=False)


@CHECKPOINTED_FORWARD.check
def bad_segment_counts(checkpointed_forward):
    """segments=0 and segments > len(blocks) raise ValueError"""
    for segments in (0, 5):
        classes = run_scenario(scenarios.checkpoint_raises, checkpointed_forward, tanh_blocks(4), 6,
                               torch.randn(2, 6), segments)
        expect("ValueError" in classes, f"checkpointed_forward(4 blocks, x, segments={segments}) should raise "
                                        f"ValueError, {'raised ' + classes[0] if classes else 'but returned'}")
