"""Chapter 06 scenarios: the student's modules built, run and described here, as plain data.

Each scenario builds the student's class (or a model for the student's function) from plain arguments,
drives it the way a training loop would (forward, backward, train/eval, `.to()`), and reports what it
saw: parameter and buffer names, shapes and values, state_dict keys, outputs, gradients, hooks left.
The checks compute every expected value themselves, from this data.

A module can override any of its methods, so what a scenario reads it reads through nn.Module's own
methods, bound here at import (`_named_parameters(model)`, not `model.named_parameters()`), and
backward runs through `torch.autograd.backward` as it was at import: a student's forward that patches
`torch.Tensor.backward` or `torch.autograd.grad` changes nothing a scenario measures.

The special models (tied weights, a module used twice, frozen layers, named submodules) are built by
the functions in MODELS, which the checks may call too: the check builds the same model from the same
name, arguments and seed, and computes the expected answer from it.
"""
from collections import OrderedDict

import torch
import torch.nn.modules.module as _module_module
from torch import nn

from . import common

_Tensor, _Parameter = torch.Tensor, nn.Parameter
_named_parameters = nn.Module.named_parameters
_named_buffers = nn.Module.named_buffers
_named_children = nn.Module.named_children
_named_modules = nn.Module.named_modules
_state_dict = nn.Module.state_dict
_registration_hook = _module_module.register_module_module_registration_hook
_Sequential = nn.Sequential
_register_forward_hook = nn.Module.register_forward_hook
_unimplemented_forward = nn.Module.forward  # what a class that defines no forward inherits
_load_state_dict = nn.Module.load_state_dict
_train = nn.Module.train
_to = nn.Module.to
_backward = torch.autograd.backward
_equal = torch.equal
_manual_seed = torch.manual_seed
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


# ---------------------------------------------------------------- reading a module as data

def _plain(x):
    """A tensor as a detached copy (only exact torch.Tensor / Parameter: a subclass stays as it is)."""
    if type(x) in (_Tensor, _Parameter):
        return x.detach().clone()
    return x


def _grad_of(p):
    g = p.grad
    return None if g is None else _plain(g)


def describe(model):
    """Parameters (names, shapes, values, requires_grad, grads), buffers, state_dict and children, via nn.Module."""
    params = list(_named_parameters(model))
    buffers = list(_named_buffers(model))
    return {
        "parameters": [(name, tuple(p.shape)) for name, p in params],
        "parameter_values": {name: _plain(p) for name, p in params},
        "requires_grad": {name: bool(p.requires_grad) for name, p in params},
        "grads": {name: _grad_of(p) for name, p in params},
        "buffers": [(name, tuple(b.shape)) for name, b in buffers],
        "state_dict": {k: _plain(v) for k, v in _state_dict(model).items()},
        "children": [name for name, _ in _named_children(model)],
        "child_classes": {name: f"{type(c).__module__}.{type(c).__qualname__}" for name, c in _named_children(model)},
    }


def hooks_attached(model):
    """Forward and backward hooks (and pre-hooks) attached to the model or any of its submodules."""
    return sum(len(getattr(m, name, None) or ()) for _, m in _named_modules(model) for name in _MODULE_HOOKS)


def global_hooks():
    """Hooks registered for every module at once (nn.modules.module.register_module_forward_hook and kin)."""
    return sum(len(getattr(_module_module, name, None) or ()) for name in _GLOBAL_HOOKS)


def _unchanged(x, saved):
    """Whether x still holds what `saved` copied (same shape, same values)."""
    return tuple(x.shape) == tuple(saved.shape) and bool(_equal(x.detach(), saved))


def _graph_nodes(y):
    """The class names of the autograd nodes behind y (sorted), which say what library calls built it."""
    found, seen = set(), set()
    stack = [getattr(y, "grad_fn", None)] if type(y) in (_Tensor, _Parameter) else []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        found.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in getattr(node, "next_functions", ()))
    return sorted(found)


def defines_forward(model):
    """Whether the model's class defines forward (nn.Module's own raises NotImplementedError when called)."""
    return getattr(type(model), "forward", _unimplemented_forward) is not _unimplemented_forward


def called(model, *args):
    """model(*args) with a forward hook attached, and how many times the hook ran: nn.Module.__call__ runs it around
    forward, a class that replaces __call__ skips it (and every other hook)."""
    runs = []
    handle = _register_forward_hook(model, lambda module, inputs, output: runs.append(1))
    try:
        return model(*args), len(runs)
    finally:
        handle.remove()


