"""Chapter 08 (checkpointing): hidden checks: more shapes, dtypes, groups, steps, files and layouts, run only at grading."""
from __future__ import annotations

import torch

import math

from grader.exercises.checkpointing import (ADAGRAD, ATOMIC_SAVE, CHECKPOINT_INTERVAL, CHECKPOINTED_FORWARD,
                                            DROPOUT_MLP, EVERYTHING, LOAD_MATCHING, NEW_HEAD, PLAIN_MLP, PRETRAINED,
                                            SAFE_LOAD, SAVE_CHECKPOINT, _grads, expect_adagrad, expect_adagrad_resume,
                                            expect_adagrad_state_dict, expect_atomic, expect_checkpointed,
                                            expect_cuda_generators_restored, expect_in_place, expect_interval,
                                            expect_loads, expect_matching, expect_one_loadable_file,
                                            expect_published_by_rename, expect_refuses, expect_resumed, interval_of,
                                            optimizer_state_like, payload, run_atomic, run_resume, tanh_blocks,
                                            trained_state)
from grader.expect import expect_raises
from grader.inputs import randint, random_shape

# ---------------------------------------------------------------- AdaGrad


def _random_groups(count: int, dtype: torch.dtype) -> tuple[list[dict], list[tuple[int, ...]]]:
    groups, shapes = [], []
    for gi in range(count):
        ps = [torch.randn(random_shape(1, 3, 1, 4), dtype=dtype) for _ in range(randint(1, 3))]
        group: dict = {"params": ps}
        if gi:  # the first group takes the defaults, the others their own settings
            group["lr"] = [0.05, 0.3][gi % 2]
            if gi == 2:
                group["eps"] = 1e-3
        groups.append(group)
        shapes += [tuple(p.shape) for p in ps]
    return groups, shapes


@ADAGRAD.hidden
def random_groups_float64(AdaGrad):
    """three groups of random shapes in float64, six steps with random missing gradients and zero entries"""
    groups, shapes = _random_groups(3, torch.float64)
    missing = {(k, i) for k in range(6) for i in range(len(shapes)) if randint(0, 3) == 0}
    grads = _grads(shapes, 6, missing, dtype=torch.float64)
    for step in grads:
        for g in step:
            if g is not None:
                g[g.abs() < 0.3] = 0.0
    kwargs = {"lr": 0.1, "eps": 1e-6}
    out = expect_adagrad(AdaGrad, groups, kwargs, grads, "three float64 groups", rtol=1e-10, atol=1e-12)
    expect_adagrad_state_dict(out, groups, kwargs, "three float64 groups")


@ADAGRAD.hidden
def resume_with_groups(AdaGrad):
    """state_dict round trips after 1 and after 3 of 5 steps, with a parameter that gets its first gradient later"""
    groups = [{"params": [torch.randn(2, 3, dtype=torch.float64), torch.randn(4, dtype=torch.float64)]},
              {"params": [torch.randn(3, dtype=torch.float64)], "lr": 0.02, "eps": 0.1}]
    grads = _grads([(2, 3), (4,), (3,)], 5, missing={(0, 1), (1, 1), (2, 1), (3, 2)}, dtype=torch.float64)
    for split in (1, 3):
        expect_adagrad_resume(AdaGrad, groups, {"lr": 0.2, "eps": 1e-8}, grads, split, f"split after step {split}",
                              rtol=1e-10, atol=1e-12)


@ADAGRAD.hidden
def updates_in_place(AdaGrad):
    """the optimizer steps the very tensors it was given, and leaves their .grad as it was"""
    expect_in_place(AdaGrad, [(3, 3), (2,), (1, 4, 2)], 3)


