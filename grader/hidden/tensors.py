"""Chapter 01 (tensors): hidden checks: random shapes, layouts and edge cases, run only at grading."""
from __future__ import annotations

import torch

from grader.exercises.tensors import (ATTENTION_SCORES, BROADCAST_SHAPE, ELEMENT_OFFSET, MERGE_HEADS, SAME_STORAGE,
                                      SPLIT_HEADS, _broadcast_shapes, expect_broadcast, expect_offset,
                                      expect_merge, expect_same_storage, expect_scores, expect_split, numbered)
from grader.expect import expect_raises
from grader.inputs import layouts, randint, random_shape


@SAME_STORAGE.hidden
def disjoint_chunks(same_storage):
    """two non-overlapping chunks of one tensor"""
    x = torch.randn(10, 3)
    a, b = x.chunk(2)
    expect_same_storage(same_storage, a, b, True, "a, b = x.chunk(2)")


@SAME_STORAGE.hidden
def other_views(same_storage):
    """views made by expand, diagonal, unsqueeze, detach, a dtype view, as_strided"""
    x = torch.randn(6, 6)
    for how, y in [("x[:, :1].expand(6, 4)", x[:, :1].expand(6, 4)), ("x.diagonal()", x.diagonal()),
                   ("x.unsqueeze(0)", x.unsqueeze(0)), ("x.detach()", x.detach()),
                   ("x.view(torch.int32)", x.view(torch.int32)), ("x.as_strided((2, 2), (1, 7), 5)",
                                                                  x.as_strided((2, 2), (1, 7), 5))]:
        expect_same_storage(same_storage, y, x, True, f"{how}, x")


@SAME_STORAGE.hidden
def reshape_copies_when_it_must(same_storage):
    """reshape of a transposed tensor copies; of a contiguous one it views"""
    x = torch.randn(4, 6)
    expect_same_storage(same_storage, x, x.reshape(2, 12), True, "x, x.reshape(2, 12)")
    expect_same_storage(same_storage, x.t(), x.t().reshape(24), False, "x.t(), x.t().reshape(24)")


@SAME_STORAGE.hidden
def random_slices(same_storage):
    """random slices of random tensors, against copies of the same values"""
    for _ in range(20):
        x = torch.randn(random_shape(1, 3, 2, 6))
        start = randint(0, x.shape[0] - 1)
        expect_same_storage(same_storage, x, x[start:], True, f"x, x[{start}:]")
        expect_same_storage(same_storage, x[start:], x.clone()[start:], False, f"x[{start}:], x.clone()[{start}:]")


@ELEMENT_OFFSET.hidden
def random_views(element_offset):
    """random permuted, sliced and expanded views of random shapes, random indices"""
    for _ in range(40):
        shape = random_shape(1, 4, 1, 5)
        x = numbered(torch.Size(shape).numel() + 7)[7:].view(shape)
        x = x.permute(*torch.randperm(len(shape)).tolist())
        d = randint(0, x.dim() - 1)
        if x.shape[d] > 2:
            x = x.narrow(d, 1, x.shape[d] - 1)[(slice(None),) * d + (slice(None, None, 2),)]
        if randint(0, 2) == 0:
            x = x.unsqueeze(0).expand(3, *x.shape)
        index = tuple(randint(-s, s - 1) for s in x.shape)
        expect_offset(element_offset, x, index, "a view x")


@ELEMENT_OFFSET.hidden
def zero_dim(element_offset):
    """a 0-dim tensor and the empty index ()"""
    x = numbered(10)[4]
    expect_offset(element_offset, x, (), "x = arange(10)[4]")


@ELEMENT_OFFSET.hidden
def random_out_of_range(element_offset):
    """indices just past either end of a random dimension of a transposed tensor"""
    for _ in range(10):
        x = numbered(60).view(3, 4, 5).transpose(0, 2)
        d = randint(0, 2)
        for bad in (x.shape[d], -x.shape[d] - 1):
            index = tuple(bad if i == d else 0 for i in range(3))
            expect_raises(IndexError, lambda: element_offset(x, index), f"element_offset(x of shape (5, 4, 3), {index})")


@ELEMENT_OFFSET.hidden
def index_of_the_wrong_length(element_offset):
    """an index with one entry too many or too few for x's dimensions raises: it names no element of x"""
    # x[index] raises IndexError for too many entries and returns a sub-tensor, not an element, for too few. The
    # statement asks for one int per dimension and names IndexError only for entries outside the shape, so a
    # wrong length may raise IndexError or ValueError (zip(..., strict=True)); returning a position may not.
    for _ in range(6):
        shape = random_shape(1, 4, 2, 5)
        x = numbered(torch.Size(shape).numel()).view(shape).transpose(0, -1)
        dims = x.dim()
        for n in (dims + 1, dims - 1):
            index = tuple(randint(0, 1) for _ in range(n))  # every entry in range: only the length is wrong
            expect_raises((IndexError, ValueError), lambda: element_offset(x, index),
                          f"element_offset(x of shape {tuple(x.shape)}, {index}) ({n} entries for a {dims}-dim x)")


