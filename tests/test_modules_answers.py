"""Chapter 06 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail. Most answers are classes: the checks build them,
train them, switch them and look inside through the scenarios in grader/scenarios/modules.py."""
from __future__ import annotations

import contextlib
import copy
import functools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_module

from grader.results import ERROR
from grader.runner import run_exercise

from tests.answers import Wrong, assert_caught, assert_passes, ids

W = Wrong

_real = {"torch.autograd.backward": torch.autograd.backward, "torch.autograd.grad": torch.autograd.grad,
         "torch.Tensor.backward": torch.Tensor.backward}


@pytest.fixture(autouse=True)
def restore_torch():
    """Hostile answers patch torch and leave global hooks; put everything back after each test."""
    hooks = {name: dict(getattr(module_module, name))
             for name in ("_global_forward_hooks", "_global_forward_pre_hooks")}
    yield
    torch.autograd.backward = _real["torch.autograd.backward"]
    torch.autograd.grad = _real["torch.autograd.grad"]
    torch.Tensor.backward = _real["torch.Tensor.backward"]
    for name, saved in hooks.items():
        table = getattr(module_module, name)
        table.clear()
        table.update(saved)


class Linear(nn.Module):
    """The notebook's bias-free layer: weight (in, out), y = x @ weight."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(in_dim, out_dim) / math.sqrt(in_dim))

    def forward(self, x):
        return x @ self.weight


# ---------------------------------------------------------------- correct, written differently

class SequentialSetattr(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for i in range(len(self._modules)):
            x = getattr(self, str(i))(x)
        return x


class SequentialReduce(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.register_module(f"{i}", m)

    def forward(self, x):
        return functools.reduce(lambda h, m: m(h), self._modules.values(), x)


class SequentialSortedByInt(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        self._modules.update({str(i): m for i, m in enumerate(modules)})

    def forward(self, x):
        for name in sorted(self._modules, key=int):  # names compared as numbers: "10" after "9"
            x = self._modules[name](x)
        return x


class ConcatModuleList(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.branches = nn.ModuleList([net1, net2])

    def forward(self, x):
        return torch.cat([branch(x) for branch in self.branches], dim=-1)


class ConcatModuleDict(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = nn.ModuleDict({"left": net1, "right": net2})

    def forward(self, x):
        a, b = self.nets["left"](x), self.nets["right"](x)
        return torch.concat((a, b), dim=a.dim() - 1)


class ConcatAddModule(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.add_module("first", net1)
        self.add_module("second", net2)

    def forward(self, x):
        outs = [self.first(x), self.second(x)]
        return torch.cat(outs, -1)


class CruncherMultiDot(nn.Module):
    def __init__(self, dim, num_layers):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(Linear(dim, dim))
        self.final = Linear(dim, 1)

    def forward(self, x):
        mats = [x] + [layer.weight for layer in self.layers] + [self.final.weight]
        return torch.linalg.multi_dot(mats)[:, 0]


class _NormalLinear(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        nn.init.normal_(self.weight, std=in_dim ** -0.5)

    def forward(self, x):
        return torch.matmul(x, self.weight)


class CruncherInitNormal(nn.Module):
    def __init__(self, dim, num_layers):
        super().__init__()
        self.final = _NormalLinear(dim, 1)  # registered first: the key order differs, the keys do not
        self.layers = nn.ModuleList(_NormalLinear(dim, dim) for _ in range(num_layers))

    def forward(self, x):
        h = functools.reduce(lambda acc, layer: layer(acc), self.layers, x)
        return self.final(h).reshape(-1)


def count_unique_set(model):
    unique = {p for _, p in model.named_parameters(remove_duplicate=False)}  # a Parameter hashes by identity
    return sum(map(torch.Tensor.numel, unique))


def count_by_identity(model):
    return sum({id(p): p.numel() for _, p in model.named_parameters(remove_duplicate=False)}.values())


def count_by_data_ptr(model):
    return int(sum({p.data_ptr(): p.numel() for p in model.parameters()}.values()))


def count_every_module_own(model):
    """Every module's own parameters (recurse=False), a shared one once by identity: the tree walked by hand."""
    seen = {}
    for module in model.modules():
        for p in module.parameters(recurse=False):
            seen[id(p)] = p.numel()
    return sum(seen.values())


class RunningMeanCopy(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("count", torch.tensor(0))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)  # extra, not saved: allowed

    def forward(self, x):
        if self.training:
            n = x.shape[0]
            total = self.mean * self.count + x.detach().sum(dim=0)
            self.mean.copy_(total / (self.count + n))
            self.count.add_(n)
        return x - self.mean


class RunningMeanReassign(nn.Module):
    def __init__(self, num_features):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                count = self.count + x.shape[0]
                self.mean = self.mean + (x - self.mean).sum(0) / count
                self.count = count
        return x.sub(self.mean)


def shapes_global_hook(model, x):
    names = {id(m): name for name, m in model.named_modules() if name}
    shapes = {}

    def hook(module, inputs, output):
        if id(module) in names:
            shapes[names[id(module)]] = tuple(int(s) for s in output.shape)
    handle = module_module.register_module_forward_hook(hook)
    try:
        model(x)
    finally:
        handle.remove()
    return shapes


def shapes_hook_with_kwargs_always_called(model, x):
    shapes, handles = {}, []
    for name, m in model.named_modules():
        if m is not model:
            handles.append(m.register_forward_hook(
                lambda mod, args, kwargs, out, name=name: out is None or shapes.update({name: tuple(map(int, out.size()))}),
                with_kwargs=True, always_call=True))  # always_call: also run (with out None) when forward raises
    try:
        model(x)
    finally:
        while handles:
            handles.pop().remove()
    return shapes


def shapes_exit_stack(model, x):
    shapes = {}
    with contextlib.ExitStack() as stack:
        for name, m in list(model.named_modules())[1:]:
            h = m.register_forward_hook(lambda mod, args, out, name=name: shapes.__setitem__(name, (*out.shape,)))
            stack.callback(h.remove)
        model(x)
    return shapes


