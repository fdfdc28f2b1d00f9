"""The translation files' format: one JSON file per chapter (and one for the grader's strings), one Markdown file
for the README.

A JSON file is {"about": ..., "entries": {key: {"en_sha", "en", "<lang>"}}}: `en` is the English the translation
was made from and `en_sha` its hash, so a changed English cell shows as stale and `--todo` can show what changed.
Texts of several lines are stored as lists of lines (as .ipynb stores sources), so a diff shows the line that
changed. The README is kept as Markdown, readable as it is: its first line is a comment with the hash.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

SHA_CHARS = 16  # as grader.demonstrations.digest: enough to tell edits apart, short enough to read
README = "README.md"
STRINGS = "grader.json"
README_HEADER = "<!-- translated from release/README.md, en_sha={sha}: keep this line; the release drops it -->"
_HEADER = re.compile(r"^<!-- translated from release/README\.md, en_sha=(?P<sha>[0-9a-f]+)[^\n]*-->\n")


class TranslationError(ValueError):
    """A translation is missing, stale or unfaithful: a translated release is never built from it."""


def sha(text: str) -> str:
    """The hash a translation records of the English it was made from."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:SHA_CHARS]


@dataclass(frozen=True)
class Entry:
    """One translation: the English it was made from, that English's hash, and the translated text."""

    en_sha: str
    en: str
    text: str


def _joined(value: object, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "\n".join(value)
    raise TranslationError(f"{where}: expected a string or a list of lines, got {type(value).__name__}")


def _lines(text: str) -> str | list[str]:
    return text.split("\n") if "\n" in text else text


def read_json(path: Path, lang: str) -> dict[str, Entry]:
    """The entries of a chapter's (or the strings') file; {} when it does not exist yet."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise TranslationError(f"{path}: not valid JSON ({e})") from None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise TranslationError(f"{path}: expected an object with \"entries\"")
    out = {}
    for key, value in entries.items():
        where = f"{path.name}: {key}"
        if not isinstance(value, dict) or not {"en_sha", "en", lang} <= value.keys():
            raise TranslationError(f"{where}: an entry needs \"en_sha\", \"en\" and \"{lang}\"")
        out[key] = Entry(str(value["en_sha"]), _joined(value["en"], where), _joined(value[lang], where))
    return out


def write_json(path: Path, lang: str, entries: dict[str, Entry], about: str) -> None:
    """Write `entries` in the order given, each text as lines where it has several."""
    data = {"about": about,
            "entries": {key: {"en_sha": e.en_sha, "en": _lines(e.en), lang: _lines(e.text)} for key, e in entries.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


def read_readme(path: Path) -> tuple[str, str] | None:
    """(en_sha, translated text without its header line) of a translated README; None when there is none."""
    if not path.is_file():
        return None
    text = path.read_text(encoding="utf-8")
    match = _HEADER.match(text)
    if match is None:
        raise TranslationError(f"{path}: its first line must be {README_HEADER.format(sha='<hash of the English>')}")
    return match["sha"], text[match.end():]


def write_readme(path: Path, en: str, text: str) -> None:
    """Write a translated README, headed by the hash of the English `en` it was made from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(README_HEADER.format(sha=sha(en)) + "\n" + text, encoding="utf-8")
