"""The ten chapters, each declared once, and the one rule that names a file's chapter."""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class Chapter:
    """One chapter, declared once: its notebook's stem (`01_tensors`) names the notebook, and the part after the
    number (`tensors`) names its exercises, check modules, scenarios and answer tests."""

    stem: str
    title: str  # what the chapter is called where people read it (feedback pages, the README)

    @property
    def key(self) -> str:
        return key(self.stem)


CHAPTERS: tuple[Chapter, ...] = (
    Chapter("01_tensors", "Tensors: storage, views and einops"),
    Chapter("02_dtypes", "Floating-point formats and mixed precision"),
    Chapter("03_memory", "Where the bytes go"),
    Chapter("04_flops", "Counting compute, MFU and the roofline"),
    Chapter("05_autograd", "Gradients by hand and by machine"),
    Chapter("06_modules", "nn.Module from the inside"),
    Chapter("07_initialization", "Scale, variance and reproducibility"),
    Chapter("08_checkpointing", "Saving, resuming, recomputing"),
    Chapter("09_gpu", "Devices, asynchrony, transfers"),
    Chapter("10_ddp", "Data-parallel training"),
)
NOTEBOOKS: tuple[str, ...] = tuple(c.stem for c in CHAPTERS)


def title(stem: str) -> str:
    """`01_tensors` -> `Chapter 01 · Tensors: storage, views and einops` (an unknown stem is shown as is)."""
    for c in CHAPTERS:
        if c.stem == stem:
            return f"Chapter {stem.split('_', 1)[0]} · {c.title}"
    return stem


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
