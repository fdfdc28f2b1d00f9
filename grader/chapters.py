"""The ten chapter notebooks, by file stem, and the short key their exercise ids use (`01_tensors` -> `tensors`)."""
from __future__ import annotations

NOTEBOOKS: tuple[str, ...] = (
    "01_tensors", "02_dtypes", "03_memory", "04_flops", "05_autograd",
    "06_modules", "07_initialization", "08_checkpointing", "09_gpu", "10_ddp",
)


def key(stem: str) -> str:
    """The exercise-id prefix of a notebook stem: `01_tensors` -> `tensors`."""
    return stem.split("_", 1)[1]


def stem(key_: str) -> str:
    """The notebook stem of an exercise-id prefix: `tensors` -> `01_tensors`."""
    for s in NOTEBOOKS:
        if key(s) == key_:
            return s
    raise KeyError(f"no chapter {key_!r}; chapters: {', '.join(NOTEBOOKS)}")
