"""JupyterLab in a real browser: Chromium driven by Playwright, against the installed student release.

A student opens 06_modules.ipynb with the course kernel and runs all cells: the grader's result table
shows "not implemented yet" and no cell raises; the same on a solved copy shows every check passed;
then the feedback.html that `make grade` wrote for them; and the zh release's 06_modules.ipynb, read in
Chinese (a CJK font installed where the test may). Screenshots go to artifacts/browser/.
Skipped, with the reason, only where Chromium (or, for the zh notebook, a CJK font) is missing and cannot be
installed.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import psutil
import pytest

from tests.conftest import translated_env
from tests.test_release import answered_in_release

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts" / "browser"
TOKEN = "browser-test-token"
# The chapter the student runs in the browser: one of the quickest to run top to bottom (its demonstrations take
# seconds on a CPU, chapter 01's roofline sweeps three times as long), run three times here (untouched, solved, zh).
NOTEBOOK = "06_modules.ipynb"
EXERCISES = 7                           # its grader.check cells, one per exercise
FIRST, SHOWN = "modules.MySequential", "modules.Concat"  # its first exercise, and the one the screenshots show
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]


def apt_install(package: str) -> None:
    """`apt-get install package`, quietly, after refreshing the package lists (the caller checks the result)."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=600)
    subprocess.run(["apt-get", "install", "-y", "-qq", package], env=env, capture_output=True, timeout=900)


def chromium() -> str | None:
    """Debian's Chromium, installed now if it is missing and this process may (root with apt-get)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found or os.geteuid() != 0 or not shutil.which("apt-get"):
        return found
    apt_install("chromium")
    return shutil.which("chromium")


CJK_FONT_PACKAGE = "fonts-noto-cjk"  # Debian's Noto Sans/Serif CJK: the fonts Chromium falls back to for Chinese


def _has_cjk_font() -> bool:
    if not shutil.which("fc-list"):
        return False
    return bool(subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True, timeout=60).stdout.strip())


def cjk_font_missing() -> str | None:
    """None once a font with Chinese glyphs is installed (installed now if missing and this process may: root with
    apt-get); else why there is none, for the skip."""
    if _has_cjk_font():
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return (f"no font with Chinese glyphs is installed and this process cannot install one (it needs root and "
                f"apt-get): install {CJK_FONT_PACKAGE} (Debian/Ubuntu) or any CJK font to see the zh notebook")
    apt_install(CJK_FONT_PACKAGE)
    return None if _has_cjk_font() else f"`apt-get install {CJK_FONT_PACKAGE}` did not install a CJK font here"


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (make test installs it)")
    path = chromium()
    if path is None:
        pytest.skip("Chromium is not installed and could not be installed here (needs root and apt-get)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(student_release, tmp_path_factory):
    """JupyterLab from the release's venv, on a free port with a token, serving an untouched and a solved copy."""
    root = tmp_path_factory.mktemp("lab")
    shutil.copy(student_release.folder / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    (root / "solved").mkdir()
    nbformat.write(answered_in_release(root / NOTEBOOK, ROOT / "solutions" / NOTEBOOK), root / "solved" / NOTEBOOK)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    yield from serve_lab(student_release.python, root, env, tmp_path_factory)


@pytest.fixture(scope="module")
def lab_zh(student_release, zh_release, tmp_path_factory):
    """JupyterLab from the English release's venv with the zh release's grader first on the path (its kernels
    inherit it), serving the zh release's untouched 06_modules.ipynb."""
    root = tmp_path_factory.mktemp("lab-zh")
    shutil.copy(zh_release.folder / "notebooks" / NOTEBOOK, root / NOTEBOOK)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = translated_env(zh_release, tmp_path_factory.mktemp("zh-env"))["PYTHONPATH"]
    yield from serve_lab(student_release.python, root, env, tmp_path_factory)


def serve_lab(python: Path, root: Path, env: dict[str, str], tmp_path_factory):
    """Yield (url, root) of JupyterLab started from `python`'s venv on `root`, then stop it and its kernels."""
    port = free_port()
    args = [str(python.parent / "jupyter"), "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={root}",
            "--LabApp.news_url=None"]
    if os.geteuid() == 0:
        args.append("--allow-root")
    # A student's own settings folder, fresh: JupyterLab's "get notified about Jupyter news?" question must be
    # answered by the course's defaults (grader.lab.quiet_lab, written into the release's venv by its set-up).
    env = dict(env)
    env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp_path_factory.mktemp("lab-settings"))
    server = subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise RuntimeError("JupyterLab did not start")
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}", root
    finally:
        family = [server.pid] + [c.pid for c in psutil.Process(server.pid).children(recursive=True)]
        server.send_signal(signal.SIGTERM)  # the server shuts its kernels down on the way out
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        for pid in family:  # whatever is left (a kernel that did not answer)
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


