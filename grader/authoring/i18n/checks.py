"""What is wrong with a language's translations, per unit: missing, stale (the English changed after it was
translated), orphaned (its English is gone), or unfaithful: a number, a code span, a formula, a link target or a
heading of the English missing from it, or a template's {fields} changed.

A number is a run of ASCII digits not glued to a letter or underscore before it (so `float16`, `fp8`, `H100`
and `e4m3` are names, not numbers), with its decimals, further dotted parts (`2.13.0`) and exponent (`1e-3`);
thousands separators are ignored (`1,024` is 1024). Numbers in code spans count: they are copied anyway.
"""
from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path

from grader.authoring.i18n import glossary
from grader.authoring.i18n.sources import Unit, all_units
from grader.authoring.i18n.store import README, STRINGS, Entry, read_json, read_readme, sha

NUMBER = re.compile(r"(?<![A-Za-z_0-9.])(?:\d{1,3}(?:,\d{3})+(?![0-9])|\d+)(?:\.\d+)*(?:[eE][-+]?\d+)?")
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,}).*?^[ \t]*\1[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
DISPLAY_MATH = re.compile(r"\$\$.+?\$\$", re.S)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?![\s$])[^$\n]+?(?<!\s)\$")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK_TARGET = re.compile(r"\]\(([^)\s]+)|<(https?://[^>\s]+)>")
HEADING = re.compile(r"^(#{1,6})\s", re.M)
OTHER_FILES = (glossary.FILE,)  # kept in translations/<lang>/ beside the translations, translating nothing


def numbers(text: str) -> set[str]:
    """The numbers `text` states (see the module's docstring), thousands separators removed."""
    return {m.group().replace(",", "") for m in NUMBER.finditer(text)}


def verbatim(text: str) -> list[str]:
    """What a translation copies as it is: fenced blocks, code spans, formulas, HTML comments (the README's
    `<!-- colab -->` marks where its Colab route goes), link and image targets."""
    found = [m.group() for m in FENCE.finditer(text)]
    rest = FENCE.sub("", text)
    found += [m.group() for m in INLINE_CODE.finditer(rest)]
    rest = INLINE_CODE.sub("", rest)
    found += [m.group() for m in DISPLAY_MATH.finditer(rest)]
    rest = DISPLAY_MATH.sub("", rest)
    found += [m.group() for m in INLINE_MATH.finditer(rest)]
    found += [m.group() for m in HTML_COMMENT.finditer(rest)]
    found += [m.group(1) or m.group(2) for m in LINK_TARGET.finditer(rest)]
    return found


def headings(text: str) -> list[int]:
    """The level of each Markdown heading, in order (fenced code aside)."""
    return [len(m.group(1)) for m in HEADING.finditer(FENCE.sub("", text))]


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def prose(text: str) -> str:
    """`text` without what is copied as it is (code, formulas, comments, link targets): what gets translated."""
    for piece in sorted(set(verbatim(text)), key=len, reverse=True):
        text = text.replace(piece, " ")
    return text


def unfaithful(en: str, text: str, template: bool = False,
               terms: list[glossary.Term] | None = None) -> list[tuple[str, str]]:
    """(kind, detail) for each way `text` fails to carry what its English `en` states, or to use the glossary's
    word for an enforced term of `terms`."""
    found = []
    lost = sorted(numbers(en) - numbers(text), key=lambda n: (len(n), n))
    if lost:
        found.append(("numbers", "missing " + ", ".join(lost)))
    missing = [v for v in dict.fromkeys(verbatim(en)) if v not in text]
    if missing:
        found.append(("verbatim", "missing " + ", ".join(repr(v if len(v) <= 60 else v[:57] + "...") for v in missing)))
    if headings(en) != headings(text):
        found.append(("headings", f"levels {headings(en)} in English, {headings(text)} here"))
    if template and fields(en) != fields(text):
        found.append(("fields", f"{{{'}, {'.join(sorted(fields(en)))}}} in English, "
                                f"{{{'}, {'.join(sorted(fields(text)))}}} here"))
    if not text.strip():
        found.append(("empty", "the translation is empty"))
    said = re.sub(r"\{\w*\}", " ", prose(en)) if template else prose(en)  # a {field} is a name, not prose
    missed = glossary.unused(terms or [], said, text)
    if missed:
        found.append(("glossary", ", ".join(f"{t.en} -> {t.word}" for t in missed)))
    return found


@dataclass(frozen=True)
class Problem:
    """One thing to fix in translations/<lang>/<file>, at `key` (a cell id, a string key, README)."""

    file: str
    key: str
    kind: str       # missing | stale | orphan | corrupt | numbers | verbatim | headings | fields | empty | glossary
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.kind}" + (f" ({self.detail})" if self.detail else "")


def stored(folder: Path, file: str, lang: str) -> dict[str, Entry]:
    """The entries kept in translations/<lang>/<file> (the README as one entry, without its English)."""
    if file == README:
        readme = read_readme(folder / README)
        return {} if readme is None else {"README": Entry(readme[0], "", readme[1])}
    return read_json(folder / file, lang)


def problems_of(file: str, units: list[Unit], entries: dict[str, Entry],
                terms: list[glossary.Term] | None = None) -> list[Problem]:
    """The problems of one file's translations against its units, in the units' order, orphans last."""
    found = []
    for unit in units:
        entry = entries.get(unit.key)
        if entry is None or not entry.text.strip():
            found.append(Problem(unit.file, unit.key, "missing"))
        elif entry.en and sha(entry.en) != entry.en_sha:
            found.append(Problem(unit.file, unit.key, "corrupt", "its en is not the English its en_sha names"))
        elif entry.en_sha != sha(unit.en):
            found.append(Problem(unit.file, unit.key, "stale", "the English changed after it was translated"))
        else:
            found += [Problem(unit.file, unit.key, kind, detail)
                      for kind, detail in unfaithful(unit.en, entry.text, unit.template, terms)]
    known = {u.key for u in units}
    found += [Problem(file, key, "orphan", "no such English any more") for key in entries if key not in known]
    return found


def problems(repo: Path, lang: str, units: dict[str, list[Unit]] | None = None) -> list[Problem]:
    """Every problem of translations/<lang>/ against the repo's English (or against the `units` given only)."""
    folder = repo / "translations" / lang
    whole = units is None  # then a file of translations/<lang>/ that no English belongs to is a problem too
    units = all_units(repo) if units is None else units
    found, words = [], glossary.terms(folder)
    for file, file_units in units.items():
        found += problems_of(file, file_units, stored(folder, file, lang), words)
    if whole and folder.is_dir():
        found += [Problem(p.name, "*", "orphan", "a file no English belongs to") for p in sorted(folder.iterdir())
                  if p.name not in units and p.name not in OTHER_FILES]
    return found


__all__ = ["numbers", "verbatim", "headings", "unfaithful", "Problem", "problems", "problems_of", "stored",
           "README", "STRINGS"]
