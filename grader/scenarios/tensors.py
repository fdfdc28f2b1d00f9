"""Chapter 01 scenarios: element_offset given a tensor's layout and nothing else.

`x[index].storage_offset()` reads the answer off a real tensor instead of computing it; on an object
that has only what the formula needs there is nothing to index, so only the computation works.
"""
import torch

_Size = torch.Size


class StridedLayout:
    """A tensor's shape, strides and storage offset, as a tensor gives them; no elements, no storage, no indexing."""

    def __init__(self, shape, stride, offset):
        self.shape = _Size(shape)
        self._stride = tuple(stride)
        self._offset = offset

    @property
    def ndim(self):
        return len(self.shape)

    def dim(self):
        return len(self.shape)

    ndimension = dim

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def stride(self, dim=None):
        return self._stride if dim is None else self._stride[dim]

    def storage_offset(self):
        return self._offset

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __repr__(self):
        return f"StridedLayout(shape={tuple(self.shape)}, stride={self._stride}, storage_offset={self._offset})"


def offset_from_layout(element_offset, shape, stride, offset, index):
    """element_offset on a StridedLayout: {"value": what it returned, "error": what it raised, as text}."""
    try:
        return {"value": element_offset(StridedLayout(shape, stride, offset), tuple(index)), "error": None,
                "index_error": False}
    except NotImplementedError:
        raise
    except Exception as e:  # the student's exception is data: the check explains it
        text = str(e).strip().splitlines()
        return {"value": None, "error": type(e).__name__, "message": text[0][:200] if text else "",
                "index_error": isinstance(e, IndexError)}
