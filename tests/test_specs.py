"""The peak table and its lookup: real device names, traps, sparse halving, TF32 switching."""
from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import pytest
import torch

from grader.course import specs
from grader.course.specs import DTYPE_KEYS, device_peak, dtype_key, lookup, peak_flops

# Names as torch.cuda.get_device_name reports them -> expected row (None: not in the table).
NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H100", None),  # ambiguous without an SM count
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA H20", "H20"),  # a different (China) part, no published peak: never the H200's
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100-PCIE-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA A10", "A10"),  # must not match A100
    ("NVIDIA A10G", "A10G"),  # its own row, not the A10's
    ("NVIDIA B200", "B200"),
    ("NVIDIA GB200", "GB200 (per GPU)"),  # must not match B200
    ("NVIDIA L4", "L4"),  # must not match L40 / L40S
    ("NVIDIA L40", "L40"),
    ("NVIDIA L40S", "L40S"),
    ("Tesla T4", "T4"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("Tesla V100-SXM2-32GB", "V100 SXM2"),
    ("Tesla V100-PCIE-32GB", "V100 PCIe"),
    ("Tesla V100S-PCIE-32GB", "V100S PCIe"),  # not the V100 row
    ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA GeForce RTX 3090 Ti", None),  # a different card
    ("NVIDIA GeForce RTX 4090 D", None),  # fewer SMs than the 4090
    ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA RTX A6000", "RTX A6000"),
    # Kaggle / Colab / lab machines (issue 17 §4).
    ("Tesla P100-PCIE-16GB", "P100 PCIe 16GB"),
    ("Tesla P100-PCIE-12GB", "P100 PCIe 12GB"),  # fewer HBM2 stacks: not the 16 GB row
    ("Tesla P100-SXM2-16GB", "P100 SXM2"),  # higher clocks than the PCIe board
    ("Tesla P100", None),  # PCIe or SXM2: unknown
    ("NVIDIA GeForce RTX 3060", "RTX 3060"),
    ("NVIDIA GeForce RTX 3070", "RTX 3070"),
    ("NVIDIA GeForce RTX 3080", "RTX 3080"),
    ("NVIDIA GeForce RTX 3080 Ti", None),  # a different card
    ("NVIDIA GeForce RTX 4060", "RTX 4060"),
    ("NVIDIA GeForce RTX 4060 Ti", "RTX 4060 Ti"),  # not the 4060
    ("NVIDIA GeForce RTX 4070", "RTX 4070"),
    ("NVIDIA GeForce RTX 4070 Ti", "RTX 4070 Ti"),  # not the 4070
    ("NVIDIA GeForce RTX 4070 Ti SUPER", None),  # not the 4070 Ti
    ("NVIDIA GeForce RTX 4080", "RTX 4080"),
    ("NVIDIA GeForce RTX 4080 SUPER", None),  # more SMs than the 4080
    ("NVIDIA GeForce RTX 5090", "RTX 5090"),
    ("NVIDIA GeForce RTX 3060 Laptop GPU", "RTX 3060 Laptop"),  # never the desktop rows
    ("NVIDIA GeForce RTX 3070 Laptop GPU", "RTX 3070 Laptop"),
    ("NVIDIA GeForce RTX 3080 Laptop GPU", "RTX 3080 Laptop"),
    ("NVIDIA GeForce RTX 4060 Laptop GPU", "RTX 4060 Laptop"),
    ("NVIDIA GeForce RTX 4070 Laptop GPU", "RTX 4070 Laptop"),
    ("NVIDIA GeForce RTX 4080 Laptop GPU", "RTX 4080 Laptop"),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "RTX 4090 Laptop"),
    ("NVIDIA GeForce RTX 5090 Laptop GPU", "RTX 5090 Laptop"),
    ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada"),  # not the RTX A6000
    ("Quadro RTX 6000", None),  # Turing: neither RTX 6000 Ada nor RTX A6000
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None),
    ("NVIDIA B300 SXM6 AC", "B300"),
    ("NVIDIA GB300", "GB300 (per GPU)"),  # must not match B300
    ("AMD Instinct MI325X", "MI325X"),  # must not match MI300X
    ("AMD Instinct MI355X", "MI355X"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None),  # a slice: the full-GPU peak would be wrong
    ("cpu", None),
    ("", None),
]


@pytest.mark.parametrize("name,expected", NAMES)
def test_lookup_real_names(name: str, expected: str | None) -> None:
    spec = lookup(name)
    assert (spec.name if spec else None) == expected


@pytest.mark.parametrize("name", ["nvidia h100 80gb hbm3", "NVIDIA   H100-80GB-HBM3"])
def test_lookup_is_case_and_separator_insensitive(name: str) -> None:
    assert lookup(name).name == "H100 SXM"


@pytest.mark.parametrize("sm_count,expected", [(132, "H100 SXM"), (114, "H100 PCIe"),
                                               (None, None), (100, None)])
def test_bare_h100_is_decided_by_sm_count(sm_count: int | None, expected: str | None) -> None:
    spec = lookup("NVIDIA H100", sm_count=sm_count)
    assert (spec.name if spec else None) == expected


