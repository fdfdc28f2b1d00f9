"""Scenario helpers the chapters share: modules built from plain specs.

A spec is a list: its first item names a class of torch.nn, the rest are its arguments; a dict among
them holds keyword arguments, and a list of specs stands for a list of modules (for containers):
    ["Linear", 3, 4, {"bias": False}]      ["Sequential", ["Linear", 3, 4], ["ReLU"]]
Only torch.nn's own module classes can be named, so a spec cannot run anything else.
"""
import torch

_Module = torch.nn.Module
_manual_seed = torch.manual_seed


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
