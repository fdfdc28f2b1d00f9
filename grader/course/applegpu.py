"""An estimated peak FLOP/s for an Apple silicon GPU (PyTorch's `mps` device), so MFU on a Mac is a ratio.

Apple publishes one compute figure for its GPUs, the 8-core M1's "2.6 teraflops" (Apple Newsroom,
"Apple unleashes M1", 10 November 2020); for every other chip this is arithmetic, labelled an estimate:

    peak = GPU cores x 128 FP32 ALUs per core x 2 (an FMA is two FLOPs) x GPU clock

The 128 ALUs per core and the clocks of M1 and M2 are from Philip Turner's measurements
(github.com/philipturner/metal-benchmarks, "GPU" table), which give 2.617 TFLOP/s for the 8-core M1,
in line with Apple's figure; the M3 and M4 clocks are third-party database figures (hmc-tech.com), and an
Ultra (two Max dies) is taken at its Max's clock.
float16 runs at the float32 rate on these GPUs (same source); bfloat16 and other dtypes get no figure,
nor does a chip whose clock is not in the table (M5 and later; there is no M4 Ultra): an unknown peak,
never a guess.

A chip is also known by name ("Apple M2 Max", or "Apple M2 Max, 38-core GPU" as grader.bench names it):
without a core count, the largest GPU Apple ships that chip with is taken (MAX_CORES, from Apple's
tech-specs pages), an upper bound for the smaller configuration, and the label says so.

Everything that reads the machine (sysctl, system_profiler) is split from the arithmetic, so tests can
feed what a Mac prints.
"""
from __future__ import annotations

import functools
import json
import platform
import re
import subprocess
from dataclasses import dataclass

from grader.course import cpuinfo

ALUS_PER_CORE = 128
# GPU clock in GHz by chip ("M1", "M1 Pro", ...), with where the figure comes from.
_TURNER = "Philip Turner, metal-benchmarks (measured)"
_HMC = "hmc-tech.com GPU database (third-party)"
_ULTRA = "; an Ultra is two Max dies, taken at the Max's clock"
CLOCKS: dict[str, tuple[float, str]] = {
    "M1": (1.278, _TURNER), "M1 Pro": (1.296, _TURNER), "M1 Max": (1.296, _TURNER), "M1 Ultra": (1.296, _TURNER),
    "M2": (1.398, _TURNER), "M2 Pro": (1.398, _TURNER), "M2 Max": (1.398, _TURNER),
    "M2 Ultra": (1.398, _TURNER + _ULTRA),
    "M3": (1.398, _HMC), "M3 Pro": (1.398, _HMC), "M3 Max": (1.398, _HMC), "M3 Ultra": (1.398, _HMC + _ULTRA),
    "M4": (1.470, _HMC), "M4 Pro": (1.470, _HMC), "M4 Max": (1.678, _HMC),
}
# The largest GPU (cores) Apple ships each chip with: Apple's tech-specs pages and Newsroom releases
# (M1 7/8, M1 Pro 14/16, M1 Max 24/32, M1 Ultra 48/64; M2 8/10, M2 Pro 16/19, M2 Max 30/38, M2 Ultra
# 60/76; M3 8/10, M3 Pro 14/18, M3 Max 30/40, M3 Ultra 60/80; M4 8/10, M4 Pro 16/20, M4 Max 32/40).
MAX_CORES: dict[str, int] = {
    "M1": 8, "M1 Pro": 16, "M1 Max": 32, "M1 Ultra": 64,
    "M2": 10, "M2 Pro": 19, "M2 Max": 38, "M2 Ultra": 76,
    "M3": 10, "M3 Pro": 18, "M3 Max": 40, "M3 Ultra": 80,
    "M4": 10, "M4 Pro": 20, "M4 Max": 40,
}
# Figures Apple itself published, by (chip, GPU cores): FLOP/s and the source.
PUBLISHED: dict[tuple[str, int], tuple[float, str]] = {
    ("M1", 8): (2.6e12, 'Apple Newsroom, "Apple unleashes M1", 2020-11-10: "2.6 teraflops of throughput"'),
}
_RATE = {"float32": 1.0, "float16": 1.0}  # of the float32 FMA rate
_CHIP = re.compile(r"\bM(\d+)(?:\s+(Pro|Max|Ultra))?\b")
_CORES_IN_NAME = re.compile(r"\b(\d+)-core GPU\b", re.IGNORECASE)


@dataclass(frozen=True)
class AppleGpu:
    """What the estimate is built from; printed next to the figure so it can be checked."""

    chip: str             # "M2 Pro", or the brand string when it names no known chip
    cores: int | None     # GPU cores (system_profiler), None when unknown
    cores_assumed: bool = False  # True when cores is MAX_CORES[chip], not what the machine or name said

    @property
    def name(self) -> str:
        cores = f", {self.cores}-core GPU" if self.cores else ""
        return f"Apple {self.chip}{cores}"


