"""Chapter 01 (tensors): public checks. Hidden checks for the same exercises live in grader/hidden/tensors.py."""
from __future__ import annotations

import torch

from grader.expect import (CheckFailure, call, describe, expect, expect_equal, expect_raises, expect_tensor,
                           expect_tensor_like, expect_type, fail)
from grader.registry import exercise
from grader.scenario import run_scenario, tracing
from grader.scenarios import tensors as scenarios

_broadcast_shapes = torch.broadcast_shapes  # the references, bound before any student code runs
_matmul = torch.matmul

# torch._C._is_alias_of(x, y) answers the question outright; comparing the storages (untyped_storage()) is the lesson.
# Builtins that answer "one storage?" outright: refused by identity, under any name (grader/guard.py).
SAME_STORAGE = exercise("tensors.same_storage", points=2, forbid=("torch._C._is_alias_of", "torch._C._overlaps"))
ELEMENT_OFFSET = exercise("tensors.element_offset", points=3)
# Library routes to the broadcast shape, torch's pure-Python rules for shape functions, fake tensors, prims and its
# NumPy layer included; any other (arrays, meta tensors) fails on shapes no array can have.
BROADCAST_SHAPE = exercise("tensors.broadcast_shape", points=2,
                           forbid=("torch.broadcast_shapes", "torch.functional.broadcast_shapes",
                                   "torch.broadcast_tensors", "torch.broadcast_to", "torch._C._infer_size",
                                   "torch._refs.broadcast_shapes", "torch._refs._broadcast_shapes",
                                   "torch.jit._shape_functions.broadcast", "torch._prims_common.infer_size_shapes",
                                   "torch._subclasses.fake_impls.infer_size",
                                   "torch._numpy._funcs_impl.broadcast_shapes",
                                   "torch.backends._nnapi.serializer.broadcast_shapes",
                                   "numpy.broadcast_shapes", "numpy.broadcast", "numpy.broadcast_arrays",
                                   "numpy.broadcast_to"))
ATTENTION_SCORES = exercise("tensors.attention_scores", points=2)
SPLIT_HEADS = exercise("tensors.split_heads", points=2)
MERGE_HEADS = exercise("tensors.merge_heads", points=1)


# ---------------------------------------------------------------- same_storage

def expect_same_storage(same_storage, x, y, expected: bool, how: str) -> None:
    got = call(same_storage, x, y, what=f"same_storage({how})")
    expect_type(got, bool, f"same_storage({how})")
    if got != expected:
        verdict = "share one storage" if expected else "have separate storages"
        fail(f"same_storage({how}) returned {got}, but they {verdict} "
             f"(x: {describe(x)}, storage offset {x.storage_offset()}; "
             f"y: {describe(y)}, storage offset {y.storage_offset()})")


@SAME_STORAGE.check
def views_share_storage(same_storage):
    """a tensor and its views (view, slice, transpose) share storage"""
    x = torch.randn(4, 6)
    expect_same_storage(same_storage, x, x, True, "x, x")
    expect_same_storage(same_storage, x, x.view(24), True, "x, x.view(24)")
    expect_same_storage(same_storage, x, x.t(), True, "x, x.t()")


@SAME_STORAGE.check
def views_at_an_offset(same_storage):
    """views that start at different places in the same storage still share it"""
    x = torch.randn(4, 6)
    expect_same_storage(same_storage, x, x[1:], True, "x, x[1:]")
    expect_same_storage(same_storage, x[2], x[:, 3], True, "x[2], x[:, 3]")


@SAME_STORAGE.check
def copies_do_not_share(same_storage):
    """a clone, a contiguous copy and a fresh tensor have storages of their own"""
    x = torch.randn(4, 6)
    expect_same_storage(same_storage, x, x.clone(), False, "x, x.clone()")
    expect_same_storage(same_storage, x.t(), x.t().contiguous(), False, "x.t(), x.t().contiguous()")
    expect_same_storage(same_storage, x, torch.randn(4, 6), False, "x, torch.randn(4, 6)")


# Each case of the scenario grader.scenarios.tensors.storages_of_no_bytes: the call, and whether they share storage.
NO_BYTES_CASES = {
    "two empty tensors": ("torch.empty(0), torch.zeros(0, 3)", False,
                          "both storages hold 0 bytes, so both have data_ptr() 0, yet they are two storages; a "
                          "storage of no bytes is shared only by views of it"),
    "an empty tensor and its view": ("x, x.view(0, 3) for x = torch.empty(0)", True,
                                     "x.view(0, 3) is a view of x's own storage, which holds no bytes"),
    "a tensor and its empty slice": ("x, x[4:] for x = torch.arange(4.0)", True,
                                     "x[4:] has no elements but views x's storage of 16 bytes"),
}


