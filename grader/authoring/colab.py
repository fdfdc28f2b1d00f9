"""What a release built with a course URL adds for Google Colab: a first set-up cell, and the README's Colab route.

`python -m grader release --course-url URL` (`make release COURSE_URL=URL`), where URL is where the release zip
is published (https://, file://, or a local path). Each student notebook then starts with a cell that does
nothing outside Colab and, in Colab, downloads that zip, puts its `grader` on Python's path for good (a .pth
file in site-packages, so the grader's own subprocesses find it too; no pip build, so Colab's torch stays),
pip-installs only the few small packages Colab may lack, and moves into the release's `notebooks/` folder so
that `../data/` resolves. Without a URL no cell is added, and the README's Colab route says there is none.

Colab opens notebooks by address only from GitHub, so "Open in Colab" badges are written when the zip is
published there: a release asset (`.../releases/download/TAG/x.zip`: the notebooks at `notebooks/` in TAG)
or a file in a repository (`.../raw/REF/dir/x.zip`: the notebooks at `dir/notebooks/` in REF), which is where
they are when the release folder is what that repository holds. For any other address the README tells
students to upload a notebook.
"""
from __future__ import annotations

import json
import re

import nbformat
from nbformat import NotebookNode

TOP_FOLDER = "resource-accounting"  # the release zip's top folder; the set-up cell finds the course there
CELL_ID = "colab-setup"
# What the notebooks and the grader import beyond what Colab ships for certain (torch, numpy, matplotlib,
# IPython, ipykernel, jupyter_client): pip installs only those missing, never torch.
EXTRA_MODULES = ("einops", "psutil", "rich", "nbformat", "nbclient")
BADGE = "https://colab.research.google.com/assets/colab-badge.svg"

_CELL = '''\
# Google Colab only (elsewhere this cell does nothing): installs the course's grader and data from its
# release, {url}, and keeps Colab's own PyTorch.
def _colab_setup(url: str, top: str, extra: tuple[str, ...]) -> None:
    import importlib, importlib.util, os, pathlib, shutil, site, subprocess, sys, tempfile
    import urllib.request, zipfile

    here = pathlib.Path.cwd()
    course = here.parent if (here.parent / "grader").is_dir() else here / top  # a re-run starts in notebooks/
    if not (course / "grader").is_dir():
        source = url if "://" in url else pathlib.Path(url).resolve().as_uri()
        unpacked = pathlib.Path(tempfile.mkdtemp(dir=course.parent))
        with zipfile.ZipFile(urllib.request.urlretrieve(source)[0]) as release:
            release.extractall(unpacked)
        if not (unpacked / top / "grader").is_dir():
            raise RuntimeError(f"{{url}} is not the course's release: it has no {{top}}/grader/")
        (unpacked / top).rename(course)
        shutil.rmtree(unpacked)
    missing = [name for name in extra if importlib.util.find_spec(name) is None]
    if missing:  # never torch: Colab's stays
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing], check=True)
    # On the path for good: after a restart, and in the processes the grader starts.
    pathlib.Path(site.getsitepackages()[0], "resource-accounting.pth").write_text(f"{{course}}\\n")
    if str(course) not in sys.path:
        sys.path.insert(0, str(course))
    importlib.invalidate_caches()
    os.chdir(course / "notebooks")  # where the chapters run: they read ../data/
    import torch
    print(f"Colab: the course's grader and data in {{course}}; Colab's own torch {{torch.__version__}}")


try:
    import google.colab  # noqa: F401  (exists only in Colab)
except ImportError:
    pass
else:
    _colab_setup({url_literal}, {top_literal}, {extra_literal})
'''


