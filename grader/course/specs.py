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

A live GPU with no row (or a row without the dtype) gets an estimate from what it reports
itself (estimate_gpu_peak): SMs (CUs) x the clock it reports x its architecture's dense
FLOPs per clock per SM from the vendor's whitepaper, labelled "estimate: 24 SMs x 2.46 GHz x
512 FLOP/clock/SM"; never another card's figure. Apple chips are known by name as well
(grader.course.applegpu). Where each row and rate comes from: docs/peaks.md.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

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
    """A looked-up peak with enough context to print where the number came from.

    label is the short form printed next to every MFU ("datasheet: RTX 4090", "estimate: 24 SMs x
    2.46 GHz x 512 FLOP/clock/SM"); left empty, it is filled from spec_name.
    """

    flop_per_sec: float
    device_name: str
    spec_name: str
    dtype_key: str
    estimate: bool
    source: str
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            kind = "estimate" if self.estimate else "datasheet"
            object.__setattr__(self, "label", f"{kind}: {self.spec_name}")


HALVED = "sparse figures halved"
CPU_ESTIMATE = "CPU (estimate)"  # the spec_name of every CPU peak


def _keyed(fp64: float | None = None, fp32: float | None = None, tf32: float | None = None,
           bf16: float | None = None, fp16: float | None = None, fp8: float | None = None,
           int8: float | None = None) -> dict[str, float]:
    """Short keywords to DTYPE_KEYS, leaving out the absent; FP8 fills both encodings (one rate on these parts)."""
    values = {"float64": fp64, "float32": fp32, "tf32": tf32, "bfloat16": bf16,
              "float16": fp16, "float8_e4m3fn": fp8, "float8_e5m2": fp8, "int8": int8}
    return {k: v for k, v in values.items() if v is not None}


def _peaks(**tflops: float) -> dict[str, float]:
    """A row's peaks dict from TFLOP/s figures (the keywords of _keyed)."""
    # Via the decimal string, so 1307.4 becomes exactly the float literal 1307.4e12.
    return {k: float(f"{v!r}e12") for k, v in _keyed(**tflops).items()}


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
             "sparse figures, no dense FP16/BF16 rate with FP32 accumulate; no datasheet peak: "
             "a live device gets the estimate from its own SM count and clock (estimate_gpu_peak)")
_LAPTOP_SRC = ("laptop GPU: its clocks depend on the power limit the laptop maker sets, and "
               "NVIDIA publishes a range, not one peak; no datasheet peak (never the desktop "
               "card's): a live device gets the estimate from its own SM count and the clock it "
               "reports, which is the one its maker set (estimate_gpu_peak)")
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
    # RTX 5090 (170 SMs, 2,407 MHz boost). The whitepaper lists FP16/BF16 with FP32 accumulate at
    # 209.5 dense, the GeForce halving of the FP16-accumulate 419, but this card does not halve:
    # mma.sync with FP32 accumulate measured 370.6 TFLOP/s and torch.matmul bf16 224.3 (main-horse,
    # "Things I learned digging into 5090 perf"), and cuBLASLt bf16 254 (xzwgit/gpu-flops-bench), all
    # above 209.5. So the bound used is the whitepaper's FP16-accumulate 419, which every measurement
    # stays below. FP8 likewise: cuBLASLt measured 773.5 against the FP32-accumulate 419, so the
    # FP16-accumulate 838 is used. TF32 104.8 and INT8 838 are the whitepaper's dense figures, the
    # rates mma.sync measured (92.8 and 745.7 TFLOP/s at the same 0.89 of them); cuBLASLt measured
    # 125.8 TF32 and 906 INT8, above them, which a GeForce card boosting past the rated 2,407 MHz
    # explains: grader.bench then refuses the MFU and names this row.
    DeviceSpec("RTX 5090", _peaks(fp32=104.8, tf32=104.8, bf16=419, fp16=419, fp8=838, int8=838),
               "NVIDIA RTX Blackwell GPU Architecture whitepaper, GeForce RTX 5090 column, "
               "https://images.nvidia.com/aem-dam/Solutions/geforce/blackwell/nvidia-rtx-"
               "blackwell-gpu-architecture.pdf ; dense figures: 104.8 TFLOPS FP32 and TF32, "
               "FP16/BF16 419 and FP8 838 (the FP16-accumulate figures: this card runs FP32 "
               "accumulate above the whitepaper's halved 209.5 and 419, measured by main-horse."
               "github.io/posts/5090-mm-perf and github.com/xzwgit/gpu-flops-bench), INT8 838; "
               "1,792 GB/s", sms=170, bandwidth=1792000000000.0),
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
    # A China-market Hopper part with no public NVIDIA datasheet: recognised, never an H200. Its
    # tensor rate is capped below SMs x clock x Hopper's per-SM rate (third-party reports give 148
    # TFLOPS dense BF16 for 78 SMs), so the estimate from its properties is a loose upper bound.
    DeviceSpec("H20", {}, "no public NVIDIA datasheet for the H20; peaks unpublished, no "
               "datasheet peak. Its tensor rate is capped by NVIDIA below SMs x clock x Hopper's "
               "per-SM rate (third-party reports, not NVIDIA's: 148 TFLOPS dense BF16), so the "
               "estimate from its properties is an upper bound far above it: its MFU reads low"),
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


