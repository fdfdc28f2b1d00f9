"""Dense peak FLOP/s per device and dtype: the denominator of every MFU in the course.

Figures are the vendors' own. NVIDIA marks its Ampere-and-later tensor-core figures for
TF32/FP16/BF16/FP8/INT8 "with sparsity" (2:4 structured sparsity, which ordinary
matmuls never use), so those are halved here and the row's source says so. A dtype a
device lacks, or one whose figure could not be checked against a published table, is
simply absent: a missing peak is reported as unknown rather than guessed.

Device names are matched as torch.cuda.get_device_name reports them, on whole tokens
("NVIDIA A10" must never become an A100), and an unknown name gives None. Some rows hold no
peak at all (laptop GPUs, whose clocks the laptop maker sets; cards no vendor table covers):
they make the name known, so it never borrows a neighbouring card's figures.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

import torch

from grader.course import applegpu, cpuinfo

DTYPE_KEYS = ("float64", "float32", "tf32", "bfloat16", "float16", "float8_e4m3fn",
              "float8_e5m2", "int8")


@dataclass(frozen=True)
class DeviceSpec:
    """One device's dense peaks, keyed by DTYPE_KEYS; an absent key means no published peak."""

    name: str
    peaks: dict[str, float]
    source: str
    sms: int | None = None  # streaming multiprocessors (CUs on AMD), when known
    bandwidth: float | None = None  # peak memory bandwidth in bytes/s from the same datasheet (None: not given)


@dataclass(frozen=True)
class Peak:
    """A looked-up peak with enough context to print where the number came from."""

    flop_per_sec: float
    device_name: str
    spec_name: str
    dtype_key: str
    estimate: bool
    source: str


HALVED = "sparse figures halved"


def _peaks(fp64: float | None = None, fp32: float | None = None, tf32: float | None = None,
           bf16: float | None = None, fp16: float | None = None, fp8: float | None = None,
           int8: float | None = None) -> dict[str, float]:
    """Build a peaks dict in TFLOP/s; FP8 fills both encodings (same rate on these parts)."""
    values = {"float64": fp64, "float32": fp32, "tf32": tf32, "bfloat16": bf16,
              "float16": fp16, "float8_e4m3fn": fp8, "float8_e5m2": fp8, "int8": int8}
    # Via the decimal string, so 1307.4 becomes exactly the float literal 1307.4e12.
    return {k: float(f"{v!r}e12") for k, v in values.items() if v is not None}


_H100_SRC = ("NVIDIA H100 Tensor Core GPU datasheet / product page, "
             "https://www.nvidia.com/en-us/data-center/h100/ ; TF32/BF16/FP16/FP8/INT8 are "
             f"listed with sparsity: {HALVED}; FP64 is the FP64 Tensor Core figure")
_H200_SRC = ("NVIDIA H200 Tensor Core GPU datasheet / product page, "
             "https://www.nvidia.com/en-us/data-center/h200/ ; TF32/BF16/FP16/FP8/INT8 are "
             f"listed with sparsity: {HALVED}; FP64 is the FP64 Tensor Core figure")

_GA102_SRC = ("NVIDIA Ampere GA102 GPU Architecture whitepaper v2, https://www.nvidia.com/content/"
              "PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf")
_ADA_SRC = ("NVIDIA Ada GPU Architecture whitepaper, https://images.nvidia.com/aem-dam/Solutions/"
            "Data-Center/l4/nvidia-ada-gpu-architecture-whitepaper-v2.1.pdf")
_NO_TABLE = ("no NVIDIA whitepaper table for this card; its product page gives only rounded or "
             "sparse figures, no dense FP16/BF16 rate with FP32 accumulate; peaks not "
             "verified, none given")
_LAPTOP_SRC = ("laptop GPU: its clocks depend on the power limit the laptop maker sets, and "
               "NVIDIA publishes a range, not one peak; none given (never the desktop card's)")
