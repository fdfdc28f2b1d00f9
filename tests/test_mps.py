"""Apple silicon, simulated: this machine has no Apple GPU, so each test stands one in.

What is simulated and how: `torch.backends.mps.is_available` answers True, `torch.mps.synchronize` and the
clock `time_fn` reads are recorded, and what a Mac's `sysctl` and `system_profiler` print is fed in. The
arithmetic and the control flow under test are the real ones; no Metal kernel runs here.
"""
from __future__ import annotations

import json
import platform

import pytest
import torch

from grader.course import applegpu, bench, cpuinfo, mfu, specs

PROFILER_M2_PRO = json.dumps({"SPDisplaysDataType": [{"_name": "Apple M2 Pro", "sppci_cores": "19",
                                                       "sppci_device_type": "spdisplays_gpu"}]})


@pytest.fixture
def mac(monkeypatch: pytest.MonkeyPatch):
    """A Mac with an M2 Pro (19-core GPU) and no CUDA."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(cpuinfo, "sysctl", lambda name: {"machdep.cpu.brand_string": "Apple M2 Pro"}.get(name))
    monkeypatch.setattr(applegpu, "_profiler", lambda: PROFILER_M2_PRO)
    applegpu.apple_gpu.cache_clear()
    yield
    applegpu.apple_gpu.cache_clear()


def test_the_default_device_is_mps_where_cuda_is_absent(mac) -> None:
    assert bench.default_device() == torch.device("mps")


def test_cuda_still_comes_first(mac, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert bench.default_device() == torch.device("cuda")


def test_a_linux_machine_without_a_gpu_stays_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert bench.default_device() == torch.device("cpu")


def test_time_fn_reads_the_clock_only_after_mps_finished_the_work(mac, monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a timer that reads the host clock while Metal still has queued work (it would time launches)."""
    events: list[str] = []
    now = [0.0]

    def call() -> None:  # each call "takes" 3 ms of simulated time
        events.append("call")
        now[0] += 3e-3

    monkeypatch.setattr(torch.mps, "synchronize", lambda: events.append("sync"))
    monkeypatch.setattr(bench, "_timer", lambda: (events.append("clock"), now[0])[1])
    seconds = bench.time_fn(call, warmup=2, reps=5, device="mps")
    assert seconds == pytest.approx(3e-3)
    first_clock = events.index("clock")
    assert events[:first_clock].count("call") == 2 and events[first_clock - 1] == "sync"  # warm-up finished
    pending = False
    for e in events[first_clock:]:
        if e == "call":
            pending = True
        elif e == "sync":
            pending = False
        elif e == "clock":
            assert not pending, f"the clock was read with work still queued: {events}"


def test_the_peak_of_an_m2_pro_is_an_estimate_from_cores_and_clock(mac) -> None:
    peak = specs.device_peak("mps", torch.float32)
    assert peak is not None and peak.estimate
    assert peak.flop_per_sec == pytest.approx(19 * 128 * 2 * 1.398e9)  # 6.80 TFLOP/s, Turner's table says 6,800 GOPS
    assert peak.spec_name == "Apple M2 Pro GPU (estimate)" and "19 GPU cores" in peak.source
    assert specs.device_peak("mps", torch.float16).flop_per_sec == peak.flop_per_sec  # same rate on Apple GPUs
    assert specs.device_peak("mps", torch.bfloat16) is None  # no honest figure: unknown, not guessed
    assert specs.device_peak("mps", torch.float64) is None  # MPS has no float64


def test_apples_own_figure_wins_where_it_published_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(applegpu, "apple_gpu", lambda: applegpu.AppleGpu("M1", 8))
    peak = specs.device_peak("mps", torch.float32)
    assert peak.flop_per_sec == 2.6e12 and not peak.estimate and "Apple Newsroom" in peak.source
    # the estimate agrees with it: 8 x 128 x 2 x 1.278 GHz = 2.617 TFLOP/s
    assert applegpu.estimate_flops(applegpu.AppleGpu("M1", 7), "float32") == pytest.approx(7 / 8 * 2.617e12, rel=1e-3)


@pytest.mark.parametrize("chip, cores, tflops", [
    ("M1 Max", 32, 10.617), ("M1 Ultra", 64, 21.233), ("M2", 10, 3.579), ("M2 Max", 38, 13.6),
    ("M3 Max", 40, 14.32), ("M4", 10, 3.76), ("M4 Max", 32, 13.74),
])
def test_estimates_agree_with_the_tables_they_come_from(chip: str, cores: int, tflops: float) -> None:
    assert applegpu.estimate_flops(applegpu.AppleGpu(chip, cores), "float32") / 1e12 == pytest.approx(tflops, rel=2e-3)


def test_a_chip_with_no_known_clock_or_core_count_has_an_unknown_peak() -> None:
    assert applegpu.estimate_flops(applegpu.AppleGpu("M5", 10), "float32") is None
    assert applegpu.estimate_flops(applegpu.AppleGpu("M2", None), "float32") is None


@pytest.mark.parametrize("brand, chip", [("Apple M2 Pro", "M2 Pro"), ("Apple M1", "M1"), ("Apple M3 Ultra", "M3 Ultra"),
                                         ("Apple M4 Max", "M4 Max"), ("", "unknown"), ("Apple A18 Pro", "Apple A18 Pro")])
def test_chip_names_from_the_brand_string(brand: str, chip: str) -> None:
    assert applegpu.chip_from_brand(brand) == chip


def test_core_count_from_system_profiler() -> None:
    assert applegpu.cores_from_profiler(PROFILER_M2_PRO) == 19
    assert applegpu.cores_from_profiler("not json") is None
    assert applegpu.cores_from_profiler(json.dumps({"SPDisplaysDataType": [{"_name": "x"}]})) is None