@SAME_STORAGE.check
def storages_of_no_bytes(same_storage):
    """storages of no bytes all have data_ptr() 0: two such storages share nothing, one shares with its views"""
    out = run_scenario(scenarios.storages_of_no_bytes, same_storage, list(NO_BYTES_CASES))
    for (how, expected, why), got in zip(NO_BYTES_CASES.values(), out):
        what = f"same_storage({how})"
        if got["error"]:
            fail(f"{what} raised {got['error']}: {got['message']}")
        expect_type(got["value"], bool, what)
        if got["value"] != expected:
            verdict = "share one storage" if expected else "share no storage"
            fail(f"{what} returned {got['value']}, but they {verdict}: {why}")


# ---------------------------------------------------------------- element_offset

def numbered(n: int) -> torch.Tensor:
    """Storage holding 0, 1, 2, ...: the value of an element is its position in the storage."""
    return torch.arange(n, dtype=torch.float64)


def expect_offset(element_offset, x: torch.Tensor, index: tuple[int, ...], how: str) -> None:
    """`x` must be a view of a `numbered` storage: then the value x[index] *is* the expected position."""
    want = int(x[index].item())
    got = call(element_offset, x, index, what=f"element_offset({how}, {index})")
    expect_type(got, int, f"element_offset({how}, {index})")
    if got != want:
        where = ", ".join(map(str, index))
        fail(f"element_offset({how}, {index}) returned {got}, but x[{where}] sits at storage position {want} "
             f"(x: {describe(x)}; stride {tuple(x.stride())}, storage offset {x.storage_offset()})")


@ELEMENT_OFFSET.check
def contiguous(element_offset):
    """a contiguous 2-D and 3-D tensor"""
    x = numbered(24).view(4, 6)
    for index in [(0, 0), (0, 5), (3, 2)]:
        expect_offset(element_offset, x, index, "x = arange(24).view(4, 6)")
    y = numbered(60).view(3, 4, 5)
    expect_offset(element_offset, y, (2, 1, 3), "x = arange(60).view(3, 4, 5)")


@ELEMENT_OFFSET.check
def transposed(element_offset):
    """a transposed tensor (strides not in row-major order)"""
    x = numbered(24).view(4, 6).t()
    for index in [(5, 0), (1, 3)]:
        expect_offset(element_offset, x, index, "x = arange(24).view(4, 6).t()")


@ELEMENT_OFFSET.check
def sliced(element_offset):
    """slices that start past the beginning of the storage and skip elements"""
    base = numbered(48).view(6, 8)
    expect_offset(element_offset, base[2:], (1, 4), "x = arange(48).view(6, 8)[2:]")
    expect_offset(element_offset, base[1::2, 3::2], (2, 1), "x = arange(48).view(6, 8)[1::2, 3::2]")


@ELEMENT_OFFSET.check
def expanded(element_offset):
    """an expanded tensor, where a stride of 0 repeats the same element"""
    x = numbered(3).view(3, 1).expand(3, 5)
    expect_offset(element_offset, x, (2, 4), "x = arange(3).view(3, 1).expand(3, 5)")


@ELEMENT_OFFSET.check
def negative_index(element_offset):
    """negative indices count from the end, as in x[index]"""
    x = numbered(24).view(4, 6)[1:]
    expect_offset(element_offset, x, (-1, -2), "x = arange(24).view(4, 6)[1:]")


# Operators that make a tensor with a given layout, or step through one: with them, torch's own indexing finds the
# position (torch.empty(n, device="meta").as_strided(shape, stride, offset)[index].storage_offset()).
_LAYOUTS = {"as_strided", "empty_strided", "new_empty_strided", "set", "select", "slice", "index", "unfold",
            "diagonal", "expand", "permute", "transpose", "t", "narrow", "unbind", "split", "view", "unsafe_view",
            "alias"}


def expect_offset_from_layout(element_offset, shape: tuple[int, ...], stride: tuple[int, ...], offset: int,
                              index: tuple[int, ...]) -> None:
    """element_offset on an object with only x's shape, stride() and storage_offset(): the formula, no indexing."""
    x = numbered(offset + sum((s - 1) * st for s, st in zip(shape, stride)) + 1).as_strided(shape, stride, offset)
    how = (f"element_offset(x, {index}) for an x that has only shape {shape}, stride() {stride} "
           f"and storage_offset() {offset}")
    with tracing() as trace:
        out = run_scenario(scenarios.offset_from_layout, element_offset, shape, stride, offset, index)
    rebuilt = sorted(op.removeprefix("aten.") for op in trace.ops if op.removeprefix("aten.").strip("_") in _LAYOUTS)
    if rebuilt:
        fail(f"{how} made a tensor with x's layout and indexed it (torch ran {', '.join(rebuilt[:6])}): torch then "
             "computes the position for you. Compute it from storage_offset(), stride() and shape yourself, with "
             "Python arithmetic")
    if not all(-s <= i < s for i, s in zip(index, shape)):
        expect(out["index_error"], f"{how} should raise IndexError, but "
                                   + (f"raised {out['error']}" if out["error"] else f"returned {out['value']!r}"))
        return
    if out["error"]:
        fail(f"{how} raised {out['error']}: {out['message']}. Compute the position from storage_offset(), stride() "
             "and shape alone: indexing x (x[index].storage_offset()) or reading its elements is not the exercise")
    expect_type(out["value"], int, how)
    expect_equal(out["value"], int(x[index].item()), how)