_LAPTOPS = ("3060", "3070", "3080", "4060", "4070", "4080", "4090", "5090")
_P100_SRC = ("NVIDIA Tesla P100 datasheet (columns for NVLink and for PCIe), https://images.nvidia."
             "com/content/tesla/pdf/nvidia-tesla-p100-datasheet.pdf ; no tensor cores, no "
             "sparsity; FP16 left out: the datasheet's half-precision figure is FP16 math with "
             "FP16 accumulate, PyTorch's half matmuls accumulate in FP32, and no rate for that "
             "is published")

# Hopper tensor rates keep fixed ratios (TF32 = BF16/2, FP8 = INT8 = 2 x BF16), checked on
# the SXM and PCIe columns. For the NVL boards only the BF16 figure (1,671 sparse) was seen
# quoted from NVIDIA's pages, so their other tensor rates follow those ratios, and FP64/FP32
# (which run at a different clock ratio) are left out as unverified.
_NVL_TENSOR = dict(tf32=417.5, bf16=835.5, fp16=835.5, fp8=1670.5, int8=1670.5)
# CDNA 3 (304 CUs at 2,100 MHz): the MI300X's dense matrix figures, which the MI325X shares.
_CDNA3 = dict(fp64=163.4, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, int8=2614.9)
_HOPPER_SXM = dict(fp64=67, fp32=67, tf32=494.5, bf16=989.5, fp16=989.5, fp8=1979, int8=1979)

