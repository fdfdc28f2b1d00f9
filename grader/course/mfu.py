"""`python -m grader mfu`: time square matmuls per dtype on this device and report MFU.

MFU = achieved FLOP/s / the device's dense peak for that dtype (grader.course.specs): the datasheet
number where the table has the GPU, else an estimate from the GPU's own SM count and clock; on a CPU an
upper-bound estimate. Each peak's label says which. An MFU above 1 is never shown: the peak it would
need is wrong, and the table says which one instead.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import torch
from rich.console import Console
from rich.table import Table

from grader.course import bench, specs

CPU_SIZES = (256, 512, 1024)
CUDA_SIZES = (256, 512, 1024, 2048, 4096, 8192)
CPU_DTYPES = ("float32", "float64", "bfloat16")
CUDA_DTYPES = ("float32", "tf32", "bfloat16", "float16")
MPS_SIZES = (256, 512, 1024, 2048, 4096)
MPS_DTYPES = ("float32", "float16", "bfloat16")  # MPS has no float64

# Names accepted by --dtypes, mapped to the canonical label used in the table and plot.
_ALIASES = {
    "fp32": "float32",
    "float": "float32",
    "fp64": "float64",
    "double": "float64",
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp8": "float8_e4m3fn",
    "float8": "float8_e4m3fn",
    "e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
}


@dataclass
class DtypeRun:
    """Every size timed for one dtype label, and why it stopped if it did."""

    label: str
    timings: list[bench.MatmulTiming] = field(default_factory=list)
    error: str | None = None


def _label(name: str) -> str:
    name = name.strip().lower().removeprefix("torch.")
    return _ALIASES.get(name, name)


def _torch_dtype(label: str) -> torch.dtype:
    """The tensor dtype for a label ("tf32" is float32 tensors with TF32 matmuls)."""
    if label == "tf32":
        return torch.float32
    dtype = getattr(torch, label, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {label!r}")
    return dtype


@contextlib.contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """Turn TF32 for CUDA float32 matmuls on or off for one run, and restore the previous setting.

    Uses the legacy `allow_tf32` switch when the state is readable that way (so code that reads
    either API still works), and the newer `fp32_precision` when the state was set through it.
    """
    matmul = torch.backends.cuda.matmul
    try:
        previous = matmul.allow_tf32
    except RuntimeError:  # state was set through fp32_precision: reading allow_tf32 refuses a mix
        previous_precision = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = previous_precision
        return
    matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32 = previous


def _default_dtypes(device: torch.device) -> list[str]:
    if device.type == "mps":
        return list(MPS_DTYPES)
    if device.type != "cuda":
        return list(CPU_DTYPES)
    dtypes = list(CUDA_DTYPES)
    # FP8 tensor cores arrived with Ada/Hopper (sm_89 / sm_90).
    if hasattr(torch, "float8_e4m3fn") and torch.cuda.get_device_capability(device) >= (8, 9):
        dtypes.append("float8_e4m3fn")
    return dtypes


def _short_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _run_dtype(label: str, sizes: Sequence[int], device: torch.device, reps: int, warmup: int) -> DtypeRun:
    """Time every size for one dtype; stop at the first error and keep its reason."""
    run = DtypeRun(label)
    if label == "tf32" and device.type != "cuda":
        run.error = f"TF32 is a CUDA tensor-core mode; there is none on {device.type}"
        return run
    try:
        dtype = _torch_dtype(label)
    except ValueError as exc:
        run.error = str(exc)
        return run
    for size in sizes:
        # float32 on CUDA: TF32 explicitly off for the "float32" row, on for the "tf32" row.
        mode = _tf32(label == "tf32") if device.type == "cuda" and dtype == torch.float32 else contextlib.nullcontext()
        try:
            with mode:
                timing = bench.time_matmul(size, size, size, dtype, device, reps=reps, warmup=warmup)
        except (ValueError, RuntimeError, TypeError, NotImplementedError) as exc:
            run.error = _short_error(exc)
            break
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
            elif device.type == "mps":
                torch.mps.empty_cache()
        run.timings.append(timing)
    return run


def _tflops(value: float | None) -> str:
    return "unknown" if value is None else f"{value / 1e12:.3g}"


def _table(runs: list[DtypeRun], device: torch.device) -> Table:
    table = Table(title=f"Square matmuls on {device}: achieved vs peak")
    table.add_column("dtype", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("achieved TFLOP/s", justify="right", no_wrap=True)
    table.add_column("peak TFLOP/s", justify="right", no_wrap=True)
    table.add_column("MFU")
    notes = any(run.error for run in runs)
    if notes:
        table.add_column("note")
    for run in runs:
        note = [f"[yellow]{run.error}[/yellow]"] if notes else []
        if not run.timings:
            table.add_row(run.label, "-", "-", "-", "-", "skipped", *note)
            continue
        t = run.timings[-1]
        peak = _tflops(t.peak)
        if t.peak is not None and t.peak_is_estimate:
            peak += " (est.)"
        if t.warning is not None:
            peak, mfu = "refused", "[red]not reported (below)[/red]"
        elif t.mfu is None:
            mfu = "-"
        else:
            mfu = f"{t.mfu:.2f}"
        if run.error:
            note = [f"[yellow]larger sizes failed: {run.error}[/yellow]"]
        elif notes:
            note = [""]
        seconds = bench._format_seconds(t.seconds)
        table.add_row(run.label, f"{t.m}", seconds, f"{t.flop_per_sec / 1e12:.3g}", peak, mfu, *note)
    return table


def _plot(runs: list[DtypeRun], path: Path, title: str) -> None:
    """Achieved TFLOP/s against matrix size, one line per dtype, dashed lines at known peaks."""
    # The Agg canvas directly, not pyplot: no global backend switch inside a notebook.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    sizes: set[int] = set()
    for run in runs:
        if not run.timings:
            continue
        xs = [t.m for t in run.timings]
        sizes.update(xs)
        (line,) = ax.plot(xs, [t.flop_per_sec / 1e12 for t in run.timings], marker="o", label=run.label)
        peak = run.timings[-1].peak
        if peak is not None and not any(t.warning for t in run.timings):  # never a line under a point above it
            est = " (est.)" if run.timings[-1].peak_is_estimate else ""
            ax.axhline(peak / 1e12, linestyle="--", linewidth=1, color=line.get_color(), label=f"{run.label} peak{est}")
    ax.set_xscale("log", base=2)
    if sizes:
        ticks = sorted(sizes)
        ax.set_xticks(ticks, [str(s) for s in ticks])
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no dtype ran", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("matrix size n (an n×n @ n×n matmul; log2 scale)")
    ax.set_ylabel("achieved throughput (TFLOP/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def _parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or any(s < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"sizes must be positive integers, got {text!r}")
    return sorted(set(sizes))


def _parse_dtypes(text: str) -> list[str]:
    labels = [_label(s) for s in text.split(",") if s.strip()]
    if not labels:
        raise argparse.ArgumentTypeError("give at least one dtype")
    return list(dict.fromkeys(labels))


def _console() -> Console:
    # Wide enough off a terminal (pipes, CI logs) that skip reasons are not squeezed.
    return Console(width=None if sys.stdout.isatty() else 140, highlight=False)


def main(argv: list[str] | None = None) -> int:
    """Time matmuls per dtype on one device, print the MFU table, optionally save a plot."""
    parser = argparse.ArgumentParser(prog="python -m grader mfu", description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="cpu, cuda, cuda:N or mps (default: cuda, else mps, else cpu)")
    parser.add_argument("--sizes", type=_parse_sizes, help="comma-separated square sizes (default: by device)")
    parser.add_argument("--dtypes", type=_parse_dtypes, help="comma-separated dtypes, e.g. float32,tf32,bfloat16")
    parser.add_argument("--plot", type=Path, help="save a PNG of achieved TFLOP/s against size here")
    parser.add_argument("--reps", type=int, default=25, help="timed repetitions per size (default 25)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before timing (default 3)")
    args = parser.parse_args(argv)
    console = _console()

    if args.reps < 1 or args.warmup < 0:
        console.print("[red]--reps must be >= 1 and --warmup >= 0[/red]")
        return 2
    try:
        device = torch.device(args.device) if args.device else bench.default_device()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("CUDA was asked for, but torch.cuda.is_available() is False")
        if device.type == "mps" and not bench.mps_available():
            raise ValueError("MPS was asked for, but torch.backends.mps.is_available() is False")
        if device.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"only cpu, cuda and mps devices are supported, got {device.type}")
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    except (RuntimeError, ValueError) as exc:
        console.print(f"[red]bad --device {args.device!r}: {exc}[/red]")
        return 2

    sizes = args.sizes or list({"cuda": CUDA_SIZES, "mps": MPS_SIZES}.get(device.type, CPU_SIZES))
    labels = args.dtypes or _default_dtypes(device)
    name = bench.device_name(device)

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        console.print(f"Device: {device} - {name} ({props.multi_processor_count} SMs)")
        console.print("Peaks are dense (no sparsity), from grader.course.specs: the datasheet row, else an estimate "
                      "from this GPU's SM count and clock; each dtype's label is listed under the table.")
    elif device.type == "mps":
        console.print(f"Device: mps - {name}")
        peak = specs.device_peak(device, torch.float32)
        if peak is None:
            console.print("No peak is known for this Apple GPU: the MFU column stays empty.")
        elif peak.estimate:
            console.print(f"Apple GPU peaks are estimates, so read MFU as a rough guide: {peak.source}")
        console.print("On MPS, time_fn brackets each block with torch.mps.synchronize (no CUDA events, no TF32, "
                      "no float8).")
    else:
        console.print(f"Device: cpu - {name}, {torch.get_num_threads()} threads")
        peak = specs.device_peak(device, torch.float32)
        if peak is not None and peak.estimate:
            console.print(f"CPU peaks are upper-bound estimates, not datasheet numbers, so an MFU here is a lower "
                          f"bound: {peak.source}")
        elif peak is None:
            console.print("No peak is known for this CPU: the MFU column stays empty.")

    runs = []
    with console.status("timing matmuls...") if console.is_terminal else contextlib.nullcontext():
        for label in labels:
            runs.append(_run_dtype(label, sizes, device, args.reps, args.warmup))
    console.print(_table(runs, device))
    console.print(f"size = the largest size that ran (of {', '.join(map(str, sizes))}); MFU = achieved / peak.")
    for run in runs:
        last = run.timings[-1] if run.timings else None
        if last is not None and last.warning is not None:
            console.print(f"  {run.label}: [red]{last.warning}[/red]")
        elif last is not None and last.peak_label:
            console.print(f"  {run.label} peak: {last.peak_label}")

    if args.plot is not None:
        _plot(runs, args.plot, f"Matmul throughput on {name}")
        console.print(f"plot saved to {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