def _output_and_backward(model, x, g):
    """model(x), then backward of (output * g).sum() when the output is a tensor of g's shape that has a graph.

    Also whether the forward left its input as it was (a module must not write into its input), and whether the call
    went through nn.Module.__call__ to forward (`hooks_ran`); a class without forward is not called (`no_forward`)."""
    if not defines_forward(model):
        return {"no_forward": True, "output": None, "input_unchanged": True, "graph": [], "hooks_ran": 0}
    saved = x.detach().clone()
    y, hooks_ran = called(model, x)
    report = {"output": _plain(y), "input_unchanged": _unchanged(x, saved), "graph": _graph_nodes(y),
              "hooks_ran": hooks_ran}
    # An input written in place can break the graph's saved tensors: no backward then, the check names the write.
    if (report["input_unchanged"] and type(y) in (_Tensor, _Parameter) and tuple(y.shape) == tuple(g.shape)
            and y.requires_grad):
        _backward([y], [g.to(y.dtype)])
    del y
    return report


# ---------------------------------------------------------------- special models, by name

class Residual(nn.Module):
    """x + ff(norm(x)): a block whose submodules have names, not numbers."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Tower(nn.Module):
    """An input layer, `depth` residual blocks and a head: qualified names like `blocks.1.ff.0`."""

    def __init__(self, dim_in, dim, hidden, depth, dim_out):
        super().__init__()
        self.embed = nn.Linear(dim_in, dim)
        self.blocks = nn.ModuleList([Residual(dim, hidden) for _ in range(depth)])
        self.head = nn.Sequential(OrderedDict(norm=nn.LayerNorm(dim), out=nn.Linear(dim, dim_out)))

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Twice(nn.Module):
    """One Linear run on the whole batch, then again on its first `rows` rows; an unused layer beside it."""

    def __init__(self, dim, rows):
        super().__init__()
        self.shared = nn.Linear(dim, dim)
        self.unused = nn.Linear(dim, 3)
        self.rows = rows

    def forward(self, x):
        return self.shared(self.shared(x)[: self.rows])


class Nested(nn.Module):
    """A parameter of the model's own (`scale`) beside submodules nested three deep: every level holds parameters."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        inner = nn.Sequential(nn.Linear(dim, 2 * dim), nn.LayerNorm(2 * dim))
        self.body = nn.Sequential(nn.Linear(dim, dim), nn.Sequential(nn.ReLU(), inner))

    def forward(self, x):
        return self.body(x * self.scale)


_RAN = []  # (Scaled module, whether a forward hook was attached when its forward ran), for shapes_report


class Scaled(nn.Module):
    """x * factor; notes whether a forward hook (its own or a global one) was attached when its forward ran: however
    activation_shapes reaches the outputs, this forward runs, and a method without hooks shows here."""

    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        hooked = bool(self.__dict__.get("_forward_hooks")) or bool(_module_module._global_forward_hooks)
        _RAN.append((self, hooked))
        return x * self.factor


def scaled_chain(dim_in, dim, dim_out):
    """Linear, Scaled, then a nested Sequential(Scaled, ReLU) and a Linear: Scaled modules at two depths."""
    return nn.Sequential(nn.Linear(dim_in, dim), Scaled(2.0), nn.Sequential(Scaled(0.5), nn.ReLU()),
                         nn.Linear(dim, dim_out))


def tied_lm(vocab, dim, bias=False):
    """Embedding and output layer sharing one (vocab, dim) weight, as in GPT-2: Sequential(embedding, head)."""
    embedding = nn.Embedding(vocab, dim)
    head = nn.Linear(dim, vocab, bias=bias)
    head.weight = embedding.weight
    return nn.Sequential(embedding, head)


def reused(dim, times):
    """The same Linear(dim, dim) run `times` times, with a ReLU between uses."""
    layer = nn.Linear(dim, dim)
    parts = []
    for i in range(times):
        parts += [layer] if i == 0 else [nn.ReLU(), layer]
    return nn.Sequential(*parts)


def frozen(specs, frozen_indices):
    """Sequential of the specs with every parameter of the modules at `frozen_indices` set requires_grad=False."""
    model = nn.Sequential(*[common.build(s) for s in specs])
    for i in frozen_indices:
        for p in model[i].parameters():
            p.requires_grad_(False)
    return model


MODELS = {
    "spec": common.build,
    "tied_lm": tied_lm,
    "reused": reused,
    "frozen": frozen,
    "tower": Tower,
    "twice": Twice,
    "nested": Nested,
    "scaled": scaled_chain,
}


