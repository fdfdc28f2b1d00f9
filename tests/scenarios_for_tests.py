"""Scenarios that only the grader's own tests run (tests/test_scenarios.py installs this module as
grader.scenarios.for_tests, in this process and in every grading kernel it starts): a module described as
plain data, and a bare call. The grader's scenario modules hold only what its checks use."""
import torch

from . import common  # relative, as every scenario module imports: in the kernel, the kernel's copy


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
    model = cls(*common.build_all(specs, seed))
    y = model(x)
    y.sum().backward()
    report = describe(model)
    report["output"] = y.detach()
    del model, y
    return report
