"""Build Gradescope's autograder zip: `python -m grader gradescope [--out dist/autograder.zip] [--chapters ...]`.

Gradescope runs one container per submission: `setup.sh` once when the image is built, then
`run_autograder` for every submission, which must write /autograder/results/results.json. Ours
installs the pinned requirements (PyTorch's CPU-only build) into a venv, and grades the notebooks in
/autograder/submission with every public and hidden check, exactly as `make grade` does for one
student (same kernel isolation, limits and statuses), through `python -m grader gradescope-run`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grader import chapters as chapter_names
from grader.authoring.release import repo_root
from grader.authoring.zipped import write_zip


SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image (Ubuntu).
# It installs Python 3.11+ and the course's pinned requirements, with PyTorch's CPU-only build.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
# The kernel's sandbox; where the container refuses its namespaces, kernels run as this unprivileged user.
apt-get install -y -qq bubblewrap >/dev/null || echo "no bubblewrap: kernels will run as grader-kernel"
id grader-kernel >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin grader-kernel
python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else
    "Python 3.11 or newer is needed: choose an Ubuntu 24.04 base image in the autograder settings")'
python3 -m venv /autograder/venv
PIP="/autograder/venv/bin/python -m pip install --quiet --disable-pip-version-check"
# torch first, from PyTorch's CPU index (the PyPI wheel for Linux pulls several GB of CUDA libraries)
$PIP "$(grep '^torch==' /autograder/source/requirements.txt)" --index-url https://download.pytorch.org/whl/cpu
$PIP -r /autograder/source/requirements.txt -e /autograder/source
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this for every submission; it must write results/results.json under the root.
# AUTOGRADER_ROOT (default /autograder) and GRADER_PYTHON let it run outside Gradescope's container too.
set -uo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
PYTHON="${GRADER_PYTHON:-$ROOT/venv/bin/python}"
mkdir -p "$ROOT/results"
cd "$ROOT/source"
"$PYTHON" -m grader gradescope-run --submission "$ROOT/submission" --results "$ROOT/results/results.json" \
    --chapters "$(cat "$ROOT/source/CHAPTERS")"
"""


def build(out: Path, chapters: list[str]) -> Path:
    """Write the autograder zip to `out` (files at the zip's root, as Gradescope requires)."""
    repo = repo_root()
    unknown = [c for c in chapters if c not in chapter_names.NOTEBOOKS]
    if unknown:
        raise ValueError(f"unknown chapter(s) {', '.join(unknown)}; chapters: {', '.join(chapter_names.NOTEBOOKS)}")
    files: dict[str, bytes] = {
        "setup.sh": SETUP_SH.encode(),
        "run_autograder": RUN_AUTOGRADER.encode(),
        "CHAPTERS": (",".join(chapters) + "\n").encode(),
        "requirements.txt": (repo / "requirements.txt").read_bytes(),
        "pyproject.toml": (repo / "pyproject.toml").read_bytes(),
    }
    for folder in ("grader", "data"):
        for path in sorted((repo / folder).rglob("*")):
            rel = path.relative_to(repo)
            if path.is_file() and not any(p in ("__pycache__", "authoring", ".ipynb_checkpoints") for p in rel.parts) \
                    and path.suffix != ".pyc":
                files[rel.as_posix()] = path.read_bytes()
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_zip(out, files, executable=("setup.sh", "run_autograder"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader gradescope", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="default: dist/autograder.zip under the repo root")
    parser.add_argument("--chapters", default="",
                        help="comma-separated notebook stems this assignment grades (default: every chapter)")
    args = parser.parse_args(argv)
    from grader import registry

    course = registry.load()
    chosen = [c.strip() for c in args.chapters.split(",") if c.strip()] or \
        [c for c in chapter_names.NOTEBOOKS if course.of(chapter_names.key(c))]
    try:
        out = build(args.out or repo_root() / "dist" / "autograder.zip", chosen)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"built {out} for {', '.join(chosen)}: upload it as the assignment's autograder (see README)")
    return 0