# ---------------------------------------------------------------------------------------------
# Estimates from what a GPU reports: SMs (CUs) x its clock x its architecture's per-SM rate
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arch:
    """One architecture's dense FLOPs (OPs for int8) per clock per SM (CU on AMD), from its whitepaper.

    geforce holds the GeForce parts' rates where they differ (FP16/BF16/FP8 with FP32 accumulate at
    half the FP16-accumulate rate, TF32 at half the workstation rate). A part not named GeForce gets
    the full rates, the upper bound (an unknown workstation or datacenter card).
    """

    name: str
    per_sm: dict[str, float]
    source: str
    geforce: dict[str, float] = field(default_factory=dict)
    unit: str = "SM"


_HALF_RATE = "GeForce: FP32 accumulate at half the FP16-accumulate rate"
# NVIDIA, by compute capability. Each source line shows the arithmetic reproducing a datasheet row.
_NVIDIA_ARCHS: dict[tuple[int, int], Arch] = {
    (6, 0): Arch("Pascal GP100", _keyed(fp64=64, fp32=128),
                 "NVIDIA Tesla P100 whitepaper (per SM: 64 FP32 and 32 FP64 cores); P100 SXM2: 56 SMs "
                 "x 1,480 MHz x 128 = 10.6 TFLOPS FP32; FP16 accumulates in FP16 there, so it is left out"),
    (6, 1): Arch("Pascal GP10x", _keyed(fp32=256),
                 "NVIDIA GeForce GTX 1080 whitepaper (128 FP32 cores per SM); GTX 1080: 20 SMs x "
                 "1,733 MHz x 256 = 8.9 TFLOPS FP32; no tensor cores"),
    (7, 0): Arch("Volta", _keyed(fp64=64, fp32=128, fp16=1024),
                 "NVIDIA Tesla V100 GPU Architecture whitepaper (per SM: 32 FP64 and 64 FP32 cores, "
                 "8 tensor cores x 64 FP16 FMA per clock, FP32 accumulate at full rate); V100 SXM2: 80 "
                 "SMs x 1,530 MHz x 1,024 = 125 TFLOPS"),
    (7, 5): Arch("Turing", _keyed(fp32=128, fp16=1024, int8=2048),
                 "NVIDIA Turing GPU Architecture whitepaper (per SM: 64 FP32 cores, 8 tensor cores x 64 "
                 f"FP16 FMA per clock); T4: 40 SMs x 1,590 MHz x 1,024 = 65 TFLOPS; {_HALF_RATE}",
                 geforce=_keyed(fp16=512)),
    (8, 0): Arch("Ampere GA100", _keyed(fp64=128, fp32=128, tf32=1024, bf16=2048, fp16=2048, int8=4096),
                 "NVIDIA A100 Tensor Core GPU Architecture whitepaper; A100: 108 SMs x 1,410 MHz x "
                 "2,048 = 312 TFLOPS BF16, x 128 = 19.5 FP64 tensor"),
    (8, 6): Arch("Ampere GA10x", _keyed(fp32=256, tf32=512, bf16=1024, fp16=1024, int8=2048),
                 "NVIDIA Ampere GA102 GPU Architecture whitepaper; RTX A6000: 84 SMs x 1,800 MHz x "
                 "1,024 = 154.8 TFLOPS BF16; GeForce RTX 3090: 82 SMs x 1,695 MHz x 512 = 71; "
                 + _HALF_RATE, geforce=_keyed(tf32=256, bf16=512, fp16=512)),
    (8, 9): Arch("Ada", _keyed(fp32=256, tf32=512, bf16=1024, fp16=1024, fp8=2048, int8=2048),
                 "NVIDIA Ada GPU Architecture whitepaper; RTX 6000 Ada: 142 SMs x 2,505 MHz x 2,048 = "
                 "728.5 TFLOPS FP8; GeForce RTX 4090: 128 SMs x 2,520 MHz x 512 = 165.2 BF16; "
                 + _HALF_RATE, geforce=_keyed(tf32=256, bf16=512, fp16=512, fp8=1024)),
    (9, 0): Arch("Hopper", _keyed(fp64=256, fp32=256, tf32=2048, bf16=4096, fp16=4096, fp8=8192,
                                  int8=8192),
                 "NVIDIA H100 Tensor Core GPU Architecture whitepaper; H100 SXM: 132 SMs x 1,830 MHz x "
                 "4,096 = 989.5 TFLOPS BF16"),
    (12, 0): Arch("Blackwell (RTX)", _keyed(fp32=256, tf32=512, bf16=1024, fp16=1024, fp8=2048,
                                            int8=2048),
                  "NVIDIA RTX Blackwell GPU Architecture whitepaper; GeForce RTX 5090: 170 SMs x 2,407 "
                  "MHz x 256 = 104.8 TFLOPS FP32 and TF32, x 1,024 = 419 FP16/BF16 (the FP16-accumulate "
                  "rate: FP32 accumulate measures above the halved figure, see the RTX 5090 row). "
                  "Workstation parts run TF32 at twice the GeForce rate (RTX PRO 5000 Blackwell measured "
                  "140 TFLOPS TF32, github.com/xzwgit/gpu-flops-bench)", geforce=_keyed(tf32=256)),
}
# AMD, by the gfx target in gcnArchName ("gfx942:sramecc+:xnack-"); rates per CU per clock.
_AMD_ARCHS: dict[str, Arch] = {
    "gfx90a": Arch("CDNA 2", _keyed(fp64=256, fp32=256, bf16=1024, fp16=1024, int8=1024),
                   "AMD CDNA 2 architecture whitepaper; MI250X: 220 CUs x 1,700 MHz x 1,024 = 383 "
                   "TFLOPS FP16/BF16, x 256 = 95.7 FP64/FP32 matrix", unit="CU"),
    "gfx942": Arch("CDNA 3", _keyed(fp64=256, fp32=256, tf32=1024, bf16=2048, fp16=2048, fp8=4096,
                                    int8=4096),
                   "AMD CDNA 3 architecture whitepaper and ROCm's MI300 peak-performance table; "
                   "MI300X: 304 CUs x 2,100 MHz x 2,048 = 1,307.4 TFLOPS FP16/BF16", unit="CU"),
    "gfx950": Arch("CDNA 4", _keyed(fp32=256, bf16=4096, fp16=4096, fp8=8192, int8=8192),
                   "AMD CDNA 4 architecture whitepaper and MI355X specifications; MI355X: 256 CUs x "
                   "2,400 MHz x 4,096 = 2.5 PFLOPS FP16/BF16; no TF32; FP64 not verified, left out",
                   unit="CU"),
    **{target: Arch("RDNA 3", _keyed(fp32=256),
                    "AMD Radeon RX 7900 XTX specifications: 61.4 TFLOPS FP32 = 96 CUs x 2,500 MHz x 256 "
                    "(dual-issue); no matrix (WMMA) rate verified: FP16/BF16 left out", unit="CU")
       for target in ("gfx1100", "gfx1101", "gfx1102")},
}
_NO_TENSOR_CORES = re.compile(r"\b(gtx|mx\d+)\b")  # Turing's GTX 16 and MX parts: CUDA cores only


