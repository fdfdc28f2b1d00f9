"""Chapter 02 scenarios: round_to_bf16 on an input whose memory the trace can recognise downstream.

The trace of a call (grader/guard.py) records, for each tensor its operators make, which operators its values came
from (its lineage). The input itself comes with no history: a result rebuilt from NumPy or Python numbers (its
values rounded there, a tensor made with torch.from_numpy or torch.tensor, which no operator makes) and a result
of the input look alike. So the input is first passed through one operator that changes nothing and that no answer
runs, an in-place resize to its own shape: the result's lineage holds that operator only if its values were computed
from the input by torch operators.
"""
import torch

_resize = torch.Tensor.resize_
_size = torch.Tensor.size

# The lineage entry the mark leaves (the check looks for it).
MARK = "aten.resize_:float32"


def round_marked(round_to_bf16, x):
    """round_to_bf16(x) after the mark: x's values, shape and strides are unchanged (resize_ to its own size
    returns at once), but its memory now has the mark in its history."""
    _resize(x, _size(x))
    return round_to_bf16(x)
