"""An estimated peak FLOP/s for this CPU, so MFU on a laptop is a ratio rather than a blank.

CPU vendors publish no per-dtype peak tables, so this is arithmetic, not a datasheet:

    peak = cores x clock x FMA units per core x SIMD lanes x 2 (an FMA is two FLOPs)

Assumptions, each of which can make the figure wrong for a given chip:

* 2 FMA units per core. That is the common case for server x86 cores (Skylake-SP and
  later Xeon Gold/Platinum, Zen 2-5) and for recent Arm cores' 128-bit pipes, but some
  parts have one 512-bit unit (Xeon Silver/Bronze, Zen 4 double-pumps 256-bit halves)
  and some Arm cores have four.
* The clock is the nominal one in the model name ("@ 2.20GHz") when there is one, else
  cpufreq's maximum, else /proc/cpuinfo's "cpu MHz". Wide-vector code often runs below it.
* float64 has half the lanes of float32. Other dtypes get no estimate: AMX, VNNI and
  BF16 dot-product instructions vary too much between models to guess honestly.

Everything that reads the machine is split from the parsing, so tests can feed real
/proc/cpuinfo text.
"""
from __future__ import annotations

import platform
import re
import subprocess
from dataclasses import dataclass

import torch

FMA_UNITS = 2  # per core; see the module docstring
_PROC_CPUINFO = "/proc/cpuinfo"
_MAX_FREQ = "/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"
_GHZ_IN_MODEL = re.compile(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", re.IGNORECASE)
_ARM_MACHINES = ("aarch64", "arm64", "armv8l", "armv8b")


@dataclass(frozen=True)
class CpuInfo:
    """What the estimate is built from; printed next to the figure so it can be checked."""

    model: str
    cores: int  # cores a matmul uses: torch's thread count, capped at physical cores
    ghz: float | None
    simd: str  # "avx512", "avx2", "neon" or "unknown"
    fma_units: int
    fp32_lanes: int  # float32 lanes per FMA unit; 0 when the SIMD width is unknown


def parse_proc_cpuinfo(text: str) -> dict[str, object]:
    """Pull model, flags, MHz and the physical core count out of /proc/cpuinfo text."""
    model: str | None = None
    flags: set[str] = set()
    mhz: float | None = None
    implementer = part = None
    cores: set[tuple[str, str]] = set()
    logical = 0
    phys_id = "0"
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip()
        if key == "processor":
            logical += 1
            phys_id = "0"
        elif key == "model name" and model is None:
            model = value
        elif key in ("flags", "features") and not flags:  # x86 "flags", Arm "Features"
            flags = set(value.lower().split())
        elif key == "cpu mhz" and mhz is None:
            try:
                mhz = float(value)
            except ValueError:
                pass
        elif key == "physical id":
            phys_id = value
        elif key == "core id":
            cores.add((phys_id, value))
        elif key == "cpu implementer" and implementer is None:
            implementer = value
        elif key == "cpu part" and part is None:
            part = value
    if model is None and part is not None:
        model = f"Arm CPU (implementer {implementer}, part {part})"
    return {
        "model": model,
        "flags": flags,
        "mhz": mhz,
        "physical_cores": len(cores) or None,
        "logical_cpus": logical or None,
    }


def ghz_from_model(model: str | None) -> float | None:
    """The nominal clock a model name states, e.g. "Intel(R) Xeon(R) CPU @ 2.20GHz" -> 2.2."""
    if not model:
        return None
    match = _GHZ_IN_MODEL.search(model)
    return float(match.group(1)) if match else None


def ghz_from_max_freq(text: str | None) -> float | None:
    """cpufreq's cpuinfo_max_freq is in kHz."""
    try:
        khz = float((text or "").strip())
    except ValueError:
        return None
    return khz / 1e6 if khz > 0 else None


def simd_from_flags(flags: set[str], machine: str) -> tuple[str, int]:
    """SIMD family and float32 lanes per FMA unit; ("unknown", 0) when we can't tell."""
    if "avx512f" in flags:
        return "avx512", 16
    if "avx2" in flags and "fma" in flags:
        return "avx2", 8
    if machine.lower() in _ARM_MACHINES or "asimd" in flags:
        return "neon", 4  # 128-bit NEON; SVE widths vary by core and are not assumed
    return "unknown", 0


def info_from_text(
    cpuinfo_text: str,
    *,
    max_freq_text: str | None = None,
    machine: str = "x86_64",
    threads: int = 1,
) -> CpuInfo:
    """Build a CpuInfo from /proc/cpuinfo text (and cpuinfo_max_freq text); no I/O."""
    parsed = parse_proc_cpuinfo(cpuinfo_text)
    model = parsed["model"] or f"{machine} CPU"
    ghz = ghz_from_model(parsed["model"])  # the nominal clock wins
    if ghz is None:
        ghz = ghz_from_max_freq(max_freq_text)
    if ghz is None and parsed["mhz"]:
        ghz = parsed["mhz"] / 1000.0
    simd, lanes = simd_from_flags(parsed["flags"], machine)
    physical = parsed["physical_cores"]
    cores = max(1, min(threads, physical) if physical else threads)  # SMT adds no FMA units
    return CpuInfo(model=str(model), cores=cores, ghz=ghz, simd=simd,
                   fma_units=FMA_UNITS, fp32_lanes=lanes)


def estimate_flops(info: CpuInfo, dtype: torch.dtype | str) -> float | None:
    """cores x GHz x FMA units x lanes x 2; None for dtypes or CPUs we can't estimate."""
    name = _dtype_name(dtype)
    if name == "float32":
        lanes = info.fp32_lanes
    elif name == "float64":
        lanes = info.fp32_lanes // 2
    else:
        return None
    if not info.ghz or lanes <= 0:
        return None
    return info.cores * info.ghz * 1e9 * info.fma_units * lanes * 2


def cpu_info(threads: int | None = None) -> CpuInfo:
    """Read this machine; threads defaults to torch.get_num_threads(), the cores a matmul uses."""
    threads = torch.get_num_threads() if threads is None else threads
    machine = platform.machine()
    text = _read(_PROC_CPUINFO)
    if text is not None:
        return info_from_text(text, max_freq_text=_read(_MAX_FREQ), machine=machine,
                              threads=threads)
    return _macos_info(threads, machine)


def cpu_peak_flops(dtype: torch.dtype | str, threads: int | None = None) -> float | None:
    """Estimated peak for float32/float64 matmuls on this CPU; None where there is no honest one."""
    return estimate_flops(cpu_info(threads), dtype)


def describe(info: CpuInfo, dtype: torch.dtype | str) -> str:
    """The arithmetic behind the estimate, for Peak.source."""
    name = _dtype_name(dtype)
    lanes = info.fp32_lanes // 2 if name == "float64" else info.fp32_lanes
    ghz = f"{info.ghz:.2f} GHz" if info.ghz else "unknown GHz"
    return (f"estimate (grader.course.cpuinfo): {info.cores} cores x {ghz} x {info.fma_units} FMA units"
            f" x {lanes} {name} lanes ({info.simd}) x 2 FLOP/FMA; assumes {FMA_UNITS} FMA units"
            " per core")


def _dtype_name(dtype: torch.dtype | str) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    name = str(dtype).strip().lower().removeprefix("torch.")
    return {"float": "float32", "fp32": "float32", "double": "float64", "fp64": "float64"}.get(
        name, name)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def sysctl(name: str) -> str | None:
    """`sysctl -n name` on macOS (and BSDs); None where it is absent or says nothing."""
    try:
        out = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True, timeout=2)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _macos_info(threads: int, machine: str) -> CpuInfo:
    """macOS has no /proc: sysctl gives the model, and a clock only on Intel Macs."""
    model = sysctl("machdep.cpu.brand_string") or f"{machine} CPU"
    flags = set()
    for key in ("machdep.cpu.features", "machdep.cpu.leaf7_features"):
        flags |= {f.lower().replace(".", "_") for f in (sysctl(key) or "").split()}
    # sysctl spells them AVX512F, AVX2, FMA; Apple silicon reports none, and no clock.
    hz = sysctl("hw.cpufrequency_max")
    ghz = ghz_from_model(model)
    if ghz is None and hz and hz.isdigit():
        ghz = int(hz) / 1e9
    simd, lanes = simd_from_flags(flags, machine)
    physical = sysctl("hw.physicalcpu")
    cores = min(threads, int(physical)) if physical and physical.isdigit() else threads
    return CpuInfo(model=model, cores=max(1, cores), ghz=ghz, simd=simd,
                   fma_units=FMA_UNITS, fp32_lanes=lanes)


__all__ = ["CpuInfo", "cpu_info", "cpu_peak_flops", "estimate_flops", "info_from_text",
           "parse_proc_cpuinfo", "ghz_from_model", "ghz_from_max_freq", "simd_from_flags",
           "describe", "sysctl", "FMA_UNITS"]
