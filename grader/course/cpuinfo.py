"""An upper bound on this CPU's peak FLOP/s, so MFU on a laptop is a ratio rather than a blank.

CPU vendors publish no per-dtype peak tables, so this is arithmetic, not a datasheet:

    peak = cores x clock x FMA units per core x SIMD lanes x 2 (an FMA is two FLOPs)

Each factor is taken at its most, so that no measurement can exceed the figure (an MFU above 1
is a wrong peak, never a fast machine):

* The clock is the highest one the machine reports, turbo included: the largest of every
  core's cpufreq cpuinfo_max_freq (the turbo clock under intel_pstate and amd-pstate), the
  clock in the model name ("@ 2.20GHz", the nominal one) and every core's "cpu MHz". A VM that
  exposes no cpufreq reports only its nominal clock; the label says so, because its cores
  can run faster (then grader.bench refuses the MFU and says why).
* The widest SIMD the CPU has (AVX-512: 16 float32 lanes; AVX2 with FMA: 8; NEON: 4) and
  2 FMA units per x86 core, the most any x86 core has at its widest width (some have one:
  Xeon Silver/Bronze; Zen 4 double-pumps 256-bit halves). Arm cores known by their "CPU part"
  use their own count of 128-bit FMA pipes (ARM_FMA_PIPES), others 4, the most of those known.
* Cores: torch's thread count, capped at the physical cores (SMT adds no FMA units).
* float64 has half the lanes of float32. Other dtypes get no estimate: AMX, VNNI and
  BF16 dot-product instructions vary too much between models to bound honestly.

Everything that reads the machine is split from the parsing, so tests can feed real
/proc/cpuinfo and cpufreq text.
"""
from __future__ import annotations

import glob
import platform
import re
import subprocess
from dataclasses import dataclass, field
from typing import Iterable

import torch

FMA_UNITS = 2  # per x86 core, at the widest SIMD width: the most any x86 core has
# 128-bit FMA pipes per core of Arm designs, by /proc/cpuinfo's "CPU part" (implementer 0x41), from Arm's
# Neoverse software optimization guides: N1 and N2 have two FP/ASIMD pipes, V1 and V2 four.
ARM_FMA_PIPES: dict[str, tuple[str, int]] = {
    "0xd0c": ("Neoverse N1", 2), "0xd49": ("Neoverse N2", 2),
    "0xd40": ("Neoverse V1", 4), "0xd4f": ("Neoverse V2", 4),
}
ARM_FMA_PIPES_UNKNOWN = 4  # the most of the cores above: the bound for an Arm core not listed
_PROC_CPUINFO = "/proc/cpuinfo"
_MAX_FREQ_GLOB = "/sys/devices/system/cpu/cpu*/cpufreq/cpuinfo_max_freq"
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
    clock_source: str = ""  # which reported clock ghz is, e.g. "cpufreq max, turbo included"
    turbo_reported: bool = False  # whether ghz includes turbo (cpufreq reported a maximum)
    # the CPU's feature flags as /proc/cpuinfo (or sysctl) names them, e.g. "avx512_bf16", "amx_tile": what a
    # notebook prints beside a timing; not part of the estimate, so not compared
    flags: frozenset[str] = field(default=frozenset(), compare=False)


def parse_proc_cpuinfo(text: str) -> dict[str, object]:
    """Pull model, flags, the highest MHz, the physical core count and an Arm core's part out of /proc/cpuinfo text."""
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
        elif key == "cpu mhz":
            try:
                mhz = max(mhz or 0.0, float(value)) or None
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
        "mhz": mhz,  # the highest "cpu MHz" of any core
        "physical_cores": len(cores) or None,
        "logical_cpus": logical or None,
        "arm_part": part if implementer == "0x41" else None,
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


def highest_clock(model: str | None, max_freq_texts: Iterable[str | None] = (), mhz: float | None = None,
                  mhz_source: str = '"cpu MHz"') -> tuple[float | None, str, bool]:
    """The highest clock the machine reports, in GHz, which report it is ("" when none), and whether turbo is in it."""
    turbo = [g for g in (ghz_from_max_freq(t) for t in max_freq_texts) if g is not None]
    candidates = [(max(turbo, default=None), "cpufreq max, turbo included"),
                  (ghz_from_model(model), "the model name's nominal clock"),
                  (mhz / 1000.0 if mhz else None, mhz_source)]
    known = [(ghz, source) for ghz, source in candidates if ghz]
    if not known:
        return None, "", False
    ghz, source = max(known, key=lambda c: c[0])
    if not turbo:
        source += "; no turbo clock reported (a VM?), so cores that run faster exceed this bound"
    return ghz, source, bool(turbo)