def _compatible_pair() -> tuple[tuple[int, ...], tuple[int, ...]]:
    out = random_shape(0, 5, 0, 4)
    a = tuple(1 if randint(0, 2) == 0 else s for s in out[randint(0, len(out)):])
    b = tuple(1 if randint(0, 2) == 0 else s for s in out[randint(0, len(out)):])
    a = tuple(s if s or randint(0, 1) else 1 for s in a)
    return a, b


@BROADCAST_SHAPE.hidden
def random_compatible(broadcast_shape):
    """random compatible shapes of ranks 0 to 5, zero sizes included"""
    for _ in range(200):
        a, b = _compatible_pair()
        expect_broadcast(broadcast_shape, a, b)


@BROADCAST_SHAPE.hidden
def random_incompatible(broadcast_shape):
    """random shapes with one clashing dimension"""
    for _ in range(50):
        a, b = _compatible_pair()
        if not a:
            continue
        d = randint(1, len(a))
        clash = list(a)
        clash[-d] = a[-d] + 2 if a[-d] > 1 else 3
        other = list(b) if len(b) >= d else [1] * (d - len(b)) + list(b)
        other[-d] = clash[-d] + 1
        a2, b2 = tuple(clash), tuple(other)
        try:
            _broadcast_shapes(a2, b2)
            continue
        except RuntimeError:
            pass
        expect_raises(ValueError, lambda: broadcast_shape(a2, b2), f"broadcast_shape({a2}, {b2})")


@BROADCAST_SHAPE.hidden
def zero_sizes(broadcast_shape):
    """a size of 0 broadcasts with 1 only"""
    expect_broadcast(broadcast_shape, (0,), (1,))
    expect_broadcast(broadcast_shape, (2, 0), (2, 1))
    expect_raises(ValueError, lambda: broadcast_shape((0,), (3,)), "broadcast_shape((0,), (3,))")


@ATTENTION_SCORES.hidden
def random_shapes_and_layouts(attention_scores):
    """random batch ranks and sizes, inputs in non-contiguous layouts"""
    for _ in range(6):
        batch = random_shape(0, 3, 1, 3)
        sq, sk, d = randint(1, 6), randint(1, 6), randint(1, 6)
        q, k = torch.randn(*batch, sq, d), torch.randn(*batch, sk, d)
        for (qname, qv), (kname, kv) in zip(layouts(q), layouts(k)):
            expect_scores(attention_scores, qv, kv, f"q {tuple(q.shape)} ({qname}), k {tuple(k.shape)} ({kname})")


@ATTENTION_SCORES.hidden
def square(attention_scores):
    """seq_q = seq_k = d, where a missing transpose still has the right shape"""
    q, k = torch.randn(2, 4, 4), torch.randn(2, 4, 4)
    expect_scores(attention_scores, q, k, "q (2, 4, 4), k (2, 4, 4)")


@ATTENTION_SCORES.hidden
def bfloat16(attention_scores):
    """bfloat16 in, bfloat16 out"""
    q, k = torch.randn(3, 5, 8).bfloat16(), torch.randn(3, 6, 8).bfloat16()
    expect_scores(attention_scores, q, k, "bfloat16 q (3, 5, 8), k (3, 6, 8)")


@SPLIT_HEADS.hidden
def random_split(split_heads):
    """random shapes and head counts (1 head, d = 1), integer and non-contiguous inputs"""
    for _ in range(10):
        lead = random_shape(0, 2, 1, 3)
        heads, d, seq = randint(1, 4), randint(1, 4), randint(1, 5)
        x = torch.randint(-50, 50, (*lead, seq, heads * d))
        for name, xv in layouts(x):
            expect_split(split_heads, xv, heads, name)


@SPLIT_HEADS.hidden
def random_not_divisible(split_heads):
    """random widths that the head count does not divide"""
    for _ in range(5):
        heads = randint(2, 5)
        x = torch.randn(2, 3, heads * randint(1, 3) + randint(1, heads - 1))
        expect_raises(ValueError, lambda: split_heads(x, heads), f"split_heads(x of shape {tuple(x.shape)}, {heads})")


@MERGE_HEADS.hidden
def random_merge(merge_heads):
    """random shapes, integer and non-contiguous inputs"""
    for _ in range(10):
        x = torch.randint(-50, 50, (*random_shape(0, 2, 1, 3), randint(1, 4), randint(1, 5), randint(1, 4)))
        for name, xv in layouts(x):
            expect_merge(merge_heads, xv, f"x of shape {tuple(x.shape)} ({name})")