class QuadraticRegistered(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.register_parameter("W", nn.Parameter(torch.randn(out_features, in_features, in_features) / in_features))

    def forward(self, x):
        return torch.einsum("bi,kij,bj->bk", x, self.W, x)


class QuadraticBroadcastMatmul(QuadraticRegistered):
    """(1, in) @ W_k @ (in, 1) for every row and output, by broadcasting matmul."""

    def forward(self, x):
        left = x[:, None, None, :] @ self.W                   # (batch, out, 1, in)
        return (left @ x[:, None, :, None]).reshape(x.shape[0], -1)


class QuadraticMatmul(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Parameter(torch.randn(out_features, in_features, in_features).div(in_features))

    def forward(self, x):
        wx = torch.einsum("kij,bj->bki", self.W, x)
        return (wx * x[:, None, :]).sum(-1)


class QuadraticTransposed(nn.Module):
    """W[k, j, i] instead of W[k, i, j]: the same function, since x^T W x = x^T W^T x."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Parameter(torch.randn(out_features, in_features, in_features) / in_features)

    def forward(self, x):
        return torch.einsum("kji,bi,bj->bk", self.W, x, x)


CORRECT = [
    ("MySequential", SequentialSetattr), ("MySequential", SequentialReduce), ("MySequential", SequentialSortedByInt),
    ("Concat", ConcatModuleList), ("Concat", ConcatModuleDict), ("Concat", ConcatAddModule),
    ("Cruncher", CruncherMultiDot), ("Cruncher", CruncherInitNormal),
    ("get_num_parameters", count_unique_set), ("get_num_parameters", count_by_identity),
    ("get_num_parameters", count_by_data_ptr), ("get_num_parameters", count_every_module_own),
    ("RunningMean", RunningMeanCopy), ("RunningMean", RunningMeanReassign),
    ("activation_shapes", shapes_global_hook), ("activation_shapes", shapes_exit_stack),
    ("activation_shapes", shapes_hook_with_kwargs_always_called),
    ("Quadratic", QuadraticRegistered), ("Quadratic", QuadraticMatmul), ("Quadratic", QuadraticTransposed),
    ("Quadratic", QuadraticBroadcastMatmul),
]


@pytest.mark.parametrize("name,obj", CORRECT, ids=[f"{n}-{o.__name__}" for n, o in CORRECT])
def test_correct_answers_pass_every_check(name, obj):
    assert_passes("modules", name, obj)


# ---------------------------------------------------------------- plausible but wrong: MySequential

class SequentialPlainList(nn.Module):
    """The classic: a plain list, so parameters() and state_dict() see nothing."""

    def __init__(self, *modules):
        super().__init__()
        self.steps = list(modules)

    def forward(self, x):
        for m in self.steps:
            x = m(x)
        return x


class SequentialNamedLayers(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(f"layer{i}", m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class SequentialReversed(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), m)

    def forward(self, x):
        for m in reversed(list(self._modules.values())):
            x = m(x)
        return x


class SequentialModuleList(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        self.layers = nn.ModuleList(modules)

    def forward(self, x):
        for m in self.layers:
            x = m(x)
        return x


class SequentialSubclass(nn.Sequential):
    pass


class SequentialCopies(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            self.add_module(str(i), copy.deepcopy(m))

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class SequentialLastOnly(SequentialSetattr):
    def forward(self, x):
        return list(self._modules.values())[-1](x) if self._modules else x


class SequentialBrokenGetattr(SequentialSetattr):
    """A broken __getattr__: every lookup recurses. It must end in a clear error, not a hang or a crash."""

    def __getattr__(self, name):
        return getattr(self, name)


class SequentialNamedChildren(nn.Module):
    """named_children() yields a module registered twice once: MySequential(layer, ReLU(), layer) runs it once."""

    def __init__(self, *modules):
        super().__init__()
        self._modules.update({str(i): m for i, m in enumerate(modules)})

    def forward(self, x):
        for _, m in sorted(self.named_children(), key=lambda item: int(item[0])):
            x = m(x)
        return x


class SequentialChildren(SequentialSetattr):
    """children() de-duplicates the same way."""

    def forward(self, x):
        for m in self.children():
            x = m(x)
        return x


class SequentialSortedNames(SequentialSetattr):
    """Names sorted as text: "10" comes before "2", so from 11 modules on the order is wrong."""

    def forward(self, x):
        for name in sorted(self._modules):
            x = self._modules[name](x)
        return x


class SequentialForgotSuper(nn.Module):
    def __init__(self, *modules):
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        return x


# ---------------------------------------------------------------- Concat

class ConcatComposed(nn.Module):
    """d2l's notes: a 'parallel' block that composes the nets."""

    def __init__(self, net1, net2):
        super().__init__()
        self.net1, self.net2 = net1, net2

    def forward(self, x):
        return self.net2(self.net1(x))


class ConcatDim0(ConcatModuleList):
    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], dim=0)


class ConcatDim1(ConcatModuleList):
    def forward(self, x):
        return torch.cat([b(x) for b in self.branches], dim=1)


class ConcatTuple(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        self.nets = (net1, net2)

    def forward(self, x):
        return torch.cat([n(x) for n in self.nets], dim=-1)


class ConcatHidden(nn.Module):
    def __init__(self, net1, net2):
        super().__init__()
        object.__setattr__(self, "net1", net1)  # bypasses nn.Module.__setattr__: not registered
        self.net2 = net2

    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=-1)


class ConcatTwiceNet1(ConcatAddModule):
    def forward(self, x):
        return torch.cat([self.first(x), self.first(x)], -1)


# ---------------------------------------------------------------- Cruncher

class CruncherNNLinear(nn.Module):
    """nn.Linear's default init and orientation: final.weight is (1, dim), std 1/sqrt(3 dim)."""

    def __init__(self, dim, num_layers):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(dim, dim, bias=False) for _ in range(num_layers))
        self.final = nn.Linear(dim, 1, bias=False)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.final(x).squeeze(-1)


