"""The Chinese edition (issue 31): translations/zh/ beside the English source, current, faithful and released.

The repository's translations are current (a stale one fails naming its cell) and faithful (a number of the English
missing from its translation fails naming the cell and the number); each rule is also shown to fail on a copy
broken that way. `python -m grader release --lang zh` changes markdown text only, refuses a stale or missing
translation naming it, and its grader shows the words around a check in Chinese while grading stays English; the zh
release's untouched notebooks run to their end; `make release LANG=zh` picks the language, a LANG in the
environment (the locale) does not.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader import feedback, language, selfcheck
from grader.authoring import student
from grader.authoring.i18n import checks, cli, glossary, localize, sources
from grader.authoring.i18n.store import STRINGS, Entry, TranslationError, read_json, sha, write_json
from grader.results import CheckResult, ExerciseResult
from tests.conftest import translated_env

ROOT = Path(__file__).resolve().parents[1]
LANG = "zh"
FOLDER = ROOT / "translations" / LANG
CURRENCY = ("missing", "stale", "orphan", "corrupt")  # whether a translation exists for today's English
TODO = f"re-translate them: `python -m grader translate --lang {LANG} --todo` lists them with their English"


@pytest.fixture(scope="module")
def problems() -> list[checks.Problem]:
    return checks.problems(ROOT, LANG)


def translated_chapter() -> tuple[str, list[sources.Unit], dict[str, Entry]]:
    """A chapter whose every markdown cell has a current translation (the tests below break copies of it)."""
    for stem in ("01_tensors", "02_dtypes", "05_autograd"):
        units = sources.chapter_units(ROOT, stem)
        entries = read_json(FOLDER / f"{stem}.json", LANG)
        if units and all(u.key in entries and entries[u.key].en_sha == sha(u.en) for u in units):
            return f"{stem}.json", units, entries
    pytest.fail("no chapter of 01, 02, 05 is wholly translated and current: run the translation step")


# --- the repository's translations ----------------------------------------------------------------------------


def test_no_translation_is_stale(problems):
    """Fails naming each cell (and string) whose English changed after it was translated, or that is gone."""
    stale = [str(p) for p in problems if p.kind in ("stale", "orphan", "corrupt")]
    assert not stale, f"{len(stale)} translations no longer match their English; {TODO}:\n" + "\n".join(stale)


def test_every_english_text_is_translated(problems):
    """Every markdown cell of the ten chapters, every status word, phrase and public check description, and the
    README have a translation: what `make release LANG=zh` needs."""
    missing = [str(p) for p in problems if p.kind == "missing"]
    assert not missing, f"{len(missing)} texts have no {LANG} translation; {TODO}:\n" + "\n".join(missing)


def test_every_translation_keeps_the_numbers_code_headings_and_terms_of_its_english(problems):
    """A number, code span, formula, link or heading of the English missing from its translation, a template's
    {fields} changed, or an enforced glossary term not used: each names the cell and what is missing."""
    unfaithful = [str(p) for p in problems if p.kind not in CURRENCY]
    assert not unfaithful, "\n".join(unfaithful)


def test_the_glossary_enforces_the_issues_terms():
    words = {t.en: t.word for t in glossary.terms(FOLDER)}
    for en, word in {"tensor": "张量", "stride": "步幅", "storage": "存储", "activations": "激活值",
                     "mixed precision": "混合精度", "gradient accumulation": "梯度累积"}.items():
        assert words.get(en) == word, en


# --- staleness, both ways ---------------------------------------------------------------------------------------


def test_an_english_cell_changed_after_its_translation_is_stale_and_named():
    file, units, entries = translated_chapter()
    assert [p for p in checks.problems_of(file, units, entries) if p.kind in CURRENCY] == []
    changed = units[len(units) // 2]
    edited = [sources.Unit(u.file, u.key, u.en + " An added sentence.") if u is changed else u for u in units]
    found = [p for p in checks.problems_of(file, edited, entries) if p.kind in CURRENCY]
    assert found == [checks.Problem(file, changed.key, "stale", "the English changed after it was translated")]
    assert str(found[0]).startswith(f"{file}: {changed.key}: stale")


def test_the_release_refuses_a_stale_translation_naming_its_cell(tmp_path):
    """The translation recorded as made from older English (as after an edit of the notebook): `--lang zh` stops,
    naming the cell, and writes no release."""
    file, units, entries = translated_chapter()
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("solutions", "release"):
        (repo / name).symlink_to(ROOT / name)
    shutil.copytree(FOLDER, repo / "translations" / LANG)
    unit = units[0]
    older = unit.en.replace(" ", "  ", 1)
    entries = {**entries, unit.key: Entry(sha(older), older, entries[unit.key].text)}
    write_json(repo / "translations" / LANG / file, LANG, entries, "a copy with one stale entry")
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TranslationError, match=re.escape(f"{file}: {unit.key}: stale")):
        localize.localize(repo, out, LANG)
    assert not any(out.iterdir())
    assert [p for p in checks.problems(repo, LANG) if p.kind == "stale"] == \
        [checks.Problem(file, unit.key, "stale", "the English changed after it was translated")]


def test_a_translation_whose_english_is_gone_is_an_orphan():
    file, units, entries = translated_chapter()
    found = checks.problems_of(file, units[1:], entries)
    assert [str(p) for p in found if p.kind in CURRENCY] == [f"{file}: {units[0].key}: orphan (no such English any more)"]


# --- numbers, both ways -----------------------------------------------------------------------------------------


def test_what_counts_as_a_number():
    assert checks.numbers("float16 fp8 H100 e4m3fn 01_tensors") == {"01"}
    assert checks.numbers("1,024 bytes, 1e-3, torch 2.13.0, x[:10] and `view(12)`") == {"1024", "1e-3", "2.13.0",
                                                                                       "10", "12"}
    assert checks.numbers("共3个，2<sup>−7</sup>，约 0.5") == {"3", "2", "7", "0.5"}


def test_a_number_missing_from_a_translation_fails_naming_cell_and_number():
    file, units, entries = translated_chapter()
    unit = max((u for u in units if checks.numbers(u.en)), key=lambda u: len(checks.numbers(u.en)))
    number = max(checks.numbers(unit.en), key=len)
    assert [p for p in checks.problems_of(file, units, entries) if p.kind == "numbers"] == []
    text = entries[unit.key].text
    assert number in text
    broken = {**entries, unit.key: Entry(entries[unit.key].en_sha, entries[unit.key].en, text.replace(number, "N"))}
    found = [p for p in checks.problems_of(file, units, broken) if p.kind == "numbers"]
    assert [(p.key, p.detail) for p in found] == [(unit.key, f"missing {number}")], found
    assert f"{file}: {unit.key}: numbers (missing {number})" in [str(p) for p in found]


def test_a_number_inside_a_code_span_counts_and_so_does_the_span():
    en = "Slice `x[:10]` of 4 rows."
    assert checks.unfaithful(en, "切片 `x[:10]`，共 4 行。") == []
    found = dict(checks.unfaithful(en, "切片 `x[:1]`，共 4 行。"))
    assert found["numbers"] == "missing 10" and "`x[:10]`" in found["verbatim"]


def test_an_enforced_term_left_out_fails_and_a_code_name_does_not_count():
    terms = glossary.terms(FOLDER)
    assert checks.unfaithful("A view of the tensor.", "这个张量的一个视图。", terms=terms) == []
    assert dict(checks.unfaithful("A view of the tensor.", "这个张量的一个 view。", terms=terms)) == \
        {"glossary": "view -> 视图"}
    assert checks.unfaithful("Call `x.view(3)` or stride().", "调用 `x.view(3)` 或 stride()。", terms=terms) == []


# --- the translate command: todo, then apply -------------------------------------------------------------------


def test_todo_lists_a_stale_cell_with_what_changed_and_apply_writes_it_back(tmp_path, capsys):
    """The lead's round trip: --todo names the stale cell and shows the English diff; --apply refuses a filled
    translation that lost a number (writing nothing), then takes a faithful one, after which the cell is current."""
    file, units, entries = translated_chapter()
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("solutions", "release", "pyproject.toml"):
        (repo / name).symlink_to(ROOT / name)
    shutil.copytree(FOLDER, repo / "translations" / LANG)
    stored = repo / "translations" / LANG / file
    unit = max(units, key=lambda u: len(checks.numbers(u.en)))
    number = max(checks.numbers(unit.en), key=len)
    older = unit.en.replace(" ", "  ", 1)
    write_json(stored, LANG, {**entries, unit.key: Entry(sha(older), older, entries[unit.key].text)}, "copy")
    chapter = {file: units}
    assert cli.todo(repo, LANG, chapter, None) == 1
    shown = capsys.readouterr().out
    assert f"{file}: {len(units) - 1} of {len(units)} done; to do: 1 stale" in shown
    assert f"--- {file} · {unit.key} · stale" in shown and "+++ English now" in shown
    todo = tmp_path / "todo.json"
    cli.todo(repo, LANG, chapter, todo)
    [item] = json.loads(todo.read_text(encoding="utf-8"))["items"]
    assert item["en"] == unit.en and item["old_en"] == older and item[LANG] == ""
    before = stored.read_bytes()
    item[LANG] = entries[unit.key].text.replace(number, "N")
    todo.write_text(json.dumps({"lang": LANG, "items": [item]}, ensure_ascii=False), encoding="utf-8")
    assert cli.apply(repo, LANG, chapter, todo) == 1
    assert f"{file}: {unit.key}: numbers (missing {number})" in capsys.readouterr().err
    assert stored.read_bytes() == before
    item[LANG] = entries[unit.key].text
    todo.write_text(json.dumps({"lang": LANG, "items": [item]}, ensure_ascii=False), encoding="utf-8")
    assert cli.apply(repo, LANG, chapter, todo) == 0
    assert checks.problems_of(file, units, read_json(stored, LANG)) == []


# --- what the release's grader shows ---------------------------------------------------------------------------


def zh_table() -> dict[str, str]:
    """What `--lang zh` writes into the release's grader/lang.json."""
    return {k: e.text for k, e in read_json(FOLDER / STRINGS, LANG).items() if k.split(":")[0] in sources.SHIPPED}


