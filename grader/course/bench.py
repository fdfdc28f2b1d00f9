"""Timing that agrees with the standard tools: `time_fn` for any callable, `time_matmul` for MFU.

How `time_fn` measures, and why:

* CPU (and any device without CUDA events): like `torch.utils.benchmark.Timer.blocked_autorange`.
  One `perf_counter` read costs tens of nanoseconds, so short calls are timed in *blocks*:
  the block size grows by powers of 10 until one block lasts at least `min_block_seconds`, each block
  is timed as a whole with `timeit.default_timer` (Python's garbage collector off, as
  `timeit` does), and the result is the median over `reps` blocks of block time / block size.
  On a device that is neither CPU nor CUDA (Apple's MPS) the warm-up ends with a synchronize and so
  does every block, before its clock is read: Metal queues work as CUDA does, and MPS has no timing
  events every torch version offers, so the host clock brackets finished work.
* CUDA: like `triton.testing.do_bench`. Kernels are asynchronous, so host clocks would measure
  launch time; instead each rep records a pair of CUDA events around ONE call and the
  device is synchronized once at the end. With `flush_l2=True` (the default) a 256 MB buffer
  is zeroed before every rep so each call starts with a cold L2 cache (the realistic case
  for a large matmul); the flush also keeps the GPU busy while the host enqueues the call,
  so launch latency stays out of the measurement. With `flush_l2=False` the calls run in
  back-to-back blocks (sized by `min_block_seconds`, events around each block): a warm-cache,
  steady-state throughput where per-launch overhead is amortized over the block.
"""
from __future__ import annotations

import functools
import gc
import itertools
import os
import statistics
import timeit
from dataclasses import dataclass
from typing import Callable

import torch

from grader.course import applegpu, cpuinfo, specs

__all__ = [
    "ImpossibleMFU",
    "MatmulTiming",
    "default_device",
    "device_name",
    "machine",
    "mfu",
    "mps_available",
    "synchronize",
    "time_fn",
    "time_matmul",
]

# The same timer `timeit` (and hence blocked_autorange on a CPU-only build) reads.
_timer = timeit.default_timer

_FLUSH_BYTES = 256 * 1024 * 1024
_flush_buffers: dict[torch.device, torch.Tensor] = {}

# do_bench's choices when reps is None: estimate from 5 calls, fill about 100 ms.
_ESTIMATE_CALLS = 5
_TARGET_SECONDS = 0.1
_MAX_AUTO_REPS = 10_000


def mps_available() -> bool:
    """Whether an Apple silicon GPU (torch's `mps` device) can run work here."""
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def default_device() -> torch.device:
    """The device the course's measurements run on by default: CUDA, else Apple's MPS, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("mps") if mps_available() else torch.device("cpu")


def _as_device(device: torch.device | str | None) -> torch.device:
    """Resolve None to the default device, and "cuda" to the current CUDA device index."""
    dev = default_device() if device is None else torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        if not torch.cuda.is_available():
            raise ValueError("a CUDA device was asked for, but torch.cuda.is_available() is False")
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for all queued work on `device` to finish, so a host clock read afterwards is honest."""
    dev = _as_device(device)
    if dev.type == "cpu":
        return
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        return
    if dev.type == "mps":
        torch.mps.synchronize()  # waits for every queued Metal command buffer
        return
    backend = getattr(torch, dev.type, None)
    sync = getattr(backend, "synchronize", None)
    if callable(sync):
        sync()
    elif torch.accelerator.is_available():
        torch.accelerator.synchronize()


def device_name(device: torch.device | str | None = None) -> str:
    """A human-readable name for the hardware behind `device` (GPU model or CPU model)."""
    dev = _as_device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "cpu":
        return cpuinfo.cpu_info().model
    if dev.type == "mps":
        gpu = applegpu.apple_gpu()
        return gpu.name if gpu is not None else "Apple GPU (mps)"
    return dev.type


# The CPU flags a chapter's measurements depend on: SIMD widths, FMA, and the 16-bit and 8-bit instructions.
MACHINE_FLAGS = ("avx512f", "avx2", "fma", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "neon", "asimd",
                 "sve", "bf16")


