"""`python -m grader translate --lang LANG ACTION`: keep translations/LANG/ in step with the English.

  --check          list every problem (missing, stale, orphaned, unfaithful); exit 1 if there is one
  --todo [--out F] list what to translate or re-translate, with its English (and, for a stale one, what changed
                   in the English since); with --out, also write F: a fill-in file with an empty LANG field per item
  --apply F        write the translations filled into F (all or nothing: any item whose English changed since, or
                   that loses a number, code span, formula, link or heading of its English, stops it)
  --prune          drop translations whose English is gone
--only 04_flops,README limits --todo and --check to those files.
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

from grader.authoring.i18n import glossary
from grader.authoring.i18n.checks import Problem, problems, stored, unfaithful
from grader.authoring.i18n.localize import translations_dir
from grader.authoring.i18n.sources import Unit, all_units
from grader.authoring.i18n.store import README, Entry, TranslationError, sha, write_json, write_readme


def about(file: str, lang: str) -> str:
    """The note at the top of a JSON translation file."""
    what = (f"the markdown cells of notebooks/{file[:-5]}.ipynb (generated from solutions/), keyed by cell id"
            if file[:2].isdigit() else
            "the words the release's grader shows around a check, keyed status:, label:, phrase:, check:<check id> "
            "(public checks), and the README's Colab route (colab:)")
    return (f"The {lang} translation of {what}. en is the English each was made from, en_sha its hash. Written by "
            f"`python -m grader translate --lang {lang} --apply`; `--todo` lists what to (re)translate.")


def _selected(units: dict[str, list[Unit]], only: str | None) -> dict[str, list[Unit]]:
    if not only:
        return units
    wanted = [w.strip().removesuffix(".json").removesuffix(".md") for w in only.split(",") if w.strip()]
    chosen = {f: u for f, u in units.items() if any(f.removesuffix(".json").removesuffix(".md") == w for w in wanted)}
    if len(chosen) != len(wanted):
        raise TranslationError(f"--only {only}: the files are {', '.join(units)}")
    return chosen


def todo_items(repo: Path, lang: str, units: dict[str, list[Unit]]) -> list[dict]:
    """One fill-in item per unit to (re)translate: its English now, and what it was translated from before."""
    folder = repo / "translations" / lang
    by_key = {(u.file, u.key): u for us in units.values() for u in us}
    items, seen = [], set()
    for p in problems(repo, lang, units):
        if p.kind == "orphan" or (p.file, p.key) in seen:
            continue
        seen.add((p.file, p.key))
        unit = by_key[(p.file, p.key)]
        old = stored(folder, p.file, lang).get(p.key)
        item = {"file": p.file, "key": p.key, "state": p.kind, "detail": p.detail, "en": unit.en}
        if old is not None:
            item.update(old_en=old.en, **{f"old_{lang}": old.text})
        item[lang] = ""
        items.append(item)
    return items


def _show(item: dict, lang: str) -> str:
    head = f"--- {item['file']} · {item['key']} · {item['state']}" + (f" ({item['detail']})" if item["detail"] else "")
    if item["state"] == "stale" and item.get("old_en"):
        diff = difflib.unified_diff(item["old_en"].splitlines(), item["en"].splitlines(), "translated from", "English now",
                                    lineterm="", n=1)
        return head + "\n" + "\n".join(diff)
    return head + "\n" + "\n".join("    " + line for line in item["en"].splitlines())


def todo(repo: Path, lang: str, units: dict[str, list[Unit]], out: Path | None) -> int:
    items = todo_items(repo, lang, units)
    for file, file_units in units.items():
        mine = [i for i in items if i["file"] == file]
        states = sorted({i["state"] for i in mine})
        counts = ", ".join(f"{sum(i['state'] == s for i in mine)} {s}" for s in states)
        print(f"{file}: {len(file_units) - len(mine)} of {len(file_units)} done" + (f"; to do: {counts}" if mine else ""))
    if out is not None:
        out.write_text(json.dumps({"lang": lang, "items": items}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {len(items)} items to fill in to {out}: put each translation in its \"{lang}\" field, then "
              f"`python -m grader translate --lang {lang} --apply {out}`")
    else:
        for item in items:
            print(_show(item, lang))
    return 1 if items else 0


def apply(repo: Path, lang: str, units: dict[str, list[Unit]], filled: Path) -> int:
    """Write the filled items' translations; nothing at all when any item is wrong."""
    data = json.loads(filled.read_text(encoding="utf-8"))
    if data.get("lang") != lang:
        raise TranslationError(f"{filled} is for {data.get('lang')!r}, not {lang!r}")
    by_key = {(u.file, u.key): u for us in units.values() for u in us}
    terms = glossary.terms(translations_dir(repo, lang))
    errors, chosen = [], {}
    for item in data["items"]:
        text = item.get(lang, "")
        if not text.strip():
            continue
        where = f"{item['file']}: {item['key']}"
        unit = by_key.get((item["file"], item["key"]))
        if unit is None:
            errors.append(f"{where}: no such English any more")
        elif sha(unit.en) != sha(item["en"]):
            errors.append(f"{where}: the English changed after {filled.name} was written: run --todo again")
        else:
            errors += [f"{where}: {kind} ({detail})" for kind, detail in unfaithful(unit.en, text, unit.template, terms)]
            chosen[(unit.file, unit.key)] = Entry(sha(unit.en), unit.en, text)
    if errors:
        print("nothing written:\n  " + "\n  ".join(errors), file=sys.stderr)
        return 1
    folder = translations_dir(repo, lang)
    for file in dict.fromkeys(f for f, _ in chosen):
        if file == README:
            entry = chosen[(file, "README")]
            write_readme(folder / README, entry.en, entry.text)
        else:
            _write(folder, file, lang, units[file], {k: e for (f, k), e in chosen.items() if f == file})
    skipped = sum(1 for i in data["items"] if not i.get(lang, "").strip())
    print(f"wrote {len(chosen)} translations into {folder}" + (f"; {skipped} items left empty" if skipped else ""))
    return 0