def build_model(name, args, seed):
    """The model MODELS[name](*args), its parameters drawn after torch.manual_seed(seed)."""
    _manual_seed(seed)
    return MODELS[name](*args)


# ---------------------------------------------------------------- MySequential and Concat

_CONTAINERS_MODULE = _Sequential.__module__  # torch.nn.modules.container


def borrowed_from_containers(cls):
    """{"forward": "Sequential.forward"} when a class (or a base of its own, not torch's) takes its forward or __call__
    from torch's containers by assignment (`forward = nn.Sequential.forward`): their code doing the job without the
    class subclassing them. (A borrowed __iter__ or __len__ is a helper, not the job.)"""
    found = {}
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch.") or klass.__module__ == "builtins":
            continue
        for name in ("forward", "__call__"):
            fn = getattr(vars(klass).get(name), "__func__", vars(klass).get(name))
            if callable(fn) and getattr(fn, "__module__", None) == _CONTAINERS_MODULE:
                found.setdefault(name, getattr(fn, "__qualname__", name))
    return found


_SEQUENTIAL_FORWARD = _Sequential.forward
_WATCH_NAME = "_grader_sequential_watch"
# Sequential.forward's code while a scenario watches it: the original (a copy of the function) runs, and a call on a
# Sequential that is none of the modules the scenario gave is counted. The watch sits in the containers module's
# globals, since swapped code keeps the function's globals and has no closure to hold it in.
_WATCHING_FORWARD = compile(
    f"def forward(self, *args, **kwargs):\n"
    f"    given, ran, original = {_WATCH_NAME}\n"
    f"    if id(self) not in given:\n"
    f"        ran.append(type(self).__qualname__)\n"
    f"    return original(self, *args, **kwargs)\n", "<grader: Sequential.forward watched>", "exec").co_consts[0]