_SPECS: tuple[DeviceSpec, ...] = (
    DeviceSpec("H100 SXM", _peaks(**_HOPPER_SXM), _H100_SRC, sms=132, bandwidth=3350000000000.0),
    DeviceSpec("H100 PCIe", _peaks(fp64=51, fp32=51, tf32=378, bf16=756.5, fp16=756.5,
                                   fp8=1513, int8=1513), _H100_SRC, sms=114, bandwidth=2000000000000.0),
    DeviceSpec("H100 NVL", _peaks(**_NVL_TENSOR),
               _H100_SRC + "; FP64/FP32 not verified, left out", sms=132, bandwidth=3900000000000.0),
    DeviceSpec("H200 SXM", _peaks(**_HOPPER_SXM), _H200_SRC, sms=132, bandwidth=4800000000000.0),
    DeviceSpec("H200 NVL", _peaks(**_NVL_TENSOR),
               _H200_SRC + "; FP64/FP32 not verified, left out", sms=132, bandwidth=4800000000000.0),
    # SXM4 and PCIe, 40 GB and 80 GB, share these peaks. The datasheet lists dense and
    # sparse side by side; the dense column is used. No FP8 on Ampere. Memory bandwidth is
    # left out: it differs between the variants this row covers (1,555 to 2,039 GB/s).
    DeviceSpec("A100", _peaks(fp64=19.5, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
               "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/"
               "en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-"
               "r4-web.pdf ; dense column (the * sparse column is 2x); FP64 is the FP64 "
               "Tensor Core figure", sms=108),
    # FP64/FP64 Tensor Core 37 TF and FP32 75 TF are the current HGX page; the March 2024
    # Blackwell datasheet said 40/80 before NVIDIA revised them.
    DeviceSpec("B200", _peaks(fp64=37, fp32=75, tf32=1100, bf16=2250, fp16=2250, fp8=4500,
                              int8=4500),
               "NVIDIA HGX B200 specifications (per GPU), "
               "https://www.nvidia.com/en-us/data-center/hgx/ ; tensor figures listed with "
               f"sparsity: {HALVED}", sms=148, bandwidth=8000000000000.0),
    DeviceSpec("GB200 (per GPU)", _peaks(fp64=40, fp32=80, tf32=1250, bf16=2500, fp16=2500,
                                         fp8=5000, int8=5000),
               "NVIDIA GB200 NVL72 specifications, individual Blackwell GPU column, "
               "https://www.nvidia.com/en-us/data-center/gb200-nvl72/ ; tensor figures "
               f"listed with sparsity: {HALVED}", bandwidth=8000000000000.0),
    # The L4 datasheet lists no FP64; its tensor figures are all starred (with sparsity).
    # TF32 120* and INT8 485* were seen quoted; FP16/BF16 242* and FP8 485* follow Ada's
    # fixed ratios (16-bit = 2 x TF32, FP8 = INT8).
    DeviceSpec("L4", _peaks(fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242.5, int8=242.5),
               "NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/"
               f"l4/ ; tensor figures listed with sparsity: {HALVED}; no FP64 listed",
               sms=58, bandwidth=300000000000.0),
    DeviceSpec("L40", _peaks(fp32=90.5, tf32=90.5, bf16=181.05, fp16=181.05, fp8=362,
                             int8=362),
               "NVIDIA L40 GPU datasheet, https://www.nvidia.com/en-us/data-center/l40/ ; "
               "dense column (the * sparse column is 2x); no FP64 listed", sms=142, bandwidth=864000000000.0),
    # INT8 733 dense follows FP8 (Ada runs them at one rate); the rest is the datasheet's
    # dense column.
    DeviceSpec("L40S", _peaks(fp32=91.6, tf32=183, bf16=362.05, fp16=362.05, fp8=733,
                              int8=733),
               "NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/ ; "
               "dense column (the * sparse column is 2x); no FP64 listed", sms=142, bandwidth=864000000000.0),
    # Turing: FP16 tensor with FP32 accumulate ("mixed precision"); no BF16/TF32/FP8 and
    # no sparsity. The datasheet gives no FP64 figure.
    DeviceSpec("T4", _peaks(fp32=8.1, fp16=65, int8=130),
               "NVIDIA T4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/"
               "tesla-t4/ ; no sparsity on Turing; no FP64 listed", sms=40, bandwidth=320000000000.0),
    DeviceSpec("A10", _peaks(fp32=31.2, tf32=62.5, bf16=125, fp16=125, int8=250),
               "NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/"
               "en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf ; dense column (the * "
               "sparse column is 2x); no FP64 listed", sms=72, bandwidth=600000000000.0),
    # The A10G is an AWS-only variant (EC2 G5) with no public NVIDIA datasheet; third-party
    # tables disagree (some copy the A10's), so no peak is given. It has its own row so
    # "NVIDIA A10G" is recognised and never borrows the A10's figures.
    DeviceSpec("A10G", {}, "no public NVIDIA datasheet for the A10G (AWS EC2 G5); peaks "
               "unpublished, none given"),
    # Volta: FP16 tensor cores only (no BF16/TF32/FP8, no INT8 tensor figure, no sparsity);
    # FP64 is the CUDA-core rate, there are no FP64 tensor cores.
    DeviceSpec("V100 SXM2", _peaks(fp64=7.8, fp32=15.7, fp16=125),
               "NVIDIA V100 Tensor Core GPU datasheet (V100 for NVLink), https://images."
               "nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-"
               "1165301-r5.pdf ; no sparsity on Volta", sms=80, bandwidth=900000000000.0),
    DeviceSpec("V100 PCIe", _peaks(fp64=7, fp32=14, fp16=112),
               "NVIDIA V100 Tensor Core GPU datasheet (V100 for PCIe), https://images."
               "nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-"
               "1165301-r5.pdf ; no sparsity on Volta", sms=80, bandwidth=900000000000.0),
    # Only the 130 TF tensor figure was seen quoted from the r5 datasheet; its FP32/FP64
    # figures could not be checked and are left out.
    DeviceSpec("V100S PCIe", _peaks(fp16=130),
               "NVIDIA V100 Tensor Core GPU datasheet (V100S for PCIe), https://images."
               "nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-"
               "1165301-r5.pdf ; no sparsity on Volta; FP32/FP64 not verified, left out",
               sms=80, bandwidth=1134000000000.0),
    # GeForce cards run FP16/BF16 tensor math with FP32 accumulate (what PyTorch matmuls
    # use) at half the FP16-accumulate rate; those are the figures used. FP8 likewise with
    # FP32 accumulate.
    DeviceSpec("RTX 4090", _peaks(fp32=82.6, tf32=82.6, bf16=165.2, fp16=165.2, fp8=330.3,
                                  int8=660.6),
               "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 column, https://"
               "images.nvidia.com/aem-dam/Solutions/Data-Center/l4/nvidia-ada-gpu-architecture-"
               "whitepaper-v2.1.pdf ; dense column, FP16/BF16/FP8 with FP32 accumulate",
               sms=128, bandwidth=1008000000000.0),
    DeviceSpec("RTX 3090", _peaks(fp32=35.6, tf32=35.6, bf16=71, fp16=71, int8=284),
               "NVIDIA Ampere GA102 GPU Architecture whitepaper, Appendix A (GeForce RTX 3090),"
               " https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-"
               "whitepaper-v2.pdf ; dense column, FP16/BF16 with FP32 accumulate", sms=82, bandwidth=936000000000.0),
    # The RTX 3080 and 3070 sit in the same whitepaper (3080 in the body, 3070 in Appendix A).
    # On GA10x GeForce, FP16/BF16 with FP32 accumulate runs at 2 x and TF32 at 1 x the FP32
    # rate (the 3090 row: 71 = 2 x 35.6). The 3080's 29.8 / 59.5 / 238 and the 3070's 20.3 /
    # 40.6 were seen quoted and agree with that ratio; the 3070's INT8 was seen only rounded
    # (163, against 162.6 recalled), so it is left out.
    # The 12 GB RTX 3080 (70 SMs, 912 GB/s) reports the same name; its SM count tells it apart.
    DeviceSpec("RTX 3080", _peaks(fp32=29.8, tf32=29.8, bf16=59.5, fp16=59.5, int8=238),
               _GA102_SRC + " (GeForce RTX 3080 10 GB); dense column, FP16/BF16 with FP32 "
               "accumulate", sms=68, bandwidth=760000000000.0),
    DeviceSpec("RTX 3070", _peaks(fp32=20.3, tf32=20.3, bf16=40.6, fp16=40.6),
               _GA102_SRC + ", Appendix A (GeForce RTX 3070); dense column, FP16/BF16 with "
               "FP32 accumulate; INT8 not verified, left out", sms=46, bandwidth=448000000000.0),
    # Ada GeForce keeps the 4090's ratios: FP16/BF16 with FP32 accumulate = 2 x FP32 (before
    # rounding: 512 FLOP/clock/SM, 165.2 = 512 x 128 SMs x 2,520 MHz on the 4090 and 97.5 =
    # 512 x 76 x 2,505 MHz here; third-party tables quote 97 and 97.4), TF32 = FP32. FP8/INT8
    # for the 4080 were not checked and are left out.
    DeviceSpec("RTX 4080", _peaks(fp32=48.7, tf32=48.7, bf16=97.5, fp16=97.5),
               _ADA_SRC + ", GeForce RTX 4080 (16 GB) column; dense column, FP16/BF16 with FP32"
               " accumulate; FP8/INT8 not verified, left out", sms=76, bandwidth=716800000000.0),
    # No NVIDIA architecture whitepaper tabulates these cards, and their product pages give
    # only rounded shader TFLOPS and sparse tensor figures ("AI TOPS"), never a dense FP16/BF16
    # rate with FP32 accumulate: the row is there so the name is recognised; its peak is unknown.
    *(DeviceSpec(name, {}, _NO_TABLE, sms=sms) for name, sms in (
        ("RTX 3060", 28), ("RTX 4060", 24), ("RTX 4060 Ti", 34), ("RTX 4070", 46),
        ("RTX 4070 Ti", 60))),
    # RTX 5090: FP32 104.8 (21,760 CUDA cores x 2 x 2,407 MHz; quoted as 105). Its FP16/BF16
    # rate with FP32 accumulate is quoted (third-party tables) as 210, i.e. the GeForce
    # halving, but a public cuBLASLt benchmark measured about 254 TFLOP/s BF16 on one, above
    # it; until NVIDIA's own table is checked, the tensor dtypes are left out.
    DeviceSpec("RTX 5090", _peaks(fp32=104.8),
               "NVIDIA RTX Blackwell GPU Architecture whitepaper, GeForce RTX 5090 column, "
               "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-"
               "blackwell-gpu-architecture.pdf ; 104.8 TFLOPS FP32 (non-tensor), 1,792 GB/s; "
               "tensor dtypes not verified (a measured 254 TFLOP/s BF16 exceeds the quoted "
               "210 with FP32 accumulate), left out", sms=170, bandwidth=1792000000000.0),
    # Laptop parts: the clocks, hence the peak, depend on the power limit each laptop maker
    # sets (NVIDIA publishes a range, not a figure), so none is given. Their own rows keep a
    # laptop name from ever borrowing the desktop card's peak.
    *(DeviceSpec(f"RTX {model} Laptop", {}, _LAPTOP_SRC) for model in _LAPTOPS),
    # Professional Ampere/Ada: FP16/BF16 tensor math with FP32 accumulate at the full rate
    # (no GeForce halving). The A6000's INT8 (309.7) was seen only rounded: left out.
    DeviceSpec("RTX A6000", _peaks(fp32=38.7, tf32=77.4, bf16=154.8, fp16=154.8),
               _GA102_SRC + ", Appendix C (RTX A6000 GPU performance), Peak BF16/FP16 Tensor "
               "TFLOPS with FP32 Accumulate and Peak TF32 Tensor TFLOPS, dense column; NVIDIA "
               "RTX A6000 datasheet (38.7 TFLOPS single precision, 768 GB/s); INT8 not "
               "verified, left out", sms=84, bandwidth=768000000000.0),
    # The datasheet gives one tensor figure, 1,457 TFLOPS FP8 with sparsity: 728.5 dense. Ada
    # runs INT8 at the FP8 rate and FP16/BF16 (FP32 accumulate, full rate on this part) at
    # half of it: 364.25, which third-party tables quote as 364. TF32 is left out.
    DeviceSpec("RTX 6000 Ada", _peaks(fp32=91.1, bf16=364.25, fp16=364.25, fp8=728.5,
                                      int8=728.5),
               "NVIDIA RTX 6000 Ada Generation datasheet, https://www.nvidia.com/en-us/design-"
               "visualization/rtx-6000/ ; 91.1 TFLOPS single precision, 960 GB/s; tensor "
               f"figure (FP8) listed with sparsity: {HALVED}; FP16/BF16 = FP8 / 2 on Ada; TF32 "
               "not verified, left out", sms=142, bandwidth=960000000000.0),
    # Pascal: no tensor cores. The datasheet's half-precision figure (18.7 PCIe, 21.2 SXM2,
    # 2 x FP32) is packed FP16 math accumulating in FP16; PyTorch's half matmuls accumulate in
    # FP32, for which no rate is published, so float16 is left out rather than overstated.
    # The PCIe boards run slower clocks than the SXM2 one; the 12 GB PCIe board has three
    # HBM2 stacks instead of four, hence less bandwidth.
    DeviceSpec("P100 PCIe 16GB", _peaks(fp64=4.7, fp32=9.3), _P100_SRC,
               sms=56, bandwidth=732000000000.0),
    DeviceSpec("P100 PCIe 12GB", _peaks(fp64=4.7, fp32=9.3), _P100_SRC,
               sms=56, bandwidth=549000000000.0),
    DeviceSpec("P100 SXM2", _peaks(fp64=5.3, fp32=10.6),
               _P100_SRC, sms=56, bandwidth=732000000000.0),
    # A China-market Hopper part with no public NVIDIA datasheet: recognised, never an H200.
    DeviceSpec("H20", {}, "no public NVIDIA datasheet for the H20; peaks unpublished, none "
               "given"),
    # Blackwell Ultra. HGX B300 (8 GPUs) lists FP8 72, FP16/BF16 36, TF32 18 PFLOPS with
    # sparsity: per GPU and halved, 4.5 / 2.25 / 1.125 PFLOPS. Its FP32, FP64, INT8 and memory
    # bandwidth were seen quoted with different values (FP32 75 or 80 TF; INT8 0.15 or 4.5 POPS;
    # 7.7 or 8 TB/s), so they are left out.
    DeviceSpec("B300", _peaks(tf32=1125, bf16=2250, fp16=2250, fp8=4500),
               "NVIDIA HGX B300 specifications (8 GPUs; divided by 8), https://www.nvidia.com/"
               f"en-us/data-center/hgx/ ; tensor figures listed with sparsity: {HALVED}; FP32, "
               "FP64, INT8 and bandwidth not verified (quoted values disagree), left out"),
    # GB300 NVL72: FP8 720, FP16/BF16 360, TF32 180 PFLOPS with sparsity for 72 GPUs; per GPU
    # and halved, 5 / 2.5 / 1.25 PFLOPS; 576 TB/s of HBM3e over 72 GPUs is 8 TB/s. INT8 was
    # seen quoted per GPU as 0.165 and as 5 POPS; FP32/FP64 per GPU were not checked: left out.
    DeviceSpec("GB300 (per GPU)", _peaks(tf32=1250, bf16=2500, fp16=2500, fp8=5000),
               "NVIDIA GB300 NVL72 specifications (72 GPUs; divided by 72), https://www.nvidia."
               f"com/en-us/data-center/gb300-nvl72/ ; tensor figures listed with sparsity: "
               f"{HALVED}; FP32, FP64 and INT8 not verified, left out",
               bandwidth=8000000000000.0),
    # AMD lists dense and sparse separately; these are the dense matrix figures. FP64 is the
    # matrix rate (what DGEMM uses); FP32 vector and matrix are equal.
    DeviceSpec("MI300X", _peaks(**_CDNA3),
               "AMD ROCm docs, AMD Instinct MI300 series microarchitecture, peak-performance "
               "table, https://rocm.docs.amd.com/en/docs-6.3.0/conceptual/gpu-arch/mi300.html ; "
               "AMD Instinct MI300X data sheet, https://www.amd.com/en/products/accelerators/"
               "instinct/mi300/mi300x.html ; dense figures (no halving needed)", sms=304, bandwidth=5300000000000.0),
    # Same CDNA 3 compute as the MI300X (304 CUs at 2,100 MHz), with 256 GB of HBM3E at 6 TB/s.
    DeviceSpec("MI325X", _peaks(**_CDNA3),
               "AMD Instinct MI325X specifications, https://www.amd.com/en/products/accelerators/"
               "instinct/mi300/mi325x.html ; dense figures (no halving needed), the MI300X's",
               sms=304, bandwidth=6000000000000.0),
    # CDNA 4, 256 CUs. AMD gives the dense figures rounded (FP16/BF16 2.5 PFLOPS; its
    # "with structured sparsity" figures are exactly 2x). No TF32 figure was found for this
    # part, and its FP64 figure was not checked here: both left out.
    DeviceSpec("MI355X", _peaks(fp32=157.3, bf16=2500, fp16=2500, fp8=5000, int8=5000),
               "AMD Instinct MI355X specifications, https://www.amd.com/en/products/accelerators/"
               "instinct/mi350/mi355x.html ; dense figures as AMD rounds them (no halving "
               "needed); TF32 and FP64 not verified, left out",
               sms=256, bandwidth=8000000000000.0),
)

_BY_NAME = {spec.name: spec for spec in _SPECS}

# Tokens that say nothing about which device it is (vendor, brand, memory size and type).
# "gpu" ends the laptop names ("... RTX 4060 Laptop GPU"); "laptop" itself is kept, so a
# laptop part never resolves to the desktop row. "ac" ends "NVIDIA B300 SXM6 AC".
_DECORATION = {"nvidia", "tesla", "geforce", "amd", "instinct", "vf", "gpu", "ac",
               "hbm2", "hbm2e", "hbm3", "hbm3e"}
_MEMORY = re.compile(r"^\d+gb$")
_SXM = {"sxm", "sxm2", "sxm3", "sxm4", "sxm5", "sxm6"}
_FORM = _SXM | {"pcie", "nvl"}

# Model tokens (what is left after decoration and form factor) -> family.
_FAMILIES: dict[tuple[str, ...], str] = {
    ("h100",): "h100", ("h200",): "h200", ("a100",): "A100", ("a10",): "A10",
    ("a10g",): "A10G", ("b200",): "B200", ("gb200",): "GB200 (per GPU)", ("l4",): "L4",
    ("l40",): "L40", ("l40s",): "L40S", ("t4",): "T4", ("v100",): "v100",
    ("v100s",): "V100S PCIe", ("rtx", "4090"): "RTX 4090", ("rtx", "3090"): "RTX 3090",
    ("mi300x",): "MI300X", ("mi325x",): "MI325X", ("mi355x",): "MI355X",
    ("p100",): "p100", ("h20",): "H20", ("b300",): "B300", ("gb300",): "GB300 (per GPU)",
    ("rtx", "a6000"): "RTX A6000", ("rtx", "6000", "ada", "generation"): "RTX 6000 Ada",
    ("rtx", "4060", "ti"): "RTX 4060 Ti", ("rtx", "4070", "ti"): "RTX 4070 Ti",
    **{("rtx", model): f"RTX {model}"
       for model in ("3060", "3070", "3080", "4060", "4070", "4080", "5090")},
    **{("rtx", model, "laptop"): f"RTX {model} Laptop" for model in _LAPTOPS},
}


def _tokens(device_name: str) -> list[str]:
    return [t for t in re.split(r"[\s\-_/]+", device_name.strip().lower()) if t]


def _resolve(family: str, form: set[str], tokens: list[str], sm_count: int | None) -> str | None:
    """Pick the row inside a family from form-factor hints, else from the SM count."""
    if family == "h100":
        if "nvl" in form:
            return "H100 NVL" if not form - {"nvl"} else None
        if "pcie" in form:
            return "H100 PCIe" if not form - {"pcie"} else None
        if form & _SXM or "hbm3" in tokens:  # "NVIDIA H100 80GB HBM3" is the SXM part
            return "H100 SXM"
        # Bare "NVIDIA H100": only the SM count tells SXM (132) from PCIe (114); without
        # it the name is ambiguous and we give no peak rather than assume.
        return {132: "H100 SXM", 114: "H100 PCIe"}.get(sm_count) if sm_count else None
    if family == "h200":
        # The only PCIe-form H200 is the NVL board (some driver tables call it "H200 PCIe").
        if form & {"nvl", "pcie"}:
            return "H200 NVL" if not form & _SXM else None
        return "H200 SXM"
    if family == "p100":
        # PCIe boards come with 16 GB (732 GB/s) or 12 GB (549 GB/s); SXM2 runs faster clocks.
        if form & _SXM:
            return "P100 SXM2" if "pcie" not in form else None
        if "pcie" in form:
            return {"16gb": "P100 PCIe 16GB", "12gb": "P100 PCIe 12GB"}.get(
                next((t for t in tokens if _MEMORY.match(t)), ""))
        return None  # bare "P100": PCIe and SXM2 peaks differ
    if family == "v100":
        if form & _SXM:
            return "V100 SXM2" if "pcie" not in form else None
        if "pcie" in form:
            return "V100 PCIe"
        return None  # both have 80 SMs: without a hint the variant is unknown
    # Single-row families: SXM/PCIe hints change nothing, but an "NVL" product is not
    # the one in the table.
    return None if "nvl" in form else family


def lookup(device_name: str, sm_count: int | None = None) -> DeviceSpec | None:
    """The spec row for a device name as torch reports it, or None if unknown or ambiguous.

    Whole tokens only, case-insensitive: vendor words, memory sizes and form factors are
    set aside and what is left must name exactly one model. A known SM count that differs
    from the row's means a partition (MIG, CPX) or another SKU, whose peak is not the row's.
    """
    if not isinstance(device_name, str):
        return None
    tokens = _tokens(device_name)
    form = {t for t in tokens if t in _FORM}
    model = tuple(t for t in tokens
                  if t not in _DECORATION and t not in _FORM and not _MEMORY.match(t))
    family = _FAMILIES.get(model)
    if family is None:
        return None
    name = _resolve(family, form, tokens, sm_count)
    if name is None:
        return None
    spec = _BY_NAME[name]
    if sm_count is not None and spec.sms is not None and sm_count != spec.sms:
        return None
    return spec


def tf32_enabled() -> bool:
    """Whether float32 CUDA matmuls may use TF32 under torch's current settings."""
    matmul = torch.backends.cuda.matmul
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:  # the new API (torch >= 2.9); "none" defers to the global setting
            precision = getattr(matmul, "fp32_precision", None)
            if precision == "none":
                precision = getattr(torch.backends, "fp32_precision", None)
            if precision == "tf32":
                return True
        except Exception:
            pass
        try:  # legacy flag; raises if the two APIs were mixed
            if matmul.allow_tf32:
                return True
        except Exception:
            pass
        try:
            if torch.get_float32_matmul_precision() in ("high", "medium"):
                return True
        except Exception:
            pass
    return False


_ALIASES = {
    "double": "float64", "fp64": "float64", "float": "float32", "fp32": "float32",
    "tfloat32": "tf32", "half": "float16", "fp16": "float16", "bf16": "bfloat16",
    # AMD's FP8 encodings run at the same FP8 matrix rate as the OCP ones.
    "float8_e4m3fnuz": "float8_e4m3fn", "float8_e5m2fnuz": "float8_e5m2",
}


def dtype_key(dtype: torch.dtype | str, tf32: bool | None = None) -> str | None:
    """The DTYPE_KEYS entry a matmul in this dtype runs at; float32 becomes "tf32" when TF32 is on.

    tf32=None follows torch's current settings (tf32_enabled()); unknown dtypes give None.
    """
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.")
    else:
        return None
    name = _ALIASES.get(name, name)
    if name == "float32":
        use_tf32 = tf32_enabled() if tf32 is None else tf32
        return "tf32" if use_tf32 else "float32"
    return name if name in DTYPE_KEYS else None


def peak_flops(device_name: str, dtype: torch.dtype | str, *, tf32: bool | None = None,
               sm_count: int | None = None) -> float | None:
    """Dense peak FLOP/s (OP/s for int8) of a named device in a dtype, or None if unknown."""
    spec = lookup(device_name, sm_count)
    key = dtype_key(dtype, tf32)
    if spec is None or key is None:
        return None
    return spec.peaks.get(key)


def device_peak(device: torch.device | str | None, dtype: torch.dtype | str, *,
                tf32: bool | None = None) -> Peak | None:
    """The peak for a live device: the table for CUDA, an estimate for the CPU and for Apple's GPU
    (`mps`); None if unknown. device=None means the current CUDA device when CUDA is available, else the CPU.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return None
    if device.type == "cpu":
        key = dtype_key(dtype, tf32=False)  # TF32 is a CUDA tensor-core mode
        if key is None:
            return None
        info = cpuinfo.cpu_info()
        flops = cpuinfo.estimate_flops(info, key)
        if flops is None:
            return None
        return Peak(flops, info.model, "CPU (estimate)", key, True,
                    cpuinfo.describe(info, key))
    if device.type == "mps":
        return _apple_peak(dtype_key(dtype, tf32=False))
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    name = torch.cuda.get_device_name(index)
    sms = torch.cuda.get_device_properties(index).multi_processor_count
    spec = lookup(name, sms)
    key = dtype_key(dtype, tf32)
    if spec is None or key is None or key not in spec.peaks:
        return None
    return Peak(spec.peaks[key], name, spec.name, key, False, spec.source)


def _apple_peak(key: str | None) -> Peak | None:
    """This Mac's GPU: Apple's published figure or an estimate (grader.course.applegpu), marked as such."""
    gpu = applegpu.apple_gpu()
    flops = applegpu.estimate_flops(gpu, key) if gpu is not None and key is not None else None
    if flops is None:
        return None
    published = (gpu.chip, gpu.cores) in applegpu.PUBLISHED
    return Peak(flops, gpu.name, f"Apple {gpu.chip} GPU" + ("" if published else " (estimate)"), key,
                not published, applegpu.describe(gpu, key))


def memory_bandwidth(device: torch.device | str | None) -> float | None:
    """Datasheet peak memory bandwidth (bytes/s) of a live CUDA device, or None (unknown device, or a CPU:
    measure a CPU's instead, as chapter 04 does)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    spec = lookup(torch.cuda.get_device_name(index), torch.cuda.get_device_properties(index).multi_processor_count)
    return spec.bandwidth if spec is not None else None


def table() -> list[DeviceSpec]:
    """Every row, in table order, for docs and `python -m grader mfu`."""
    return list(_SPECS)


__all__ = ["DTYPE_KEYS", "DeviceSpec", "Peak", "lookup", "peak_flops", "dtype_key",
           "tf32_enabled", "device_peak", "memory_bandwidth", "table"]
