"""Chapter 01 scenarios: element_offset given a tensor's layout and nothing else; same_storage on storages of no bytes.

`x[index].storage_offset()` reads the answer off a real tensor instead of computing it; on an object
that has only what the formula needs there is nothing to index, so only the computation works.

Storages of no bytes are made here, where same_storage runs: the grading bridge carries a storage as its bytes,
and every storage of no bytes has the same (none), so it could not tell two of them from one.
"""
import torch

_Size = torch.Size
_empty = torch.empty
_zeros = torch.zeros
_arange = torch.arange
_narrow = torch.narrow
_view = torch.Tensor.view


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


def _no_bytes_pair(case):
    """The two tensors of a case of storages_of_no_bytes, made afresh."""
    if case == "two empty tensors":        # two storages of 0 bytes, both at address 0
        return _empty(0), _zeros(0, 3)
    if case == "an empty tensor and its view":  # one storage of 0 bytes
        x = _empty(0)
        return x, _view(x, (0, 3))
    if case == "a tensor and its empty slice":  # a view with no elements of a storage of 16 bytes
        x = _arange(4.0)
        return x, _narrow(x, 0, 4, 0)
    raise ValueError(f"no such case: {case!r}")


def storages_of_no_bytes(same_storage, cases):
    """same_storage on each case's pair: [{"value": what it returned, "error": what it raised, as text}]."""
    out = []
    for case in cases:
        x, y = _no_bytes_pair(case)
        try:
            out.append({"value": same_storage(x, y), "error": None})
        except NotImplementedError:
            raise
        except Exception as e:  # the student's exception is data: the check explains it
            text = str(e).strip().splitlines()
            out.append({"value": None, "error": type(e).__name__, "message": text[0][:200] if text else ""})
        del x, y
    return out