PROMPTS = """() => [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell')].map(c => {
    const p = c.querySelector('.jp-InputPrompt'); const e = c.querySelector('.jp-InputArea-editor');
    return [p ? p.textContent.trim() : '', e ? e.textContent.trim().slice(0, 60) : '']; })"""


def run_all_cells(page) -> None:
    """Run > Run All Cells, as a student clicks it."""
    page.click("li.lm-MenuBar-item >> text=Run")
    page.click(".lm-Menu-item >> text=Run All Cells")


def wait_for_every_cell(page, path: str, stall_s: float = 150, limit_s: float = 480) -> None:
    """Wait until every code cell shows an execution count. The deadline moves while cells keep finishing
    (the machine runs other tests beside this one); a run that stops moving fails naming the cell it sits on."""
    start = last_move = time.time()
    done_before, clicked_again = -1, False
    while True:
        prompts = page.evaluate(PROMPTS)
        waiting = [src for p, src in prompts if not re.fullmatch(r"\[\d+\]:?", p)]
        done = len(prompts) - len(waiting)
        if prompts and done == len(prompts):
            return
        now = time.time()
        if done != done_before:
            done_before, last_move = done, now
        busy = [src for p, src in prompts if "*" in p]
        if not busy and done == 0 and now - start > 30 and not clicked_again:
            run_all_cells(page)  # the first click never reached the notebook (nothing queued, nothing ran)
            clicked_again, last_move = True, now
        if now - last_move > stall_s or now - start > limit_s:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "stalled.png"))
            status = page.evaluate("""() => { const i = document.querySelector(
                '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook-ExecutionIndicator'); return i && i.dataset.status; }""")
            raise AssertionError(f"{path}: {done}/{len(prompts)} code cells ran in {now - start:.0f} s, none for "
                                 f"{now - last_move:.0f} s; kernel {status!r}; running: {busy[:1] or 'nothing'}; "
                                 f"first not run: {waiting[:1]}")
        time.sleep(1)


def open_and_run_all(page, url: str, path: str) -> None:
    """Open a notebook as a student would, then Run > Run All Cells, and wait until every code cell ran."""
    page.goto(f"{url}/lab/tree/{path}?token={TOKEN}&reset")  # reset: only this notebook open
    page.wait_for_selector(".jp-NotebookPanel", timeout=90_000)
    page.wait_for_function(  # the course kernel, started and idle
        """() => { const t = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-NotebookPanel-toolbar');
                   const i = t && t.querySelector(".jp-Notebook-ExecutionIndicator[data-status='idle']");
                   return t && i && t.innerText.includes('Python (resource accounting)'); }""", timeout=90_000)
    run_all_cells(page)
    wait_for_every_cell(page, path)
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    page.keyboard.press("Control+s")
    page.wait_for_function("() => !document.querySelector('.jp-mod-current .jp-mod-dirty')", timeout=30_000)