def test_name_hint_beats_sm_count_and_mismatch_gives_none() -> None:
    assert lookup("NVIDIA H100 PCIe", sm_count=114).name == "H100 PCIe"
    assert lookup("NVIDIA H100 80GB HBM3", sm_count=132).name == "H100 SXM"
    # A known SM count that disagrees means a partition or another SKU: no peak.
    assert lookup("NVIDIA H100 PCIe", sm_count=132) is None
    assert lookup("NVIDIA A100-SXM4-80GB", sm_count=14) is None
    assert lookup("AMD Instinct MI300X", sm_count=38) is None  # a CPX partition
    assert lookup("AMD Instinct MI300X", sm_count=304).name == "MI300X"


def test_no_fallback_to_another_row() -> None:
    assert peak_flops("NVIDIA H100", torch.bfloat16) is None
    assert peak_flops("NVIDIA H20", torch.bfloat16) is None
    assert peak_flops("NVIDIA A10G", torch.bfloat16) is None  # unpublished; not the A10's 125e12
    assert peak_flops("NVIDIA A10", torch.bfloat16) == 125e12


def test_every_row_is_sourced_with_known_positive_peaks() -> None:
    rows = specs.table()
    names = [row.name for row in rows]
    assert len(names) == len(set(names))
    for row in rows:
        assert row.source.strip(), row.name
        assert set(row.peaks) <= set(DTYPE_KEYS), row.name
        for key, value in row.peaks.items():
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (row.name, key)
        assert row.sms is None or row.sms > 0
        if "with sparsity" in row.source:
            assert specs.HALVED in row.source, row.name


def test_required_rows_are_present() -> None:
    names = {row.name for row in specs.table()}
    for required in ["H100 SXM", "H100 PCIe", "H100 NVL", "H200 SXM", "H200 NVL", "A100",
                     "B200", "GB200 (per GPU)", "L4", "L40", "L40S", "T4", "A10", "A10G",
                     "V100 SXM2", "V100 PCIe", "V100S PCIe", "RTX 4090", "RTX 3090",
                     "MI300X", "P100 PCIe 16GB", "RTX 3060", "RTX 3070", "RTX 3080",
                     "RTX 4060", "RTX 4060 Ti", "RTX 4070", "RTX 4070 Ti", "RTX 4080",
                     "RTX 5090", "RTX 4060 Laptop", "RTX A6000", "RTX 6000 Ada", "H20", "B300",
                     "GB300 (per GPU)", "MI325X", "MI355X"]:
        assert required in names


def test_sparse_figures_are_halved() -> None:
    # The curriculum's figure: the datasheet's 1,979 "with sparsity", halved.
    assert peak_flops("NVIDIA H100 80GB HBM3", torch.bfloat16) == 989.5e12
    assert peak_flops("NVIDIA H100 80GB HBM3", torch.float8_e4m3fn) == 1979e12
    assert peak_flops("NVIDIA H100 PCIe", torch.float16) == 756.5e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", "tf32") == 156e12
    assert peak_flops("NVIDIA A100-SXM4-80GB", torch.bfloat16) == 312e12
    assert peak_flops("NVIDIA B200", torch.bfloat16) == 2.25e15
    assert peak_flops("NVIDIA L4", torch.bfloat16) == 121e12


def test_fp64_uses_the_tensor_core_figure() -> None:
    assert peak_flops("NVIDIA H100 80GB HBM3", torch.float64) == 67e12
    assert peak_flops("NVIDIA A100-SXM4-40GB", torch.float64) == 19.5e12


def test_h200_matches_h100_compute() -> None:
    for dtype in [torch.bfloat16, torch.float8_e5m2, torch.int8, torch.float64]:
        assert peak_flops("NVIDIA H200", dtype) == peak_flops("NVIDIA H100 80GB HBM3", dtype)


@pytest.mark.parametrize("name,dtype", [
    ("Tesla T4", torch.bfloat16),  # Turing: no bf16
    ("Tesla T4", "tf32"),
    ("Tesla V100-SXM2-16GB", torch.bfloat16),  # Volta: no bf16 / tf32 / fp8
    ("Tesla V100-SXM2-16GB", torch.float8_e4m3fn),
    ("NVIDIA A100-SXM4-80GB", torch.float8_e4m3fn),  # Ampere: no fp8
    ("NVIDIA L4", torch.float64),  # not on the datasheet
    ("NVIDIA H100 80GB HBM3", torch.complex64),  # not a key at all
    ("NVIDIA H100 80GB HBM3", "float4"),
    ("NVIDIA H100 80GB HBM3", torch.uint8),
])
def test_missing_dtype_gives_none(name: str, dtype: torch.dtype | str) -> None:
    assert peak_flops(name, dtype, tf32=False) is None


def test_float32_follows_explicit_tf32_flag() -> None:
    name = "NVIDIA A100-SXM4-80GB"
    assert peak_flops(name, torch.float32, tf32=True) == 156e12
    assert peak_flops(name, torch.float32, tf32=False) == 19.5e12
    assert peak_flops("NVIDIA H100 80GB HBM3", "float32", tf32=True) == 494.5e12