def test_the_device_name_says_which_apple_gpu(mac) -> None:
    assert bench.device_name("mps") == "Apple M2 Pro, 19-core GPU"


def test_off_a_mac_there_is_no_apple_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    applegpu.apple_gpu.cache_clear()
    try:
        assert applegpu.apple_gpu() is None
    finally:
        applegpu.apple_gpu.cache_clear()


def test_an_apple_cpu_without_a_clock_has_an_unknown_peak_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apple silicon's sysctl has no hw.cpufrequency_max and no SIMD flags: the CPU's peak is unknown."""
    monkeypatch.setattr(cpuinfo, "_read", lambda path: None)  # no /proc/cpuinfo on macOS
    monkeypatch.setattr(cpuinfo, "sysctl", lambda name: {"machdep.cpu.brand_string": "Apple M2 Pro",
                                                        "hw.physicalcpu": "10"}.get(name))
    info = cpuinfo.cpu_info(threads=8)
    assert info.model == "Apple M2 Pro" and info.ghz is None
    assert cpuinfo.estimate_flops(info, "float32") is None
    assert "unknown GHz" in cpuinfo.describe(info, "float32")


def test_python_m_grader_mfu_on_mps(mac, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m grader mfu` on a Mac: mps is accepted, the peak is labelled an estimate, MFU is filled in.
    time_matmul is replaced by one that answers 1 ms per matmul (no Metal here)."""
    calls: list[tuple[int, torch.dtype, str]] = []

    def fake_time_matmul(m, k, n, dtype, device, **kw):
        calls.append((m, dtype, str(device)))
        peak = specs.device_peak(device, dtype)
        flops = 2 * m * k * n
        return bench.MatmulTiming(m=m, k=k, n=n, dtype=dtype, device=str(device), device_name=bench.device_name(device),
                                  seconds=1e-3, flops=flops, flop_per_sec=flops / 1e-3,
                                  peak=peak.flop_per_sec if peak else None,
                                  mfu=flops / 1e-3 / peak.flop_per_sec if peak else None,
                                  peak_is_estimate=bool(peak and peak.estimate), dtype_key=peak.dtype_key if peak else None)

    monkeypatch.setattr(bench, "time_matmul", fake_time_matmul)
    monkeypatch.setattr(torch.mps, "empty_cache", lambda: None)
    assert mfu.main(["--device", "mps", "--sizes", "1024"]) == 0
    out = capsys.readouterr().out
    assert "Apple M2 Pro, 19-core GPU" in out and "estimates" in out and "torch.mps.synchronize" in out
    assert {d for _, d, _ in calls} == {torch.float32, torch.float16, torch.bfloat16}
    assert all(dev == "mps" for _, _, dev in calls)
    assert "0.32" in out and "unknown" in out  # 2·1024³ FLOP in 1 ms = 2.15 TFLOP/s of 6.80; bfloat16: no peak


def test_mfu_refuses_mps_where_there_is_none(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert mfu.main(["--device", "mps"]) == 2
    assert "MPS was asked for" in capsys.readouterr().out


# --- Apple chips by name (issue 31): "Apple M2 Max" as well as through system_profiler ------------------

@pytest.mark.parametrize("chip", list(applegpu.MAX_CORES))
def test_every_m1_to_m4_chip_resolves_by_name_to_its_largest_gpu(chip: str) -> None:
    """Without a core count the largest GPU Apple ships that chip with is taken: a bound for the smaller one."""
    peak = specs.named_peak(f"Apple {chip}", torch.float32)
    assert peak is not None and peak.flop_per_sec > 0
    cores = applegpu.MAX_CORES[chip]
    if (chip, cores) in applegpu.PUBLISHED:
        assert not peak.estimate and peak.flop_per_sec == applegpu.PUBLISHED[(chip, cores)][0]
    else:
        assert peak.estimate and f"{cores} GPU cores (the largest, an upper bound)" in peak.label
        assert peak.flop_per_sec == pytest.approx(cores * 128 * 2 * applegpu.CLOCKS[chip][0] * 1e9)
    assert "largest" in peak.source
    assert specs.peak_flops(f"Apple {chip}", torch.float32) == peak.flop_per_sec


def test_apple_m2_max_by_name() -> None:
    assert specs.peak_flops("Apple M2 Max", torch.float32) == pytest.approx(13.6e12, rel=1e-3)  # 38 cores
    assert specs.peak_flops("Apple M2 Max", torch.float16) == specs.peak_flops("Apple M2 Max", torch.float32)
    assert specs.peak_flops("Apple M2 Max", torch.bfloat16) is None


def test_a_core_count_in_the_name_is_used() -> None:
    """bench.device_name names a Mac's GPU "Apple M2 Max, 30-core GPU": that exact GPU, not the largest."""
    peak = specs.named_peak("Apple M2 Max, 30-core GPU", torch.float32)
    assert peak.flop_per_sec == pytest.approx(30 * 128 * 2 * 1.398e9) and "largest" not in peak.source
    assert specs.peak_flops("Apple M1, 8-core GPU", torch.float32) == 2.6e12  # Apple's own figure
    assert specs.peak_flops("Apple M1, 7-core GPU", torch.float32) == pytest.approx(7 * 128 * 2 * 1.278e9)


@pytest.mark.parametrize("name", ["Apple M4 Ultra",  # never made
                                  "Apple M2 Max, 64-core GPU",  # more cores than the chip was sold with
                                  "Apple M5", "M2 Max",  # no clock known; no vendor word
                                  "Tesla M40", "NVIDIA Quadro M4000", "Apple A18 Pro"])
def test_names_that_are_no_known_apple_gpu_give_nothing(name: str) -> None:
    assert specs.peak_flops(name, torch.float32) is None
