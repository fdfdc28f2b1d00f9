"""Chapter 02 scenarios: which dtypes a student's function produces (round_to_bf16 must not convert to bfloat16)."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode

_tree_leaves = torch.utils._pytree.tree_leaves
_Tensor = torch.Tensor


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.dtypes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in _tree_leaves(out):
            if isinstance(leaf, _Tensor):
                self.dtypes.append(str(leaf.dtype).removeprefix("torch."))
        return out


def dtypes_produced(fn, x):
    """The dtypes of every tensor fn(x)'s operations produced (in order, repeats removed)."""
    recorder = _Recorder()
    with recorder:
        fn(x)
    return list(dict.fromkeys(recorder.dtypes))
