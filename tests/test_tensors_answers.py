"""Chapter 01 checks against answers we did not write the checks from: other correct ones must pass
(public and hidden checks), plausible wrong ones must fail."""
import functools
import math
import operator

import einops
import pytest
import torch
from torch._C import _is_alias_of as ALIAS  # issue 26: bound before any check, under another name

from grader.results import ERROR

from tests.answers import Wrong, assert_caught, assert_passes, ids, passes_without_forbid


# ---------------------------------------------------------------- correct, written differently

def same_storage_ptr(x, y):
    # storage addresses where the storages hold bytes; a storage of no bytes (data_ptr() 0) only with itself
    sx, sy = x.untyped_storage(), y.untyped_storage()
    if sx.nbytes() and sy.nbytes():
        return sx.data_ptr() == sy.data_ptr()
    return sx is sy


def same_storage_object(x, y):
    # every view of a storage hands back one Python storage object
    return x.untyped_storage() is y.untyped_storage()


def element_offset_loop(x, index):
    if len(index) != x.dim():
        raise IndexError("need one index per dimension")
    pos = x.storage_offset()
    for d in range(x.dim()):
        i = index[d]
        if i < 0:
            i += x.shape[d]
        if i < 0 or i >= x.shape[d]:
            raise IndexError(f"index {index[d]} out of range")
        pos += i * x.stride(d)
    return pos


def element_offset_sum(x, index):
    norm = []
    for i, s in zip(index, x.shape, strict=True):
        if not -s <= i < s:
            raise IndexError(i)
        norm.append(i % s)
    return x.storage_offset() + sum(i * st for i, st in zip(norm, x.stride()))


def element_offset_methods(x, index):
    # x.ndim, x.size(d) and x.stride(d) instead of shape and stride()
    if len(index) != x.ndim:
        raise IndexError("need one index per dimension")
    pos = x.storage_offset()
    for d, i in enumerate(index):
        if not -x.size(d) <= i < x.size(d):
            raise IndexError(i)
        pos += (i + x.size(d) if i < 0 else i) * x.stride(d)
    return pos


def broadcast_loop(a, b):
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise ValueError(f"{a} and {b} are incompatible")
    return tuple(reversed(out))


def broadcast_zip(a, b):
    import itertools
    result = []
    for da, db in itertools.zip_longest(reversed(a), reversed(b), fillvalue=1):
        if 1 not in (da, db) and da != db:
            raise ValueError("incompatible")
        result.append(db if da == 1 else da)
    return tuple(result[::-1])


def scores_einsum(q, k):
    return einops.einsum(q, k, "... i d, ... j d -> ... i j")


def scores_matmul(q, k):
    return q @ k.transpose(-1, -2)


def scores_torch_einsum(q, k):
    return torch.einsum("...id,...jd->...ij", q, k)


def split_rearrange(x, num_heads):
    if x.shape[-1] % num_heads != 0:
        raise ValueError("not divisible")
    return einops.rearrange(x, "... s (h d) -> ... h s d", h=num_heads)


def split_view(x, num_heads):
    *lead, s, width = x.shape
    if width % num_heads:
        raise ValueError("not divisible")
    return x.reshape(*lead, s, num_heads, width // num_heads).movedim(-2, -3)


def merge_rearrange(x):
    return einops.rearrange(x, "... h s d -> ... s (h d)")


def merge_reshape(x):
    return x.transpose(-3, -2).flatten(-2)


CORRECT = [
    ("same_storage", same_storage_ptr), ("same_storage", same_storage_object),
    ("same_storage", lambda x, y: x.untyped_storage()._cdata == y.untyped_storage()._cdata),  # the StorageImpl
    ("same_storage", lambda x, y: torch._C._storage_address(x) == torch._C._storage_address(y)),
    ("element_offset", element_offset_loop), ("element_offset", element_offset_sum),
    ("element_offset", element_offset_methods),
    ("broadcast_shape", broadcast_loop), ("broadcast_shape", broadcast_zip),
    ("attention_scores", scores_einsum), ("attention_scores", scores_matmul), ("attention_scores", scores_torch_einsum),
    ("split_heads", split_rearrange), ("split_heads", split_view),
    ("merge_heads", merge_rearrange), ("merge_heads", merge_reshape),
]


@pytest.mark.parametrize("name,fn", CORRECT, ids=[f"{n}-{f.__name__}" for n, f in CORRECT])
def test_correct_answers_pass_every_check(name, fn):
    assert_passes("tensors", name, fn)


# ---------------------------------------------------------------- plausible but wrong

def _split_then_wipe(x, num_heads):
    out = split_rearrange(x.clone(), num_heads)
    x.zero_()  # right output, but the caller's tensor is destroyed
    return out


def _scores_zeroing_inputs(q, k):
    q.zero_(), k.zero_()  # the reference, if computed after the call, would be zeros too
    return torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype)