def saved_errors(path: Path) -> list[str]:
    """The errors in the notebook as JupyterLab saved it, once the saved file holds the run (the server
    truncates the file and then writes it, so a read can catch it empty or half written)."""
    deadline = time.time() + 60
    while True:
        try:
            nb = nbformat.read(path, as_version=4)
            if all(c.get("execution_count") for c in nb.cells if c.cell_type == "code"):
                break
        except (ValueError, nbformat.reader.NotJSONError):
            pass
        assert time.time() < deadline, f"{path.name} was not saved with its outputs"
        time.sleep(0.2)
    return [f"{o.get('ename')}: {o.get('evalue')}" for c in nb.cells if c.cell_type == "code"
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


def check_outputs(page) -> list[str]:
    """The text of every grader.check result the page shows."""
    return page.eval_on_selector_all(
        ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell",
        """cells => cells.filter(c => c.querySelector('.jp-InputArea-editor').textContent.trim().startsWith('grader.check('))
                        .map(c => (c.querySelector('.jp-OutputArea') || {textContent: ''}).textContent)""")


def shoot(page, locator, name: str) -> None:
    """A screenshot of `locator`, with nothing over the cells: catches JupyterLab's "news?" toast, which the
    course's lab settings switch off (a student on first start saw it cover the cells)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert page.locator(".jp-Notification-Toast").count() == 0, page.inner_text(".jp-Notification-Toast")
    locator.scroll_into_view_if_needed()
    page.mouse.wheel(0, -120)
    page.screenshot(path=str(ARTIFACTS / name))


def test_a_student_runs_the_untouched_notebook_then_a_solved_one(browser, lab):
    url, root = lab
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        open_and_run_all(page, url, NOTEBOOK)
        outputs = check_outputs(page)
        assert len(outputs) == EXERCISES and all("not implemented yet" in o for o in outputs), outputs
        assert not page.query_selector_all("[data-mime-type='application/vnd.jupyter.stderr'] >> text=Traceback")
        assert saved_errors(root / NOTEBOOK) == []
        skipped = page.locator(".jp-OutputArea-output >> text=Skipped: this cell uses")
        assert skipped.count() >= 1
        shoot(page, page.locator(".jp-CodeCell", has_text=f'grader.check("{SHOWN}"').first, "06_untouched_check.png")

        open_and_run_all(page, url, f"solved/{NOTEBOOK}")
        outputs = check_outputs(page)
        assert len(outputs) == EXERCISES and all(re.search(r" passed — (\d+)/\1 public checks", o) for o in outputs), outputs
        assert not any("✗" in o or "not implemented" in o for o in outputs)
        assert saved_errors(root / "solved" / NOTEBOOK) == []
        shoot(page, page.locator(".jp-CodeCell", has_text=f'grader.check("{SHOWN}"').first, "06_solved_check.png")
    finally:
        page.close()


GLYPHS_DRAWN = """(text) => {
    const h = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1');
    const canvas = document.createElement('canvas'); canvas.width = 64; canvas.height = 40;
    const g = canvas.getContext('2d');
    const draw = (ch) => { g.clearRect(0, 0, 64, 40); g.font = `32px ${getComputedStyle(h).fontFamily}`;
                           g.fillText(ch, 4, 32); return g.getImageData(0, 0, 64, 40).data.join(); };
    const shapes = [...text].map(draw);
    return new Set(shapes).size === shapes.length && !shapes.includes(draw('\\u{10FFFD}'));
}"""


def test_a_student_reads_the_zh_notebook_in_chinese(browser, lab_zh):
    """The zh release's 06_modules in JupyterLab: its markdown in Chinese, drawn with real glyphs (distinct shapes,
    none the missing-glyph box), and, after Run All, each check's words in Chinese; no cell raises."""
    missing = cjk_font_missing()
    if missing:
        pytest.skip(missing)
    url, root = lab_zh
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        open_and_run_all(page, url, NOTEBOOK)
        outputs = check_outputs(page)
        assert len(outputs) == EXERCISES and all("尚未实现" in o and "not implemented" not in o for o in outputs), outputs
        assert saved_errors(root / NOTEBOOK) == []
        # JupyterLab renders a markdown cell once it is scrolled to: back to the top, where the title is.
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.scroll_into_view_if_needed()
        title = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-RenderedMarkdown h1").first
        title.wait_for(timeout=30_000)
        assert "从内部看" in title.text_content(), title.text_content()  # innerText is empty while a cell is off screen
        assert page.evaluate(GLYPHS_DRAWN, "从内部看参数"), "Chinese text is drawn as missing-glyph boxes"
        # The first exercise: its text in Chinese above the check, whose words are Chinese too.
        exercise = page.locator(".jp-MarkdownCell", has_text="练习 1").first
        exercise.scroll_into_view_if_needed()
        page.evaluate("(el) => el.scrollIntoView({block: 'start'})", exercise.element_handle())
        check = page.locator(".jp-CodeCell", has_text=f'grader.check("{FIRST}"').first
        check.locator(".jp-OutputArea >> text=尚未实现").wait_for(timeout=30_000)
        # The shot shows the check's Chinese words with the end of the exercise's code above them.
        page.evaluate("(el) => el.scrollIntoView({block: 'center'})", check.element_handle())
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert page.locator(".jp-Notification-Toast").count() == 0, page.inner_text(".jp-Notification-Toast")
        page.screenshot(path=str(ARTIFACTS / "notebook_zh.png"))
    finally:
        page.close()


