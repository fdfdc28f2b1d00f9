"""What English there is to translate, as units: the file of translations/<lang>/ it goes in, its key there, its text.

Chapters: every markdown cell of the student notebook generated from solutions/<stem>.ipynb (what the English
release holds), keyed by cell id, which generation keeps. Strings (grader.json): the Status words, the notebook's
status labels and phrases (grader.language.PHRASES), every public check's description (keyed by check id,
`check:<exercise>.<check>`; hidden checks' are read by instructors only) and the README's Colab route. README:
release/README.md as a whole.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader import chapters, feedback, language, registry
from grader.authoring import colab
from grader.authoring.i18n.store import README, STRINGS, TranslationError
from grader.authoring.student import student_notebook
from grader.results import Status

# grader.json's keys: prefix -> whether the text is a str.format template (a translation keeps its {fields})
PREFIXES = {"status": False, "label": False, "phrase": True, "check": False, "colab": True}
SHIPPED = ("status", "label", "phrase", "check")  # what the release's grader looks up (grader/lang.json)


@dataclass(frozen=True)
class Unit:
    """One piece of English to translate."""

    file: str        # in translations/<lang>/: "01_tensors.json", "grader.json" or "README.md"
    key: str         # cell id, string key, or "README"
    en: str
    template: bool = False  # a str.format template: the translation keeps the same {fields}


def chapter_file(stem: str) -> str:
    return f"{stem}.json"


def chapter_units(repo: Path, stem: str) -> list[Unit]:
    """The markdown cells of the student notebook of chapter `stem`, in notebook order."""
    path = repo / "solutions" / f"{stem}.ipynb"
    nb = student_notebook(nbformat.read(path, as_version=4), path)
    units, seen = [], set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        key = cell.get("id")
        if not key or key in seen:
            raise TranslationError(f"{path}: markdown cell {i} has {'a duplicate' if key else 'no'} id "
                                   f"{key or ''}: translations are keyed by cell id")
        seen.add(key)
        units.append(Unit(chapter_file(stem), key, cell.source))
    return units


def string_units() -> list[Unit]:
    """grader.json's units, in a stable order: statuses, labels, phrases, public checks (course order), Colab."""
    units = [Unit(STRINGS, f"status:{s.value}", s.words) for s in Status]
    units += [Unit(STRINGS, f"label:{k}", v) for k, v in feedback._LABEL.items()]
    units += [Unit(STRINGS, f"phrase:{k}", v, True) for k, v in language.PHRASES.items()]
    course = registry.load(hidden=False)
    units += [Unit(STRINGS, f"check:{e.id}.{c.name}", c.description) for e in course.exercises
              if e.module.startswith("grader.") for c in e.public_checks()]
    units += [Unit(STRINGS, f"colab:{k}", v, True) for k, v in colab.README_TEXT.items()]
    return units


def readme_unit(repo: Path) -> Unit:
    return Unit(README, "README", (repo / "release" / "README.md").read_text(encoding="utf-8"))


def all_units(repo: Path) -> dict[str, list[Unit]]:
    """Every unit, by file: the ten chapters in course order, then the strings, then the README."""
    units = {chapter_file(stem): chapter_units(repo, stem) for stem in chapters.NOTEBOOKS}
    units[STRINGS] = string_units()
    units[README] = [readme_unit(repo)]
    return units