def _offset_by_indexing(x, index):
    if len(index) != x.dim():
        raise IndexError("one index per dimension")
    return x[tuple(index)].storage_offset()  # right for every tensor, but reads the answer instead of computing it


def _offset_zipped(x, index):
    """Bounds-checked, but zip stops at the shorter of index and shape: an index of the wrong length passes."""
    pos = x.storage_offset()
    for i, s, st in zip(index, x.shape, x.stride()):
        if not -s <= i < s:
            raise IndexError(i)
        pos += (i % s) * st
    return pos


def _offset_padded(x, index):
    """Pads a short index with zeros (the first element of the sub-tensor x[index]) and drops extra entries."""
    index = (tuple(index) + (0,) * x.dim())[:x.dim()]
    return _offset_zipped(x, index)


def _broadcast_by_meta_tensors(a, b):
    try:
        return tuple((torch.empty(a, device="meta") + torch.empty(b, device="meta")).shape)
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def _broadcast_by_expanding(a, b):
    try:
        return tuple(torch.broadcast_tensors(torch.empty(()).expand(a), torch.empty(()).expand(b))[0].shape)
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def _broadcast_by_an_alias(a, b):
    from numpy import broadcast_shapes  # bound under another name: refused all the same
    return tuple(int(s) for s in broadcast_shapes(a, b))


def _broadcast_by_refs(a, b):
    """torch._refs' pure-Python broadcast rule: handles any sizes, so only the forbid list stops it."""
    try:
        return tuple(torch._refs._broadcast_shapes(a, b))
    except RuntimeError as e:
        raise ValueError(str(e)) from None


def _offset_by_a_meta_copy(x, index):
    """x's layout rebuilt on the meta device (no memory), indexed there: torch finds the position and raises the
    IndexError."""
    size = x.storage_offset() + sum((n - 1) * st for n, st in zip(x.shape, x.stride())) + 1
    return torch.empty(size, device="meta").as_strided(tuple(x.shape), x.stride(), x.storage_offset())[
        tuple(index)].storage_offset()


def _broadcast_by_torch_rule(rule):
    """One of torch's pure-Python two-shape rules (shape functions, prims, fake tensors), its errors as ValueError."""
    def broadcast_shape(a, b):
        try:
            return tuple(int(s) for s in rule(list(a), list(b)))
        except (AssertionError, RuntimeError) as e:
            raise ValueError(str(e)) from None
    return broadcast_shape


def _offset_by_narrowing(x, index):
    """Narrows x down to the one element and reads its storage_offset(): needs a tensor, not just its layout."""
    if len(index) != x.dim():
        raise IndexError("one index per dimension")
    for d, i in enumerate(index):
        if not -x.shape[d] <= i < x.shape[d]:
            raise IndexError(i)
        x = x.narrow(d, i % x.shape[d], 1)
    return x.storage_offset()