class _Layer(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = nn.Parameter(weight)

    def forward(self, x):
        return x @ self.weight


def cruncher_with(name, init=lambda d, o: torch.randn(d, o) / math.sqrt(d), step=lambda x, w: x @ w, relu=False,
                  squeeze=True, same_layer=False, plain_list=False):
    class Variant(nn.Module):
        def __init__(self, dim, num_layers):
            super().__init__()
            if same_layer:
                layers = [_Layer(init(dim, dim))] * num_layers
            else:
                layers = [_Layer(init(dim, dim)) for _ in range(num_layers)]
            self.layers = layers if plain_list else nn.ModuleList(layers)
            self.final = _Layer(init(dim, 1))

        def forward(self, x):
            for layer in self.layers:
                x = step(x, layer.weight)
                if relu:
                    x = torch.relu(x)
            out = step(x, self.final.weight)
            return out.squeeze(-1) if squeeze else out
    Variant.__name__ = Variant.__qualname__ = name
    return Variant


CruncherNoScale = cruncher_with("CruncherNoScale", init=lambda d, o: torch.randn(d, o))
CruncherOverDim = cruncher_with("CruncherOverDim", init=lambda d, o: torch.randn(d, o) / d)
CruncherUniform = cruncher_with("CruncherUniform", init=lambda d, o: (torch.rand(d, o) * 2 - 1) * math.sqrt(3 / d))
CruncherRelu = cruncher_with("CruncherRelu", relu=True)
CruncherTransposed = cruncher_with("CruncherTransposed",  # nn.Linear's orientation for the square layers
                                   step=lambda x, w: x @ w.T if w.shape[0] == w.shape[1] else x @ w)
CruncherNoSqueeze = cruncher_with("CruncherNoSqueeze", squeeze=False)
CruncherSameLayer = cruncher_with("CruncherSameLayer", same_layer=True)
CruncherPlainList = cruncher_with("CruncherPlainList", plain_list=True)
CruncherData = cruncher_with("CruncherData", step=lambda x, w: x @ w.data)


# ---------------------------------------------------------------- get_num_parameters

def count_state_dict(model):
    return sum(t.numel() for t in model.state_dict().values())


def count_with_duplicates(model):
    return sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))


def count_trainable(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_tensors(model):
    return len(list(model.parameters()))


def count_per_module(model):
    return sum(p.numel() for m in model.modules() for p in m.parameters(recurse=False))


def count_with_buffers(model):
    return sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())


def count_as_tensor(model):
    return torch.tensor(sum(p.numel() for p in model.parameters()))


def count_as_float(model):
    return float(sum(p.numel() for p in model.parameters()))


def count_one_level_down(model):
    """Each child's own parameters, a shared one once (issue 26: it passed every public check on flat models)."""
    return sum({id(p): p.numel() for child in model.children() for p in child.parameters(recurse=False)}.values())


def count_children(model):
    """Every child's parameters, deduplicated, but not the model's own."""
    return sum({id(p): p.numel() for child in model.children() for p in child.parameters()}.values())


def count_two_levels(model):
    """The model's own parameters, its children's and grandchildren's: two levels deep."""
    levels = [model, *model.children(), *(g for child in model.children() for g in child.children())]
    return sum({id(p): p.numel() for m in levels for p in m.parameters(recurse=False)}.values())


def count_after_unfreezing(model):
    for p in model.parameters():
        p.requires_grad_(True)
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- RunningMean

class RunningMeanEvalToo(nn.Module):
    """Updates in eval mode as well."""

    def __init__(self, num_features):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def update(self, x):
        with torch.no_grad():
            n = x.shape[0]
            self.count += n
            self.mean += (x.sum(0) - n * self.mean) / self.count

    def forward(self, x):
        self.update(x)
        return x - self.mean


class RunningMeanParameter(RunningMeanEvalToo):
    def __init__(self, num_features):
        nn.Module.__init__(self)
        self.mean = nn.Parameter(torch.zeros(num_features), requires_grad=False)
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        if self.training:
            self.update(x)
        return x - self.mean


class RunningMeanAttribute(RunningMeanEvalToo):
    def __init__(self, num_features):
        nn.Module.__init__(self)
        self.mean = torch.zeros(num_features)
        self.count = torch.zeros((), dtype=torch.long)

    def forward(self, x):
        if self.training:
            self.update(x)
        return x - self.mean


class RunningMeanLastBatch(RunningMeanEvalToo):
    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.mean.copy_(x.mean(0))
                self.count += x.shape[0]
        return x - self.mean


class RunningMeanOfBatchMeans(RunningMeanEvalToo):
    def __init__(self, num_features):
        super().__init__(num_features)
        self.batches = 0

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.batches += 1
                self.mean += (x.mean(0) - self.mean) / self.batches
                self.count += x.shape[0]
        return x - self.mean


class RunningMeanEMA(RunningMeanEvalToo):
    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.mean.mul_(0.9).add_(0.1 * x.mean(0))
                self.count += x.shape[0]
        return x - self.mean


class RunningMeanWithGraph(RunningMeanEvalToo):
    """No torch.no_grad(): the buffer becomes part of the graph."""

    def forward(self, x):
        if self.training:
            n = x.shape[0]
            self.count = self.count + n
            self.mean = self.mean + (x.sum(0) - n * self.mean) / self.count
        return x - self.mean


class RunningMeanFloatCount(RunningMeanEvalToo):
    def __init__(self, num_features):
        super().__init__(num_features)
        self.count = torch.zeros(())

    def forward(self, x):
        if self.training:
            self.update(x)
        return x - self.mean


class RunningMeanOldMean(RunningMeanEvalToo):
    def forward(self, x):
        out = x - self.mean
        if self.training:
            self.update(x)
        return out


class RunningMeanCountTurnsFloat(RunningMeanEvalToo):
    """Adds the batch size as a tensor made like x: the int64 count becomes float32 at the first update."""

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                n = x.new_tensor(x.shape[0])
                self.count = self.count + n
                self.mean += (x.sum(0) - n * self.mean) / self.count
        return x - self.mean


class RunningMeanCall(RunningMeanEvalToo):
    """Defines __call__ instead of forward: calling it works, hooks never run."""

    def forward(self, x):
        raise NotImplementedError

    def __call__(self, x):
        if self.training:
            self.update(x)
        return x - self.mean


class RunningMeanNotPersistent(RunningMeanEvalToo):
    def __init__(self, num_features):
        nn.Module.__init__(self)
        self.register_buffer("mean", torch.zeros(num_features), persistent=False)
        self.register_buffer("count", torch.zeros((), dtype=torch.long), persistent=False)

    def forward(self, x):
        if self.training:
            self.update(x)
        return x - self.mean


# ---------------------------------------------------------------- activation_shapes

def shapes_hooks_left(model, x):
    shapes = {}
    for name, m in model.named_modules():
        if name:
            m.register_forward_hook(lambda mod, i, out, name=name: shapes.__setitem__(name, tuple(out.shape)))
    model(x)
    return shapes


