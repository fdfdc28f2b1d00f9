"""grader.course.bench: time_fn measures what it says (warm-up excluded, median per call), time_matmul's numbers add up."""
from __future__ import annotations

import gc
from dataclasses import replace
import re
import time

import pytest
import torch

from grader.course import bench, specs

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def fake_peak(flop_per_sec: float, *, estimate: bool = True, dtype_key: str = "float32",
              spec_name: str = "fake") -> specs.Peak:
    return specs.Peak(
        flop_per_sec=flop_per_sec,
        device_name="Fake Device",
        spec_name=spec_name,
        dtype_key=dtype_key,
        estimate=estimate,
        source="a test's made-up number",
    )


# ---------------------------------------------------------------- time_fn (CPU)


def test_sleep_of_2ms_times_as_about_2ms() -> None:
    seconds = bench.time_fn(lambda: time.sleep(0.002), warmup=1, reps=5, device="cpu")
    assert 0.0019 <= seconds < 0.010


def test_warmup_calls_happen_and_are_not_timed() -> None:
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        # The warm-up calls are slow (like a first call that compiles or allocates); timing them would show.
        time.sleep(0.020 if calls <= 4 else 0.001)

    seconds = bench.time_fn(fn, warmup=4, reps=3, device="cpu")
    assert calls >= 4 + 3
    assert seconds < 0.005


def test_warmup_zero_is_allowed_and_every_rep_calls_fn() -> None:
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1

    assert bench.time_fn(fn, warmup=0, reps=7, device="cpu") > 0
    assert calls >= 7


def test_fast_fn_is_timed_in_blocks_and_returns_per_call_time() -> None:
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1

    seconds = bench.time_fn(fn, warmup=0, reps=3, device="cpu", min_block_seconds=1e-3)
    assert 0 < seconds < 1e-5  # per call, not per block
    assert calls > 3 * 10  # blocks of many calls, not one call per rep


def test_gc_is_off_while_timing_and_back_on_after() -> None:
    seen: list[bool] = []
    assert gc.isenabled()
    bench.time_fn(lambda: seen.append(gc.isenabled()), warmup=0, reps=2, device="cpu", min_block_seconds=0)
    assert seen and not any(seen)
    assert gc.isenabled()


def test_reps_none_picks_a_count() -> None:
    assert bench.time_fn(lambda: time.sleep(0.001), reps=None, warmup=0, device="cpu") >= 0.0009