class _SequentialForwardWatch:
    """For the length of a `with` block, every run of nn.Sequential.forward on an object that is not among `given`
    (the modules a scenario built, and what they hold) is counted in `ran`: the student's own code calling
    Sequential.forward on itself (`nn.Sequential.forward(self, x)`, an alias bound beforehand included), or an
    nn.Sequential made in forward and handed the modules, does the whole job. Torch's own code is swapped, not an
    attribute, so no alias escapes."""

    def __init__(self, given):
        self.given = {id(m) for g in given for m in g.modules()}
        self.ran = []

    def __enter__(self):
        fn = _SEQUENTIAL_FORWARD
        self._code = fn.__code__
        original = type(fn)(self._code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        fn.__globals__[_WATCH_NAME] = (self.given, self.ran, original)
        fn.__code__ = _WATCHING_FORWARD
        return self

    def __exit__(self, *exc):
        _SEQUENTIAL_FORWARD.__code__ = self._code
        _SEQUENTIAL_FORWARD.__globals__.pop(_WATCH_NAME, None)
        return False


def build_repeating(specs, seed, repeats=()):
    """common.build_all(specs, seed), then for each (j, i) in `repeats` module j replaced by module i: one module
    object given twice, as in Sequential(layer, ReLU(), layer). Module j is built first and dropped, so every
    other module draws the same numbers as without repeats."""
    modules = common.build_all(specs, seed)
    for j, i in repeats:
        modules[j] = modules[i]
    return modules


def sequential_report(MySequential, specs, x, g, seed, run=True, repeats=()):
    """MySequential(*modules built from specs): description, output on x, gradients of (output * g).sum().

    Also whether each module given is one of its children (the very object), and its classes (MRO).
    With run=False, the model is only built and described (no forward). `repeats`: see build_repeating.
    """
    modules = build_repeating(specs, seed, repeats)
    # Every nn.Sequential that registers modules while the student's code runs: one built of the modules
    # given (in __init__ or in forward) does the whole job; a subclass of nn.Sequential is the model itself.
    built = set()
    handle = _registration_hook(lambda module, name, sub: built.add(id(module)) if isinstance(module, _Sequential)
                                else None)
    try:
        with _SequentialForwardWatch(modules) as watch:
            model = MySequential(*modules)
            children = [child for _, child in _named_children(model)]
            report = {"classes": [f"{c.__module__}.{c.__qualname__}" for c in type(model).__mro__],
                      "kept": [any(child is m for child in children) for m in modules],
                      "borrowed": borrowed_from_containers(type(model))}
            if run:
                report.update(_output_and_backward(model, x, g))
    finally:
        handle.remove()
    built.discard(id(model))
    report["sequentials_built"] = len(built)
    report["sequential_forward_ran"] = sorted(set(watch.ran))
    report.update(describe(model))
    report["module_grads"] = {f"{i}.{name}": _grad_of(p) for i, m in enumerate(modules)
                              for name, p in _named_parameters(m)}
    del model, modules, children
    return report


def sequential_eval_report(MySequential, specs, x, seed):
    """MySequential(*modules) switched to eval(): the training flag of each module given, and the output."""
    modules = common.build_all(specs, seed)
    model = MySequential(*modules)
    _train(model, False)
    report = {"children_training": [bool(m.training) for m in modules], "output": _plain(model(x))}
    del model, modules
    return report


def sequential_dtype_report(MySequential, specs, x, seed):
    """MySequential(*modules).to(x.dtype): the dtypes of the modules' parameters afterwards, and the output."""
    modules = common.build_all(specs, seed)
    model = MySequential(*modules)
    _to(model, x.dtype)
    report = {"dtypes": [str(p.dtype) for m in modules for p in m.parameters()], "output": _plain(model(x))}
    report["parameter_values"] = {f"{i}.{name}": _plain(p) for i, m in enumerate(modules)
                                  for name, p in _named_parameters(m)}
    del model, modules
    return report


def concat_report(Concat, spec1, spec2, x, g, seed, same=False, training=False):
    """Concat(net1, net2) (net2 is net1 when `same`), in training mode or not: output on x, gradients of
    (output * g).sum() for each net.

    `registered` says, for each net, whether all its parameters are among the model's parameters.
    """
    net1, net2 = common.build_all([spec1, spec2], seed)
    if same:
        net2 = net1
    model = Concat(net1, net2)
    _train(model, training)
    seen = {id(p) for _, p in _named_parameters(model)}
    report = {"registered": [all(id(p) in seen for p in net.parameters()) for net in (net1, net2)],
              "nets_training": [bool(net1.training), bool(net2.training)]}
    report.update(_output_and_backward(model, x, g))
    report.update(describe(model))
    report["net_grads"] = [{name: _grad_of(p) for name, p in _named_parameters(net)} for net in (net1, net2)]
    del model, net1, net2
    return report


# ---------------------------------------------------------------- Cruncher

def cruncher_report(Cruncher, dim, num_layers, x, g, seed, dtype=None):
    """Cruncher(dim, num_layers) made after manual_seed(seed) (and moved to `dtype`): description, output, grads."""
    _manual_seed(seed)
    model = Cruncher(dim, num_layers)
    if dtype is not None:
        _to(model, dtype)
    report = describe(model)  # the weights as they were before any gradient
    report.update(_output_and_backward(model, x, g))
    report["grads"] = {name: _grad_of(p) for name, p in _named_parameters(model)}
    del model
    return report


# ---------------------------------------------------------------- get_num_parameters

def count_report(get_num_parameters, name, args, seed):
    """get_num_parameters(model) for the model MODELS[name](*args), and whether the call left it as it was."""
    model = build_model(name, args, seed)
    before = [(n, p.requires_grad) for n, p in _named_parameters(model, remove_duplicate=False)]
    count = get_num_parameters(model)
    after = [(n, p.requires_grad) for n, p in _named_parameters(model, remove_duplicate=False)]
    del model
    return {"count": count, "unchanged": before == after}


# ---------------------------------------------------------------- RunningMean

def _where(model, name):
    """Where a module keeps `name`: "buffer", "parameter", "attribute" (a plain attribute), or "missing"."""
    if name in dict(_named_buffers(model, recurse=False)):
        return "buffer"
    if name in dict(_named_parameters(model, recurse=False)):
        return "parameter"
    if name in vars(model):
        return "attribute"
    return "missing"


def _stored(model, name):
    """The tensor the module keeps under `name`, wherever it keeps it (None when it keeps none)."""
    for table in (dict(_named_buffers(model, recurse=False)), dict(_named_parameters(model, recurse=False)),
                  vars(model)):
        if name in table:
            value = table[name]
            return value if isinstance(value, _Tensor) else None
    return None


def _state(model):
    mean, count = _stored(model, "mean"), _stored(model, "count")
    return {"mean": _plain(mean), "count": _plain(count),
            "mean_requires_grad": bool(getattr(mean, "requires_grad", False)),
            "mean_has_graph": getattr(mean, "grad_fn", None) is not None}


def running_mean_report(RunningMean, num_features, steps):
    """RunningMean(num_features) driven through `steps`, a list of ("train" or "eval", batch) pairs.

    Before the steps: where `mean` and `count` live, parameters, buffers, state_dict. After each step:
    the mode, the output, and `mean` and `count` as stored. Training batches require grad, as activations do.
    """
    model = RunningMean(num_features)
    report = {"where": {name: _where(model, name) for name in ("mean", "count")}, "start": _state(model)}
    report.update(describe(model))
    report["steps"] = []
    for mode, batch in steps:
        _train(model, mode == "train")
        x = batch.detach().clone().requires_grad_(mode == "train")
        if not defines_forward(model):
            report["no_forward"] = True
            break
        y, hooks_ran = called(model, x)
        report["steps"].append({"mode": mode, "output": _plain(y), "input_unchanged": _unchanged(x, batch),
                                "hooks_ran": hooks_ran, **_state(model)})
        del x, y
    del model
    return report


def running_mean_reload_report(RunningMean, num_features, train_batches, x, more=None):
    """Train one RunningMean on the batches, load its state_dict into a fresh one: the fresh one's eval output on x,
    and (with `more`) its state after training on one more batch: a resumed run goes on from the state_dict alone."""
    trained = RunningMean(num_features)
    _train(trained, True)
    for batch in train_batches:
        trained(batch)
    fresh = RunningMean(num_features)
    _load_state_dict(fresh, _state_dict(trained))
    _train(fresh, False)
    report = {"output": _plain(fresh(x)), **_state(fresh)}
    if more is not None:
        _train(fresh, True)
        fresh(more)
        report["resumed"] = _state(fresh)
    del trained, fresh
    return report


def running_mean_to_report(RunningMean, num_features):
    """RunningMean(num_features).to(torch.float64), then .to("meta"): where its tensors are after each."""
    model = RunningMean(num_features)
    _to(model, torch.float64)
    state = _state(model)
    report = {"float64": {k: (None if state[k] is None else str(state[k].dtype)) for k in ("mean", "count")}}
    _to(model, "meta")
    report["meta"] = {k: (None if _stored(model, k) is None else _stored(model, k).device.type)
                      for k in ("mean", "count")}
    del model
    return report


# ---------------------------------------------------------------- activation_shapes

def _modes(model):
    """Each module's training flag, by qualified name (the model itself as "")."""
    return {name: bool(m.training) for name, m in _named_modules(model)}


def shapes_report(activation_shapes, name, args, x, seed, training=None, eval_modules=()):
    """activation_shapes(model, x) for the model MODELS[name](*args): its result, and the hooks left behind.

    With `training` given, the model is first put in that mode (nn.Module.train), then the submodules named in
    `eval_modules` in eval mode; `modes` are then every module's training flag before the call and after it."""
    model = build_model(name, args, seed)
    if training is not None:
        _train(model, training)
        modules = dict(_named_modules(model))
        for sub in eval_modules:
            _train(modules[sub], False)
    modes_before = _modes(model)
    global_before = global_hooks()
    saved = x.detach().clone()
    _RAN.clear()
    try:
        shapes = activation_shapes(model, x)
        names = {id(m): n for n, m in _named_modules(model)}
        unhooked = sorted({names.get(id(m), "?") for m, hooked in _RAN if not hooked})
    finally:
        _RAN.clear()
    report = {"shapes": shapes, "hooks": hooks_attached(model), "global_hooks": global_hooks() - global_before,
              "input_unchanged": _unchanged(x, saved), "modes": {"before": modes_before, "after": _modes(model)},
              "unhooked": unhooked}
    del model, shapes
    return report


def raising_report(activation_shapes, name, args, x, seed):
    """activation_shapes on a model whose forward raises: the exception it let through, and the hooks left behind."""
    model = build_model(name, args, seed)
    global_before = global_hooks()
    raised = ""
    try:
        activation_shapes(model, x)
    except NotImplementedError:  # a stub is not an answer
        raise
    except Exception as e:  # the error the model raised should come out of activation_shapes
        raised = type(e).__name__
    report = {"raised": raised, "hooks": hooks_attached(model), "global_hooks": global_hooks() - global_before}
    del model
    return report


# ---------------------------------------------------------------- Quadratic

def quadratic_report(Quadratic, in_features, out_features, x, g, seed, dtype=None):
    """Quadratic(in, out) made after manual_seed(seed) (and moved to `dtype`): description, output on x,
    gradients of (output * g).sum() for its parameters and for x."""
    _manual_seed(seed)
    model = Quadratic(in_features, out_features)
    if dtype is not None:
        _to(model, dtype)
    report = describe(model)
    xr = x.detach().clone().requires_grad_()
    report.update(_output_and_backward(model, xr, g))
    report["grads"] = {name: _grad_of(p) for name, p in _named_parameters(model)}
    report["x_grad"] = _plain(xr.grad)
    del model, xr
    return report
