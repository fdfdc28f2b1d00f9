"""The CPU peak estimate, an upper bound, fed real /proc/cpuinfo and /sys cpufreq text."""
from __future__ import annotations

import pytest
import torch

from grader.course import cpuinfo
from grader.course.cpuinfo import (CpuInfo, estimate_flops, ghz_from_max_freq, ghz_from_model,
                            info_from_text, parse_proc_cpuinfo, simd_from_flags)

# A GCP n2 (Cascade Lake) vCPU pair: one core, two hyperthreads, clock in the model name.
XEON = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 85
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
stepping\t: 7
cpu MHz\t\t: 2200.158
cache size\t: 39424 KB
physical id\t: 0
siblings\t: 2
core id\t\t: 0
cpu cores\t: 1
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx \
fxsr sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc \
cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave \
avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp \
ibrs_enhanced fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm mpx avx512f avx512dq \
rdseed adx smap clflushopt clwb avx512cd avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves arat \
avx512_vnni md_clear arch_capabilities

processor\t: 1
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) CPU @ 2.20GHz
cpu MHz\t\t: 2200.158
physical id\t: 0
siblings\t: 2
core id\t\t: 0
cpu cores\t: 1
"""

# An AMD EPYC Rome (Zen 2) VM with two cores: AVX2 + FMA, no AVX-512, no GHz in the name.
EPYC_AVX2 = """\
processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC 7B12
cpu MHz\t\t: 2249.998
physical id\t: 0
siblings\t: 2
core id\t\t: 0
cpu cores\t: 2
flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx \
fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl \
nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe \
popcnt aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse \
3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 \
rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 clzero xsaveerptr arat npt \
nrip_save umip rdpid

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B12
cpu MHz\t\t: 2249.998
physical id\t: 0
siblings\t: 2
core id\t\t: 1
cpu cores\t: 2
"""

# An AWS Graviton2 (Neoverse N1): no model name, no MHz; the clock has to come from cpufreq.
GRAVITON2 = """\
processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1

processor\t: 1
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm \
lrcpc dcpop asimddp ssbs
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1
"""

# Some hypervisors leave out "cpu MHz" entirely, and the model name has no clock either.
NO_CLOCK = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel Xeon Processor (Icelake)
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 fma avx avx2 avx512f avx512dq
"""

# Sandy Bridge: AVX without FMA, so the FMA formula does not apply.
AVX_ONLY = """\
processor\t: 0
model name\t: Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz
cpu MHz\t\t: 2600.000
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx
"""


def test_parse_proc_cpuinfo_xeon() -> None:
    parsed = parse_proc_cpuinfo(XEON)
    assert parsed["model"] == "Intel(R) Xeon(R) CPU @ 2.20GHz"
    assert parsed["mhz"] == pytest.approx(2200.158)
    assert "avx512f" in parsed["flags"] and "fma" in parsed["flags"]
    assert parsed["physical_cores"] == 1 and parsed["logical_cpus"] == 2


def test_xeon_turbo_clock_wins_over_the_nominal_one_and_smt_adds_nothing() -> None:
    """The model name's 2.20 GHz is the base clock; cpufreq's 3.9 GHz turbo is what the core can reach."""
    info = info_from_text(XEON, max_freq_text="3900000\n", threads=2)
    assert info == CpuInfo(model="Intel(R) Xeon(R) CPU @ 2.20GHz", cores=1, ghz=3.9,
                           simd="avx512", fma_units=2, fp32_lanes=16,
                           clock_source="cpufreq max, turbo included", turbo_reported=True)
    # 1 core x 3.9 GHz x 2 FMA units x 16 lanes x 2 FLOP/FMA
    assert estimate_flops(info, torch.float32) == pytest.approx(249.6e9)
    assert estimate_flops(info, torch.float64) == pytest.approx(124.8e9)
    assert estimate_flops(info, torch.bfloat16) is None
    assert {"avx512f", "fma"} <= info.flags  # the flags, for a notebook to print beside its timings
    assert cpuinfo.label(info, torch.float32) == ("estimate (upper bound): 1 cores × 3.90 GHz × 2 FMA units × "
                                                  "16 float32 lanes × 2")