@ELEMENT_OFFSET.check
def from_the_layout_alone(element_offset):
    """computed from storage_offset(), stride() and shape alone: x need not be a tensor you can index"""
    expect_offset_from_layout(element_offset, (4, 6), (1, 4), 3, (2, 5))     # transposed, past the start
    expect_offset_from_layout(element_offset, (3, 5), (2, 0), 1, (-1, 4))    # expanded, negative index
    expect_offset_from_layout(element_offset, (2, 3, 4), (24, 2, 6), 5, (1, 2, 3))
    expect_offset_from_layout(element_offset, (4, 6), (1, 4), 3, (4, 0))     # out of range


@ELEMENT_OFFSET.check
def out_of_range(element_offset):
    """an index outside the shape raises IndexError"""
    x = numbered(24).view(4, 6)
    expect_raises(IndexError, lambda: element_offset(x, (4, 0)), "element_offset(x of shape (4, 6), (4, 0))")
    expect_raises(IndexError, lambda: element_offset(x, (0, -7)), "element_offset(x of shape (4, 6), (0, -7))")


# ---------------------------------------------------------------- broadcast_shape

def expect_broadcast(broadcast_shape, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    got = broadcast_shape(a, b)
    expect_type(got, tuple, f"broadcast_shape({a}, {b})")
    expect_equal(tuple(got), tuple(_broadcast_shapes(a, b)), f"broadcast_shape({a}, {b})")
    expect(all(type(s) is int for s in got), f"broadcast_shape({a}, {b}) should hold ints, got {got!r}")


@BROADCAST_SHAPE.check
def same_rank(broadcast_shape):
    """shapes of the same rank, with sizes of 1 stretched"""
    for a, b in [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((2, 1, 5), (2, 7, 1))]:
        expect_broadcast(broadcast_shape, a, b)


@BROADCAST_SHAPE.check
def aligned_from_the_right(broadcast_shape):
    """shapes of different ranks are aligned from the right (trailing dimensions)"""
    for a, b in [((4,), (3, 4)), ((5, 3, 1), (3, 6)), ((), (2, 3)), ((8, 1, 6, 1), (7, 1, 5))]:
        expect_broadcast(broadcast_shape, a, b)


@BROADCAST_SHAPE.check
def sizes_no_array_could_have(broadcast_shape):
    """the rule is arithmetic on the sizes: shapes too big (or of too many dimensions) for any array still broadcast"""
    for how, a, b in [("(2**40, 1), (1, 2**40)", (2**40, 1), (1, 2**40)), ("(2**70,), (1,)", (2**70,), (1,)),
                      ("(1,) * 70, (3,) * 70", (1,) * 70, (3,) * 70)]:
        try:
            got = broadcast_shape(a, b)
        except (NotImplementedError, CheckFailure):
            raise
        except Exception as e:
            fail(f"broadcast_shape({how}) raised {type(e).__name__}: {str(e).strip()[:120]}. Shapes are "
                 "tuples of Python ints and broadcasting them needs no tensor or array (which cannot have these "
                 "sizes): apply the rule to the sizes yourself")
        expect_type(got, tuple, f"broadcast_shape({how})")
        expect(tuple(got) == tuple(_broadcast_shapes(a, b)), f"broadcast_shape({how}) returned a wrong shape")


@BROADCAST_SHAPE.check
def incompatible(broadcast_shape):
    """incompatible shapes raise ValueError"""
    for a, b in [((3,), (4,)), ((2, 3), (3, 2)), ((4, 3), (2, 3, 4))]:
        expect_raises(ValueError, lambda: broadcast_shape(a, b), f"broadcast_shape({a}, {b})")


# ---------------------------------------------------------------- attention_scores

def expect_scores(attention_scores, q: torch.Tensor, k: torch.Tensor, how: str) -> None:
    want = _matmul(q.double(), k.double().transpose(-1, -2)).to(q.dtype)  # torch's own matmul, in float64
    got = call(attention_scores, q, k, what=f"attention_scores(q, k) for {how}")
    tol = 2e-2 if q.dtype in (torch.bfloat16, torch.float16) else 1e-5
    expect_tensor(got, want, f"attention_scores(q, k) for {how}", rtol=tol, atol=tol)


@ATTENTION_SCORES.check
def one_batch_dim(attention_scores):
    """q: (batch, seq_q, d), k: (batch, seq_k, d) gives (batch, seq_q, seq_k)"""
    q, k = torch.randn(2, 5, 8), torch.randn(2, 7, 8)
    expect_scores(attention_scores, q, k, "q (2, 5, 8), k (2, 7, 8)")


@ATTENTION_SCORES.check
def any_batch_rank(attention_scores):
    """no batch dimension, or several"""
    expect_scores(attention_scores, torch.randn(3, 4), torch.randn(6, 4), "q (3, 4), k (6, 4)")
    expect_scores(attention_scores, torch.randn(2, 3, 4, 5), torch.randn(2, 3, 6, 5), "q (2, 3, 4, 5), k (2, 3, 6, 5)")


@ATTENTION_SCORES.check
def keeps_dtype(attention_scores):
    """the output has the inputs' dtype (float64 in, float64 out)"""
    q, k = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 5, 4, dtype=torch.float64)
    expect_scores(attention_scores, q, k, "float64 q (2, 3, 4), k (2, 5, 4)")