def machine(device: torch.device | str | None = None) -> str:
    """One line naming the hardware behind `device`, for a chapter's first measurement: committed outputs then say
    which machine made them (a CPU's model, threads and the flags that matter; a GPU's name)."""
    dev = _as_device(device)
    if dev.type != "cpu":
        return device_name(dev)
    cpu = cpuinfo.cpu_info()
    flags = [f for f in MACHINE_FLAGS if f in cpu.flags]
    return f"{cpu.model}, torch on {cpu.cores} cores, {', '.join(flags) or 'no SIMD flags reported'}"


# --------------------------------------------------------------------------------------
# time_fn
# --------------------------------------------------------------------------------------


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: int = 3,
    reps: int | None = 25,
    device: torch.device | str | None = None,
    flush_l2: bool = True,
    min_block_seconds: float = 2e-3,
) -> float:
    """Median seconds of one call of fn(), after `warmup` untimed calls.

    `fn` should close over inputs allocated beforehand: allocation is not what we time.
    `device` says where fn's work runs (None: CUDA if available, else CPU); pass "cpu" to
    time CPU code on a GPU machine. reps=None picks the count like triton's do_bench
    (about 100 ms of measurement). See the module docstring for the method on each device.
    In a grading kernel (GRADER_GRADING=1) fn runs once, untimed in earnest: grades never
    depend on timings, and the grader discards the notebook's outputs.
    """
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if reps is not None and reps < 1:
        raise ValueError(f"reps must be >= 1 (or None to choose automatically), got {reps}")
    if not min_block_seconds >= 0:
        raise ValueError(f"min_block_seconds must be >= 0, got {min_block_seconds}")
    dev = _as_device(device)
    if os.environ.get("GRADER_GRADING") == "1":
        warmup, reps, min_block_seconds = 0, 1, 0.0
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            return _time_cuda(fn, warmup, reps, dev, flush_l2, min_block_seconds)
    return _time_host(fn, warmup, reps, dev, min_block_seconds)


def _time_block(fn: Callable[[], object], number: int, sync: Callable[[], None] | None) -> float:
    """Seconds for `number` back-to-back calls, timed as one block with GC off (as timeit does)."""
    it = itertools.repeat(None, number)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        t0 = _timer()
        for _ in it:
            fn()
        if sync is not None:
            sync()
        t1 = _timer()
    finally:
        if gc_was_enabled:
            gc.enable()
    return t1 - t0


def _calibrate_block(min_block_seconds: float, time_block: Callable[[int], float],
                     tries: int = 1) -> tuple[int, float]:
    """Block size (calls per timed block) whose block lasts >= min_block_seconds; also that block's time.

    Grows by powers of 10 as blocked_autorange does, so both settle on the same block sizes;
    longer blocks also make the per-call median steadier for sub-millisecond calls. With tries > 1 each
    size is judged by its fastest of `tries` blocks, so one stalled block cannot stop the growth early.
    """
    number = 1
    while True:
        t = min(time_block(number) for _ in range(tries))
        if t >= min_block_seconds or number * 10 > 2**31 - 1:
            return number, t
        number *= 10


# A measurement is re-taken when a short re-check after it disagrees this much (the machine was disturbed).
_RECHECK_BLOCKS = 5
_DISTURBED = 1.5
_MAX_ATTEMPTS = 3


def _time_host(
    fn: Callable[[], object], warmup: int, reps: int | None, dev: torch.device, min_block_seconds: float
) -> float:
    """blocked_autorange-style timing with host clocks (CPU, or another device plus synchronize).

    A stalled virtual machine or a slow first call can inflate a whole measurement; a short re-check
    follows it, and when the re-check runs much faster the measurement is taken again (at most
    _MAX_ATTEMPTS times; the smallest median wins). Undisturbed, the first median is returned as is.
    """
    sync = None if dev.type == "cpu" else functools.partial(synchronize, dev)
    if sync is not None:
        sync()
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()

    def block(number: int) -> float:
        return _time_block(fn, number, sync)

    best = float("inf")
    for _attempt in range(_MAX_ATTEMPTS):
        number, block_seconds = _calibrate_block(min_block_seconds, block, tries=3 if _attempt else 1)
        count = reps if reps is not None else max(5, min(_MAX_AUTO_REPS, int(_TARGET_SECONDS / max(block_seconds, 1e-9))))
        median = statistics.median(block(number) / number for _ in range(count))
        best = min(best, median)
        if count < _RECHECK_BLOCKS:
            break
        recheck = statistics.median(block(number) / number for _ in range(_RECHECK_BLOCKS))
        if recheck * _DISTURBED >= median:
            break
    return best