def test_epyc_avx2_without_cpufreq_uses_cpu_mhz_and_says_it_is_no_turbo_clock() -> None:
    info = info_from_text(EPYC_AVX2, threads=8)
    assert (info.simd, info.fp32_lanes, info.cores) == ("avx2", 8, 2)
    assert info.ghz == pytest.approx(2.249998) and not info.turbo_reported
    assert estimate_flops(info, "float32") == pytest.approx(2 * 2.249998e9 * 2 * 8 * 2)
    assert "unless the cores run above 2.25 GHz" in cpuinfo.label(info, "float32")
    assert "no turbo clock reported" in cpuinfo.describe(info, "float32")


def test_max_freq_beats_cpu_mhz() -> None:
    info = info_from_text(EPYC_AVX2, max_freq_text="3300000", threads=1)
    assert info.ghz == pytest.approx(3.3) and info.turbo_reported


def test_graviton_needs_cpufreq() -> None:
    info = info_from_text(GRAVITON2, max_freq_text="2500000\n", machine="aarch64", threads=2)
    assert (info.simd, info.fp32_lanes, info.ghz) == ("neon", 4, 2.5)
    assert "0xd0c" in info.model
    assert estimate_flops(info, torch.float32) == pytest.approx(2 * 2.5e9 * 2 * 4 * 2)
    no_freq = info_from_text(GRAVITON2, machine="aarch64", threads=2)
    assert no_freq.ghz is None
    assert estimate_flops(no_freq, torch.float32) is None


def test_no_clock_anywhere_gives_none() -> None:
    info = info_from_text(NO_CLOCK, threads=4)
    assert info.ghz is None and info.simd == "avx512"
    assert estimate_flops(info, torch.float32) is None


def test_avx_without_fma_gives_none() -> None:
    info = info_from_text(AVX_ONLY, threads=1)
    assert info.simd == "unknown" and info.ghz == 2.6
    assert estimate_flops(info, torch.float32) is None


@pytest.mark.parametrize("model,ghz", [
    ("Intel(R) Xeon(R) CPU @ 2.20GHz", 2.2),
    ("Intel(R) Core(TM) i7-8700K CPU @ 3.70GHz", 3.7),
    ("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50 GHz", 2.5),
    ("AMD EPYC 7B12", None),
    (None, None),
])
def test_ghz_from_model(model: str | None, ghz: float | None) -> None:
    assert ghz_from_model(model) == ghz


@pytest.mark.parametrize("text,ghz", [("2500000\n", 2.5), ("", None), ("garbage", None),
                                      (None, None), ("0", None)])
def test_ghz_from_max_freq(text: str | None, ghz: float | None) -> None:
    assert ghz_from_max_freq(text) == ghz


@pytest.mark.parametrize("flags,machine,expected", [
    ({"avx512f", "avx2", "fma"}, "x86_64", ("avx512", 16)),
    ({"avx2", "fma"}, "x86_64", ("avx2", 8)),
    ({"avx2"}, "x86_64", ("unknown", 0)),
    (set(), "aarch64", ("neon", 4)),
    (set(), "arm64", ("neon", 4)),
    ({"sse2"}, "x86_64", ("unknown", 0)),
])
def test_simd_from_flags(flags: set[str], machine: str, expected: tuple[str, int]) -> None:
    assert simd_from_flags(flags, machine) == expected


# A hybrid Intel laptop (Raptor Lake): P-cores' cpufreq says 5.4 GHz, E-cores' 4.2 GHz; one core is idling
# at 800 MHz and another running at 4.7 GHz when /proc/cpuinfo was read.
HYBRID = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: 13th Gen Intel(R) Core(TM) i9-13900H
cpu MHz\t\t: 800.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 fma avx avx2

processor\t: 1
model name\t: 13th Gen Intel(R) Core(TM) i9-13900H
cpu MHz\t\t: 4700.112
physical id\t: 0
core id\t\t: 4
"""
HYBRID_MAX_FREQS = ["5400000\n", "5400000\n", "4200000\n", "4200000\n"]

# The machine of issue 28: a VM with no cpufreq, no clock in the model name, "cpu MHz" 2300 (its TSC), whose
# cores ran faster: 0.316 TFLOP/s measured on 2 cores against an estimate of 0.294 at 2.30 GHz.
VM_NO_TURBO = """\
processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2300.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 fma avx avx2 avx512f hypervisor