def shapes_top_level(model, x):
    shapes, handles = {}, []
    for name, m in model.named_children():
        handles.append(m.register_forward_hook(
            lambda mod, i, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return shapes


def _with_hooks(model, x, record, names=None):
    handles = []
    try:
        for name, m in (names or model.named_modules()):
            if name:
                handles.append(m.register_forward_hook(functools.partial(record, name)))
        model(x)
    finally:
        for h in handles:
            h.remove()


def shapes_torch_size(model, x):
    shapes = {}
    _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, out.shape))
    return shapes


def shapes_type_names(model, x):
    shapes = {}
    _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(type(mod).__name__ + name, tuple(out.shape)))
    return shapes


def shapes_with_root(model, x):
    shapes = {"": None}
    _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, tuple(out.shape)))
    shapes[""] = tuple(model(x).shape)
    return shapes


def shapes_no_finally(model, x):
    shapes, handles = {}, []
    for name, m in list(model.named_modules())[1:]:
        handles.append(m.register_forward_hook(
            lambda mod, i, out, name=name: shapes.__setitem__(name, tuple(out.shape))))
    model(x)
    for h in handles:
        h.remove()
    return shapes


def shapes_swallow_errors(model, x):
    shapes = {}
    try:
        _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, tuple(out.shape)))
    except RuntimeError:
        return {}
    return shapes


def shapes_first_call(model, x):
    shapes = {}
    _with_hooks(model, x, lambda name, mod, i, out: None if name in shapes else
                shapes.__setitem__(name, tuple(out.shape)))
    return shapes


def shapes_inputs(model, x):
    shapes = {}
    _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, tuple(i[0].shape)))
    return shapes


def shapes_in_eval(model, x):
    """Switches the model to eval mode for the measurement, and leaves it there."""
    model.eval()
    shapes = {}
    _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, tuple(out.shape)))
    return shapes


def shapes_in_train(model, x):
    model.train()
    shapes = {}
    _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, tuple(out.shape)))
    return shapes


def shapes_restores_the_top_flag(model, x):
    """Puts back the model's own flag only: model.train(was) sets every submodule to it, whatever each one was."""
    was = model.training
    model.eval()
    try:
        shapes = {}
        _with_hooks(model, x, lambda name, mod, i, out: shapes.__setitem__(name, tuple(out.shape)))
    finally:
        model.train(was)
    return shapes


def shapes_wrapped_forward(model, x):
    """No hooks: each submodule's forward replaced (on the instance) by one that records, then put back."""
    shapes, wrapped = {}, []
    try:
        for name, m in list(model.named_modules())[1:]:
            def forward(*args, _inner=m.forward, _name=name, **kwargs):
                out = _inner(*args, **kwargs)
                shapes[_name] = tuple(out.shape)
                return out
            m.forward = forward
            wrapped.append(m)
        model(x)
    finally:
        for m in wrapped:
            del m.forward
    return shapes


def shapes_patched_call(model, x):
    """No hooks: nn.Module.__call__ replaced for the length of one forward."""
    names = {id(m): name for name, m in model.named_modules() if name}
    shapes, call = {}, nn.Module.__call__

    def recording_call(self, *args, **kwargs):
        out = call(self, *args, **kwargs)
        if id(self) in names:
            shapes[names[id(self)]] = tuple(out.shape)
        return out
    nn.Module.__call__ = recording_call
    try:
        model(x)
    finally:
        nn.Module.__call__ = call
    return shapes


def shapes_global_hook_left(model, x):
    names = {id(m): name for name, m in model.named_modules() if name}
    shapes = {}

    def hook(module, inputs, output):
        if id(module) in names:
            shapes[names[id(module)]] = tuple(output.shape)
    module_module.register_module_forward_hook(hook)  # never removed
    model(x)
    return shapes


# ---------------------------------------------------------------- Quadratic