def gpu_arch(properties: object) -> Arch | None:
    """The architecture a GPU's properties name: AMD by gcnArchName's gfx target, NVIDIA by compute capability."""
    target = str(getattr(properties, "gcnArchName", "") or "").split(":", 1)[0].strip().lower()
    if target.startswith("gfx"):
        return _AMD_ARCHS.get(target)
    major, minor = getattr(properties, "major", None), getattr(properties, "minor", None)
    return _NVIDIA_ARCHS.get((major, minor)) if isinstance(major, int) and isinstance(minor, int) else None


def _per_sm_rate(arch: Arch, name: str, key: str) -> tuple[float, str] | None:
    """The dense rate per SM per clock for this part of the architecture, and which rate it is."""
    lowered = name.lower()
    if _NO_TENSOR_CORES.search(lowered) and key not in ("float32", "float64"):
        return None  # a GTX 16 or MX part: CUDA cores only
    if "geforce" in lowered and key in arch.geforce and arch.geforce[key] != arch.per_sm.get(key):
        return arch.geforce[key], "the GeForce rate, half the workstation rate (FP32 accumulate)"
    rate = arch.per_sm.get(key)
    return (rate, "the full rate") if rate is not None else None


def estimate_gpu_peak(properties: object, dtype: torch.dtype | str, *, tf32: bool | None = None,
                      note: str = "") -> Peak | None:
    """SMs x the clock the GPU reports x its architecture's per-SM rate: a labelled estimate, never a row.

    properties is what torch.cuda.get_device_properties returns (name, major, minor,
    multi_processor_count, clock_rate in kHz, gcnArchName on ROCm). None where the architecture, the
    dtype's rate, the SM count or the clock is unknown: no clock is assumed.
    """
    key = dtype_key(dtype, tf32)
    arch = gpu_arch(properties)
    name = str(getattr(properties, "name", "") or "GPU")
    sms = getattr(properties, "multi_processor_count", None)
    khz = getattr(properties, "clock_rate", None)
    if key is None or arch is None or not isinstance(sms, int) or sms <= 0 or not khz or khz <= 0:
        return None
    found = _per_sm_rate(arch, name, key)
    if found is None:
        return None
    rate, which = found
    ghz = khz / 1e6
    what = "OP" if key == "int8" else "FLOP"
    label = f"estimate: {sms} {arch.unit}s × {ghz:.2f} GHz × {rate:g} {what}/clock/{arch.unit}"
    source = (f"{label}, from the device's own properties: multi_processor_count, the clock it reports "
              f"(clock_rate, its maximum: a card that boosts past it can exceed this bound), and {arch.name}'s "
              f"dense {key} rate per {arch.unit}, {which} ({arch.source})" + (f". {note}" if note else ""))
    return Peak(sms * ghz * 1e9 * rate, name, f"{arch.name} (estimate)", key, True, source, label)