def results() -> list[ExerciseResult]:
    checks_ = [CheckResult("views_share_storage", "a tensor and its views (view, slice, transpose) share storage",
                           "passed"),
               CheckResult("copies_do_not_share", "a clone, a contiguous copy and a fresh tensor have storages of "
                           "their own", "failed", "returned True for a clone")]
    stub = [CheckResult("views_share_storage", "English description", "not_implemented", "not implemented yet")]
    return [ExerciseResult("tensors.same_storage", 2, checks_), ExerciseResult("tensors.same_storage", 2, stub)]


def test_without_a_table_the_notebook_shows_english(monkeypatch):
    monkeypatch.setattr(language, "table", lambda: {})
    solved, stub = results()
    assert feedback.render_text(solved).splitlines() == [
        "tensors.same_storage: failed — 1/2 public checks, 1/2 points on public checks (grading adds hidden checks)",
        "  ✓ a tensor and its views (view, slice, transpose) share storage",
        "  ✗ a clone, a contiguous copy and a fresh tensor have storages of their own: returned True for a clone"]
    assert "Replace <code>raise NotImplementedError</code> with your code" in feedback.render_html(stub)
    assert selfcheck.closing_lines(1, 2)[0] == "1 of 2 exercises pass their public checks."


def test_with_the_zh_table_the_words_and_descriptions_are_chinese_and_messages_stay(monkeypatch):
    table = zh_table()
    monkeypatch.setattr(language, "table", lambda: table)
    solved, stub = results()
    text = feedback.render_text(solved)
    assert text.splitlines() == [
        f"tensors.same_storage：{table['label:failed']} — 1/2 项公开检查，公开检查得分 1/2（评分时还会加上隐藏检查）",
        f"  ✓ {table['check:tensors.same_storage.views_share_storage']}",
        f"  ✗ {table['check:tensors.same_storage.copies_do_not_share']}: returned True for a clone"]
    shown = feedback.render_html(stub)
    assert table["label:not_implemented"] in shown and "<code>raise NotImplementedError</code>" in shown
    assert "Replace" not in shown
    assert selfcheck._shown("error") == f"[red]{table['status:error']}[/]"
    assert selfcheck.closing_lines(1, 2)[0].startswith("2 个练习中有 1 个")