processor\t: 1
model name\t: Intel(R) Xeon(R) Processor
cpu MHz\t\t: 2300.000
physical id\t: 0
core id\t\t: 1
"""


def test_the_highest_clock_of_every_core_is_taken() -> None:
    info = info_from_text(HYBRID, max_freq_text=HYBRID_MAX_FREQS, threads=2)
    assert info.ghz == pytest.approx(5.4) and info.turbo_reported
    assert parse_proc_cpuinfo(HYBRID)["mhz"] == pytest.approx(4700.112)  # the busiest core's, not the first
    assert info_from_text(HYBRID, threads=2).ghz == pytest.approx(4.700112)


@pytest.mark.parametrize("text,max_freqs,ghz", [
    (XEON, ["3900000\n"], 3.9),            # turbo above the nominal model-name clock
    (XEON, [], 2.2),                        # no cpufreq: the higher of the nominal 2.20 and "cpu MHz" 2200.158
    (HYBRID, HYBRID_MAX_FREQS, 5.4),
    (VM_NO_TURBO, [], 2.3),
    (EPYC_AVX2, ["3300000", "garbage", None, "0"], 3.3),  # unreadable files are skipped
])
def test_the_estimate_is_never_below_any_clock_the_machine_reports(text: str, max_freqs: list, ghz: float) -> None:
    info = info_from_text(text, max_freq_text=max_freqs, threads=64)
    assert info.ghz == pytest.approx(ghz, rel=1e-4)
    reported = [cpuinfo.ghz_from_max_freq(t) for t in max_freqs] + [
        cpuinfo.ghz_from_model(parse_proc_cpuinfo(text)["model"]), (parse_proc_cpuinfo(text)["mhz"] or 0) / 1000]
    for clock in filter(None, reported):
        at_that_clock = info.cores * clock * 1e9 * info.fma_units * info.fp32_lanes * 2
        assert estimate_flops(info, torch.float32) >= at_that_clock * (1 - 1e-12)


def test_issue_28s_vm_is_labelled_a_bound_only_at_its_reported_clock() -> None:
    info = info_from_text(VM_NO_TURBO, threads=2)
    assert (info.cores, info.ghz, info.fma_units, info.fp32_lanes) == (2, 2.3, 2, 16)
    assert estimate_flops(info, torch.float32) == pytest.approx(294.4e9)  # what 09 printed; 0.316 was measured
    assert cpuinfo.label(info, torch.float32).startswith("estimate (upper bound unless the cores run above 2.30 GHz)")


@pytest.mark.parametrize("part,pipes", [("0xd0c", 2), ("0xd49", 2), ("0xd40", 4), ("0xd4f", 4), ("0xfff", 4)])
def test_arm_cores_use_their_own_fma_pipes_else_the_most_known(part: str, pipes: int) -> None:
    """Graviton2 (N1) has two 128-bit FMA pipes, Graviton3 (V1) and 4 (V2) four; an unknown part gets four."""
    text = GRAVITON2.replace("0xd0c", part)
    info = info_from_text(text, max_freq_text="2600000", machine="aarch64", threads=2)
    assert info.fma_units == pipes
    assert estimate_flops(info, torch.float32) == pytest.approx(2 * 2.6e9 * pipes * 4 * 2)


def test_x86_takes_the_widest_simd_and_two_fma_units() -> None:
    assert cpuinfo.fma_units("x86_64", None) == cpuinfo.FMA_UNITS == 2
    assert simd_from_flags({"avx512f", "avx2", "fma", "sse2"}, "x86_64") == ("avx512", 16)


def test_live_machine_reads_without_error() -> None:
    info = cpuinfo.cpu_info()
    assert info.cores >= 1 and info.model
    assert info.cores <= torch.get_num_threads()
    peak = cpuinfo.cpu_peak_flops(torch.float32)
    assert peak is None or peak > 0
    assert cpuinfo.cpu_peak_flops(torch.bfloat16) is None
    assert cpuinfo.cpu_info(threads=1).cores == 1
