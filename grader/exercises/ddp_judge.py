"""How a ddp_train run is judged (chapter 10): which rows each rank trained on, how much each rank's layers computed,
the gradient each rank computed before communicating, which step each rank took, and rank 0's final state. Public
like the checks that use it: it holds no solution.

The run is recorded by the models toy_model builds in the ranks (grader/course/ddp_record.py): at each training
forward of the model, the rows received, the weights held and the collectives run so far; at each forward of a
layer with parameters, its rows and FLOPs; at each backward, the gradient reaching each parameter before any
communication, and (in a world of several) the random mark the hook added to it, which only that rank's .grad and
its messages carry on. Rows are matched to toy_batch(seed, t). The gradient before communication must be that of
the mean-squared error of the rank's own rows; the weights at forward t minus those at forward t + 1, over lr, are
the gradient the rank stepped with, which must be the mean of the ranks' own gradients plus the mean of their
marks, with collectives in between that carried at least as many numbers as the model has gradients (torch's flight
recorder lists them in the ranks). So DistributedDataParallel, gradients all-reduced by hand (SUM then divide, or
AVG; one bucket or per parameter; reduce-scatter then all-gather) and SGD written out all pass; so does averaging
the weights right after each plain SGD step, the same update. A rank that works out the whole batch's gradient
itself (every rank can build every row) and all-reduces as many other numbers steps without the marks, and fails.
The final state is compared with one process stepping with the full batch's gradient plus the ranks' mean mark.
Any split of the 16 rows into disjoint shards of 16/n that cover the batch passes (blocks, strided rows,
a DistributedSampler's permutation): the exercise asks for "its own 16 / n rows", not which ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from grader.course.distributed import TOY_BATCH, toy_batch, toy_model
from grader.expect import describe, expect, expect_equal, expect_tensor, expect_type, fail
from grader.scenario import run_scenario
from grader.scenarios import ddp as scenarios

# Bound before any student code runs.
_mse, _sgd = F.mse_loss, torch.optim.SGD
_grad, _functional_call = torch.autograd.grad, torch.func.functional_call

AVERAGE_HOW = ("all-reduce the gradients with SUM and divide them by the world size (or wrap the model in "
               "DistributedDataParallel) between backward and the optimizer's step")
Weights = dict[str, torch.Tensor]


@dataclass
class Rank:
    """One rank's recorded model: the inputs, weights and collectives run so far at each training forward; each
    layer's rows and FLOPs at each of its training forwards; each parameter's gradients before communication."""
    rank: int
    group: bool                 # a process group was up at every forward
    x: list[Any]
    params: list[Weights]
    seq: list[Any]              # collectives the process group had run, at each forward (None: not counted)
    sent: list[Any]             # floating-point numbers its collectives had carried, at each forward (None: unknown)
    layers: dict[str, dict[str, list[int]]]
    grads: dict[str, list[torch.Tensor]]
    marks: dict[str, list[torch.Tensor]]  # what the hook added to each gradient (zeros: nothing)


def recorded_run(ddp_train: Any, world_size: int, steps: int, lr: float, seed: int) -> dict[str, Any]:
    """Run ddp_train with every rank's model recording; what it returned and the recorded models."""
    out = run_scenario(scenarios.train_recorded, ddp_train, world_size, steps, lr, seed)
    what = f"ddp_train(world_size={world_size}, steps={steps}, lr={lr}, seed={seed})"
    return {"what": what, "world": world_size, "steps": steps, "lr": lr, "seed": seed, **out}