def _flush_buffer(dev: torch.device) -> torch.Tensor:
    """A buffer larger than L2 (256 MB int8, or 2x L2 if that is bigger), made once per device."""
    buf = _flush_buffers.get(dev)
    if buf is None:
        nbytes = _FLUSH_BYTES
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 0
        nbytes = max(nbytes, 2 * int(l2))
        buf = torch.empty(nbytes, dtype=torch.int8, device=dev)
        _flush_buffers[dev] = buf
    return buf


def _time_cuda(
    fn: Callable[[], object],
    warmup: int,
    reps: int | None,
    dev: torch.device,
    flush_l2: bool,
    min_block_seconds: float,
) -> float:
    """do_bench-style timing with CUDA events on the current stream of `dev`."""
    torch.cuda.synchronize(dev)
    cache = _flush_buffer(dev) if flush_l2 else None
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(dev)

    def event() -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=True)

    if cache is not None:
        # Cold L2 for every call: flush, then events around exactly one call.
        if reps is None:
            start, end = event(), event()
            start.record()
            for _ in range(_ESTIMATE_CALLS):
                cache.zero_()
                fn()
            end.record()
            torch.cuda.synchronize(dev)
            estimate = start.elapsed_time(end) / 1e3 / _ESTIMATE_CALLS
            reps = max(1, min(_MAX_AUTO_REPS, int(_TARGET_SECONDS / max(estimate, 1e-9))))
        starts = [event() for _ in range(reps)]
        ends = [event() for _ in range(reps)]
        for start, end in zip(starts, ends):
            cache.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize(dev)
        return statistics.median(s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends))

    # Warm cache: back-to-back blocks of calls, events around each block.
    def block(number: int) -> float:
        start, end = event(), event()
        start.record()
        for _ in itertools.repeat(None, number):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    number, block_seconds = _calibrate_block(min_block_seconds, block)
    if reps is None:
        reps = max(1, min(_MAX_AUTO_REPS, int(_TARGET_SECONDS / max(block_seconds, 1e-9))))
    starts = [event() for _ in range(reps)]
    ends = [event() for _ in range(reps)]
    for start, end in zip(starts, ends):
        start.record()
        for _ in itertools.repeat(None, number):
            fn()
        end.record()
    torch.cuda.synchronize(dev)
    return statistics.median(s.elapsed_time(e) / 1e3 / number for s, e in zip(starts, ends))


# --------------------------------------------------------------------------------------
# time_matmul
# --------------------------------------------------------------------------------------


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _float8_dtypes() -> set[torch.dtype]:
    names = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    return {getattr(torch, name) for name in names if hasattr(torch, name)}


def _format_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3g} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


class ImpossibleMFU(ValueError):
    """Achieved FLOP/s above the peak: the peak is wrong for this device (a row, or an estimate's clock), never the
    timing fast. Its message names the peak and why it is suspect."""


def mfu(flop_per_sec: float, peak: specs.Peak) -> float:
    """achieved / peak, the model FLOPs utilisation, which is never above 1: raises ImpossibleMFU naming the peak."""
    ratio = flop_per_sec / peak.flop_per_sec
    if ratio > 1.0:
        raise ImpossibleMFU(_refusal(flop_per_sec, peak.flop_per_sec, peak.label, _why_suspect(peak)))
    return ratio