@pytest.mark.parametrize("dtype,tf32,expected", [
    (torch.float32, True, "tf32"), (torch.float32, False, "float32"),
    ("float32", True, "tf32"), ("tf32", False, "tf32"), (torch.float64, True, "float64"),
    (torch.bfloat16, None, "bfloat16"), ("torch.float16", None, "float16"),
    (torch.int8, None, "int8"), (torch.float8_e5m2, None, "float8_e5m2"),
    (torch.float8_e4m3fnuz, None, "float8_e4m3fn"), ("bf16", None, "bfloat16"),
    (torch.int32, None, None), ("nonsense", None, None), (3, None, None),
])
def test_dtype_key(dtype: object, tf32: bool | None, expected: str | None) -> None:
    assert dtype_key(dtype, tf32) == expected


@pytest.fixture
def restore_tf32():
    """Put TF32 settings back the way the test found them, through the new API."""
    matmul = torch.backends.cuda.matmul
    saved = getattr(matmul, "fp32_precision", None)
    saved_legacy = torch.get_float32_matmul_precision() if saved is None else None
    yield matmul
    if saved is not None:
        matmul.fp32_precision = saved
    else:
        torch.set_float32_matmul_precision(saved_legacy)


def test_tf32_none_follows_allow_tf32(restore_tf32) -> None:
    name = "NVIDIA A100-SXM4-80GB"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        restore_tf32.allow_tf32 = True
        assert specs.tf32_enabled()
        assert dtype_key(torch.float32) == "tf32"
        assert peak_flops(name, torch.float32) == 156e12
        restore_tf32.allow_tf32 = False
        assert not specs.tf32_enabled()
        assert peak_flops(name, torch.float32) == 19.5e12


@pytest.mark.skipif(not hasattr(torch.backends.cuda.matmul, "fp32_precision"),
                    reason="fp32_precision API needs torch >= 2.9")
def test_tf32_none_follows_fp32_precision(restore_tf32) -> None:
    restore_tf32.fp32_precision = "tf32"
    assert specs.tf32_enabled()
    assert peak_flops("NVIDIA H100 80GB HBM3", torch.float32) == 494.5e12
    restore_tf32.fp32_precision = "ieee"
    assert not specs.tf32_enabled()
    assert peak_flops("NVIDIA H100 80GB HBM3", torch.float32) == 67e12


def test_tf32_none_follows_float32_matmul_precision(restore_tf32) -> None:
    torch.set_float32_matmul_precision("high")
    assert specs.tf32_enabled()
    torch.set_float32_matmul_precision("highest")
    assert not specs.tf32_enabled()


def test_tf32_enabled_emits_no_warnings(restore_tf32) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        specs.tf32_enabled()
        dtype_key(torch.float32)
    assert caught == []


def test_device_peak_cpu_is_an_estimate_or_none() -> None:
    peak = device_peak("cpu", torch.float32)
    if peak is not None:
        assert peak.estimate is True
        assert peak.spec_name == "CPU (estimate)"
        assert peak.dtype_key == "float32"
        assert peak.flop_per_sec > 0
        assert peak.source


def test_device_peak_cpu_ignores_tf32() -> None:
    peak = device_peak(torch.device("cpu"), torch.float32, tf32=True)
    assert peak is None or peak.dtype_key == "float32"


def test_device_peak_cpu_bf16_is_none() -> None:
    assert device_peak("cpu", torch.bfloat16) is None
    assert device_peak("cpu", "tf32") is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only fallback")
def test_device_peak_none_device_without_cuda_is_the_cpu() -> None:
    peak = device_peak(None, torch.float32)
    assert peak is None or peak.spec_name == "CPU (estimate)"
    assert device_peak("cuda", torch.float32) is None


def test_device_peak_unknown_device_types() -> None:
    assert device_peak("meta", torch.float32) is None
    assert device_peak("not-a-device", torch.float32) is None


def gpu(name: str, sms: int, cc: tuple[int, int] | str, mhz: float | None) -> SimpleNamespace:
    """What torch.cuda.get_device_properties reports for a GPU (simulated: this machine has none).

    cc is the compute capability, or the gfx target for AMD (torch's gcnArchName); mhz the clock the device
    reports (torch's clock_rate is in kHz), None where the torch build reports none.
    """
    amd = isinstance(cc, str)
    major, minor = (9, 4) if amd else cc
    props = SimpleNamespace(name=name, major=major, minor=minor, multi_processor_count=sms,
                            gcnArchName=f"{cc}:sramecc+:xnack-" if amd else "")
    if mhz is not None:
        props.clock_rate = int(mhz * 1000)
    return props


def _fake_cuda(monkeypatch, name: str, sms: int, cc: tuple[int, int] | str = (9, 0),
               mhz: float | None = 1980) -> None:
    """A CUDA machine with one simulated GPU (no GPU here)."""
    props = gpu(name, sms, cc, mhz)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)


def test_device_peak_cuda_reads_name_and_sm_count(monkeypatch) -> None:
    _fake_cuda(monkeypatch, "NVIDIA H100", 132)
    peak = device_peak("cuda", torch.bfloat16)
    assert peak.flop_per_sec == 989.5e12
    assert (peak.device_name, peak.spec_name) == ("NVIDIA H100", "H100 SXM")
    assert peak.dtype_key == "bfloat16" and peak.estimate is False and peak.source
    assert device_peak("cuda:0", torch.float32, tf32=True).dtype_key == "tf32"
    assert device_peak(None, torch.float32, tf32=False).flop_per_sec == 67e12
    assert device_peak("cuda", torch.complex64) is None


