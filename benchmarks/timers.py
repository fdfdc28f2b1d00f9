"""Does grader.bench.time_fn agree with the standard timers? A report for `make bench`.

CPU: fp32 square matmuls against torch.utils.benchmark's blocked_autorange (target ratio
0.97-1.03). CUDA, when present: against triton.testing.do_bench, and bf16 8192^3 MFU through
time_matmul (target >= 0.78 on H100/H200). Always exits 0: it reports, it does not gate.
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from grader.bench import time_fn, time_matmul  # noqa: E402

CPU_SIZES = (256, 512, 1024)
CUDA_SIZES = (1024, 4096, 8192)
ROUNDS = 7  # interleaved rounds per size; each timer's result is its median over rounds
MIN_RUN_TIME = 0.3  # blocked_autorange's min_run_time per measurement, seconds
LOW, HIGH = 0.97, 1.03
MFU_TARGET = 0.78


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:9.4f} ms"


def _warm_up_cpu(seconds: float = 1.0) -> None:
    """Spin up the thread pool and let the OS settle thread placement before anything is measured."""
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, b)


def compare_cpu() -> list[bool]:
    """time_fn vs blocked_autorange on fp32 matmuls, interleaved so machine drift hits both alike."""
    threads = torch.get_num_threads()
    print(f"CPU: fp32 square matmuls, {threads} threads, {ROUNDS} interleaved rounds per size")
    print(f"  blocked_autorange(min_run_time={MIN_RUN_TIME}) vs time_fn(defaults); target ratio {LOW}-{HIGH}")
    _warm_up_cpu()
    inputs = {}
    for n in CPU_SIZES:
        a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
        inputs[n] = (a, b, c)
    ours: dict[int, list[float]] = {n: [] for n in CPU_SIZES}
    theirs: dict[int, list[float]] = {n: [] for n in CPU_SIZES}
    for r in range(ROUNDS):
        for n in CPU_SIZES:
            a, b, c = inputs[n]
            timer = Timer("torch.mm(a, b, out=c)", globals={"a": a, "b": b, "c": c}, num_threads=threads)

            def run_ours(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
                ours[n].append(time_fn(lambda: torch.mm(a, b, out=c), device="cpu"))

            def run_theirs(timer: Timer = timer) -> None:
                theirs[n].append(timer.blocked_autorange(min_run_time=MIN_RUN_TIME).median)

            first, second = (run_ours, run_theirs) if r % 2 == 0 else (run_theirs, run_ours)
            first()
            second()
    results = []
    print(f"  {'n':>5}  {'time_fn':>12}  {'blocked_autorange':>17}  {'ratio':>6}  per-round ratios (min-max)")
    for n in CPU_SIZES:
        mine, ref = statistics.median(ours[n]), statistics.median(theirs[n])
        ratio = mine / ref
        per_round = [o / t for o, t in zip(ours[n], theirs[n])]
        ok = LOW <= ratio <= HIGH
        results.append(ok)
        print(
            f"  {n:>5}  {_fmt(mine)}  {_fmt(ref):>17}  {ratio:6.3f}  "
            f"{min(per_round):.3f}-{max(per_round):.3f}  {'PASS' if ok else 'FAIL'}"
        )
    return results


def _interleave(a: Callable[[], float], b: Callable[[], float], rounds: int) -> tuple[float, float]:
    """Medians of a() and b() over alternating rounds."""
    xs, ys = [], []
    for r in range(rounds):
        if r % 2 == 0:
            xs.append(a())
            ys.append(b())
        else:
            ys.append(b())
            xs.append(a())
    return statistics.median(xs), statistics.median(ys)


def compare_cuda() -> list[bool]:
    """time_fn vs triton's do_bench on bf16 matmuls, then the bf16 8192^3 MFU."""
    results: list[bool] = []
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    print(f"\nCUDA: {name}")
    try:
        import triton.testing
    except ImportError:
        print("  triton is not installed: do_bench comparison skipped")
    else:
        print(f"  time_fn(defaults) vs triton.testing.do_bench(return_mode='median'), bf16; target {LOW}-{HIGH}")
        for n in CUDA_SIZES:
            a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
            b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
            c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)

            def fn(a: torch.Tensor = a, b: torch.Tensor = b, c: torch.Tensor = c) -> None:
                torch.mm(a, b, out=c)

            mine, ref = _interleave(
                lambda: time_fn(fn, device=dev),
                lambda: triton.testing.do_bench(fn, return_mode="median") / 1e3,
                rounds=5,
            )
            ratio = mine / ref
            ok = LOW <= ratio <= HIGH
            results.append(ok)
            print(f"  {n:>5}  time_fn {_fmt(mine)}  do_bench {_fmt(ref)}  ratio {ratio:6.3f}  {'PASS' if ok else 'FAIL'}")
    timing = time_matmul(8192, 8192, 8192, torch.bfloat16, dev)
    print(f"  {timing}")
    if timing.mfu is None:
        print("  bf16 MFU: peak unknown for this device, no target to check")
    elif any(tag in name for tag in ("H100", "H200")):
        ok = timing.mfu >= MFU_TARGET
        results.append(ok)
        print(f"  bf16 8192^3 MFU {timing.mfu:.3f} (target >= {MFU_TARGET})  {'PASS' if ok else 'FAIL'}")
    else:
        print(f"  bf16 8192^3 MFU {timing.mfu:.3f} (the {MFU_TARGET} target is for H100/H200 only)")
    return results


def main() -> int:
    start = time.perf_counter()
    results = compare_cpu()
    if torch.cuda.is_available():
        results += compare_cuda()
    else:
        print("\nno CUDA device: GPU timing comparison skipped")
    passed = sum(results)
    verdict = "PASS" if passed == len(results) else "FAIL"
    print(f"\nsummary: {passed}/{len(results)} checks within target, {verdict} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