# --- the zh release -------------------------------------------------------------------------------------------------


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def test_the_zh_release_changes_markdown_text_only(zh_release):
    """Code cells, outputs, ids and metadata byte for byte those of the English release; every markdown cell the
    translation of its English; the README Chinese with its Colab route; the grader's table beside it."""
    english = student.expected(ROOT / "solutions")
    assert sorted(p.name for p in (zh_release.folder / "notebooks").glob("*.ipynb")) == sorted(english)
    for name, text in english.items():
        en, zh = json.loads(text), json.loads((zh_release.folder / "notebooks" / name).read_text(encoding="utf-8"))
        assert {k: v for k, v in en.items() if k != "cells"} == {k: v for k, v in zh.items() if k != "cells"}
        assert [c["id"] for c in en["cells"]] == [c["id"] for c in zh["cells"]]
        entries = read_json(FOLDER / f"{Path(name).stem}.json", LANG)
        for a, b in zip(en["cells"], zh["cells"]):
            if a["cell_type"] == "code":
                assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), (name, a["id"])
            else:
                assert {k: v for k, v in a.items() if k != "source"} == {k: v for k, v in b.items() if k != "source"}
                assert "".join(b["source"]) == entries[a["id"]].text != "".join(a["source"]), (name, a["id"])
    readme = (zh_release.folder / "README.md").read_text(encoding="utf-8")
    assert readme.startswith("# PyTorch 资源核算") and "en_sha=" not in readme and "<!-- colab -->" not in readme
    assert "### Google Colab" in readme and "详细的失败信息" in readme and "`glossary.md`" in readme
    assert (zh_release.folder / "glossary.md").read_bytes() == (FOLDER / "glossary.md").read_bytes()
    table = json.loads((zh_release.folder / "grader" / language.TABLE).read_text(encoding="utf-8"))
    assert table["lang"] == LANG and table["text"]["label:not_implemented"] == "尚未实现"
    assert not any(k.startswith("colab:") for k in table["text"])