def trained_models(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each worker process's record of the toy_model it trained (the one that ran the most forwards)."""
    models = [m for m in run["models"] if m["pid"] != run["pid"]] or run["models"]  # else: trained in the notebook
    per_process: dict[int, dict[str, Any]] = {}
    for m in models:
        if m["pid"] not in per_process or len(m["x"]) > len(per_process[m["pid"]]["x"]):
            per_process[m["pid"]] = m
    return list(per_process.values())


def ranks_of(run: dict[str, Any]) -> list[Rank]:
    """Each rank's model, rank 0 first; fails unless world_size processes each trained a toy_model, one
    forward per step."""
    what, n, steps = run["what"], run["world"], run["steps"]
    models = trained_models(run)
    if not models:
        fail(f"{what}: no forward of a model built by toy_model(seed) ran in the worker processes: build the model "
             "with toy_model(seed) in train_worker and call it (or DistributedDataParallel around it) on the rows")
    found = [Rank(m["rank"][-1], all(m["group"]), m["x"], m["params"], m.get("seq", [None] * len(m["x"])),
                  m.get("sent", [None] * len(m["x"])), m.get("layers", {}), m.get("grads", {}), m.get("marks", {}))
             for m in models]
    if len(found) == 1 and found[0].rank == -1:
        found[0].rank = 0
    ranks = sorted(r.rank for r in found)
    if -1 in ranks:
        fail(f"{what}: a process trained a toy_model without knowing its rank (no process group joined, no RANK "
             "in its environment): launch the ranks with grader.course.distributed.launch and join the process group")
    if ranks != list(range(n)):
        fail(f"{what}: {len(found)} process(es) trained a toy_model (as ranks {ranks}) in a world of {n}: launch "
             f"{n} processes, rank r of them training its own copy")
    found.sort(key=lambda r: r.rank)
    for r in found:
        expect(len(r.x) == steps, f"{what}: rank {r.rank}'s model ran {len(r.x)} training forwards in {steps} steps: "
                                  "one forward per step, on this rank's rows of the step's batch (evaluate under "
                                  "torch.no_grad())")
    return found


def rows_seen(run: dict[str, Any], ranks: list[Rank]) -> list[list[list[int]]]:
    """For each step, for each rank, the indices in toy_batch(seed, step) of the rows its forward received."""
    what, seed, rows = run["what"], run["seed"], []
    for t in range(run["steps"]):
        batch = toy_batch(seed, t)[0].double()
        per_rank = []
        for r in ranks:
            x = r.x[t]
            if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != batch.shape[1]:
                fail(f"{what}: rank {r.rank}'s model at step {t} received {describe(x)}, not rows of "
                     f"toy_batch(seed, {t}) (a tensor of shape (rows, {batch.shape[1]}))")
            if x.shape[0] == 0:
                per_rank.append([])
                continue
            best, index = (x.double()[:, None, :] - batch[None]).abs().amax(-1).min(1)
            if not bool((best <= 1e-6).all()):
                fail(f"{what}: rank {r.rank}'s model at step {t} received rows that are not rows of "
                     f"toy_batch(seed, {t}): take step t's rows from toy_batch(seed, t)")
            per_rank.append(index.tolist())
        rows.append(per_rank)
    return rows


def expect_sharded(run: dict[str, Any]) -> None:
    """At every step each rank's forward received its own TOY_BATCH / n rows: disjoint, together all of them."""
    what, n = run["what"], run["world"]
    per = TOY_BATCH // n
    share = f"rank r of {n} takes its own shard of {TOY_BATCH}/{n} = {per} rows"
    for t, seen in enumerate(rows_seen(run, ranks_of(run))):
        everything = set(range(TOY_BATCH))
        whole = [r for r in range(n) if set(seen[r]) == everything]
        if n > 1 and whole:
            who = "every rank's forward" if len(whole) == n else f"rank {whole[0]}'s forward"
            fail(f"{what}: {who} saw all {TOY_BATCH} rows of step {t}'s batch: the batch was not sharded; {share}")
        for r in range(n):
            expect(len(set(seen[r])) == len(seen[r]), f"{what}: rank {r}'s forward received some rows of step {t} "
                                                      f"twice: each row belongs to one shard, once; {share}")
        for r in range(n):
            for s in range(r + 1, n):
                common = sorted(set(seen[r]) & set(seen[s]))
                expect(not common, f"{what}: ranks {r} and {s} both trained on rows {common} of step {t}: the "
                                   f"shards overlap; they must be disjoint: {share}")
        for r in range(n):
            expect(len(seen[r]) == per, f"{what}: rank {r}'s forward received {len(seen[r])} rows at step {t}, "
                                        f"not an equal shard: {share}")
        missing = sorted(everything - {i for rows in seen for i in rows})
        expect(not missing, f"{what}: no rank trained on rows {missing} of step {t}: the shards must cover all "
                            f"{TOY_BATCH} rows; {share}")
    expect_layers_ran_the_shard(run, ranks_of(run))


def _layer_names(template: torch.nn.Module) -> dict[str, str]:
    """Each layer with parameters, by name, described (`Linear(8 -> 32)`)."""
    out = {}
    for name, layer in template.named_modules():
        weight = getattr(layer, "weight", None)
        if any(True for _ in layer.parameters(recurse=False)) and isinstance(weight, torch.Tensor):
            out[name] = f"{type(layer).__name__}({weight.shape[-1]} -> {weight.shape[0]})"
    return out


def expect_layers_ran_the_shard(run: dict[str, Any], ranks: list[Rank]) -> None:
    """Every layer with parameters ran one training forward per step, on the rows the model received: a rank that
    also ran the batch through its layers another way (one by one, or the model once more) computed more than its
    share, which the FLOPs say."""
    what, n, steps = run["what"], run["world"], run["steps"]
    template = toy_model(run["seed"])
    layers = _layer_names(template)
    per_row = sum(2 * dict(template.named_modules())[name].weight.numel() for name in layers)
    share = steps * per_row * (TOY_BATCH // n)
    for r in ranks:
        flops = sum(f for layer in r.layers.values() for f in layer.get("flops", []) if f > 0)
        for name, label in layers.items():
            rows = r.layers.get(name, {}).get("rows", [])
            shown = ", ".join(map(str, rows[:6])) + (", ..." if len(rows) > 6 else "")
            if len(rows) != steps:
                ratio = f", {flops / share:.3g}x the forward FLOPs of its share ({steps} steps of {TOY_BATCH // n} " \
                        f"rows: {share:,})" if share and flops else ""
                fail(f"{what}: rank {r.rank}'s layer {name!r} ({label}) ran {len(rows)} training forwards in {steps} "
                     f"steps (on {shown or 'no'} rows){ratio}: a rank runs one forward per step, on its own "
                     f"{TOY_BATCH // n} rows only, through its model")
            for t, (got, x) in enumerate(zip(rows, r.x)):
                want = x.shape[0] if isinstance(x, torch.Tensor) and x.dim() else None
                expect(got == want, f"{what}: rank {r.rank}'s layer {name!r} ({label}) received {got} rows at step "
                                    f"{t}, its model {want}: every layer runs on the rows the model received")


def _gap(a: Weights, b: Weights) -> float:
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in b)


def _near(a: Weights, b: Weights) -> bool:
    """Equal within what float32 weights and another order of additions allow."""
    return _gap(a, b) <= 1e-4 + 1e-3 * max(float(v.abs().max()) for v in b.values())


def _local_gradient(template: torch.nn.Module, weights: Weights, seed: int, step: int, rows: list[int]) -> Weights:
    """The gradient of the mean-squared error of `rows` of step `step`'s batch at `weights`."""
    x, y = toy_batch(seed, step)
    leaves = {k: v.detach().float().clone().requires_grad_() for k, v in weights.items()}
    loss = _mse(_functional_call(template, leaves, (x[rows],)), y[rows])
    return dict(zip(leaves, _grad(loss, list(leaves.values()))))


def step_verdict(run: dict[str, Any], r: int, t: int, rows: int, moved: Weights, mean: Weights, own: Weights,
                 earlier: Weights) -> str:
    """What is wrong with rank r's step t, which followed the gradient `moved`; "" when it is lr x `mean`."""
    what, n = run["what"], run["world"]
    if _near(moved, mean):
        return ""
    if n > 1 and _near(moved, own):
        return (f"{what}: the gradients were not averaged across ranks: rank {r}'s step {t} followed the gradient "
                f"of its own {rows} rows alone; {AVERAGE_HOW}")
    if max(float(v.abs().max()) for v in moved.values()) <= 1e-7:
        return f"{what}: rank {r}'s weights did not change at step {t}: step the optimizer after backward"
    if t and _near(moved, {k: mean[k] + earlier[k] for k in mean}):
        return (f"{what}: rank {r}'s step {t} used the gradients of the earlier steps too: zero the gradients "
                "before each backward (optimizer.zero_grad())")
    norm = sum(float((v.double() ** 2).sum()) for v in mean.values())
    k = sum(float((moved[name].double() * v.double()).sum()) for name, v in mean.items()) / norm if norm else 0.0
    if _near(moved, {name: k * v for name, v in mean.items()}):
        if n > 1 and abs(k - n) < 1e-2 * n:
            return (f"{what}: the gradients were summed over the {n} ranks, not averaged: rank {r}'s step {t} is "
                    f"{n}x the step of the average gradient; divide the all-reduced gradients by the world size")
        if n > 1 and abs(k - 1 / n) < 1e-2 / n:
            return (f"{what}: rank {r}'s step {t} is 1/{n} of the step of the average gradient: the gradients were "
                    f"divided by the world size twice; divide the all-reduced sum once (DistributedDataParallel "
                    f"averages already: divide nothing after it)")
        return (f"{what}: rank {r}'s step {t} is {k:.3g}x lr x (the average of the ranks' gradients): SGD with "
                f"lr={run['lr']}, each rank's loss the mean-squared error of its own rows, gradients averaged")
    return (f"{what}: rank {r}'s step {t} is not lr x the average of the ranks' gradients (the gradient it followed "
            f"differs by up to {_gap(moved, mean):.3g}): each rank's loss is the mean-squared error of its own rows, "
            f"and the gradients are averaged over the ranks ({AVERAGE_HOW})")


def mark_at(marks: dict[str, list[torch.Tensor]], t: int, like: Weights) -> Weights:
    """The mark added to each gradient of backward t (zeros where none was recorded)."""
    return {k: marks[k][t] if len(marks.get(k, [])) > t else torch.zeros_like(v) for k, v in like.items()}


def unmarked_verdict(run: dict[str, Any], r: int, t: int) -> str:
    """Rank r's step t followed the ranks' average gradient, worked out without the gradients backward left."""
    return (f"{run['what']}: rank {r}'s step {t} followed the average of the ranks' gradients, but not the gradients "
            "their backward passes produced: while grading, each rank's backward adds a small random mark to its "
            "gradients, and this step carries none of them. Step with the gradients backward left in .grad, "
            "averaged with the other ranks' by an all-reduce (or DistributedDataParallel), not with a gradient "
            "worked out another way (on copies of the weights, or from the whole batch)")


def expect_averaged(run: dict[str, Any]) -> None:
    """Every rank starts from toy_model(seed)'s weights, and each step moves every rank by lr x the average of
    the ranks' gradients. Rank 0's returned state shows its last step; the other ranks' last step is unseen."""
    what, n, steps, lr, seed = run["what"], run["world"], run["steps"], run["lr"], run["seed"]
    ranks = ranks_of(run)
    alone = [r.rank for r in ranks if not r.group]
    if n > 1 and alone:
        fail(f"{what}: rank {alone[0]} trained without a process group (no dist.init_process_group before its "
             f"forwards), so its gradients were never averaged with the other ranks': join the group, then "
             f"{AVERAGE_HOW}")
    seen = rows_seen(run, ranks)
    if n > 1 and any(set(rows[r]) & set(rows[s]) for rows in seen for r in range(n) for s in range(r + 1, n)):
        fail(f"{what}: the ranks' forwards did not receive disjoint rows, so whether their gradients were averaged "
             "cannot be seen: shard the batch first (rank r its own rows)")
    template = toy_model(seed)
    start = {k: v.detach() for k, v in template.named_parameters()}
    names = sorted(start)
    for r in ranks:
        expect(sorted(r.params[0]) == names, f"{what}: rank {r.rank}'s model has parameters {sorted(r.params[0])}, "
                                             f"not toy_model's {names}")
        if _gap(r.params[0], start) > 1e-6:
            same_as_0 = r.rank and _gap(ranks[0].params[0], start) <= 1e-6
            hint = ("build toy_model(seed) with the same seed on every rank" if same_as_0
                    else "build the model with toy_model(seed)")
            fail(f"{what}: rank {r.rank} began training with weights other than toy_model(seed)'s (largest "
                 f"difference {_gap(r.params[0], start):.3g}): {hint}")
    full = list(range(TOY_BATCH))
    for r in ranks:
        expect_gradient_counts(run, r, names)
    final = run["state"]
    if not (isinstance(final, dict) and all(isinstance(final.get(k), torch.Tensor) and final[k].shape == v.shape
                                            for k, v in start.items())):
        final = None  # rank 0's last step cannot be seen; two_processes_equal_one says what is wrong with the state
    earlier: Weights = {k: torch.zeros_like(v) for k, v in start.items()}
    for t in range(steps):
        for r in ranks[1:]:
            gap = _gap(r.params[t], ranks[0].params[t])
            expect(gap <= 1e-5, f"{what}: rank {r.rank} began step {t} with weights other than rank 0's (largest "
                                f"difference {gap:.3g}): the copies drifted apart; {AVERAGE_HOW}")
        local = [_local_gradient(template, r.params[t], seed, t, seen[t][r.rank]) for r in ranks]
        plain = {k: sum(g[k] for g in local) / n for k in names}
        marked = [{k: g[k] + m[k] for k in names} for g, m in
                  zip(local, (mark_at(r.marks, t, start) for r in ranks))]
        mean = {k: sum(g[k] for g in marked) / n for k in names}
        for r, unmarked, own in zip(ranks, local, marked):
            before = {k: r.grads[k][t] for k in names}
            if not _near(before, unmarked):
                rows = len(seen[t][r.rank])
                whole = n > 1 and _near(before, _local_gradient(template, r.params[t], seed, t, full))
                fail(f"{what}: rank {r.rank}'s gradient before communication at step {t} is "
                     + (f"the gradient of all {TOY_BATCH} rows of the batch, not of the {rows} rows its model "
                        "received: its backward ran on the full batch" if whole else
                        f"not the gradient of the mean-squared error of the {rows} rows its model received")
                     + "; each rank backpropagates the loss of its own rows through its model")
            after = r.params[t + 1] if t + 1 < steps else (final if r.rank == 0 else None)
            if after is None:
                continue
            moved = {k: ((r.params[t][k].double() - after[k].double()) / lr).float() for k in names}
            verdict = step_verdict(run, r.rank, t, len(seen[t][r.rank]), moved, mean, own, earlier)
            if verdict and n > 1 and _near(moved, plain):  # the average, but not of what backward produced
                expect_communicated(run, r, t)
                verdict = unmarked_verdict(run, r.rank, t)
            if verdict:
                fail(verdict)
            expect_communicated(run, r, t)
        earlier = {k: earlier[k] + mean[k] for k in names}


def expect_gradient_counts(run: dict[str, Any], r: Rank, names: list[str]) -> None:
    """One backward per step reached each of the rank's parameters (seen before any communication)."""
    what, steps = run["what"], run["steps"]
    counts = {k: len(r.grads.get(k, [])) for k in names}
    if not any(counts.values()):
        fail(f"{what}: no gradient reached rank {r.rank}'s parameters in a backward pass: backpropagate the loss of "
             "its own rows through its model (gradients computed elsewhere and written into .grad are not seen)")
    odd = {k: c for k, c in counts.items() if c != steps}
    if odd:
        k, c = next(iter(odd.items()))
        fail(f"{what}: {c} backward passes reached rank {r.rank}'s parameter {k} in {steps} steps: one backward "
             "per step, of the loss of this rank's own rows")


def expect_communicated(run: dict[str, Any], r: Rank, t: int) -> None:
    """Between its forwards of step t and t + 1 the rank ran collectives (where its process group counts them)
    that carried at least as many numbers as its model has gradients (where torch's flight recorder lists them):
    the average of the ranks' gradients cannot reach a rank that sent none of its own."""
    what, n = run["what"], run["world"]
    if n == 1 or t + 1 >= len(r.x):
        return
    seq, sent = r.seq[t:t + 2], r.sent[t:t + 2]
    if None not in seq:
        expect(seq[1] > seq[0], f"{what}: rank {r.rank} stepped with the average of the ranks' gradients at step "
                                f"{t}, yet its process group ran no collective between that step's forward and the "
                                f"next: the average must come from the other ranks; {AVERAGE_HOW}")
    if None in sent:
        return
    need = sum(v.numel() for v in r.params[t].values())
    carried = sent[1] - sent[0]
    expect(carried >= need, f"{what}: rank {r.rank} stepped with the average of the ranks' gradients at step {t}, "
                            f"yet its collectives between that step's forward and the next carried {carried} "
                            f"number{'s' * (carried != 1)}, fewer than its model's {need} gradients: the average must "
                            f"come from the other ranks' gradients, all-reduced; {AVERAGE_HOW}")


def single_process(steps: int, lr: float, seed: int, marks: list[Weights] | None = None) -> Weights:
    """The baseline DDP must reproduce: plain SGD on each step's full batch in this process (each step's gradient
    plus marks[step], the mean of the marks the ranks' backward added, where given)."""
    model = toy_model(seed)
    opt = _sgd(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = toy_batch(seed, step)
        opt.zero_grad()
        _mse(model(x), y).backward()
        if marks:
            with torch.no_grad():
                for k, p in model.named_parameters():
                    p.grad += marks[step][k].to(p.grad.dtype)
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


def mean_marks(run: dict[str, Any]) -> list[Weights] | None:
    """For each step, the mean over the world of the marks the ranks' backward added; None where none added any."""
    like = {k: v.detach() for k, v in toy_model(run["seed"]).named_parameters()}
    marks = [m.get("marks", {}) for m in trained_models(run)]
    per_step = [[mark_at(ms, t, like) for ms in marks] for t in range(run["steps"])]
    if not any(float(v.abs().max()) > 0 for step in per_step for m in step for v in m.values()):
        return None
    return [{k: sum(m[k] for m in step) / run["world"] for k in like} for step in per_step]


def expect_same_as_one_process(run: dict[str, Any]) -> None:
    """Rank 0's returned state_dict equals one process trained on the full batch, within 1e-6 (with the ranks'
    marks added to its gradients, where they were marked)."""
    what = run["what"]
    marks = mean_marks(run)
    want = single_process(run["steps"], run["lr"], run["seed"], marks)
    got = run["state"]
    expect_type(got, dict, what)
    expect_equal(sorted(got), sorted(want), f"{what}: the state_dict keys")
    against = "one process on the full batch" + (" stepping with the gradients plus the ranks' mean mark (see "
                                                  "gradients_averaged_before_each_step)" if marks else "")
    for key, value in want.items():
        expect_tensor(got[key], value, f"{what}: {key} after training, against {against}", rtol=0, atol=1e-6)


def expect_ddp(ddp_train: Any, world_size: int, steps: int, lr: float, seed: int) -> None:
    """One run judged whole: sharding, averaging, and rank 0's final state."""
    run = recorded_run(ddp_train, world_size, steps, lr, seed)
    expect_sharded(run)
    expect_averaged(run)
    expect_same_as_one_process(run)