# ---------------------------------------------------------------- split_heads / merge_heads

def expect_split(split_heads, x: torch.Tensor, num_heads: int, layout: str = "") -> None:
    """Head h of the result must hold features h*d to (h+1)*d - 1 of every position, in order."""
    what = f"split_heads(x of shape {tuple(x.shape)}{f' ({layout})' if layout else ''}, {num_heads})"
    *lead, seq, width = x.shape
    d = width // num_heads
    got = call(split_heads, x, num_heads, what=what)
    expect_tensor_like(got, (*lead, num_heads, seq, d), x.dtype, x.device, what)
    for h in range(num_heads):
        expect_tensor(got[..., h, :, :], x[..., h * d:(h + 1) * d], f"{what}[..., {h}, :, :] (head {h}: "
                      f"features {h * d} to {(h + 1) * d - 1})")


def expect_merge(merge_heads, x: torch.Tensor, how: str = "") -> None:
    """Features h*d to (h+1)*d - 1 of the result must be head h, for every position."""
    what = f"merge_heads({how or f'x of shape {tuple(x.shape)}'})"
    *lead, heads, seq, d = x.shape
    got = call(merge_heads, x, what=what)
    expect_tensor_like(got, (*lead, seq, heads * d), x.dtype, x.device, what)
    for h in range(heads):
        expect_tensor(got[..., h * d:(h + 1) * d], x[..., h, :, :], f"{what}[..., {h * d}:{(h + 1) * d}] "
                      f"(should be head {h})")


@SPLIT_HEADS.check
def splits_the_last_dim(split_heads):
    """(batch, seq, heads*d) becomes (batch, heads, seq, d), head h holding features h*d to (h+1)*d"""
    x = torch.randn(2, 5, 12)
    expect_split(split_heads, x, 3)


@SPLIT_HEADS.check
def any_leading_dims(split_heads):
    """no batch dimension, or two"""
    expect_split(split_heads, torch.randn(5, 8), 2)
    expect_split(split_heads, torch.randn(2, 3, 4, 6), 6)


@SPLIT_HEADS.check
def not_divisible(split_heads):
    """a width that num_heads does not divide raises ValueError"""
    x = torch.randn(2, 5, 12)
    expect_raises(ValueError, lambda: split_heads(x, 5), "split_heads(x of shape (2, 5, 12), 5)")


@MERGE_HEADS.check
def inverts_split(merge_heads):
    """merge_heads undoes split_heads: (batch, heads, seq, d) becomes (batch, seq, heads*d)"""
    heads = torch.tensor([[[[0, 1], [2, 3], [4, 5]], [[10, 11], [12, 13], [14, 15]]]])  # (1, 2 heads, 3 seq, 2)
    want = torch.tensor([[[0, 1, 10, 11], [2, 3, 12, 13], [4, 5, 14, 15]]])
    got = call(merge_heads, heads, what="merge_heads(x of shape (1, 2, 3, 2))")
    expect_tensor(got, want, "merge_heads(x of shape (1, 2, 3, 2)) with head 0 = [[0, 1], [2, 3], [4, 5]] "
                  "and head 1 = [[10, 11], [12, 13], [14, 15]]")


@MERGE_HEADS.check
def merge_any_leading_dims(merge_heads):
    """no batch dimension, or two"""
    expect_merge(merge_heads, torch.randn(3, 5, 4))
    expect_merge(merge_heads, torch.randn(2, 2, 4, 3, 5))