def _why_suspect(peak: specs.Peak) -> str:
    """Which figure an MFU above 1 proves wrong, by the kind of peak it was measured against."""
    where = f"{peak.device_name}/{peak.dtype_key}"
    if not peak.estimate:
        return (f"the spec table's row {peak.spec_name!r} is wrong for {where} (or the card boosted past the "
                "rated clock its datasheet assumes, as GeForce cards do): grader/course/specs.py")
    if peak.spec_name == specs.CPU_ESTIMATE:
        return (f"the estimated peak for {where} is too low: the CPU ran faster than the highest clock it "
                "reports (a VM hides its turbo clock), or has more FMA units than assumed: grader/course/cpuinfo.py")
    return (f"the estimated peak for {where} is too low: the device ran above the clock it reports, or the "
            "per-SM rate of its architecture is wrong: grader/course/specs.py")


def _refusal(flop_per_sec: float, peak: float, label: str, why: str) -> str:
    return (f"MFU not reported: {flop_per_sec / 1e12:.3g} TFLOP/s measured is above the peak "
            f"{peak / 1e12:.3g} TFLOP/s ({label}), which cannot be: {why}")


@dataclass(frozen=True)
class MatmulTiming:
    """One timed (m x k) @ (k x n) matmul with its FLOP/s and MFU against the device's peak.

    peak and mfu are None when the peak is unknown, and when it is refused: a measurement above it proves it
    wrong, and peak_error says which peak and why (dtype_key and peak_is_estimate still describe it).
    """

    m: int
    k: int
    n: int
    dtype: torch.dtype
    device: str
    device_name: str
    seconds: float
    flops: int
    flop_per_sec: float
    peak: float | None
    mfu: float | None
    peak_is_estimate: bool
    dtype_key: str | None
    peak_label: str | None = None  # e.g. "datasheet: H100 SXM", "estimate: 24 SMs × 2.46 GHz × 512 FLOP/clock/SM"
    peak_error: str | None = None  # why the peak was refused (an MFU above 1), else None

    @property
    def warning(self) -> str | None:
        """Why no MFU is reported although a peak was found: it was exceeded, so it is wrong. Also covers a timing
        built by hand with an MFU above 1, so no such fraction is ever printed."""
        if self.peak_error is not None:
            return self.peak_error
        if self.mfu is not None and self.peak and self.mfu > 1.0:
            kind = "estimate" if self.peak_is_estimate else "datasheet"
            key = self.dtype_key or _dtype_name(self.dtype)
            return _refusal(self.flop_per_sec, self.peak, self.peak_label or kind,
                            f"that peak is wrong for {self.device_name}/{key}")
        return None

    @property
    def dtype_label(self) -> str:
        """The dtype's name, with the TF32 mode shown when the peak was looked up as TF32."""
        name = _dtype_name(self.dtype)
        if self.dtype_key and "tf32" in self.dtype_key.lower() and "tf32" not in name:
            return f"{name} (tf32)"
        return name

    def __str__(self) -> str:
        head = (
            f"{self.m}x{self.k}x{self.n} {self.dtype_label} on {self.device}: "
            f"{_format_seconds(self.seconds)}, {self.flop_per_sec / 1e12:.3g} TFLOP/s"
        )
        warning = self.warning
        if warning is not None:
            return f"{head}, {warning}"
        if self.peak is None or self.mfu is None:
            return f"{head}, peak unknown"
        label = self.peak_label or ("estimate" if self.peak_is_estimate else "")
        peak = f"peak {self.peak / 1e12:.3g} TFLOP/s" + (f", {label}" if label else "")
        return f"{head}, MFU {self.mfu:.2f} ({peak})"


