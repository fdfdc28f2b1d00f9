"""The glossary's enforced terms: where the English says one, its translation says the glossary's word for it.

translations/<lang>/glossary.md is a Markdown table per topic, `| English | <lang> | enforced | note |`; rows whose
third cell is ✓ are enforced. "a / b" in both columns pairs a with the first word and b with the second;
a parenthesis (either width) is a note. The English matches as a whole word, any case, with a plural s or es,
outside code, formulas and links, and not as a call (`stride()` is an identifier, left as it is).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FILE = "glossary.md"
_ROW = re.compile(r"^\|([^|]+)\|([^|]+)\|\s*✓\s*\|")
_NOTE = re.compile(r"\s*[(（].*?[)）]\s*")


@dataclass(frozen=True)
class Term:
    """One enforced term: its English, the word a translation must use for it, and how to find the English."""

    en: str
    word: str

    @property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(rf"(?<![\w-]){re.escape(self.en)}(?:s|es)?(?![\w-])(?!\()", re.I)


def terms(folder: Path) -> list[Term]:
    """The enforced terms of translations/<lang>/glossary.md (none when there is no glossary)."""
    path = folder / FILE
    if not path.is_file():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line)
        if match is None:
            continue
        ens = [_NOTE.sub("", e).strip() for e in match[1].split(" / ")]
        words = [_NOTE.sub("", w).strip() for w in match[2].split(" / ")]
        if len(ens) != len(words) or not all(ens) or not all(words):
            raise ValueError(f"{path}: {line!r}: pair each English term with one word (a / b | x / y)")
        found += [Term(e, w) for e, w in zip(ens, words)]
    return found


def unused(terms: list[Term], en: str, text: str) -> list[Term]:
    """The enforced terms whose English `en` (without its code: the caller strips it) says and `text` lacks."""
    return [t for t in terms if t.pattern.search(en) and t.word not in text]