def test_device_peak_cuda_estimates_a_card_with_no_row_and_nothing_for_a_missing_dtype(monkeypatch) -> None:
    _fake_cuda(monkeypatch, "NVIDIA RTX A4000", 48, (8, 6), 1560)
    peak = device_peak("cuda", torch.bfloat16)  # workstation Ampere: full rate, 48 x 1.56 GHz x 1,024
    assert peak.estimate and peak.flop_per_sec == pytest.approx(76.7e12, rel=1e-3)
    assert peak.label == "estimate: 48 SMs × 1.56 GHz × 1024 FLOP/clock/SM"
    _fake_cuda(monkeypatch, "Tesla T4", 40, (7, 5), 1590)
    assert device_peak("cuda", torch.bfloat16) is None  # Turing has no bf16: no row, no rate
    assert device_peak("cuda", torch.float16).flop_per_sec == 65e12


def test_memory_bandwidth_is_the_datasheets_and_none_where_unknown():
    from grader.course.specs import lookup, memory_bandwidth
    assert lookup("NVIDIA H100 80GB HBM3").bandwidth == 3.35e12
    assert lookup("NVIDIA H200").bandwidth == 4.8e12
    assert lookup("NVIDIA A100-SXM4-80GB").bandwidth is None  # the row covers variants that differ
    assert lookup("NVIDIA A10G").bandwidth is None
    assert memory_bandwidth("cpu") is None  # a CPU's is measured, not looked up
    for spec in __import__("grader.course.specs", fromlist=["table"]).table():
        assert spec.bandwidth is None or 1e11 <= spec.bandwidth <= 1e13, spec.name


# --- issue 17 §4: the devices students and labs have -----------------------------------

def test_traps_between_similar_names() -> None:
    """Each pair differs by one token; a substring or prefix match would confuse them."""
    pairs = [("NVIDIA GeForce RTX 4060 Ti", "NVIDIA GeForce RTX 4060"),
             ("NVIDIA GeForce RTX 4070 Ti", "NVIDIA GeForce RTX 4070"),
             ("NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX A6000"),
             ("AMD Instinct MI325X", "AMD Instinct MI300X"),
             ("NVIDIA GB300", "NVIDIA B300 SXM6 AC"), ("NVIDIA H20", "NVIDIA H200"),
             ("Tesla P100-PCIE-16GB", "Tesla P100-SXM2-16GB")]
    for a, b in pairs:
        assert lookup(a).name != lookup(b).name, (a, b)
    assert lookup("Quadro RTX 6000") is None


@pytest.mark.parametrize("model", ["3060", "3070", "3080", "4060", "4070", "4080", "4090", "5090"])
def test_laptop_never_gets_the_desktop_peak(model: str) -> None:
    # A laptop part's clocks follow the maker's power limit: no peak, and not the desktop's.
    spec = lookup(f"NVIDIA GeForce RTX {model} Laptop GPU")
    assert spec.name == f"RTX {model} Laptop" and spec.peaks == {}
    assert "power limit" in spec.source
    for dtype in [torch.float32, torch.float16, torch.bfloat16]:
        assert peak_flops(f"NVIDIA GeForce RTX {model} Laptop GPU", dtype, tf32=False) is None


def test_unverified_rows_give_no_peak_by_name_but_are_known() -> None:
    # Rows kept only so the name is recognised: no peak from the name alone, never a neighbour's figure
    # (a live device gets an estimate from its own properties: test_the_devices_students_have).
    for name in ["NVIDIA H20", "NVIDIA GeForce RTX 4060", "NVIDIA GeForce RTX 4060 Ti",
                 "NVIDIA GeForce RTX 4070", "NVIDIA GeForce RTX 4070 Ti",
                 "NVIDIA GeForce RTX 3060"]:
        spec = lookup(name)
        assert spec is not None and spec.peaks == {}, name
        assert "no datasheet peak" in spec.source, name
        assert peak_flops(name, torch.bfloat16) is None, name
    assert peak_flops("NVIDIA H20", torch.bfloat16) is None  # not the H200's 989.5e12


def test_rtx_5090_uses_the_rates_it_measurably_runs_at() -> None:
    """The whitepaper's FP32-accumulate 209.5 is exceeded by public measurements (224-254 TFLOP/s bf16): the
    FP16-accumulate 419 is the bound; FP8 likewise (773.5 measured against 419)."""
    name = "NVIDIA GeForce RTX 5090"
    assert peak_flops(name, torch.float32, tf32=False) == 104.8e12
    assert peak_flops(name, torch.float32, tf32=True) == 104.8e12
    assert peak_flops(name, torch.bfloat16) == peak_flops(name, torch.float16) == 419e12
    assert peak_flops(name, torch.float8_e4m3fn) == 838e12
    for measured in (224.3e12, 254.03e12, 370.6e12):  # torch.matmul, cuBLASLt, mma.sync (FP32 accumulate)
        assert measured < peak_flops(name, torch.bfloat16)
    assert 773.52e12 < peak_flops(name, torch.float8_e4m3fn)
    assert "209.5" in lookup(name).source or "halved" in lookup(name).source