def _matmul_fn(m: int, k: int, n: int, dtype: torch.dtype, dev: torch.device) -> Callable[[], object]:
    """Allocate the inputs and output once and return a zero-argument call of the matmul."""
    float8 = _float8_dtypes()
    name = _dtype_name(dtype)
    if dtype in float8 or dtype == torch.int8:
        if dev.type != "cuda":
            op = "torch._scaled_mm" if dtype in float8 else "torch._int_mm"
            raise ValueError(
                f"{name} matmuls run through {op}, which needs a CUDA GPU; "
                f"they are not supported on {dev.type}. Time float32 or bfloat16 there instead."
            )
    elif not dtype.is_floating_point or dtype.is_complex:
        raise ValueError(f"time_matmul supports floating-point dtypes, float8 and int8, not {name}")

    if dtype in float8:
        if m % 16 or k % 16 or n % 16:
            raise ValueError(f"{name} matmuls (torch._scaled_mm) need m, k, n divisible by 16, got {m}, {k}, {n}")
        # e5m2 x e5m2 is not a supported cuBLAS pair; use e4m3 for the left operand then.
        a_dtype = torch.float8_e4m3fn if dtype == torch.float8_e5m2 else dtype
        a = torch.randn(m, k, dtype=torch.bfloat16, device=dev).to(a_dtype)
        # _scaled_mm wants the right operand column-major: make it (n, k) and transpose the view.
        b = torch.randn(n, k, dtype=torch.bfloat16, device=dev).to(dtype).t()
        one = torch.ones((), dtype=torch.float32, device=dev)
        out = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
        with_out = functools.partial(
            torch._scaled_mm, a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, out=out
        )
        without_out = functools.partial(torch._scaled_mm, a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    elif dtype == torch.int8:
        if m <= 16 or k % 8 or n % 8:
            raise ValueError(f"int8 matmuls (torch._int_mm) need m > 16 and k, n divisible by 8, got {m}, {k}, {n}")
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=dev)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device=dev)
        out = torch.empty(m, n, dtype=torch.int32, device=dev)
        with_out = functools.partial(torch._int_mm, a, b, out=out)
        without_out = functools.partial(torch._int_mm, a, b)
    else:
        a = torch.randn(m, k, dtype=dtype, device=dev)
        b = torch.randn(k, n, dtype=dtype, device=dev)
        out = torch.empty(m, n, dtype=dtype, device=dev)
        return functools.partial(torch.mm, a, b, out=out)

    # The private ops' out= overloads are less travelled; fall back to allocating if one is missing.
    try:
        with_out()
        return with_out
    except (RuntimeError, TypeError):
        without_out()
        return without_out


def time_matmul(
    m: int,
    k: int,
    n: int,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    **time_kwargs: object,
) -> MatmulTiming:
    """Time (m x k) @ (k x n) with `time_fn` and compare with the device's peak: 2mkn FLOPs per call.

    The MFU is never above 1: a measurement above the peak proves the peak wrong, and the result then
    reports no peak and no MFU but says which peak is suspect (peak_error). Inputs and the output buffer
    are made before timing. On CUDA, float8 goes through
    torch._scaled_mm (unit scales, bf16 output) and int8 through torch._int_mm; on CPU
    those raise ValueError. Extra keyword arguments go to `time_fn`.
    """
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    for name, size in (("m", m), ("k", k), ("n", n)):
        if int(size) != size or size < 1:
            raise ValueError(f"{name} must be a positive integer, got {size!r}")
    dev = _as_device(device)
    fn = _matmul_fn(m, k, n, dtype, dev)
    seconds = time_fn(fn, device=dev, **time_kwargs)  # type: ignore[arg-type]
    flops = 2 * m * k * n
    flop_per_sec = flops / seconds
    peak = specs.device_peak(dev, dtype)
    fraction = peak_error = None
    if peak is not None and peak.flop_per_sec:
        try:
            fraction = mfu(flop_per_sec, peak)
        except ImpossibleMFU as exc:
            peak_error = str(exc)
    return MatmulTiming(
        m=m,
        k=k,
        n=n,
        dtype=dtype,
        device=str(dev),
        device_name=device_name(dev),
        seconds=seconds,
        flops=flops,
        flop_per_sec=flop_per_sec,
        peak=peak.flop_per_sec if fraction is not None else None,
        mfu=fraction,
        peak_is_estimate=bool(peak.estimate) if peak is not None else False,
        dtype_key=peak.dtype_key if peak is not None else None,
        peak_label=peak.label if peak is not None else None,
        peak_error=peak_error,
    )