def setup_cell(course_url: str) -> NotebookNode:
    """The first cell of every student notebook in a release built with `course_url`."""
    if not course_url.strip() or "\n" in course_url.strip():
        raise ValueError(f"not a course URL: {course_url!r}")
    url = course_url.strip()
    source = _CELL.format(url=url, url_literal=json.dumps(url), top_literal=json.dumps(TOP_FOLDER),
                          extra_literal=f"({', '.join(json.dumps(m) for m in EXTRA_MODULES)})")
    cell = nbformat.v4.new_code_cell(source)
    cell.id = CELL_ID
    cell.metadata["tags"] = [CELL_ID]
    return cell


_GITHUB = (
    # a release asset: the release folder is the repository at TAG
    re.compile(r"^https://github\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+)/releases/download/(?P<ref>[^/]+)/"
               r"(?P<dir>)[^/]+$"),
    # a file in the repository, next to the release folder's notebooks/
    re.compile(r"^https://github\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+)/(?:raw|blob)/(?P<ref>[^/]+)/"
               r"(?P<dir>(?:[^/]+/)*)[^/]+$"),
    re.compile(r"^https://raw\.githubusercontent\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+)/(?P<ref>[^/]+)/"
               r"(?P<dir>(?:[^/]+/)*)[^/]+$"),
)


def colab_link(course_url: str, notebook: str) -> str | None:
    """Colab's address for the release's `notebooks/<notebook>` when it is published on GitHub, else None."""
    for pattern in _GITHUB:
        match = pattern.match(course_url.strip())
        if match:
            return (f"https://colab.research.google.com/github/{match['owner']}/{match['repo']}/blob/"
                    f"{match['ref']}/{match['dir']}notebooks/{notebook}")
    return None


# The README's Colab route, in English (the source; grader.authoring.i18n translates each entry, keys kept).
README_TEXT: dict[str, str] = {
    "title": "### Google Colab",
    "none": "This copy of the course was built without the address where it is published, so its notebooks\n"
            "have no Colab set-up cell: in Colab they would find no `grader`. Use one of the routes above, or\n"
            "ask your instructor for the Colab release (`make release COURSE_URL=...` adds the set-up cell).",
    "intro": "Nothing to install: open a notebook in Colab and run it. Its first cell installs the course's\n"
             "`grader` and `data/` from the course's release, keeps Colab's own PyTorch, and moves into the\n"
             "release's `notebooks/` folder (outside Colab it does nothing). The release it installs:",
    "at_url": "`{url}`.",
    "at_path": "`{url}`, a file in the Colab session: upload the zip there first\n"
               "(Files pane → Upload; a relative path starts at `/content`).",
    "gpu": "For a GPU: Runtime → Change runtime type → a GPU (T4 on the free tier); the grader knows the T4,\n"
           "L4 and A100 peaks, so MFU is measured against them. Save your work: File → Download → .ipynb.",
    "upload": "Open <https://colab.research.google.com>, choose File → Upload notebook, and pick a notebook\n"
              "from this folder's `notebooks/`.",
}


def readme_section(course_url: str | None, notebooks: list[str], text: dict[str, str] | None = None) -> str:
    """The README's Colab route: badges when Colab can open the notebooks by address, upload otherwise,
    and without a URL the plain fact that these notebooks cannot set themselves up in Colab. `text` is
    README_TEXT or a translation of it."""
    text = README_TEXT if text is None else text
    lines = [text["title"], ""]
    if not course_url:
        return "\n".join(lines + [text["none"]]) + "\n"
    url = course_url.strip()
    lines += [text["intro"], text["at_url" if "://" in course_url else "at_path"].format(url=url), text["gpu"], ""]
    links = [(name, colab_link(course_url, name)) for name in notebooks]
    if links and all(link for _, link in links):
        lines += [f"- `{name}` [![Open In Colab]({BADGE})]({link})" for name, link in links]
    else:
        lines += [text["upload"]]
    return "\n".join(lines) + "\n"


__all__ = ["setup_cell", "colab_link", "readme_section", "README_TEXT", "TOP_FOLDER", "CELL_ID", "EXTRA_MODULES"]