def chip_from_brand(brand: str) -> str:
    """`Apple M2 Pro` -> `M2 Pro`; a brand naming no M-series chip is returned as is."""
    m = _CHIP.search(brand or "")
    if not m:
        return (brand or "unknown").strip()
    return f"M{m.group(1)}" + (f" {m.group(2)}" if m.group(2) else "")


def gpu_from_name(name: str) -> AppleGpu | None:
    """An Apple chip named as "Apple M2 Max" or "Apple M2 Max, 38-core GPU"; None for any other name.

    Without a core count the chip's largest GPU is taken (an upper bound, marked cores_assumed); a core
    count the chip was never sold with gives None.
    """
    if not isinstance(name, str) or not name.strip().lower().startswith("apple "):
        return None
    chip = chip_from_brand(name)
    most = MAX_CORES.get(chip)
    if most is None:
        return None
    m = _CORES_IN_NAME.search(name)
    if m is None:
        return AppleGpu(chip, most, cores_assumed=True)
    cores = int(m.group(1))
    return AppleGpu(chip, cores) if 0 < cores <= most else None


def cores_from_profiler(text: str) -> int | None:
    """The GPU core count in `system_profiler SPDisplaysDataType -json` output (`sppci_cores`)."""
    try:
        displays = json.loads(text).get("SPDisplaysDataType", [])
    except (ValueError, AttributeError):
        return None
    for item in displays:
        cores = str(item.get("sppci_cores", "")).strip()
        if cores.isdigit():
            return int(cores)
    return None


def estimate_flops(gpu: AppleGpu, dtype_key: str) -> float | None:
    """Apple's own figure where it published one, else cores x 128 x 2 x clock; None where unknown."""
    rate = _RATE.get(dtype_key)
    if rate is None or not gpu.cores:
        return None
    published = PUBLISHED.get((gpu.chip, gpu.cores))
    if published is not None:
        return published[0] * rate
    clock = CLOCKS.get(gpu.chip)
    if clock is None:
        return None
    return gpu.cores * ALUS_PER_CORE * 2 * clock[0] * 1e9 * rate


def is_published(gpu: AppleGpu) -> bool:
    """Whether Apple published this exact chip and core count's figure (else the peak is an estimate)."""
    return (gpu.chip, gpu.cores or 0) in PUBLISHED


def label(gpu: AppleGpu, dtype_key: str) -> str:
    """The short form printed next to an MFU: Apple's figure, or the arithmetic of the estimate."""
    if is_published(gpu):
        return f"published by Apple: {gpu.chip}, {gpu.cores}-core GPU"
    clock = CLOCKS.get(gpu.chip)
    ghz = f"{clock[0]:.3f} GHz" if clock else "unknown GHz"
    largest = " (the largest, an upper bound)" if gpu.cores_assumed else ""
    return f"estimate: {gpu.cores or 'unknown'} GPU cores{largest} × {ALUS_PER_CORE} ALUs × 2 × {ghz}"


def describe(gpu: AppleGpu, dtype_key: str) -> str:
    """Where the figure comes from, for Peak.source."""
    published = PUBLISHED.get((gpu.chip, gpu.cores or 0))
    if published is not None:
        return f"published by Apple: {published[1]}" + _rate_note(dtype_key) + _assumed_note(gpu)
    clock = CLOCKS.get(gpu.chip)
    ghz = f"{clock[0]:.3f} GHz ({clock[1]})" if clock else "unknown GHz"
    return (f"estimate (grader.course.applegpu): {gpu.cores or 'unknown'} GPU cores x {ALUS_PER_CORE} ALUs x 2 FLOP/FMA"
            f" x {ghz}" + _rate_note(dtype_key) + _assumed_note(gpu))


def _assumed_note(gpu: AppleGpu) -> str:
    if not gpu.cores_assumed:
        return ""
    return (f"; the name gives no core count, so the largest {gpu.chip} GPU ({gpu.cores} cores, Apple's tech "
            "specs) is taken: an upper bound for a smaller one")


def _rate_note(dtype_key: str) -> str:
    return "" if dtype_key == "float32" else f"; {dtype_key} at the float32 rate"


def _profiler() -> str | None:
    try:
        out = subprocess.run(["system_profiler", "SPDisplaysDataType", "-json"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def apple_gpu() -> AppleGpu | None:
    """This Mac's GPU, or None off macOS (read once: system_profiler takes a moment)."""
    if platform.system() != "Darwin":
        return None
    brand = cpuinfo.sysctl("machdep.cpu.brand_string") or ""
    text = _profiler()
    return AppleGpu(chip_from_brand(brand), cores_from_profiler(text) if text else None)


__all__ = ["ALUS_PER_CORE", "CLOCKS", "MAX_CORES", "PUBLISHED", "AppleGpu", "apple_gpu", "chip_from_brand",
           "cores_from_profiler", "describe", "estimate_flops", "gpu_from_name", "is_published", "label"]