def test_new_figures_match_the_datasheets() -> None:
    # GeForce: FP16/BF16 tensor rate with FP32 accumulate (dense), as PyTorch matmuls use.
    assert peak_flops("NVIDIA GeForce RTX 3080", torch.bfloat16) == 59.5e12
    assert peak_flops("NVIDIA GeForce RTX 3080", torch.float32, tf32=False) == 29.8e12
    assert peak_flops("NVIDIA GeForce RTX 3070", torch.float16) == 40.6e12
    assert peak_flops("NVIDIA GeForce RTX 4080", torch.bfloat16) == 97.5e12
    assert peak_flops("NVIDIA RTX A6000", torch.bfloat16) == 154.8e12
    assert peak_flops("NVIDIA RTX A6000", torch.float32, tf32=True) == 77.4e12
    assert peak_flops("NVIDIA RTX 6000 Ada Generation", torch.float32, tf32=False) == 91.1e12
    # Its datasheet's one tensor figure, 1,457 FP8 with sparsity: halved, and FP16 = FP8 / 2.
    assert peak_flops("NVIDIA RTX 6000 Ada Generation", torch.float8_e4m3fn) == 1457e12 / 2
    assert peak_flops("NVIDIA RTX 6000 Ada Generation", torch.bfloat16) == 1457e12 / 4
    # Pascal P100: no tensor cores, no bf16; its 18.7 TFLOPS FP16 accumulates in FP16, which
    # PyTorch's half matmuls do not, so float16 has no peak rather than an overstated one.
    assert peak_flops("Tesla P100-PCIE-16GB", torch.float16) is None
    assert peak_flops("Tesla P100-PCIE-16GB", torch.float32, tf32=False) == 9.3e12
    assert peak_flops("Tesla P100-PCIE-16GB", torch.float32, tf32=True) is None  # no TF32
    assert peak_flops("Tesla P100-PCIE-16GB", torch.float64) == 4.7e12
    assert peak_flops("Tesla P100-SXM2-16GB", torch.float64) == 5.3e12
    assert peak_flops("Tesla P100-PCIE-16GB", torch.bfloat16) is None
    # NVIDIA's "with sparsity" figures halved: HGX B300 36 PF FP16/BF16 over 8 GPUs, GB300
    # NVL72 360 PF over 72 GPUs.
    assert peak_flops("NVIDIA B300 SXM6 AC", torch.bfloat16) == 36e15 / 8 / 2
    assert peak_flops("NVIDIA GB300", torch.bfloat16) == 360e15 / 72 / 2
    assert peak_flops("NVIDIA GB300", torch.float8_e4m3fn) == 720e15 / 72 / 2
    # AMD lists dense figures: no halving. MI325X keeps the MI300X's compute.
    assert peak_flops("AMD Instinct MI325X", torch.bfloat16) == 1307.4e12
    assert peak_flops("AMD Instinct MI325X", torch.bfloat16) == peak_flops("AMD Instinct MI300X",
                                                                          torch.bfloat16)
    assert peak_flops("AMD Instinct MI355X", torch.bfloat16) == 2.5e15
    assert peak_flops("AMD Instinct MI355X", torch.float8_e4m3fnuz) == 5e15
    assert peak_flops("AMD Instinct MI355X", "tf32") is None  # no TF32 figure verified


def test_new_bandwidths_match_the_datasheets() -> None:
    expected = {"Tesla P100-PCIE-16GB": 732e9, "Tesla P100-PCIE-12GB": 549e9,
                "NVIDIA GeForce RTX 3080": 760e9, "NVIDIA GeForce RTX 3070": 448e9,
                "NVIDIA GeForce RTX 4080": 716.8e9, "NVIDIA RTX A6000": 768e9,
                "NVIDIA RTX 6000 Ada Generation": 960e9, "NVIDIA GeForce RTX 5090": 1792e9,
                "AMD Instinct MI325X": 6e12,
                "AMD Instinct MI355X": 8e12, "NVIDIA GB300": 8e12}
    for name, bandwidth in expected.items():
        assert lookup(name).bandwidth == bandwidth, name
    assert lookup("NVIDIA GeForce RTX 4060 Laptop GPU").bandwidth is None


def test_sm_count_tells_a_same_named_variant_apart() -> None:
    # The 12 GB RTX 3080 reports the same name with 70 SMs (the 10 GB card's row has 68).
    assert lookup("NVIDIA GeForce RTX 3080", sm_count=68).name == "RTX 3080"
    assert lookup("NVIDIA GeForce RTX 3080", sm_count=70) is None
    assert lookup("Tesla P100-PCIE-16GB", sm_count=56).name == "P100 PCIe 16GB"


def test_two_t4s_are_two_t4s(monkeypatch) -> None:
    # Kaggle's "T4 x2" is two devices that each report "Tesla T4": the peak is per device.
    _fake_cuda(monkeypatch, "Tesla T4", 40)
    for device in ["cuda:0", "cuda:1"]:
        peak = device_peak(device, torch.float16)
        assert peak.spec_name == "T4" and peak.flop_per_sec == 65e12


# --- issue 31: every device a student has resolves to a datasheet row or a labelled estimate ----------