class QuadraticData(nn.Module):
    """The notes' mistake: .data in forward, so no gradient reaches W."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Parameter(torch.randn(out_features, in_features, in_features) / in_features)

    def forward(self, x):
        return torch.einsum("kij,bi,bj->bk", self.W.data, x, x)


class QuadraticBuffer(QuadraticData):
    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.register_buffer("W", torch.randn(out_features, in_features, in_features) / in_features)

    def forward(self, x):
        return torch.einsum("kij,bi,bj->bk", self.W, x, x)


class QuadraticPlainTensor(QuadraticData):
    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.W = (torch.randn(out_features, in_features, in_features) / in_features).requires_grad_()

    def forward(self, x):
        return torch.einsum("kij,bi,bj->bk", self.W, x, x)


class QuadraticIndexMixup(QuadraticBuffer):
    """Reads W as W[i, j, k]: fails on shapes, or (in == out) gives other values."""

    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.W = nn.Parameter(torch.randn(out_features, in_features, in_features) / in_features)

    def forward(self, x):
        return torch.einsum("ijk,bi,bj->bk", self.W, x, x)


class QuadraticDetachedX(QuadraticIndexMixup):
    def forward(self, x):
        return torch.einsum("kij,bi,bj->bk", self.W, x.detach(), x)


class QuadraticNoScale(QuadraticIndexMixup):
    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.W = nn.Parameter(torch.randn(out_features, in_features, in_features))

    def forward(self, x):
        return torch.einsum("kij,bi,bj->bk", self.W, x, x)


class QuadraticLayoutInOut(QuadraticIndexMixup):
    def __init__(self, in_features, out_features):
        nn.Module.__init__(self)
        self.W = nn.Parameter(torch.randn(in_features, in_features, out_features) / in_features)

    def forward(self, x):
        return torch.einsum("ijk,bi,bj->bk", self.W, x, x)


class QuadraticPatchingBackward(QuadraticData):
    """Hostile: .data in forward, and a forward that turns backward into a no-op so nothing can be checked."""

    def forward(self, x):
        torch.Tensor.backward = lambda *a, **k: None
        torch.autograd.backward = lambda *a, **k: None
        torch.autograd.grad = lambda outputs, inputs, *a, **k: tuple(torch.zeros_like(i) for i in inputs)
        return super().forward(x)


class _AlwaysClose(torch.Tensor):
    """A tensor subclass that claims to equal anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.Tensor.__eq__, torch.allclose, torch.equal):
            return True if func in (torch.allclose, torch.equal) else torch.ones(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


class QuadraticLying(QuadraticData):
    def forward(self, x):
        return torch.zeros(x.shape[0], self.W.shape[0]).as_subclass(_AlwaysClose)


class ConcatInPlace(ConcatModuleList):
    """Careless: overwrites its input."""

    def forward(self, x):
        out = super().forward(x)
        x.zero_()
        return out


class SequentialBorrowedForward(SequentialSetattr):
    """Not a subclass of nn.Sequential, but its forward (and the __iter__ it needs) taken from it."""
    forward = nn.Sequential.forward
    __iter__ = nn.Sequential.__iter__


class SequentialCall(SequentialSetattr):
    """__call__ instead of forward: model(x) works, every hook is skipped."""

    def __call__(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class QuadraticMisspelled(nn.Module):
    """forward misspelled: nn.Module's own forward is what runs."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.W = nn.Parameter(torch.randn(out_features, in_features, in_features) / in_features)

    def foward(self, x):
        return torch.einsum("kij,bi,bj->bk", self.W, x, x)


class SequentialNoneWhenEmpty(SequentialSetattr):
    """Feeds x to the first module only: with no modules there is no output at all."""
    def forward(self, x):
        out = None
        for module in self._modules.values():
            out = module(x if out is None else out)
        return out


class CruncherProductFirst(CruncherMultiDot):
    """Multiplies the square weights together first: functools.reduce of an empty list fails for 0 layers."""
    def forward(self, x):
        product = functools.reduce(torch.matmul, [layer.weight for layer in self.layers])
        return (x @ product @ self.final.weight).squeeze(-1)


# ---------------------------------------------------------------- shortcuts: a library call that does the whole job

def count_vector(model):
    return nn.utils.parameters_to_vector(model.parameters()).numel()


_p2v = nn.utils.parameters_to_vector  # an alias bound before any check runs


def count_vector_alias(model):
    return _p2v(model.parameters()).numel()


def count_flatten(model):
    return torch._utils._flatten_dense_tensors(list(model.parameters())).numel()


_flatten_c = torch._C._nn.flatten_dense_tensors  # the C function under _flatten_dense_tensors, bound beforehand


def count_flatten_c(model):
    return _flatten_c(list(model.parameters())).numel()


def shapes_private_export(model, x):
    """torch.export's private entry point, which export() calls."""
    from torch.export._trace import _export
    exported = _export(model, (x,), strict=False)
    return {node.name: tuple(node.meta["val"].shape) for node in exported.graph.nodes if "val" in node.meta}


def shapes_fx(model, x):
    """fx's ShapeProp: every node's output shape, no hook (node names turned back into dotted module names)."""
    from torch.fx.passes.shape_prop import ShapeProp
    traced = torch.fx.symbolic_trace(model)
    ShapeProp(traced).propagate(x)
    return {node.target: tuple(node.meta["tensor_meta"].shape) for node in traced.graph.nodes
            if node.op == "call_module"}


def shapes_export(model, x):
    exported = torch.export.export(model, (x,))
    return {node.name: tuple(node.meta["val"].shape) for node in exported.graph.nodes if "val" in node.meta}


class QuadraticBilinear(QuadraticRegistered):
    def forward(self, x):
        return F.bilinear(x, x, self.W)


class QuadraticTorchBilinear(QuadraticRegistered):
    def forward(self, x):
        return torch.bilinear(x, x, self.W, None)


_bilinear = F.bilinear  # a C function bound before the check: replacing the module attribute does not reach it


class QuadraticBilinearAlias(QuadraticRegistered):
    def forward(self, x):
        return _bilinear(x, x, self.W)


class QuadraticTrilinear(QuadraticRegistered):
    def forward(self, x):
        return torch._trilinear(x, self.W, x, [1, 3], [0], [1, 2], [2, 3])


class QuadraticAtenBilinear(QuadraticRegistered):
    """The aten operator itself, through torch.ops: no Python-level bilinear is called."""

    def forward(self, x):
        return torch.ops.aten.bilinear.default(x, x, self.W, None)


# A library call that does the exercise's whole job fails a public check whose message names the call.
SHORTCUTS = [
    W("get_num_parameters", count_vector, "plain_stack", "not call torch.nn.utils.parameters_to_vector"),
    W("get_num_parameters", count_vector_alias, "plain_stack", "not call torch.nn.utils.parameters_to_vector"),
    W("get_num_parameters", count_flatten, "plain_stack", "not call torch._utils._flatten_dense_tensors"),
    W("activation_shapes", shapes_fx, "nested_sequential", "not call torch.fx.Tracer.trace"),
    W("activation_shapes", shapes_export, "nested_sequential", "not call torch.export.export"),
    # F.bilinear is torch.bilinear (one C function): the message may give either name
    W("Quadratic", QuadraticBilinear, "values", "bilinear"),
    W("Quadratic", QuadraticTorchBilinear, "values", "not call torch.bilinear"),
    W("Quadratic", QuadraticBilinearAlias, "values", "bilinear"),
    W("Quadratic", QuadraticTrilinear, "values", "not call torch._trilinear"),
    W("Quadratic", QuadraticAtenBilinear, "values", "not call torch.ops.aten"),
    W("get_num_parameters", count_flatten_c, "plain_stack", "not call torch._C._nn.flatten_dense_tensors"),
    W("activation_shapes", shapes_private_export, "nested_sequential", "not call torch.export._trace._export"),
]


@pytest.mark.parametrize("wrong", SHORTCUTS, ids=ids(SHORTCUTS))
def test_shortcuts_are_refused_by_name(wrong):
    """Refused by a public check that names the call, and short of full marks with the hidden checks too."""
    assert_caught("modules", wrong, public_only=True)
    hidden = run_exercise(f"modules.{wrong.exercise}", *wrong.objs, hidden=True)
    assert hidden.score < hidden.points


class CruncherSequentialLayers(nn.Module):
    """self.layers an nn.Sequential: the same keys and values, but not the container the exercise asks for."""

    def __init__(self, dim, num_layers):
        super().__init__()
        self.layers = nn.Sequential(*[Linear(dim, dim) for _ in range(num_layers)])
        self.final = Linear(dim, 1)

    def forward(self, x):
        return self.final(self.layers(x)).squeeze(-1)


class QuadraticExtraBuffer(QuadraticRegistered):
    """A scratch buffer besides W (not persistent, so state_dict does not show it)."""

    def __init__(self, in_features, out_features):
        super().__init__(in_features, out_features)
        self.register_buffer("eye", torch.eye(in_features), persistent=False)


class SequentialThrowaway(SequentialSetattr):
    """Registers the modules, then lets a throwaway nn.Sequential run them: nn.Sequential does the whole job."""

    def forward(self, x):
        return nn.Sequential(*self._modules.values())(x)


class SequentialThrowawayForward(SequentialSetattr):
    """The same, calling .forward directly (no hooks run): still an nn.Sequential built of the modules."""

    def forward(self, x):
        return nn.Sequential(*self._modules.values()).forward(x)


class SequentialInner(nn.Module):
    """Keeps its modules in an inner nn.Sequential: parameters named inner.0.weight, and nn.Sequential's forward."""

    def __init__(self, *modules):
        super().__init__()
        self.inner = nn.Sequential(*modules)

    def forward(self, x):
        return self.inner(x)


class SequentialEmptyRunner(SequentialSetattr):
    """An empty nn.Sequential made in forward (it registers nothing) handed this module's own _modules, then called:
    nn.Sequential's code runs the modules."""

    def forward(self, x):
        runner = nn.Sequential()
        runner._modules = self._modules
        return runner(x)


class SequentialCallsItsForward(SequentialSetattr):
    """forward calls nn.Sequential.forward on itself (not taken by assignment), with an __iter__ of its own."""

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        return nn.Sequential.forward(self, x)


_SEQUENTIAL_FORWARD = nn.Sequential.forward  # bound before the check, as a notebook's import would


class SequentialCallsAnAlias(SequentialCallsItsForward):
    """The same through an alias bound at import time."""

    def forward(self, x):
        return _SEQUENTIAL_FORWARD(self, x)


THROWAWAY = [SequentialThrowaway, SequentialThrowawayForward, SequentialInner]


class ConcatWrongInTraining(nn.Module):
    """Right in eval mode only: in training mode it concatenates along the batch."""

    def __init__(self, net1, net2):
        super().__init__()
        self.net1, self.net2 = net1, net2

    def forward(self, x):
        return torch.cat([self.net1(x), self.net2(x)], dim=0 if self.training else -1)


def _cruncher_one_draw(spread, doc):
    """A Cruncher whose layers all get one (dim, dim) draw, spread(base, i) for layer i: never equal, never fresh."""
    class CruncherOneDraw(CruncherMultiDot):
        def __init__(self, dim, num_layers):
            super().__init__(dim, 0)
            base = torch.randn(dim, dim) / math.sqrt(dim)
            for i in range(num_layers):
                layer = Linear(dim, dim)
                with torch.no_grad():
                    layer.weight.copy_(spread(base, i))
                self.layers.append(layer)
    CruncherOneDraw.__doc__ = doc
    return CruncherOneDraw


CruncherOneDrawRearranged = _cruncher_one_draw(lambda base, i: base.roll(i, 0), "its rows rolled by i")
CruncherOneDrawScaled = _cruncher_one_draw(lambda base, i: base * (1 + i / 10), "scaled by 1 + i/10")


class RunningMeanPythonCount(nn.Module):
    """The true count in a Python int, copied into the buffer: right until a reloaded module trains again."""

    def __init__(self, num_features):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.n = 0

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.mean.mul_(self.n).add_(x.sum(0)).div_(self.n + x.shape[0])
                self.n += x.shape[0]
                self.count.fill_(self.n)
        return x - self.mean


class RunningMeanKeepsRows(nn.Module):
    """Every row kept in a Python list, the mean recomputed from all of them: memory without bound, and a reloaded
    module forgets the rows."""

    def __init__(self, num_features):
        super().__init__()
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.rows = []

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.rows.append(x.detach().clone())
                every = torch.cat(self.rows)
                self.mean.copy_(every.double().mean(0))
                self.count.fill_(every.shape[0])
        return x - self.mean


# Each names the check that must fail it, public where one catches it (the student sees it before grading), with
# words of its message. The mistakes the chapter warns about (a plain list, composing the nets, counting shared or
# buffered tensors, buffers vs parameters vs attributes, hooks left, torch.Size, .data) are caught by public checks
# whose messages name them; so is what the exercise's text asks (no modules, any leading dimensions, 0 layers, fresh
# weights, a module called twice, W's scale, layers an nn.ModuleList, nothing but W).
WRONG = [
    # MySequential
    W("MySequential", SequentialPlainList, "registers_each_module_under_its_index", "not registered"),
    W("MySequential", SequentialNamedLayers, "registers_each_module_under_its_index",
      "parameter names are ['layer0.weight'"),  # layer{i} instead of str(i)
    W("MySequential", SequentialReversed, "runs_the_modules_in_order", "values differ"),
    W("MySequential", SequentialModuleList, "registers_each_module_under_its_index",
      "parameter names are ['layers.0.weight'"),  # an inner ModuleList: layers.0.weight, not 0.weight
    W("MySequential", SequentialSubclass, "registers_each_module_under_its_index",
      "is a subclass of torch.nn.modules.container.Sequential"),
    W("MySequential", SequentialCopies, "registers_each_module_under_its_index", "not copies"),
    W("MySequential", SequentialLastOnly, "runs_the_modules_in_order", "values differ"),
    W("MySequential", SequentialBrokenGetattr, "runs_the_modules_in_order", "RecursionError", status=ERROR),
    W("MySequential", SequentialForgotSuper, "registers_each_module_under_its_index",
      "cannot assign module before Module.__init__() call", status=ERROR),
    # an nn.Sequential built of the modules, in forward (called or .forward) or kept as a child: expect_sequential's
    # `sequentials_built` (the scenario's module-registration hook) names it in the public checks
    *(W("MySequential", obj, "runs_the_modules_in_order", "builds a torch.nn.Sequential") for obj in THROWAWAY),
    *(W("MySequential", obj, "runs_the_modules_in_order", "runs torch.nn.Sequential's forward")
      for obj in (SequentialEmptyRunner, SequentialCallsItsForward, SequentialCallsAnAlias)),
    W("MySequential", SequentialNoneWhenEmpty, "no_modules_returns_x", "got NoneType"),
    W("MySequential", SequentialBorrowedForward, "runs_the_modules_in_order",
      "takes forward = torch.nn.Sequential.forward"),
    W("MySequential", SequentialCall, "runs_the_modules_in_order", "replaces __call__"),
    # children() / named_children() yield a module given twice once: nn.Sequential runs it twice
    W("MySequential", SequentialNamedChildren, "a_module_given_twice", "object given twice"),
    W("MySequential", SequentialChildren, "a_module_given_twice", "object given twice"),
    # names sorted as text: "10" before "2"
    W("MySequential", SequentialSortedNames, "eleven_modules_or_more", "12 modules"),
    # Concat
    W("Concat", ConcatComposed, "does_not_compose_the_nets", "net2(net1(x))"),
    W("Concat", ConcatDim0, "does_not_compose_the_nets", "concatenated along dim 0"),
    W("Concat", ConcatDim1, "leading_dimensions", "Sizes of tensors must match except in dimension 1",
      status=ERROR),  # dim=1 is the last dim only for 2-d inputs
    W("Concat", ConcatTuple, "both_nets_are_registered", "misses net1's parameters"),  # a plain tuple hides them
    W("Concat", ConcatHidden, "both_nets_are_registered", "misses net1's parameters"),
    W("Concat", ConcatTwiceNet1, "concatenates_the_two_outputs", "has shape (5, 8), expected (5, 6)"),
    W("Concat", ConcatInPlace, "does_not_compose_the_nets", "changed its input x in place"),
    W("Concat", ConcatWrongInTraining, "concatenates_the_two_outputs", "Sizes of tensors must match except in "
      "dimension 0", status=ERROR),  # raised in training mode, which every check but this one skipped
    # Cruncher
    W("Cruncher", CruncherNNLinear, "state_dict_keys_and_shapes",
      "state_dict()['final.weight'] has shape (1, 8), expected (8, 1)"),
    W("Cruncher", CruncherNoScale, "weights_are_randn_over_sqrt_dim", "expected 0.04419 (randn(...) / sqrt(dim))"),
    W("Cruncher", CruncherOverDim, "weights_are_randn_over_sqrt_dim", "expected 0.04419 (randn(...) / sqrt(dim))"),
    W("Cruncher", CruncherUniform, "weights_are_randn_over_sqrt_dim", "draw with torch.randn"),
    W("Cruncher", CruncherRelu, "output_values_and_shape", "values differ"),
    W("Cruncher", CruncherTransposed, "output_values_and_shape", "values differ"),
    W("Cruncher", CruncherNoSqueeze, "output_values_and_shape", "has shape (5, 1), expected (5,)"),
    W("Cruncher", CruncherSameLayer, "each_layer_its_own_weight", "parameters are ['layers.0.weight', 'final.weight']"),
    W("Cruncher", CruncherPlainList, "state_dict_keys_and_shapes", "state_dict keys are ['final.weight']"),
    W("Cruncher", CruncherData, "gradients_reach_the_weights", "no gradient reached it"),
    W("Cruncher", CruncherProductFirst, "zero_layers", "reduce() of empty iterable", status=ERROR),
    W("Cruncher", CruncherSequentialLayers, "state_dict_keys_and_shapes", "the exercise asks for an nn.ModuleList"),
    W("Cruncher", CruncherOneDrawRearranged, "each_layer_its_own_weight", "rearranged: one draw shared by two layers"),
    W("Cruncher", CruncherOneDrawScaled, "each_layer_its_own_weight", "are correlated (r = 1.00)"),
    # RunningMean: state outside the buffers, seen once a reloaded module trains again
    W("RunningMean", RunningMeanPythonCount, "restored_from_state_dict", "count is 5, expected 14"),
    W("RunningMean", RunningMeanKeepsRows, "restored_from_state_dict", "count is 5, expected 14"),
    # get_num_parameters
    W("get_num_parameters", count_state_dict, "tied_embedding_and_head", "expected 50"),  # a tied weight twice
    W("get_num_parameters", count_state_dict, "buffers_do_not_count", "returned 33, expected 24"),  # and buffers
    W("get_num_parameters", count_with_duplicates, "tied_embedding_and_head", "expected 50"),
    # counting a layer used twice twice gives 2x the answer: the message says 2.00x, as grader.expect does
    W("get_num_parameters", count_with_duplicates, "module_used_twice", "2.00×"),
    W("get_num_parameters", count_trainable, "frozen_parameters_count", "returned 10, expected 26"),
    W("get_num_parameters", count_tensors, "plain_stack", "returned 4, expected 26"),  # tensors, not numbers
    W("get_num_parameters", count_per_module, "tied_embedding_and_head", "returned 90, expected 50"),
    W("get_num_parameters", count_with_buffers, "buffers_do_not_count", "returned 33, expected 24"),
    W("get_num_parameters", count_as_tensor, "plain_stack", "should be int, got int64 tensor"),
    W("get_num_parameters", count_as_float, "plain_stack", "should be int, got float 26.0"),
    W("get_num_parameters", count_after_unfreezing, "frozen_parameters_count", "changed the model's parameters"),
    # the text says nested models: every level of the tree counts, the model's own parameters too
    W("get_num_parameters", count_one_level_down, "every_level_counts", "returned 0, expected 51"),
    W("get_num_parameters", count_children, "every_level_counts", "returned 48, expected 51"),
    W("get_num_parameters", count_two_levels, "every_level_counts", "returned 15, expected 51"),
    # RunningMean
    W("RunningMean", RunningMeanEvalToo, "frozen_in_eval_mode", "eval mode"),
    W("RunningMean", RunningMeanParameter, "buffers_not_parameters", "registered as a parameter"),
    W("RunningMean", RunningMeanAttribute, "buffers_not_parameters", "plain tensor attribute"),
    W("RunningMean", RunningMeanLastBatch, "exact_mean_in_training", "not of the last batch"),
    W("RunningMean", RunningMeanOfBatchMeans, "exact_mean_in_training", "values differ"),
    W("RunningMean", RunningMeanEMA, "exact_mean_in_training", "values differ"),
    W("RunningMean", RunningMeanWithGraph, "exact_mean_in_training", "part of the autograd graph"),
    W("RunningMean", RunningMeanFloatCount, "buffers_not_parameters", "`count` has dtype torch.float32"),
    W("RunningMean", RunningMeanOldMean, "exact_mean_in_training", "the mean after this batch's update"),
    W("RunningMean", RunningMeanNotPersistent, "buffers_not_parameters", "state_dict keys are [], expected"),
    # count stays int64 after updates, not only before the first (the check read only the start)
    W("RunningMean", RunningMeanCountTurnsFloat, "exact_mean_in_training", "`count` has dtype torch.float32"),
    W("RunningMean", RunningMeanCall, "exact_mean_in_training", "replaces __call__"),
    # activation_shapes
    W("activation_shapes", shapes_hooks_left, "hooks_are_removed", "hook(s) attached"),
    W("activation_shapes", shapes_top_level, "nested_sequential", "nested"),
    W("activation_shapes", shapes_torch_size, "nested_sequential", "torch.Size"),
    W("activation_shapes", shapes_type_names, "nested_sequential", "unexpected ['Linear0'"),
    W("activation_shapes", shapes_with_root, "nested_sequential", "includes the model itself"),
    W("activation_shapes", shapes_no_finally, "hooks_are_removed_when_forward_raises", "hook(s) attached"),
    W("activation_shapes", shapes_swallow_errors, "hooks_are_removed_when_forward_raises", "got no exception"),
    W("activation_shapes", shapes_first_call, "shared_and_unused_modules", "['shared'] is (7, 5), expected (3, 5)"),
    W("activation_shapes", shapes_inputs, "nested_sequential", "['0'] is (5, 3), expected (5, 8)"),
    W("activation_shapes", shapes_global_hook_left, "hooks_are_removed", "global module hook(s) registered"),
    # the method the exercise asks for: a forward hook reads each output (the Scaled modules note none attached)
    W("activation_shapes", shapes_wrapped_forward, "shapes_come_from_forward_hooks", "['1', '2.0'] ran with no forward hook"),
    W("activation_shapes", shapes_patched_call, "shapes_come_from_forward_hooks", "['1', '2.0'] ran with no forward hook"),
    # a function that inspects a model leaves every submodule's train/eval mode as the caller left it
    W("activation_shapes", shapes_in_eval, "leaves_train_and_eval_mode_as_they_were", "(training -> eval)"),
    W("activation_shapes", shapes_in_train, "leaves_train_and_eval_mode_as_they_were", "(eval -> training)"),
    W("activation_shapes", shapes_restores_the_top_flag, "leaves_train_and_eval_mode_as_they_were",
      "'1' (eval -> training)"),
    # Quadratic
    W("Quadratic", QuadraticData, "gradients_for_W_and_x", "no gradient reached it"),
    W("Quadratic", QuadraticBuffer, "parameter_W", "W is a buffer, not a parameter"),
    W("Quadratic", QuadraticPlainTensor, "parameter_W", "parameters are [], expected [('W', (2, 3, 3))]"),
    W("Quadratic", QuadraticIndexMixup, "parameter_W", "einsum()", status=ERROR),
    W("Quadratic", QuadraticDetachedX, "gradients_for_W_and_x", "the gradient of the input x"),
    W("Quadratic", QuadraticNoScale, "initial_scale", "expected 0.025"),
    W("Quadratic", QuadraticLayoutInOut, "parameter_W", "parameters are [('W', (3, 3, 2))]"),
    W("Quadratic", QuadraticPatchingBackward, "gradients_for_W_and_x", "no gradient reached it"),
    W("Quadratic", QuadraticLying, "values", "should be a tensor, got _AlwaysClose"),
    W("Quadratic", QuadraticExtraBuffer, "parameter_W", "registers ['eye'] besides W"),
    W("Quadratic", QuadraticMisspelled, "values", "has no method named forward"),
]


def _wrong_ids(entries) -> list[str]:
    """ids() for a list that holds pytest.param entries (an xfail) beside plain Wrong ones."""
    return ids(e.values[0] if hasattr(e, "values") else e for e in entries)


@pytest.mark.parametrize("wrong", WRONG, ids=_wrong_ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    assert_caught("modules", wrong)



def test_a_hanging_forward_times_out():
    class Hangs(SequentialSetattr):
        def forward(self, x):
            while True:
                pass

    r = run_exercise("modules.MySequential", Hangs, timeout=1)
    assert r.status == "timeout" and r.score < r.points
    assert [c.name for c in r.checks if c.status == "timeout"] == ["runs_the_modules_in_order",
                                                                   "gradients_reach_every_module",
                                                                   "no_modules_returns_x"]


def test_a_broken_getattr_ends_in_a_clear_error():
    r = run_exercise("modules.MySequential", SequentialBrokenGetattr, hidden=True)
    failing = [c for c in r.checks if not c.passed]
    assert r.status == "error" and len(failing) >= 2
    assert all(c.message.startswith("RecursionError") and "__getattr__" in c.message for c in failing)


def test_patching_autograd_in_forward_changes_no_verdict():
    """A correct Quadratic whose forward replaces torch's backward and grad still passes (scenarios bound them at
    import), and a wrong one that does the same still fails: the verdict never rests on the patched functions."""
    class PatchingButRight(QuadraticRegistered):
        def forward(self, x):
            torch.autograd.grad = lambda outputs, inputs, *a, **k: tuple(torch.zeros_like(i) for i in inputs)
            torch.Tensor.backward = lambda *a, **k: None
            return super().forward(x)

    assert run_exercise("modules.Quadratic", PatchingButRight, hidden=True).status == "passed"
    assert run_exercise("modules.Quadratic", QuadraticPatchingBackward, hidden=True).status == "failed"


def test_a_stub_is_not_implemented():
    class Stub(nn.Module):
        def __init__(self, *modules):
            super().__init__()
            raise NotImplementedError

        def forward(self, x):
            raise NotImplementedError

    def stub(model, x):
        raise NotImplementedError

    assert run_exercise("modules.MySequential", Stub, hidden=True).status == "not_implemented"
    assert run_exercise("modules.activation_shapes", stub, hidden=True).status == "not_implemented"


def test_nested_counts_hold_for_any_salt():
    """The hidden nested check draws its widths from the grading run's salt: it fails counting one or two levels down
    and passes a correct count, whatever the salt."""
    from grader import registry
    from grader.runner import run_check
    ex = registry.load(hidden=True).get("modules.get_num_parameters")
    check = next(c for c in ex.checks if c.name == "nested_other_widths")
    for salt in ("a", "b", "c"):
        for wrong in (count_one_level_down, count_children, count_two_levels):
            assert run_check(ex, check, (wrong,), None, salt=salt).status == "failed", (salt, wrong.__name__)
        assert run_check(ex, check, (count_every_module_own,), None, salt=salt).status == "passed", salt
