"""`make lab` serves JupyterLab on notebooks/ with the course kernel registered (checked over its REST API)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "course-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.read()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_serves_notebooks_with_course_kernel():
    port = free_port()
    proc = subprocess.Popen(
        ["make", "-s", "lab", f"LAB_PORT={port}", f"LAB_FLAGS=--no-browser --IdentityProvider.token={TOKEN}"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 90
        specs = None
        while time.time() < deadline and proc.poll() is None:
            try:
                specs = json.loads(get(port, "/api/kernelspecs")[1])
                break
            except OSError:
                time.sleep(0.5)
        assert specs is not None, f"JupyterLab did not answer: {proc.stdout.read1().decode() if proc.poll() is not None else ''}"
        assert "resource-accounting" in specs["kernelspecs"]
        contents = json.loads(get(port, "/api/contents")[1])
        assert {c["name"] for c in contents["content"]} >= {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
        status, page = get(port, "/lab")
        assert status == 200 and b"JupyterLab" in page
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
