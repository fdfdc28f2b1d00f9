"""The ten chapter notebooks, by file stem, and the short key their exercise ids use (`01_tensors` -> `tensors`)."""
from __future__ import annotations

import re
import unicodedata

NOTEBOOKS: tuple[str, ...] = (
    "01_tensors", "02_dtypes", "03_memory", "04_flops", "05_autograd",
    "06_modules", "07_initialization", "08_checkpointing", "09_gpu", "10_ddp",
)


# What each chapter is called where people read it (feedback pages, the README).
TITLES: dict[str, str] = {
    "01_tensors": "Tensors: storage, views and einops", "02_dtypes": "Floating-point formats and mixed precision",
    "03_memory": "Where the bytes go", "04_flops": "Counting compute, MFU and the roofline",
    "05_autograd": "Gradients by hand and by machine", "06_modules": "nn.Module from the inside",
    "07_initialization": "Scale, variance and reproducibility", "08_checkpointing": "Saving, resuming, recomputing",
    "09_gpu": "Devices, asynchrony, transfers", "10_ddp": "Data-parallel training",
}


def title(stem: str) -> str:
    """`01_tensors` -> `Chapter 01 · Tensors: storage, views and einops` (an unknown stem is shown as is)."""
    number = stem.split("_", 1)[0]
    return f"Chapter {number} · {TITLES[stem]}" if stem in TITLES else stem


def key(stem: str) -> str:
    """The exercise-id prefix of a notebook stem: `01_tensors` -> `tensors`."""
    return stem.split("_", 1)[1]


def stem(key_: str) -> str:
    """The notebook stem of an exercise-id prefix: `tensors` -> `01_tensors`."""
    for s in NOTEBOOKS:
        if key(s) == key_:
            return s
    raise KeyError(f"no chapter {key_!r}; chapters: {', '.join(NOTEBOOKS)}")


def chapter_of(filename: str) -> str | None:
    """The chapter stem a notebook's file name points at (`jdoe-01-Tensors (1).ipynb` -> `01_tensors`), or None
    when it names no chapter or several. The one rule grading, the self-check and the tests share."""
    name = unicodedata.normalize("NFC", filename.replace("\\", "/").rsplit("/", 1)[-1])  # macOS writes NFD
    name = name[:-len(".ipynb")] if name.casefold().endswith(".ipynb") else name
    tokens = re.findall(r"[^\W_]+", name.casefold())
    hits = [c for c in NOTEBOOKS if _names(tokens, c)]
    return hits[0] if len(hits) == 1 else None


def _names(tokens: list[str], chapter: str) -> bool:
    """Whether the tokens hold the chapter's name, not preceded by another chapter's number (`02_tensors`)."""
    number = int(chapter.split("_", 1)[0])
    return any(t == key(chapter) and (i == 0 or not tokens[i - 1].isdecimal() or int(tokens[i - 1]) == number)
               for i, t in enumerate(tokens))
