"""Input generators for checks: random shapes, and the same values in other memory layouts.

Everything draws from torch's global generator, which the runner seeds for each check,
so the same answer always meets the same inputs.
"""
from __future__ import annotations

from typing import Iterator

import torch


def randint(low: int, high: int) -> int:
    """A random int in [low, high], from torch's seeded generator."""
    return int(torch.randint(low, high + 1, ()).item())


def random_shape(min_dims: int = 1, max_dims: int = 4, min_size: int = 1, max_size: int = 6) -> tuple[int, ...]:
    return tuple(randint(min_size, max_size) for _ in range(randint(min_dims, max_dims)))


def layouts(x: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """The values of `x` in several layouts: contiguous, transposed copy, strided slice, offset slice.

    Every variant holds exactly the values of `x` (so a reference computed on `x` still applies),
    but only the first is contiguous; the names say which layout a failure came from.
    """
    yield "contiguous", x.contiguous()
    if x.dim() >= 2:
        t = x.transpose(-1, -2).contiguous().transpose(-1, -2)
        yield "transposed (column-major) view", t
    big = torch.empty((x.shape[0] * 2,) + tuple(x.shape[1:]) if x.dim() else (2,), dtype=x.dtype, device=x.device)
    if x.dim():
        big[::2] = x
        yield "every-other-row slice", big[::2]
    pad = torch.empty(x.numel() + 3, dtype=x.dtype, device=x.device)
    view = pad[3:].view(x.shape)
    view.copy_(x)
    yield "view at storage offset 3", view