def test_the_english_release_and_the_repository_have_no_table():
    assert not (ROOT / "grader" / language.TABLE).exists()


# Run All over a zh notebook outside the browser. Every zh code cell is byte for byte its English one
# (test_the_zh_release_changes_markdown_text_only, all ten chapters), the English release's ten run to their end in
# tests/test_release.py, and tests/test_browser.py runs the zh 01_tensors in JupyterLab; what this run adds is the
# translated grader under a real kernel and `grader selfcheck`'s summary in Chinese, which one chapter shows as
# well as ten (three took 2 of the suite's 10 minutes).
ZH_RUN = ("05_autograd",)


def test_the_zh_release_runs_to_the_end_untouched_with_chinese_check_words(student_release, zh_release, tmp_path):
    """As tests/test_release.py runs the English release: notebooks top to bottom ("Run All"), in the English
    release's venv with the zh release's grader first on the path; every check not implemented, shown in Chinese."""
    done = subprocess.run([str(student_release.python), "-m", "grader", "selfcheck",
                           *(f"notebooks/{stem}.ipynb" for stem in ZH_RUN), "--json",
                           str(tmp_path / "r.json"), "--save", str(tmp_path / "ran")], cwd=zh_release.folder,
                          env=translated_env(zh_release, tmp_path), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "r.json").read_text())
    assert [Path(r["notebook"]).stem for r in results] == list(ZH_RUN)
    for r in results:
        assert r["problem"] == "" and r["cell_errors"] == [], (r["notebook"], r["problem"], r["cell_errors"])
        assert r["exercises"] and all(e["status"] == "not_implemented" for e in r["exercises"]), r["notebook"]
    shown = 0
    for path in sorted((tmp_path / "ran").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.source.startswith("grader.check("):
                html = json.dumps([o.get("data", {}) for o in cell.outputs], ensure_ascii=False)
                assert "尚未实现" in html and "not implemented yet" not in html, (path.name, cell.source)
                shown += 1
    assert shown >= len(ZH_RUN)
    assert "个练习中有 0 个通过了公开检查" in done.stdout


def test_a_notebook_completed_in_the_zh_release_is_graded_as_the_english_one(zh_release, tmp_path):
    """Grading stays the instructor's, in English: the zh notebook with the solutions filled in passes every check."""
    from tests.test_release import answered_in_release

    subs = tmp_path / "submissions" / "学生 一"
    subs.mkdir(parents=True)
    nbformat.write(answered_in_release(zh_release.folder / "notebooks" / "01_tensors.ipynb",
                                       ROOT / "solutions" / "01_tensors.ipynb"), subs / "01_tensors.ipynb")
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(subs.parent), "--out", str(out), "--workers",
                          "1"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "grades.csv", encoding="utf-8")))
    assert rows and all(r["status"] == "passed" and r["score"] == r["max_score"] for r in rows), rows


# --- make release LANG=zh -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, environment, expected", [
    (["LANG=zh"], {"LANG": "en_US.UTF-8"}, "--lang zh --out dist/student-zh"),
    ([], {"LANG": "en_US.UTF-8"}, "--out dist/student"),
    ([], {"LANG": "zh"}, "--out dist/student"),
    (["RELEASE_LANG=zh"], {}, "--lang zh --out dist/student-zh"),
    (["LANG=en"], {}, "--out dist/student"),
])
def test_make_release_reads_lang_from_its_command_line_only(args, environment, expected):
    if shutil.which("make") is None:
        pytest.skip("make is not installed here")
    env = {"PATH": "/usr/bin:/bin", **environment}
    done = subprocess.run(["make", "-n", "-s", "release", "VENV=", "PYTHON=python3", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stdout.splitlines() if "grader release" in line]
    assert line.endswith(f"-m grader release {expected}"), line