class _AlwaysClose(torch.Tensor):
    """A tensor subclass that claims to equal anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.Tensor.__eq__):
            return torch.ones(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


_ALIAS_PARTIAL = functools.partial(torch._C._is_alias_of)  # made before the check: C code calls the builtin


class _Storages:
    same = staticmethod(torch._C._is_alias_of)


def _alias_caught_and_tried_again(x, y):
    """Catches the refusal and calls again: the guard remembers the first refusal, whatever the call did next."""
    try:
        return ALIAS(x, y)
    except Exception:
        return ALIAS(x, y)


W = Wrong
WRONG = [
    W("same_storage", lambda x, y: x.data_ptr() == y.data_ptr(), "views_at_an_offset",
      "share one storage"),  # data_ptr() is where the view starts, not the storage
    W("same_storage", lambda x, y: x.shape == y.shape and torch.equal(x, y), "copies_do_not_share",
      "separate storages"),  # equal values are not shared memory
    W("same_storage", lambda x, y: x is y, "views_share_storage"),  # the same Python object is only one way to share
    W("same_storage", lambda x, y: torch.tensor(x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()),
      "views_share_storage", "should be bool"),  # returns a tensor, not a bool
    W("element_offset", lambda x, index: sum(i % s * st for i, s, st in zip(index, x.shape, x.stride())),
      "sliced", "sits at storage position"),  # forgets storage_offset
    W("element_offset", lambda x, index: x.storage_offset() + sum(
        (i % s) * math.prod(x.shape[d + 1:]) for d, (i, s) in enumerate(zip(index, x.shape))),
      "transposed"),  # assumes row-major layout from the shape
    W("element_offset", lambda x, index: (x.storage_offset() + sum(
        (i % s) * st for i, s, st in zip(index, x.shape, x.stride()))) * x.element_size(),
      "contiguous", "returned 40"),  # bytes instead of elements
    W("element_offset", lambda x, index: x.storage_offset() + sum(
        (i % s) * st for i, s, st in zip(index, x.shape, x.stride())),
      "out_of_range", "should raise IndexError"),  # no bounds check
    # an index of the wrong length names no element: zip silently drops the entries or dimensions left over
    W("element_offset", _offset_zipped, "index_of_the_wrong_length", "should raise IndexError or ValueError"),
    W("element_offset", _offset_padded, "index_of_the_wrong_length", "entries for"),
    W("broadcast_shape", lambda a, b: tuple(max(p, q) for p, q in zip(
        tuple(a) + (1,) * (len(b) - len(a)), tuple(b) + (1,) * (len(a) - len(b)))),
      "aligned_from_the_right"),  # aligns from the left
    W("broadcast_shape", lambda a, b: tuple(reversed([max(p, q) for p, q in __import__("itertools").zip_longest(
        reversed(a), reversed(b), fillvalue=1)])),
      "incompatible", "should raise ValueError"),  # max of sizes: never raises
    W("broadcast_shape", lambda a, b: tuple(reversed([max(p, q) for p, q in __import__("itertools").zip_longest(
        reversed(a), reversed(b), fillvalue=1)])),
      "zero_sizes", "expected (0,)"),  # max of sizes: wrong for 0
    W("broadcast_shape", lambda a, b: tuple(torch.empty(a).add(torch.empty(b)).shape),
      "incompatible", "but raised RuntimeError"),  # raises the wrong exception type
    W("attention_scores", lambda q, k: torch.einsum("bid,bjd->bij", q, k), "any_batch_rank",
      "einsum()", status=ERROR),  # fixed rank 3
    W("attention_scores", lambda q, k: q @ k if q.shape[-1] == k.shape[-2] else q @ k.transpose(-1, -2),
      "square", "values differ"),  # missing transpose (works only when shapes allow; wrong values when square)
    W("attention_scores", lambda q, k: q.float() @ k.float().transpose(-1, -2), "keeps_dtype",
      "expected torch.float64"),  # upcasts and returns float32
    W("attention_scores", lambda q, k: (k @ q.transpose(-1, -2)).transpose(-1, -2).contiguous()
      if q.shape[-2] != k.shape[-2] else k @ q.transpose(-1, -2),
      "square", "values differ"),  # keys by queries (transposed output)
    W("split_heads", lambda x, h: einops.rearrange(x, "... s (d h) -> ... h s d", h=h), "splits_the_last_dim",
      "(head 0: features 0 to 3)"),  # (d h) instead of (h d)
    W("split_heads", lambda x, h: x.reshape(*x.shape[:-2], h, x.shape[-2], x.shape[-1] // h),
      "splits_the_last_dim", "values differ"),  # reshape without the transpose
    W("split_heads", lambda x, h: einops.rearrange(x, "... s (h d) -> ... h s d", h=h), "not_divisible",
      "should raise ValueError, but raised EinopsError"),  # einops' own error instead of ValueError
    W("merge_heads", lambda x: x.transpose(-3, -2).view(*x.shape[:-3], x.shape[-2], -1), "inverts_split",
      "view size is not compatible", status=ERROR),  # view on a non-contiguous input
    W("merge_heads", lambda x: einops.rearrange(x, "... h s d -> ... s (d h)"), "merge_any_leading_dims",
      "(should be head 0)"),  # (d h) order
    W("merge_heads", lambda x: x.reshape(*x.shape[:-3], x.shape[-2], -1), "inverts_split",
      "with head 0 ="),  # forgets the transpose
    # hostile or careless: changes the inputs, or returns a tensor that lies about equality
    W("split_heads", _split_then_wipe, "splits_the_last_dim", "changed its input in place"),
    W("attention_scores", _scores_zeroing_inputs, "one_batch_dim", "changed its input in place"),
    W("attention_scores", lambda q, k: torch.zeros(*q.shape[:-1], k.shape[-2], dtype=q.dtype).as_subclass(_AlwaysClose),
      "one_batch_dim", "should be a plain torch.Tensor"),
    # shortcuts that read the answer off a library (issue 15). from_the_layout_alone hands element_offset an
    # object with only shape, stride() and storage_offset(): nothing to index, narrow or select.
    W("element_offset", _offset_by_indexing, "from_the_layout_alone", "not subscriptable"),
    W("element_offset", lambda x, index: x.select(0, index[0]).storage_offset() + sum(
        (i % s) * st for i, s, st in zip(index[1:], x.shape[1:], x.stride()[1:])),
      "from_the_layout_alone", "no attribute 'select'"),
    W("element_offset", _offset_by_narrowing, "from_the_layout_alone", "no attribute 'narrow'"),
    W("element_offset", _offset_by_a_meta_copy, "from_the_layout_alone", "made a tensor with x's layout and indexed "
      "it (torch ran as_strided, select"),
    *(W("broadcast_shape", _broadcast_by_torch_rule(rule), "same_rank", f"not call {name}") for name, rule in [
        ("torch.jit._shape_functions.broadcast", __import__("torch.jit._shape_functions").jit._shape_functions.broadcast),
        ("torch._prims_common.infer_size_shapes", torch._prims_common.infer_size_shapes),
        ("torch._subclasses.fake_impls.infer_size", __import__("torch._subclasses.fake_impls").
         _subclasses.fake_impls.infer_size)]),
    # the broadcast_shape forbid list names these: the check fails with "must do this itself, not call ..."
    W("broadcast_shape", lambda a, b: __import__("numpy").broadcast_shapes(a, b), "same_rank",
      "not call numpy.broadcast_shapes"),
    W("broadcast_shape", _broadcast_by_an_alias, "same_rank", "not call numpy.broadcast_shapes"),
    W("broadcast_shape", lambda a, b: __import__("numpy").broadcast(__import__("numpy").empty(a),
                                                                    __import__("numpy").empty(b)).shape,
      "same_rank", "not call numpy.broadcast"),
    W("broadcast_shape", _broadcast_by_expanding, "same_rank", "not call torch.broadcast_tensors"),
    # meta tensors broadcast through torch._refs' Python rule, which is forbidden; were it not, the shapes of
    # sizes_no_array_could_have (2**40 x 2**40, 2**70, 70 dimensions) would still fail them
    W("broadcast_shape", _broadcast_by_meta_tensors, "same_rank", "not call torch._refs._broadcast_shapes"),
    W("broadcast_shape", _broadcast_by_refs, "same_rank", "not call torch._refs._broadcast_shapes"),
    W("broadcast_shape", lambda a, b: tuple(torch._refs.broadcast_shapes(a, b)), "same_rank",
      "not call torch._refs.broadcast_shapes"),
    # torch._C._is_alias_of answers the question outright: forbidden
    W("same_storage", lambda x, y: torch._C._is_alias_of(x, y), "views_share_storage",
      "not call torch._C._is_alias_of"),
    # issue 26: the same builtin under other names and routes, refused by identity (grader/guard.py): an alias bound
    # before the check (the profile hook), a getattr string (the attribute refuses while the call runs), partials and
    # map made of the alias (C code calls it: the search of what the code refers to), one bound beforehand, a class
    # attribute, a refusal caught and tried again, and _overlaps, which answers the same question
    *[W("same_storage", answer, "views_share_storage", "not call torch._C._is_alias_of") for answer in (
        lambda x, y: ALIAS(x, y),
        lambda x, y: getattr(torch._C, "_is_al" + "ias_of")(x, y),
        lambda x, y: functools.partial(ALIAS, x)(y),
        lambda x, y: _ALIAS_PARTIAL(x, y),
        lambda x, y: next(map(ALIAS, [x], [y])),
        lambda x, y: operator.call(ALIAS, x, y),
        lambda x, y: _Storages.same(x, y),
        _alias_caught_and_tried_again)],
    W("same_storage", lambda x, y: torch._C._overlaps(x, y), "views_share_storage", "not call torch._C._overlaps"),
    # the same storage, offset, sizes and strides: x and x[1:] share a storage but are not "set to" each other
    W("same_storage", lambda x, y: x.is_set_to(y), "views_at_an_offset", "share one storage"),
    # storages of no bytes all have data_ptr() 0: torch.empty(0) and torch.zeros(0, 3) are two storages
    W("same_storage", lambda x, y: x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr(),
      "storages_of_no_bytes", "same_storage(torch.empty(0), torch.zeros(0, 3)) returned True"),
    W("same_storage", lambda x, y: (x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
                                    and x.untyped_storage().nbytes() == y.untyped_storage().nbytes()),
      "storages_of_no_bytes", "yet they are two storages"),  # equal sizes too: 0 and 0
    # "nothing to share" for tensors without elements: x.view(0, 3) of an empty x, and x[4:], are views all the same
    W("same_storage", lambda x, y: x.numel() > 0 and y.numel() > 0
      and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr(),
      "storages_of_no_bytes", "x.view(0, 3) is a view of x's own storage"),
    W("same_storage", lambda x, y: x.untyped_storage().nbytes() > 0
      and x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr(),
      "storages_of_no_bytes", "same_storage(x, x.view(0, 3) for x = torch.empty(0)) returned False"),
]


@pytest.mark.parametrize("wrong", WRONG, ids=ids(WRONG))
def test_each_wrong_answer_is_caught_by_its_check(wrong):
    assert_caught("tensors", wrong)


def test_the_refs_shortcut_would_pass_without_the_forbid_list(monkeypatch):
    """torch._refs._broadcast_shapes really does the whole job, huge shapes included: only the forbid list stops it."""
    passes_without_forbid(monkeypatch, "tensors", "broadcast_shape", _broadcast_by_refs)
    # meta tensors still fail without it: no tensor can have the shapes of sizes_no_array_could_have
    assert_caught("tensors", Wrong("broadcast_shape", _broadcast_by_meta_tensors, "sizes_no_array_could_have",
                                   "needs no tensor or array"))


def test_the_alias_builtin_would_pass_without_the_forbid_list(monkeypatch):
    """torch._C._is_alias_of under another name really does the whole job (issue 26: 8 of 8 checks): only refusing
    it, by identity, stops it."""
    passes_without_forbid(monkeypatch, "tensors", "same_storage", lambda x, y: ALIAS(x, y))