def _write(folder: Path, file: str, lang: str, units: list[Unit], new: dict[str, Entry]) -> list[str]:
    """Rewrite `file` with `new` entries added, in notebook (or course) order, dropping translations whose English is
    gone; the keys dropped."""
    entries = {**stored(folder, file, lang), **new}
    kept = {u.key: entries[u.key] for u in units if u.key in entries}
    write_json(folder / file, lang, kept, about(file, lang))
    return [k for k in entries if k not in kept]


def prune(repo: Path, lang: str, units: dict[str, list[Unit]]) -> int:
    folder = translations_dir(repo, lang)
    for file, file_units in units.items():
        if file != README and (folder / file).is_file():
            for key in _write(folder, file, lang, file_units, {}):
                print(f"dropped {file}: {key}")
    return 0


def check(repo: Path, lang: str, units: dict[str, list[Unit]]) -> int:
    found: list[Problem] = problems(repo, lang, units)
    for p in found:
        print(p)
    total = sum(len(u) for u in units.values())
    print(f"{lang}: {len(found)} problems over {total} units" if found else f"{lang}: all {total} units translated")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry: one action on translations/LANG/."""
    parser = argparse.ArgumentParser(prog="python -m grader translate", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    parser.add_argument("--lang", required=True, help="a language with a folder in translations/ (zh)")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true")
    action.add_argument("--todo", action="store_true")
    action.add_argument("--apply", type=Path, metavar="FILE")
    action.add_argument("--prune", action="store_true")
    parser.add_argument("--out", type=Path, help="with --todo: the fill-in file to write")
    parser.add_argument("--only", help="with --todo or --check: these files only (04_flops,grader,README)")
    args = parser.parse_args(argv)
    from grader.authoring.release import repo_root

    try:
        repo = repo_root()
        translations_dir(repo, args.lang)
        units = all_units(repo)
        if args.todo:
            return todo(repo, args.lang, _selected(units, args.only), args.out)
        if args.check:
            return check(repo, args.lang, _selected(units, args.only))
        if args.apply:
            return apply(repo, args.lang, units, args.apply)
        return prune(repo, args.lang, units)
    except (TranslationError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
