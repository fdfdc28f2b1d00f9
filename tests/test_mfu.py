"""`python -m grader mfu`: the table names every dtype, skips what cannot run with a reason, and saves a PNG."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from grader.course import bench, mfu

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_main_prints_each_dtype_and_saves_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "sub" / "mfu.png"
    assert mfu.main(["--sizes", "64,128", "--reps", "3", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "Device:" in out
    for label in mfu._default_dtypes(bench.default_device()):
        assert label in out
    assert plot.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip messages")
def test_dtypes_that_cannot_run_on_cpu_are_skipped_with_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert mfu.main(["--device", "cpu", "--sizes", "32", "--reps", "2",
                     "--dtypes", "float32,tf32,fp8,int8,nonsense"]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped") == 4
    assert "TF32 is a CUDA" in out and "unknown dtype 'nonsense'" in out
    assert "float8_e4m3fn" in out and "int8" in out


def test_bad_device_is_an_error_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    assert mfu.main(["--device", "nonsense"]) == 2
    if not torch.cuda.is_available():
        assert mfu.main(["--device", "cuda"]) == 2


def test_tf32_switch_is_restored() -> None:
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    with mfu._tf32(not before):
        assert matmul.allow_tf32 == (not before)
    assert matmul.allow_tf32 == before
    # Set through the newer API, where reading allow_tf32 refuses: the switch uses that API too.
    saved = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"
        with mfu._tf32(False):
            assert matmul.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = saved


def test_cli_subprocess_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "mfu", "--sizes", "64", "--reps", "2"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "float32" in proc.stdout


def test_a_peak_below_the_measurement_is_refused_in_the_table(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m grader mfu` never shows an MFU above 1: a 1 FLOP/s "peak" is refused, and named."""
    from grader.course import specs

    tiny = specs.Peak(1.0, "Fake CPU", "CPU (estimate)", "float32", True, "a test's made-up number", "estimate: tiny")
    monkeypatch.setattr(specs, "device_peak", lambda device, dtype, **kw: tiny)
    assert mfu.main(["--device", "cpu", "--sizes", "32", "--reps", "2", "--dtypes", "float32"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long cells
    assert "refused" in out and "MFU not reported" in out and "estimate: tiny" in out
    assert "cpuinfo.py" in out
