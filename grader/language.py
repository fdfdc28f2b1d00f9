"""The words a student reads around a check's result, in the language of the release they were handed.

English is the source: the status words live in grader.results.Status, the labels in grader.feedback, the
phrases that frame a result below (PHRASES), and each check's description in its docstring. A translated
release (`python -m grader release --lang zh`) writes `lang.json` beside this file: a flat table from key to
translated text. Without it (this repository, the English release, grading) every lookup returns the English
it was given, so grading and the instructor's pages stay English whatever a student was handed.
"""
from __future__ import annotations

import json
import os
from functools import lru_cache

TABLE = "lang.json"  # written into the release's grader/ by grader.authoring.i18n; never present in the repository

# The fixed text around a check's result (grader.feedback) and under `python -m grader test`'s tables
# (grader.selfcheck), as str.format templates; a translation keeps exactly the same {fields}.
PHRASES: dict[str, str] = {
    "headline": "{exercise}: {label} — {counted}, {points}",
    "counted": "{passed}/{total} {kind}",
    "kind_checks": "checks",
    "kind_public": "public checks",
    "no_checks": "no checks ran",
    "points": "{score}/{points} points",
    "points_public": "{score}/{points} points on public checks (grading adds hidden checks)",
    "hidden": "(hidden)",
    "write_it": "Replace `raise NotImplementedError` with your code, then run this cell again.",
    "table_caption": "points on public checks only: grading adds hidden checks",
    "column_exercise": "exercise",
    "column_checks": "public checks",
    "column_points": "points",
    "column_status": "status",
    "first_problem": "{name}: {words} in the check \"{description}\" (-{lost} points): {message}",
    "closing": "{done} of {total} exercises pass their public checks.\n"
               "Grading adds hidden checks: make your code right in general,\n"
               "not only for the examples.",
}


@lru_cache(maxsize=1)
def table() -> dict[str, str]:
    """The release's translations, key -> text; empty where there is no table (English)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), TABLE)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f)["text"])


def text(key: str, english: str) -> str:
    """The translation of `key`, else the English it stands for."""
    return table().get(key, english)


def phrase(key: str, /, **fields: object) -> str:
    """PHRASES[key] (or its translation) with its fields filled in."""
    return text(f"phrase:{key}", PHRASES[key]).format(**fields)


def status_words(status: str, english: str) -> str:
    """A Status's words (`Passed`, `Your code raised an error`), as the self-check's table shows them."""
    return text(f"status:{status}", english)


def label(status: str, english: str) -> str:
    """The short status label of a check's result in the notebook (`not implemented yet`)."""
    return text(f"label:{status}", english)


def description(exercise: str, check: str, english: str) -> str:
    """A check's one-line description (its docstring's first line), keyed by its id `<exercise>.<check>`."""
    return text(f"check:{exercise}.{check}", english)


__all__ = ["PHRASES", "TABLE", "table", "text", "phrase", "status_words", "label", "description"]