def _row_peak(device_name: str, spec: DeviceSpec, key: str) -> Peak:
    return Peak(spec.peaks[key], device_name, spec.name, key, False, spec.source, f"datasheet: {spec.name}")


def named_peak(device_name: str, dtype: torch.dtype | str, *, tf32: bool | None = None,
               sm_count: int | None = None) -> Peak | None:
    """The peak a name alone gives: a table row, or an Apple chip by name; never an SM x clock estimate."""
    key = dtype_key(dtype, tf32)
    if key is None or not isinstance(device_name, str):
        return None
    spec = lookup(device_name, sm_count)
    if spec is not None:
        return _row_peak(device_name, spec, key) if key in spec.peaks else None
    gpu = applegpu.gpu_from_name(device_name)
    return _apple_peak(gpu, dtype_key(dtype, tf32=False)) if gpu is not None else None


def peak_flops(device_name: str, dtype: torch.dtype | str, *, tf32: bool | None = None,
               sm_count: int | None = None) -> float | None:
    """Dense peak FLOP/s (OP/s for int8) of a named device in a dtype, or None if unknown."""
    peak = named_peak(device_name, dtype, tf32=tf32, sm_count=sm_count)
    return peak.flop_per_sec if peak is not None else None


def gpu_peak(properties: object, dtype: torch.dtype | str, *, tf32: bool | None = None) -> Peak | None:
    """A GPU's peak from its properties: its datasheet row when the table has the dtype, else the estimate."""
    name = str(getattr(properties, "name", "") or "")
    spec = lookup(name, getattr(properties, "multi_processor_count", None))
    key = dtype_key(dtype, tf32)
    if spec is not None and key in spec.peaks:
        return _row_peak(name, spec, key)
    # No row for this part (or none with this dtype): its own SMs and clock, with the row's caveat if known.
    return estimate_gpu_peak(properties, dtype, tf32=tf32, note=spec.source if spec is not None else "")