def fma_units(machine: str, arm_part: str | None) -> int:
    """FMA units per core at the widest SIMD width: 2 on x86, an Arm core's own count, else the Arm bound."""
    if machine.lower() not in _ARM_MACHINES and arm_part is None:
        return FMA_UNITS
    known = ARM_FMA_PIPES.get(arm_part or "")
    return known[1] if known else ARM_FMA_PIPES_UNKNOWN


def info_from_text(
    cpuinfo_text: str,
    *,
    max_freq_text: str | Iterable[str | None] | None = None,
    machine: str = "x86_64",
    threads: int = 1,
) -> CpuInfo:
    """Build a CpuInfo from /proc/cpuinfo text and each core's cpuinfo_max_freq text; no I/O."""
    parsed = parse_proc_cpuinfo(cpuinfo_text)
    model = parsed["model"] or f"{machine} CPU"
    texts = [max_freq_text] if max_freq_text is None or isinstance(max_freq_text, str) else list(max_freq_text)
    ghz, source, turbo = highest_clock(parsed["model"], texts, parsed["mhz"])
    simd, lanes = simd_from_flags(parsed["flags"], machine)
    physical = parsed["physical_cores"]
    cores = max(1, min(threads, physical) if physical else threads)  # SMT adds no FMA units
    return CpuInfo(model=str(model), cores=cores, ghz=ghz, simd=simd,
                   fma_units=fma_units(machine, parsed["arm_part"]), fp32_lanes=lanes, clock_source=source,
                   turbo_reported=turbo, flags=frozenset(parsed["flags"]))


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
        max_freqs = [_read(path) for path in sorted(glob.glob(_MAX_FREQ_GLOB))]
        return info_from_text(text, max_freq_text=max_freqs, machine=machine, threads=threads)
    return _macos_info(threads, machine)


def cpu_peak_flops(dtype: torch.dtype | str, threads: int | None = None) -> float | None:
    """Upper-bound peak for float32/float64 matmuls on this CPU; None where there is no honest one."""
    return estimate_flops(cpu_info(threads), dtype)


def label(info: CpuInfo, dtype: torch.dtype | str) -> str:
    """The short form printed next to an MFU: the arithmetic of the bound."""
    name = _dtype_name(dtype)
    lanes = info.fp32_lanes // 2 if name == "float64" else info.fp32_lanes
    ghz = f"{info.ghz:.2f} GHz" if info.ghz else "unknown GHz"
    bound = "upper bound" if info.turbo_reported else f"upper bound unless the cores run above {ghz}"
    return (f"estimate ({bound}): {info.cores} cores × {ghz} × {info.fma_units} FMA units × {lanes} "
            f"{name} lanes × 2")


def describe(info: CpuInfo, dtype: torch.dtype | str) -> str:
    """The arithmetic behind the bound and where each factor comes from, for Peak.source."""
    name = _dtype_name(dtype)
    lanes = info.fp32_lanes // 2 if name == "float64" else info.fp32_lanes
    ghz = f"{info.ghz:.2f} GHz" if info.ghz else "unknown GHz"
    clock = f" ({info.clock_source})" if info.clock_source else ""
    return (f"estimate, an upper bound (grader.course.cpuinfo): {info.cores} cores x {ghz}{clock} x "
            f"{info.fma_units} FMA units x {lanes} {name} lanes ({info.simd}, the widest SIMD it has) x 2 "
            "FLOP/FMA; every factor at its most")


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
    mhz = int(hz) / 1e6 if hz and hz.isdigit() else None
    ghz, source, _ = highest_clock(model, (), mhz, "sysctl hw.cpufrequency_max")
    simd, lanes = simd_from_flags(flags, machine)
    physical = sysctl("hw.physicalcpu")
    cores = min(threads, int(physical)) if physical and physical.isdigit() else threads
    return CpuInfo(model=model, cores=max(1, cores), ghz=ghz, simd=simd,
                   fma_units=fma_units(machine, None), fp32_lanes=lanes, clock_source=source,
                   flags=frozenset(flags))


__all__ = ["CpuInfo", "cpu_info", "cpu_peak_flops", "estimate_flops", "info_from_text",
           "parse_proc_cpuinfo", "ghz_from_model", "ghz_from_max_freq", "highest_clock", "fma_units",
           "simd_from_flags", "describe", "label", "sysctl", "FMA_UNITS", "ARM_FMA_PIPES",
           "ARM_FMA_PIPES_UNKNOWN"]