@pytest.mark.parametrize("kwargs", [{"warmup": -1}, {"reps": 0}, {"reps": -3}])
def test_bad_warmup_or_reps_raise(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        bench.time_fn(lambda: None, device="cpu", **kwargs)


def test_default_device_is_cpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench.default_device() == torch.device("cpu")
    bench.synchronize("cpu")  # a no-op, but callable


# ---------------------------------------------------------------- time_matmul (CPU)


def test_time_matmul_fields_are_consistent(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []

    def device_peak(device: object, dtype: torch.dtype, **kwargs: object) -> specs.Peak:
        asked.append((torch.device(device).type, dtype))
        return fake_peak(1e18)

    monkeypatch.setattr(specs, "device_peak", device_peak)
    r = bench.time_matmul(64, 32, 48, device="cpu", reps=3)
    assert asked == [("cpu", torch.float32)]
    assert (r.m, r.k, r.n, r.dtype, r.device) == (64, 32, 48, torch.float32, "cpu")
    assert r.flops == 2 * 64 * 32 * 48
    assert r.seconds > 0
    assert r.flop_per_sec == pytest.approx(r.flops / r.seconds)
    assert r.peak == 1e18
    assert r.mfu == pytest.approx(r.flop_per_sec / r.peak)
    assert r.peak_is_estimate and r.dtype_key == "float32" and r.peak_label == "estimate: fake"
    assert r.warning is None and r.peak_error is None
    text = str(r)
    assert text.startswith("64x32x48 float32 on cpu: ")
    assert "TFLOP/s" in text and "MFU" in text and "(peak 1e+06 TFLOP/s, estimate: fake)" in text


def test_unknown_peak_gives_no_mfu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(specs, "device_peak", lambda device, dtype, **kw: None)
    r = bench.time_matmul(32, 32, 32, torch.float64, device="cpu", reps=2)
    assert r.peak is None and r.mfu is None and r.dtype_key is None and not r.peak_is_estimate
    assert r.warning is None
    assert "peak unknown" in str(r)


MFU_FRACTION = re.compile(r"MFU \d")  # "MFU 0.42": any fraction printed after the word


@pytest.mark.parametrize("peak,names", [
    (fake_peak(1.0, estimate=False, spec_name="RTX 4090"), ("spec table's row 'RTX 4090'", "specs.py")),
    (fake_peak(1.0, spec_name="CPU (estimate)"), ("highest clock it reports", "cpuinfo.py")),
    (fake_peak(1.0, spec_name="Ada (estimate)"), ("above the clock it reports", "per-SM rate")),
])
def test_an_mfu_above_one_is_refused_and_the_suspect_peak_named(monkeypatch: pytest.MonkeyPatch,
                                                                peak: specs.Peak, names: tuple[str, str]) -> None:
    """A 1 FLOP/s peak: any matmul beats it, which proves that peak wrong; no fraction is reported."""
    monkeypatch.setattr(specs, "device_peak", lambda device, dtype, **kw: peak)
    r = bench.time_matmul(32, 32, 32, device="cpu", reps=2)
    assert r.mfu is None and r.peak is None  # refused: no MFU above 1, and no peak line to plot under it
    assert r.dtype_key == "float32" and r.peak_label == peak.label  # what was refused stays on record
    assert r.warning == r.peak_error and r.peak_error.startswith("MFU not reported: ")
    for words in names + (peak.label, "Fake Device/float32"):
        assert words in r.peak_error
    assert r.peak_error in str(r) and not MFU_FRACTION.search(str(r))


def test_mfu_is_a_fraction_never_above_one() -> None:
    peak = fake_peak(2e12, estimate=False, spec_name="H100 SXM")
    assert bench.mfu(1e12, peak) == 0.5 and bench.mfu(2e12, peak) == 1.0
    with pytest.raises(bench.ImpossibleMFU, match="row 'H100 SXM'"):
        bench.mfu(2.0001e12, peak)
    assert issubclass(bench.ImpossibleMFU, ValueError)


def test_str_formats() -> None:
    common = dict(m=1024, k=1024, n=1024, dtype=torch.float32, device="cpu", device_name="Some CPU",
                  seconds=1.23e-3, flops=2 * 1024**3, flop_per_sec=1.75e12)
    ok = bench.MatmulTiming(**common, peak=4.2e12, mfu=1.75 / 4.2, peak_is_estimate=True, dtype_key="float32")
    assert str(ok) == "1024x1024x1024 float32 on cpu: 1.23 ms, 1.75 TFLOP/s, MFU 0.42 (peak 4.2 TFLOP/s, estimate)"
    labelled = bench.MatmulTiming(**common, peak=4.2e12, mfu=1.75 / 4.2, peak_is_estimate=True, dtype_key="float32",
                                  peak_label="estimate: 24 SMs × 2.46 GHz × 512 FLOP/clock/SM")
    assert str(labelled).endswith("MFU 0.42 (peak 4.2 TFLOP/s, estimate: 24 SMs × 2.46 GHz × 512 FLOP/clock/SM)")
    datasheet = bench.MatmulTiming(**common, peak=4.2e12, mfu=1.75 / 4.2, peak_is_estimate=False,
                                   dtype_key="float32", peak_label="datasheet: RTX 4090")
    assert str(datasheet).endswith("(peak 4.2 TFLOP/s, datasheet: RTX 4090)")
    unknown = bench.MatmulTiming(**common, peak=None, mfu=None, peak_is_estimate=False, dtype_key=None)
    assert str(unknown).endswith("1.75 TFLOP/s, peak unknown")


@pytest.mark.parametrize("estimate", [False, True])
def test_a_timing_built_by_hand_with_an_mfu_above_one_never_prints_it(estimate: bool) -> None:
    """Code that builds a MatmulTiming itself (a chapter, a test double) still gets a refusal, not "MFU 1.75"."""
    wrong = bench.MatmulTiming(m=1024, k=1024, n=1024, dtype=torch.float32, device="cpu", device_name="Some CPU",
                               seconds=1.23e-3, flops=2 * 1024**3, flop_per_sec=1.75e12, peak=1e12, mfu=1.75,
                               peak_is_estimate=estimate, dtype_key="float32")
    assert wrong.warning.startswith("MFU not reported: 1.75 TFLOP/s measured is above the peak 1 TFLOP/s")
    assert "Some CPU/float32" in wrong.warning and ("estimate" if estimate else "datasheet") in wrong.warning
    assert not MFU_FRACTION.search(str(wrong)) and "1.75 (" not in str(wrong)


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "int8"])
def test_float8_and_int8_on_cpu_raise(name: str) -> None:
    if not hasattr(torch, name):
        pytest.skip(f"torch has no {name}")
    with pytest.raises(ValueError, match="CUDA"):
        bench.time_matmul(64, 64, 64, getattr(torch, name), device="cpu")


def test_bad_sizes_raise() -> None:
    with pytest.raises(ValueError):
        bench.time_matmul(0, 8, 8, device="cpu")


# ---------------------------------------------------------------- CUDA


class _HostEvent:
    """Stands in for torch.cuda.Event on a CPU-only machine: records host time."""

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "_HostEvent") -> float:
        assert self.t is not None and end.t is not None
        return (end.t - self.t) * 1e3  # milliseconds, like CUDA events