def device_peak(device: torch.device | str | None, dtype: torch.dtype | str, *,
                tf32: bool | None = None) -> Peak | None:
    """The peak for a live device: a datasheet row or an estimate for CUDA/ROCm (gpu_peak), an upper-bound
    estimate for the CPU, Apple's figure or an estimate for `mps`; None if unknown.
    device=None means the current CUDA device when CUDA is available, else the CPU.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        return None
    if device.type == "cpu":
        return _cpu_peak(dtype_key(dtype, tf32=False))  # TF32 is a CUDA tensor-core mode
    if device.type == "mps":
        gpu = applegpu.apple_gpu()
        return _apple_peak(gpu, dtype_key(dtype, tf32=False)) if gpu is not None else None
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return gpu_peak(torch.cuda.get_device_properties(index), dtype, tf32=tf32)


def _cpu_peak(key: str | None) -> Peak | None:
    """This CPU's upper-bound estimate (grader.course.cpuinfo), labelled as one."""
    if key is None:
        return None
    info = cpuinfo.cpu_info()
    flops = cpuinfo.estimate_flops(info, key)
    if flops is None:
        return None
    return Peak(flops, info.model, CPU_ESTIMATE, key, True, cpuinfo.describe(info, key),
                cpuinfo.label(info, key))


def _apple_peak(gpu: applegpu.AppleGpu, key: str | None) -> Peak | None:
    """An Apple GPU: Apple's published figure or an estimate (grader.course.applegpu), marked as such."""
    flops = applegpu.estimate_flops(gpu, key) if key is not None else None
    if flops is None:
        return None
    published = applegpu.is_published(gpu)
    return Peak(flops, gpu.name, f"Apple {gpu.chip} GPU" + ("" if published else " (estimate)"), key,
                not published, applegpu.describe(gpu, key), applegpu.label(gpu, key))


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


def architectures() -> list[Arch]:
    """Every architecture the estimates know, NVIDIA then AMD, once each (for docs/peaks.md)."""
    by_name = {arch.name: arch for arch in [*_NVIDIA_ARCHS.values(), *_AMD_ARCHS.values()]}
    return list(by_name.values())


__all__ = ["DTYPE_KEYS", "CPU_ESTIMATE", "Arch", "DeviceSpec", "Peak", "lookup", "named_peak", "peak_flops", "dtype_key",
           "tf32_enabled", "gpu_arch", "estimate_gpu_peak", "gpu_peak", "device_peak", "memory_bandwidth",
           "table", "architectures"]