def test_the_feedback_page_from_make_grade(browser, lab, tmp_path):
    _, root = lab
    subs = tmp_path / "submissions"
    for student, source in (("Ada Lovelace", root / "solved" / NOTEBOOK), ("Ben Bitdiddle", root / NOTEBOOK)):
        (subs / student).mkdir(parents=True)
        shutil.copy(source, subs / student / NOTEBOOK)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "grader", "grade", str(subs), "--out", str(out), "--workers", "2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "grades.csv", encoding="utf-8")))
    assert {r["status"] for r in rows if r["student"] == "Ada Lovelace"} == {"passed"}
    for student, width, height, name in (("Ada Lovelace", 1000, 1100, "feedback_solved.png"),
                                         ("Ben Bitdiddle", 390, 844, "feedback_phone.png")):
        page = browser.new_page(viewport={"width": width, "height": height})
        try:
            page.goto((out / student / "feedback.html").as_uri())
            text = page.inner_text("body")
            assert f"Feedback for {student}" in text and "Chapter 06 · nn.Module from the inside" in text
            assert f"Graded file: {NOTEBOOK}" in text and "UTC" in text
            assert "not_implemented" not in text and FIRST not in text
            overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 0, f"{student}'s page is wider than a {width}px screen"
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / name), full_page=False)
        finally:
            page.close()
    results = json.loads((out / "Ben Bitdiddle" / "results.json").read_text(encoding="utf-8"))
    assert results["score"] == 0 and all(t["status"] == "failed" for t in results["tests"])


def no_overflow(page, width: int) -> None:
    """Nothing wider than the screen: the page scrolls down only (a phone's first complaint)."""
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than a {width}px screen"


def test_the_half_solved_students_feedback_opens_with_what_to_fix(browser, demo_out):
    """The demo's half-solved student, every chapter graded (the shared demo grading, tests/conftest.py): on a phone
    the first view holds the total and the start of "What to fix" (the page used to open on sixty cards, 15,895 px
    of them); passed exercises are folded; a name in the list jumps to its card."""
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto((demo_out / "Chloé Dubois" / "feedback.html").as_uri())
        no_overflow(page, 390)
        fix = page.locator("#what-to-fix")
        box = fix.bounding_box()
        assert box is not None and box["y"] < 844 / 2, box  # the section starts in the upper half of the first view
        first = fix.locator("a").first
        assert first.bounding_box()["y"] + first.bounding_box()["height"] < 844  # and its first entry is in view
        assert "What to fix" in fix.inner_text() and "points to gain" in fix.inner_text()
        folded = page.locator("details.exercise")
        assert folded.count() >= 20 and page.locator("details.exercise[open]").count() == 0
        assert page.locator("article.exercise").count() >= 20  # the rest stay open
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "feedback_half_phone.png"), full_page=False)
        target = first.get_attribute("href")
        first.click()
        page.wait_for_function("(id) => { const r = document.getElementById(id).getBoundingClientRect(); "
                               "return r.top >= -1 && r.top < window.innerHeight; }", arg=target[1:])
    finally:
        page.close()


@pytest.fixture(scope="module")
def class_pages(tmp_path_factory):
    """The class report of the generated 60-student class and the similarity page of the generated cohort."""
    from grader.autograde.classpage import write_class_report
    from grader.autograde.report import write_cohort
    from tests import class_cohort, similarity_cohort
    from tests.inprocess import run_grader

    out = tmp_path_factory.mktemp("class-pages")
    records, students, adjust = class_cohort.generate()
    write_cohort(out, records, students, class_cohort.CHAPTERS, adjust)
    write_class_report(out, records, students, class_cohort.CHAPTERS, adjust, ["ignored notes.txt: not a notebook"],
                       "sandbox: bubblewrap")
    subs = tmp_path_factory.mktemp("similar-subs")
    similarity_cohort.write_cohort(subs)
    assert run_grader("similarity", str(subs), "--out", str(out)).returncode == 0
    return out


@pytest.mark.parametrize("name, sections", [
    ("class", ["unfair", "chapters", "exercises", "checks", "run"]),
    ("similarity", ["tensors.element_offset", "tensors.broadcast_shape"]),
])
def test_the_class_report_and_the_similarity_page_read_on_a_desk_and_a_phone(browser, class_pages, name, sections):
    """Every section there and shown, every plot loaded (the PNGs are in the page), nothing wider than a phone."""
    for width, height in ((1100, 1300), (390, 844)):
        page = browser.new_page(viewport={"width": width, "height": height})
        try:
            page.goto((class_pages / f"{name}.html").as_uri())
            for section in sections:
                assert page.locator(f"[id='{section}']").is_visible(), section
            broken = page.evaluate("() => [...document.images].filter(i => !i.complete || i.naturalWidth === 0).length")
            assert broken == 0
            no_overflow(page, width)
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{name}_{'phone' if width < 500 else 'desk'}.png"), full_page=False)
        finally:
            page.close()