@ADAGRAD.hidden
def large_eps_and_lr(AdaGrad):
    """eps = 1 and lr = 2 on gradients of every magnitude"""
    groups = [{"params": [torch.randn(50, dtype=torch.float64)]}]
    grads = [[torch.logspace(-4, 2, 50, dtype=torch.float64) * torch.randn(50, dtype=torch.float64).sign()]
             for _ in range(3)]
    expect_adagrad(AdaGrad, groups, {"lr": 2.0, "eps": 1.0}, grads, "lr=2, eps=1", rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------- save_checkpoint / load_checkpoint

BATCHNORM_MLP = ["Sequential", ["Linear", 4, 8], ["BatchNorm1d", 8], ["ReLU"], ["Dropout", 0.3], ["Linear", 8, 2]]


@SAVE_CHECKPOINT.hidden
def batchnorm_and_momentum(save_checkpoint, load_checkpoint):
    """BatchNorm (buffers) and dropout, SGD with momentum, every RNG: 4 steps, save, 2 more"""
    sources = ("torch", "numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, BATCHNORM_MLP, "sgd_momentum", sources, 4, 2, 10)
    expect_resumed(out, BATCHNORM_MLP, "sgd_momentum", sources, 4, 2, EVERYTHING)
    expect_one_loadable_file(out)


@SAVE_CHECKPOINT.hidden
def save_before_the_first_step(save_checkpoint, load_checkpoint):
    """a checkpoint saved at iteration 0 (an optimizer without state yet) resumes from the start"""
    sources = ("torch", "numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, DROPOUT_MLP, "adam", sources, 0, 3, 11)
    expect_resumed(out, DROPOUT_MLP, "adam", sources, 0, 3, EVERYTHING)


@SAVE_CHECKPOINT.hidden
def overwrite_the_same_path(save_checkpoint, load_checkpoint):
    """a save after 2 steps, then another to the same path after 5: resuming starts at 5"""
    sources = ("torch", "numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, DROPOUT_MLP, "adam", sources, 5, 2, 12, early_save=2)
    expect_resumed(out, DROPOUT_MLP, "adam", sources, 5, 2, EVERYTHING + "; a second save to the same path "
                   "replaces the first")
    expect_one_loadable_file(out)


@SAVE_CHECKPOINT.hidden
def long_resume_heavy_dropout(save_checkpoint, load_checkpoint):
    """dropout 0.5, one step before the save and six after"""
    spec = ["Sequential", ["Linear", 4, 32], ["GELU"], ["Dropout", 0.5], ["Linear", 32, 2]]
    for sources in [("torch",), ("torch", "numpy", "random")]:
        out = run_resume(save_checkpoint, load_checkpoint, spec, "adam", sources, 1, 6, 13)
        expect_resumed(out, spec, "adam", sources, 1, 6, EVERYTHING)


@SAVE_CHECKPOINT.hidden
def plain_model_sgd(save_checkpoint, load_checkpoint):
    """no dropout, SGD with momentum, numpy + random batches"""
    sources = ("numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, PLAIN_MLP, "sgd_momentum", sources, 3, 4, 14)
    expect_resumed(out, PLAIN_MLP, "sgd_momentum", sources, 3, 4, EVERYTHING)


@SAVE_CHECKPOINT.hidden
def three_gpus_and_a_second_save(save_checkpoint, load_checkpoint):
    """three simulated GPUs, saves after 1 and after 3 steps to one path: the second save's GPU states come back"""
    sources = ("torch", "numpy", "random")
    out = run_resume(save_checkpoint, load_checkpoint, BATCHNORM_MLP, "sgd_momentum", sources, 3, 2, 15, early_save=1,
                     gpus=3)
    expect_resumed(out, BATCHNORM_MLP, "sgd_momentum", sources, 3, 2, EVERYTHING)
    expect_cuda_generators_restored(out, 3)
    expect_one_loadable_file(out)


# ---------------------------------------------------------------- atomic_save

@ATOMIC_SAVE.hidden
def no_file_before(atomic_save):
    """a crash with no file yet leaves the folder empty; the first save creates the file; a crash keeps it"""
    ops = [("crash", payload(0)), ("save", payload(1)), ("crash", payload(2)), ("save", payload(3))]
    out = run_atomic(atomic_save, ops, None)
    expect_atomic(out, ops, None, "an empty folder")
    expect_published_by_rename(out, "an empty folder")


@ATOMIC_SAVE.hidden
def pathlib_nested_folder_odd_name(atomic_save):
    """a pathlib.Path in a nested folder with a space in its name, and a file name with dots"""
    existing = payload(0)
    ops = [("save", payload(1)), ("crash", payload(2, 300)), ("save", payload(3)), ("save", payload(4))]
    out = run_atomic(atomic_save, ops, existing, subfolder="runs/exp 1", name="ckpt.v2.final.pt", as_pathlib=True)
    expect_atomic(out, ops, existing, "a Path to runs/exp 1/ckpt.v2.final.pt")
    expect_published_by_rename(out, "a Path to runs/exp 1/ckpt.v2.final.pt")


@ATOMIC_SAVE.hidden
def many_saves_leave_nothing(atomic_save):
    """eight saves and crashes in turn on one path: never a stray file"""
    ops = [("save" if k % 3 else "crash", payload(k, randint(1, 50))) for k in range(8)]
    existing = payload(-1)
    out = run_atomic(atomic_save, ops, existing, name="state.pt")
    expect_atomic(out, ops, existing, "a folder holding state.pt")
    expect_published_by_rename(out, "a folder holding state.pt")


# ---------------------------------------------------------------- checkpoint_interval

def least_waste_interval(save: float, mtbf: float) -> float:
    """The interval T minimizing save/T + T/(2 mtbf), by bisection on the sign of its slope in u = log T (the waste
    is convex in u): an oracle that never uses the closed form."""
    lo, hi = math.log(save * 1e-12 + 1e-300), math.log(mtbf * 1e12)
    for _ in range(200):
        u = (lo + hi) / 2
        slope = math.exp(u) / (2 * mtbf) - save * math.exp(-u)
        lo, hi = (lo, u) if slope > 0 else (u, hi)
    return math.exp((lo + hi) / 2)


@CHECKPOINT_INTERVAL.hidden
def random_saves_and_failure_rates(checkpoint_interval):
    """save times from 0.1 s to 3 h and MTBFs from an hour to three years, against the least-waste interval"""
    for _ in range(12):
        save = 10 ** (randint(-10, 40) / 10)
        mtbf = 10 ** (randint(356, 800) / 100)
        expect_interval(interval_of(checkpoint_interval, save, mtbf), least_waste_interval(save, mtbf), save, mtbf)


@CHECKPOINT_INTERVAL.hidden
def large_and_fractional_arguments(checkpoint_interval):
    """a millisecond's save with an MTBF of 10^12 s, and fractional seconds: a float of seconds each time"""
    for save, mtbf in [(1e-3, 1e12), (0.25, 0.75), (1234.5, 98765.4321), (7, 7)]:
        expect_interval(interval_of(checkpoint_interval, save, mtbf), least_waste_interval(save, mtbf), save, mtbf)


@CHECKPOINT_INTERVAL.hidden
def refuses_zero_and_negative(checkpoint_interval):
    """both arguments zero or negative, and float zeros, raise ValueError"""
    for args in [(0, 0), (-1, -1), (0.0, 5.0), (5.0, -0.0), (-1e-9, 1e9)]:
        expect_raises(ValueError, lambda args=args: checkpoint_interval(*args), f"checkpoint_interval{args}")


@CHECKPOINT_INTERVAL.hidden
def refuses_nan(checkpoint_interval):
    """a NaN save time or MTBF raises ValueError: NaN is not a positive number (and NaN <= 0 is False too)"""
    nan = float("nan")
    for args in [(nan, 3600.0), (60.0, nan), (nan, nan)]:
        expect_raises(ValueError, lambda args=args: checkpoint_interval(*args), f"checkpoint_interval{args}")


# ---------------------------------------------------------------- safe_load

@SAFE_LOAD.hidden
def more_payloads(safe_load):
    """checkpoint-like data: nested dicts, lists, tuples, None, strings, bools, ints; bfloat16, int8, 0-dim tensors"""
    checkpoint = {"model": {"w": torch.randn(3).bfloat16(), "n": torch.tensor(7)},
                  "optimizer": optimizer_state_like(), "iteration": 12, "note": "run 3", "done": False,
                  "rng": {"torch": torch.randint(0, 255, (16,), dtype=torch.uint8), "random": (3, (1, 2, 3), None)},
                  "history": [0.5, 0.25, [1, 2]], "codes": torch.tensor([-3, 4], dtype=torch.int8)}
    expect_loads(safe_load, [("ordered", checkpoint), ("plain", torch.tensor(2.5)), ("plain", [])],
                 ["a checkpoint dict", "a 0-dim tensor", "an empty list"])


@SAFE_LOAD.hidden
def hostile_anywhere(safe_load):
    """code-running pickles alone or deep inside a checkpoint, calling os.mkdir or a Python function"""
    expect_refuses(safe_load, [("top", "mark"), ("nested", "mkdir"), ("nested", "mark")])


# ---------------------------------------------------------------- load_matching

NESTED_BN = ["Sequential", ["Sequential", ["Linear", 4, 6], ["BatchNorm1d", 6], ["ReLU"]], ["Linear", 6, 4]]


@LOAD_MATCHING.hidden
def buffers_and_nesting(load_matching):
    """nested modules with BatchNorm buffers (running stats, an int64 counter); a head of the transposed shape"""
    source = trained_state(NESTED_BN, 20)
    source["0.1.running_mean"] = torch.randn(6)
    source["0.1.num_batches_tracked"] = torch.tensor(17)
    source["1.weight"] = torch.randn(6, 4)  # same number of elements as the model's (4, 6): still a mismatch
    expect_matching(load_matching, NESTED_BN, 21, source, "nested modules with BatchNorm and a (6, 4) head")


@LOAD_MATCHING.hidden
def plain_dict_in_other_order(load_matching):
    """a plain dict whose keys come in reverse order: names are returned in model.state_dict() order"""
    source = dict(reversed(list(trained_state(PRETRAINED, 22).items())))
    expect_matching(load_matching, PRETRAINED, 23, source, "a plain dict in reverse order", ordered=False)


@LOAD_MATCHING.hidden
def other_dtype(load_matching):
    """float64 entries of matching shapes are copied into the float32 model (which stays float32)"""
    source = {k: v.double() for k, v in trained_state(NEW_HEAD, 24).items()}
    expect_matching(load_matching, NEW_HEAD, 25, source, "float64 entries")


@LOAD_MATCHING.hidden
def nothing_matches(load_matching):
    """no name in common, or only mismatched shapes: nothing copied, an empty list"""
    expect_matching(load_matching, NEW_HEAD, 26, {"encoder.weight": torch.randn(8, 4)}, "no common names")
    expect_matching(load_matching, NEW_HEAD, 27, {"2.weight": torch.randn(3, 8), "2.bias": torch.randn(3)},
                    "only mismatched shapes")


# ---------------------------------------------------------------- checkpointed_forward

@CHECKPOINTED_FORWARD.hidden
def dropout_blocks(checkpointed_forward):
    """blocks with dropout: the recomputation draws the same masks as the forward"""
    specs = [["Sequential", ["Linear", 6, 6], ["GELU"], ["Dropout", 0.4]] for _ in range(6)]
    expect_checkpointed(checkpointed_forward, specs, 30, 4, "Linear + GELU + Dropout", batch=16)
    expect_checkpointed(checkpointed_forward, specs, 31, 2, "Linear + GELU + Dropout", as_sequential=True, batch=16)


@CHECKPOINTED_FORWARD.hidden
def random_depths_and_widths(checkpointed_forward):
    """random numbers of blocks and segments, widths that change from block to block, lists and nn.Sequential"""
    for trial in range(6):
        n = randint(1, 9)
        widths = [randint(2, 7) for _ in range(n + 1)]
        specs = [["Sequential", ["Linear", widths[i], widths[i + 1]], ["Tanh" if i % 2 else "SiLU"]] for i in range(n)]
        expect_checkpointed(checkpointed_forward, specs, 40 + trial, randint(1, n), "random widths",
                            as_sequential=bool(trial % 2), batch=randint(1, 4))


@CHECKPOINTED_FORWARD.hidden
def more_segments_than_half(checkpointed_forward):
    """10 blocks in 4 segments (3 + 3 + 2 + 2) and 9 in 8 (2 + 1 + ... + 1)"""
    expect_checkpointed(checkpointed_forward, tanh_blocks(10, 5), 50, 4, "Linear + Tanh")
    expect_checkpointed(checkpointed_forward, tanh_blocks(9, 5), 51, 8, "Linear + Tanh", as_sequential=True)


@CHECKPOINTED_FORWARD.hidden
def keeps_boundaries_with_dropout(checkpointed_forward):
    """9 blocks with dropout in 3 segments, as an nn.Sequential: after the forward only 3 activations stay alive"""
    specs = [["Sequential", ["Linear", 48, 48], ["GELU"], ["Dropout", 0.3]] for _ in range(9)]
    expect_checkpointed(checkpointed_forward, specs, 52, 3, "Linear(48, 48) + GELU + Dropout", as_sequential=True,
                        batch=320, check_kept=True)
