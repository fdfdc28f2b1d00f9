"""Scenario helpers every chapter uses: modules built from plain specs, and modules described as plain data.

A spec is a list: its first item names a class of torch.nn, the rest are its arguments; a dict among
them holds keyword arguments, and a list of specs stands for a list of modules (for containers):
    ["Linear", 3, 4, {"bias": False}]      ["Sequential", ["Linear", 3, 4], ["ReLU"]]
Only torch.nn's own module classes can be named, so a spec cannot run anything else.
"""
import torch

_Module = torch.nn.Module
_manual_seed = torch.manual_seed
_no_grad = torch.no_grad


def build(spec, seed=None):
    """The nn.Module a spec describes; with a seed, its parameters come from torch.manual_seed(seed)."""
    if seed is not None:
        _manual_seed(seed)
    if not isinstance(spec, (list, tuple)) or not spec or not isinstance(spec[0], str):
        raise ValueError(f"not a module spec: {spec!r}")
    cls = getattr(torch.nn, spec[0], None)
    if not (isinstance(cls, type) and issubclass(cls, _Module)):
        raise ValueError(f"torch.nn has no module class {spec[0]!r}")
    args, kwargs = [], {}
    for a in spec[1:]:
        if isinstance(a, dict):
            kwargs.update(a)
        elif isinstance(a, list) and a and isinstance(a[0], (list, tuple)):
            args.append([build(s) for s in a])
        elif isinstance(a, list) and a and isinstance(a[0], str):
            args.append(build(a))
        else:
            args.append(a)
    return cls(*args, **kwargs)


def build_all(specs, seed=None):
    """A list of modules from a list of specs, all seeded from one seed."""
    if seed is not None:
        _manual_seed(seed)
    return [build(s) for s in specs]


def load_weights(module, weights):
    """Copy tensors into the module's parameters and buffers by state_dict name (no autograd involved)."""
    own = dict(module.named_parameters())
    own.update(dict(module.named_buffers()))
    with _no_grad():
        for name, value in weights.items():
            own[name].copy_(value)


def describe(module):
    """A module as data: its parameters (names, shapes, values, grads), buffers, state_dict, children, mode."""
    params = list(module.named_parameters())
    return {
        "type": type(module).__name__,
        "parameters": [(name, tuple(p.shape)) for name, p in params],
        "parameter_values": {name: p.detach().clone() for name, p in params},
        "grads": {name: (None if p.grad is None else p.grad.detach().clone()) for name, p in params},
        "buffers": [(name, tuple(b.shape)) for name, b in module.named_buffers()],
        "state_dict": {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                       for k, v in module.state_dict().items()},
        "children": [name for name, _ in module.named_children()],
        "training": bool(module.training),
        "hooks": sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks)
                     for m in module.modules()),
    }


def call(fn, *args, **kwargs):
    """The student's fn on the arguments, as data (for a function whose arguments are built elsewhere)."""
    return fn(*args, **kwargs)


def forward_and_describe(cls, specs, x, seed):
    """cls(*modules built from specs), run on x, then output.sum() backpropagated: output and description."""
    model = cls(*build_all(specs, seed))
    y = model(x)
    y.sum().backward()
    report = describe(model)
    report["output"] = y.detach()
    del model, y
    return report