@pytest.mark.parametrize("flush_l2", [True, False])
@pytest.mark.parametrize("reps", [4, None])
def test_cuda_code_path_runs_with_fake_events(monkeypatch: pytest.MonkeyPatch, flush_l2: bool, reps: int | None) -> None:
    """The CUDA branch's bookkeeping (flush, events, reps calibration), exercised without a GPU."""
    flushes = 0

    class Buffer:
        def zero_(self) -> None:
            nonlocal flushes
            flushes += 1

    monkeypatch.setattr(torch.cuda, "Event", _HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(bench, "_flush_buffer", lambda dev: Buffer())
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        time.sleep(0.001)

    seconds = bench._time_cuda(fn, 2, reps, torch.device("cuda", 0), flush_l2, 2e-3)
    assert 0.0009 <= seconds < 0.01
    if flush_l2:
        assert flushes >= (reps or 1) and calls == 2 + flushes  # one call per flush
    else:
        assert flushes == 0 and calls > 2 + (reps or 1)



@needs_cuda
def test_cuda_time_fn_measures_gpu_time_not_launch_time() -> None:
    # A kernel that spins ~1e6 GPU cycles (~0.5 ms) but launches in microseconds.
    seconds = bench.time_fn(lambda: torch.cuda._sleep(1_000_000), reps=5, device="cuda")
    assert seconds > 1e-4


@needs_cuda
@pytest.mark.parametrize("flush_l2", [True, False])
@pytest.mark.parametrize("reps", [5, None])
def test_cuda_time_fn_modes(flush_l2: bool, reps: int | None) -> None:
    a = torch.randn(512, 512, device="cuda")
    c = torch.empty_like(a)
    seconds = bench.time_fn(lambda: torch.mm(a, a, out=c), reps=reps, device="cuda", flush_l2=flush_l2)
    assert 0 < seconds < 0.1


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_time_matmul(dtype: torch.dtype) -> None:
    r = bench.time_matmul(1024, 1024, 1024, dtype, device="cuda", reps=5)
    assert r.device.startswith("cuda") and r.device_name == torch.cuda.get_device_name()
    assert r.flop_per_sec == pytest.approx(r.flops / r.seconds)
    if r.mfu is not None:
        assert 0 < r.mfu <= 1.0, str(r)


@needs_cuda
def test_cuda_float8_and_int8() -> None:
    r = bench.time_matmul(256, 256, 256, torch.int8, device="cuda", reps=3)
    assert r.seconds > 0
    if not hasattr(torch, "float8_e4m3fn"):
        return
    with pytest.raises(ValueError, match="16"):
        bench.time_matmul(100, 256, 256, torch.float8_e4m3fn, device="cuda")
    if torch.cuda.get_device_capability() >= (8, 9):  # FP8 tensor cores: Ada, Hopper and later
        r = bench.time_matmul(256, 256, 256, torch.float8_e4m3fn, device="cuda", reps=3)
        assert r.seconds > 0


def test_a_stall_during_the_measurement_is_measured_again() -> None:
    """A machine that stalls for the first calls (a busy VM, a slow first call) must not set the result."""
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        time.sleep(0.008 if calls <= 25 else 0.0005)

    seconds = bench.time_fn(fn, warmup=1, reps=25, device="cpu")
    assert seconds < 0.002, seconds


def test_a_steady_function_is_measured_once() -> None:
    """Re-measuring needs a median 1.5x the re-check's: a 20 ms sleep stays steady even when a busy machine
    wakes it a few ms late (a 3 ms one did not, under three test workers)."""
    calls = 0

    def fn() -> None:
        nonlocal calls
        calls += 1
        time.sleep(0.020)

    bench.time_fn(fn, warmup=2, reps=10, device="cpu")
    assert calls == 2 + 1 + 10 + 5  # warm-up, calibration, reps, re-check


def test_the_notebooks_public_face_is_the_course_library():
    """`from grader import bench, specs, memtrack` (SPEC.md's grader.bench.time_fn) is grader.course's modules
    themselves: catches a copy or a shim that would drift from the library the checks use."""
    import grader
    from grader.course import bench as course_bench, memtrack, specs as course_specs

    assert (grader.bench, grader.specs, grader.memtrack) == (course_bench, course_specs, memtrack)
    assert {"bench", "specs", "memtrack"} <= set(grader.__all__)


def test_machine_names_the_cpu_its_cores_and_the_flags_that_matter(monkeypatch) -> None:
    """A chapter's set-up cell prints bench.machine: the committed outputs then say which machine made them."""
    from grader.course import cpuinfo
    info = cpuinfo.cpu_info()
    monkeypatch.setattr(cpuinfo, "cpu_info", lambda threads=None: replace(info, model="Example CPU", cores=6,
                                                                         flags=frozenset({"avx2", "fma", "sse4_2", "amx_bf16"})))
    assert bench.machine("cpu") == "Example CPU, torch on 6 cores, avx2, fma, amx_bf16"
    monkeypatch.setattr(bench, "device_name", lambda device=None: "NVIDIA H100 80GB HBM3")
    assert bench.machine("cuda:0") == "NVIDIA H100 80GB HBM3"  # a GPU by its name (simulated: none here)