# Real names and properties (simulated: no GPU on the test machine): name, SMs (CUs), compute capability
# (or gfx target), the clock the device reports in MHz. Expected: ("row", row name) or ("estimate",
# bfloat16 TFLOP/s, or float32 where the part has no bf16 rate: then the dtype is given as a 3rd item).
DEVICES = [
    # desktop GeForce
    (gpu("NVIDIA GeForce RTX 4090", 128, (8, 9), 2520), ("row", "RTX 4090")),
    (gpu("NVIDIA GeForce RTX 5090", 170, (12, 0), 2407), ("row", "RTX 5090")),
    (gpu("NVIDIA GeForce RTX 3060", 28, (8, 6), 1777), ("estimate", 28 * 1.777 * 512 / 1e3)),
    (gpu("NVIDIA GeForce RTX 4060", 24, (8, 9), 2460), ("estimate", 24 * 2.46 * 512 / 1e3)),
    (gpu("NVIDIA GeForce RTX 4070 Ti SUPER", 66, (8, 9), 2610), ("estimate", 66 * 2.61 * 512 / 1e3)),
    (gpu("NVIDIA GeForce RTX 3080", 70, (8, 6), 1710), ("estimate", 70 * 1.71 * 512 / 1e3)),  # the 12 GB card
    (gpu("NVIDIA GeForce RTX 5080", 84, (12, 0), 2617), ("estimate", 84 * 2.617 * 1024 / 1e3)),
    (gpu("NVIDIA GeForce GTX 1660 SUPER", 22, (7, 5), 1785),
     ("estimate", 22 * 1.785 * 128 / 1e3, torch.float32)),  # no tensor cores: FP32 only
    # laptops, at the clock their maker set (what the device reports)
    (gpu("NVIDIA GeForce RTX 4060 Laptop GPU", 24, (8, 9), 2370), ("estimate", 24 * 2.37 * 512 / 1e3)),
    (gpu("NVIDIA GeForce RTX 3060 Laptop GPU", 30, (8, 6), 1425), ("estimate", 30 * 1.425 * 512 / 1e3)),
    (gpu("NVIDIA GeForce RTX 4090 Laptop GPU", 76, (8, 9), 2040), ("estimate", 76 * 2.04 * 512 / 1e3)),
    # workstation
    (gpu("NVIDIA RTX A6000", 84, (8, 6), 1800), ("row", "RTX A6000")),
    (gpu("NVIDIA RTX 6000 Ada Generation", 142, (8, 9), 2505), ("row", "RTX 6000 Ada")),
    (gpu("NVIDIA RTX A4000", 48, (8, 6), 1560), ("estimate", 48 * 1.56 * 1024 / 1e3)),
    (gpu("NVIDIA RTX 2000 Ada Generation", 22, (8, 9), 2130), ("estimate", 22 * 2.13 * 1024 / 1e3)),
    (gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 188, (12, 0), 2617),
     ("estimate", 188 * 2.617 * 1024 / 1e3)),
    # datacenter
    (gpu("NVIDIA H100 80GB HBM3", 132, (9, 0), 1980), ("row", "H100 SXM")),
    (gpu("NVIDIA A100-SXM4-80GB", 108, (8, 0), 1410), ("row", "A100")),
    (gpu("NVIDIA L4", 58, (8, 9), 2040), ("row", "L4")),
    (gpu("Tesla T4", 40, (7, 5), 1590), ("row", "T4", torch.float16)),
    (gpu("NVIDIA H20", 78, (9, 0), 1980), ("estimate", 78 * 1.98 * 4096 / 1e3)),
    (gpu("NVIDIA A10G", 80, (8, 6), 1710), ("estimate", 80 * 1.71 * 1024 / 1e3)),
    (gpu("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 14, (8, 0), 1410), ("estimate", 14 * 1.41 * 2048 / 1e3)),
    # AMD (ROCm reports CUs as multi_processor_count and the gfx target as gcnArchName)
    (gpu("AMD Instinct MI300X", 304, "gfx942", 2100), ("row", "MI300X")),
    (gpu("AMD Instinct MI325X", 304, "gfx942", 2100), ("row", "MI325X")),
    (gpu("AMD Instinct MI300A", 228, "gfx942", 2100), ("estimate", 228 * 2.1 * 2048 / 1e3)),
    (gpu("AMD Instinct MI250X", 110, "gfx90a", 1700), ("estimate", 110 * 1.7 * 1024 / 1e3)),  # one GCD
    (gpu("AMD Radeon RX 7900 XTX", 96, "gfx1100", 2500), ("estimate", 96 * 2.5 * 256 / 1e3, torch.float32)),
]


@pytest.mark.parametrize("props,expected", DEVICES, ids=[p.name for p, _ in DEVICES])
def test_the_devices_students_have(props: SimpleNamespace, expected: tuple) -> None:
    """Each resolves to its own datasheet row or to a labelled estimate from its own SMs and clock."""
    kind, *rest = expected
    dtype = rest[1] if len(rest) > 1 else torch.bfloat16
    peak = specs.gpu_peak(props, dtype, tf32=False)
    assert peak is not None, props.name
    if kind == "row":
        assert (peak.spec_name, peak.estimate) == (rest[0], False)
        assert peak.label == f"datasheet: {rest[0]}"
        assert peak.flop_per_sec == lookup(props.name).peaks[dtype_key(dtype, tf32=False)]
        return
    assert peak.estimate and peak.spec_name.endswith("(estimate)")
    assert peak.flop_per_sec / 1e12 == pytest.approx(rest[0], rel=1e-3)
    unit = "CU" if props.gcnArchName else "SM"
    assert peak.label.startswith(f"estimate: {props.multi_processor_count} {unit}s × {props.clock_rate / 1e6:.2f} GHz × ")
    assert peak.label.endswith(f"FLOP/clock/{unit}") and peak.label in peak.source


def test_the_six_devices_of_issue_31_resolve() -> None:
    """RTX 3060 (every dtype), RTX 4060 Laptop, H20, RTX 5090 bf16/fp16, Apple M2 Max by name."""
    rtx3060 = gpu("NVIDIA GeForce RTX 3060", 28, (8, 6), 1777)
    for dtype in (torch.float32, "tf32", torch.bfloat16, torch.float16):
        assert specs.gpu_peak(rtx3060, dtype).estimate, dtype
    assert specs.gpu_peak(gpu("NVIDIA GeForce RTX 4060 Laptop GPU", 24, (8, 9), 2370), torch.bfloat16).estimate
    h20 = specs.gpu_peak(gpu("NVIDIA H20", 78, (9, 0), 1980), torch.bfloat16)
    assert h20.estimate and "capped" in h20.source  # the row's warning travels with the estimate
    assert peak_flops("NVIDIA GeForce RTX 5090", torch.bfloat16) == 419e12
    assert peak_flops("NVIDIA GeForce RTX 5090", torch.float16) == 419e12
    assert peak_flops("Apple M2 Max", torch.float32) == pytest.approx(38 * 128 * 2 * 1.398e9)


# The datasheet rows, rebuilt from each card's SMs and whitepaper clock with the per-SM rates: the estimate
# path and the table agree wherever both exist (within NVIDIA's and AMD's rounding).
ROWS_FROM_RATES = [
    (gpu("NVIDIA GeForce RTX 4090", 128, (8, 9), 2520), {"bfloat16": 165.2, "float8_e4m3fn": 330.3,
                                                          "tf32": 82.6, "float32": 82.6, "int8": 660.6}),
    (gpu("NVIDIA GeForce RTX 3090", 82, (8, 6), 1695), {"bfloat16": 71, "tf32": 35.6, "float32": 35.6,
                                                         "int8": 284}),
    (gpu("NVIDIA GeForce RTX 5090", 170, (12, 0), 2407), {"bfloat16": 419, "tf32": 104.8, "float32": 104.8,
                                                          "float8_e4m3fn": 838, "int8": 838}),
    (gpu("NVIDIA RTX A6000", 84, (8, 6), 1800), {"bfloat16": 154.8, "tf32": 77.4, "float32": 38.7}),
    (gpu("NVIDIA RTX 6000 Ada Generation", 142, (8, 9), 2505), {"float8_e4m3fn": 728.5, "bfloat16": 364.25}),
    (gpu("NVIDIA H100 SXM", 132, (9, 0), 1830), {"bfloat16": 989.5, "float8_e4m3fn": 1979, "tf32": 494.5}),
    (gpu("NVIDIA A100-SXM4-80GB", 108, (8, 0), 1410), {"bfloat16": 312, "tf32": 156, "float64": 19.5,
                                                       "float32": 19.5, "int8": 624}),
    (gpu("Tesla T4", 40, (7, 5), 1590), {"float16": 65, "float32": 8.1, "int8": 130}),
    (gpu("Tesla V100-SXM2-16GB", 80, (7, 0), 1530), {"float16": 125, "float32": 15.7, "float64": 7.8}),
    (gpu("NVIDIA L4", 58, (8, 9), 2040), {"bfloat16": 121, "float8_e4m3fn": 242.5, "float32": 30.3}),
    (gpu("AMD Instinct MI300X", 304, "gfx942", 2100), {"bfloat16": 1307.4, "float8_e4m3fn": 2614.9,
                                                       "tf32": 653.7, "float64": 163.4, "float32": 163.4}),
    (gpu("AMD Instinct MI355X", 256, "gfx950", 2400), {"bfloat16": 2500, "float8_e4m3fn": 5000,
                                                       "float32": 157.3}),
]


@pytest.mark.parametrize("props,tflops", ROWS_FROM_RATES, ids=[p.name for p, _ in ROWS_FROM_RATES])
def test_per_sm_rates_rebuild_the_datasheet_rows(props: SimpleNamespace, tflops: dict[str, float]) -> None:
    for key, value in tflops.items():
        estimate = specs.estimate_gpu_peak(props, key, tf32=key == "tf32")
        assert estimate is not None and estimate.flop_per_sec / 1e12 == pytest.approx(value, rel=1e-2), key


@pytest.mark.parametrize("props,neighbour", [
    (gpu("NVIDIA GeForce RTX 4090 Laptop GPU", 76, (8, 9), 2040), "RTX 4090"),
    (gpu("NVIDIA GeForce RTX 4090 D", 114, (8, 9), 2520), "RTX 4090"),
    (gpu("NVIDIA GeForce RTX 3090 Ti", 84, (8, 6), 1860), "RTX 3090"),
    (gpu("NVIDIA GeForce RTX 4080 SUPER", 80, (8, 9), 2550), "RTX 4080"),
    (gpu("NVIDIA GeForce RTX 5090 Laptop GPU", 82, (12, 0), 2160), "RTX 5090"),
    (gpu("NVIDIA GeForce RTX 3080", 70, (8, 6), 1710), "RTX 3080"),  # 12 GB: 70 SMs, not the 10 GB row's 68
    (gpu("NVIDIA H100 PCIe", 132, (9, 0), 1980), "H100 PCIe"),  # an SM count the row does not have
    (gpu("NVIDIA H20", 78, (9, 0), 1980), "H200 SXM"),
    (gpu("NVIDIA A10", 72, (8, 6), 1695), "A100"),
    (gpu("AMD Instinct MI300A", 228, "gfx942", 2100), "MI300X"),
])
def test_look_alikes_never_get_a_neighbours_figure(props: SimpleNamespace, neighbour: str) -> None:
    row = specs.table()[[r.name for r in specs.table()].index(neighbour)]
    for dtype in (torch.bfloat16, torch.float32):
        peak = specs.gpu_peak(props, dtype, tf32=False)
        assert peak is not None and peak.spec_name != neighbour, (props.name, dtype)
        assert peak.flop_per_sec != row.peaks.get(dtype_key(dtype, tf32=False)), (props.name, dtype)


def test_an_estimate_needs_the_clock_the_device_reports() -> None:
    """A torch build that reports no clock gets no estimate: no clock is assumed, no other card's figure used."""
    assert specs.gpu_peak(gpu("NVIDIA GeForce RTX 3060", 28, (8, 6), None), torch.bfloat16) is None
    assert specs.gpu_peak(gpu("NVIDIA GeForce RTX 4090", 128, (8, 9), None), torch.bfloat16).flop_per_sec == 165.2e12


@pytest.mark.parametrize("props,dtype", [
    (gpu("NVIDIA Next-Gen Accelerator", 200, (13, 0), 2500), torch.bfloat16),  # next year's card
    (gpu("NVIDIA B200", 100, (10, 0), 1965), torch.bfloat16),  # a B200 slice: no per-SM rate known for sm_100
    (gpu("NVIDIA GeForce RTX 3060", 28, (8, 6), 1777), torch.float8_e4m3fn),  # Ampere has no FP8
    (gpu("NVIDIA GeForce GTX 1660 SUPER", 22, (7, 5), 1785), torch.float16),  # no tensor cores
    (gpu("AMD Radeon RX 7900 XTX", 96, "gfx1100", 2500), torch.bfloat16),  # no WMMA rate verified
    (gpu("AMD Instinct MI100", 120, "gfx908", 1502), torch.float16),  # no CDNA 1 rate in the table
    (gpu("NVIDIA GeForce RTX 3060", 0, (8, 6), 1777), torch.bfloat16),  # nonsense SM count
])
def test_unknown_architectures_and_rates_give_no_peak(props: SimpleNamespace, dtype: torch.dtype) -> None:
    assert specs.gpu_peak(props, dtype) is None


def test_geforce_runs_fp32_accumulate_at_half_the_workstation_rate() -> None:
    """The same Ada SM, as GeForce and as a workstation card: bf16/fp16/FP8 with FP32 accumulate and TF32 halve."""
    geforce = gpu("NVIDIA GeForce RTX 4070", 46, (8, 9), 2475)
    workstation = gpu("NVIDIA RTX 4000 SFF Ada Generation", 46, (8, 9), 2475)
    for key in ("bfloat16", "float16", "float8_e4m3fn", "tf32"):
        ratio = specs.estimate_gpu_peak(workstation, key).flop_per_sec / specs.estimate_gpu_peak(geforce, key).flop_per_sec
        assert ratio == pytest.approx(2), key
    assert specs.estimate_gpu_peak(workstation, "float32").flop_per_sec == specs.estimate_gpu_peak(geforce, "float32").flop_per_sec
    assert "half" in specs.gpu_arch(geforce).source


def test_device_peak_on_a_simulated_laptop_is_the_labelled_estimate(monkeypatch) -> None:
    """What a chapter prints on an RTX 4060 laptop: its own SMs and clock, the laptop caveat in the source."""
    _fake_cuda(monkeypatch, "NVIDIA GeForce RTX 4060 Laptop GPU", 24, (8, 9), 2370)
    peak = device_peak("cuda", torch.bfloat16)
    assert peak.label == "estimate: 24 SMs × 2.37 GHz × 512 FLOP/clock/SM"
    assert "power limit" in peak.source and peak.device_name == "NVIDIA GeForce RTX 4060 Laptop GPU"
    assert peak_flops("NVIDIA GeForce RTX 4060 Laptop GPU", torch.bfloat16) is None  # a name alone: no clock


def test_peak_labels_say_where_the_number_comes_from() -> None:
    assert specs.named_peak("NVIDIA H100 80GB HBM3", torch.bfloat16).label == "datasheet: H100 SXM"
    assert specs.Peak(1.0, "x", "fake", "float32", True, "src").label == "estimate: fake"


def test_docs_peaks_lists_every_row_and_architecture() -> None:
    """docs/peaks.md is where a reader checks a figure: every row and per-SM rate must be there, with its source."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "peaks.md").read_text(encoding="utf-8")
    for row in specs.table():
        assert f"| {row.name} |" in doc and row.source.replace("|", "/") in doc, row.name
    for arch in specs.architectures():
        assert f"| {arch.name} |" in doc and arch.source in doc, arch.name
