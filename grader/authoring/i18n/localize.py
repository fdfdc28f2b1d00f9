"""Turn a built English student release into a translated one: markdown cells, README, the grader's words, and
the glossary beside the README.

Only the text of markdown cells changes (matched by cell id, each checked to be the English its translation was
made from); code cells, outputs, ids and metadata stay byte for byte. Any problem of the language's translations
(missing, stale, orphaned, unfaithful) stops the build and names every cell: never a release in two languages.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat

from grader.authoring.i18n import glossary
from grader.authoring.i18n.checks import problems, stored
from grader.authoring.i18n.sources import SHIPPED, all_units
from grader.authoring.i18n.store import README, STRINGS, TranslationError, sha
from grader.language import TABLE

ENGLISH = "en"


def translations_dir(repo: Path, lang: str) -> Path:
    """translations/<lang>/, which must exist."""
    if not re.fullmatch(r"[a-z]{2,3}(-[A-Za-z0-9]+)?", lang):
        raise TranslationError(f"{lang!r} is not a language code (zh, pt-BR)")
    folder = repo / "translations" / lang
    if not folder.is_dir():
        known = sorted(p.name for p in (repo / "translations").iterdir() if p.is_dir()) \
            if (repo / "translations").is_dir() else []
        raise TranslationError(f"no translations for {lang!r} ({folder} does not exist); languages: "
                               f"{', '.join([ENGLISH, *known])}")
    return folder


def _notebook(path: Path, cells: dict[str, str], english: dict[str, str]) -> None:
    """Replace each markdown cell's text of the notebook at `path` by its translation, in place."""
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        key = cell.get("id")
        if key not in cells or sha(cell.source) != sha(english.get(key, "")):
            raise TranslationError(f"{path.name}: markdown cell {key} is not the English its translation was made "
                                   f"from (the release and translations/ disagree)")
        cell.source = cells[key]
    text = nbformat.writes(nb)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")


def localize(repo: Path, out: Path, lang: str) -> dict[str, str]:
    """Translate the release in `out` into `lang`; return the README's Colab route texts in that language."""
    folder = translations_dir(repo, lang)
    units = all_units(repo)
    found = problems(repo, lang, units)
    if found:
        raise TranslationError(
            f"the {lang} translations are not complete and current ({len(found)} problems):\n  "
            + "\n  ".join(str(p) for p in found)
            + f"\n`python -m grader translate --lang {lang} --todo` lists what to translate, with the English")
    for path in sorted((out / "notebooks").glob("*.ipynb")):
        file = f"{path.stem}.json"
        if file not in units:
            raise TranslationError(f"{path.name}: no chapter of the course")
        entries = stored(folder, file, lang)
        _notebook(path, {k: e.text for k, e in entries.items()}, {u.key: u.en for u in units[file]})
    (out / "README.md").write_text(stored(folder, README, lang)["README"].text, encoding="utf-8")
    if (folder / glossary.FILE).is_file():  # the terms, for students who meet them in English material
        shutil.copyfile(folder / glossary.FILE, out / glossary.FILE)
    strings = {k: e.text for k, e in stored(folder, STRINGS, lang).items()}
    shipped = {k: v for k, v in strings.items() if k.split(":", 1)[0] in SHIPPED}
    (out / "grader" / TABLE).write_text(json.dumps({"lang": lang, "text": shipped}, ensure_ascii=False, indent=1)
                                        + "\n", encoding="utf-8")
    return {k.split(":", 1)[1]: v for k, v in strings.items() if k.startswith("colab:")}
