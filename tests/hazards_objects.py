"""Hazard notebooks for exercises graded through scenarios (live objects) and real processes.

Built from the chapter 05 (autograd) and chapter 10 (DDP) solutions: a Function whose forward patches
torch.autograd.grad, an object whose __del__ hangs, one whose __getattr__ recurses, a backward that
hangs, a data-parallel run whose rank hangs, and two DDP students graded at the same time. Each is the
exercises alone (tests/hazards.exercises_only): what these hazards test is the grading of the exercises, and
chapter 10's demonstrations (torchrun, several launches) would cost each of its students more than its exercises.
Each entry: student name -> (builder, expected status of each exercise).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat

from tests.hazards import exercises_only

ROOT = Path(__file__).resolve().parents[1]
AUTOGRAD = ["linear_loss_grad", "vjp", "jacobian", "silu", "gradient_norm_penalty", "accumulate_step",
            "penalty_step_flops"]
DDP = ["ring_allreduce", "allreduce_traffic", "zero_memory", "shard_indices", "average_gradients", "ddp_train",
       "pipeline_bubble", "parallel_layout"]


def replace_cell(nb: nbformat.NotebookNode, pattern: str, source: str) -> nbformat.NotebookNode:
    """The notebook with the code cell matching `pattern` (a regex, multiline) replaced by `source`."""
    for cell in nb.cells:
        if cell.cell_type == "code" and re.search(pattern, cell.source, re.M):
            cell.source = source
            return nb
    raise KeyError(pattern)


def write(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


SILU_OK_BACKWARD = ("        (x,) = ctx.saved_tensors\n        s = torch.sigmoid(x)\n"
                    "        return grad_output * s * (1 + x * (1 - s))\n")


def silu_cell(forward_extra: str = "", backward: str = SILU_OK_BACKWARD) -> str:
    return ("import torch\n\nclass SiLU(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n"
            f"{forward_extra}        ctx.save_for_backward(x)\n        return x * torch.sigmoid(x)\n\n"
            "    @staticmethod\n    def backward(ctx, grad_output):\n" + backward +
            "\n\ndef silu(x):\n    return SiLU.apply(x)\n")


def forward_patches_grad(d: Path) -> None:
    """A Function whose forward quietly replaces torch.autograd.grad (here with a pass-through)."""
    patch = ("        import torch as _t\n        if not hasattr(_t, '_real_grad'):\n"
             "            _t._real_grad = _t.autograd.grad\n"
             "            _t.autograd.grad = lambda *a, **k: _t._real_grad(*a, **k)\n")
    write(replace_cell(exercises_only("05_autograd"), r"^class SiLU\(", silu_cell(forward_extra=patch)),
          d / "05_autograd.ipynb")


def del_hangs(d: Path) -> None:
    """accumulate_step leaves behind an object whose __del__ never returns."""
    body = ("import time\n\nclass Sticky:\n    def __del__(self):\n        while True:\n            time.sleep(0.01)\n\n"
            "def accumulate_step(model, loss_fn, micro_batches, optimizer):\n    keep = Sticky()\n"
            "    optimizer.zero_grad()\n    for x, y in micro_batches:\n"
            "        (loss_fn(model(x), y) / len(micro_batches)).backward()\n    optimizer.step()\n")
    write(replace_cell(exercises_only("05_autograd"), r"^def accumulate_step\(", body), d / "05_autograd.ipynb")


def getattr_recurses(d: Path) -> None:
    """gradient_norm_penalty returns an object whose __getattr__ recurses forever."""
    body = ("class Penalty:\n    def __getattr__(self, name):\n        return self.__getattr__(name)\n\n"
            "def gradient_norm_penalty(loss, params):\n    return Penalty()\n")
    write(replace_cell(exercises_only("05_autograd"), r"^def gradient_norm_penalty\(", body),
          d / "05_autograd.ipynb")


def backward_hangs(d: Path) -> None:
    """SiLU's backward never returns."""
    hang = "        while True:\n            pass\n"
    write(replace_cell(exercises_only("05_autograd"), r"^class SiLU\(", silu_cell(backward=hang)),
          d / "05_autograd.ipynb")


def ddp_rank_hangs(d: Path) -> None:
    """Rank 1 of the data-parallel run joins the group, then never takes part; ddp_train waits 10 minutes."""
    nb = exercises_only("10_ddp")
    worker = ("%%writefile ddp_worker.py\nimport datetime, time\nimport torch.distributed as dist\n\n\n"
              "def train_worker(rank, world_size, steps, lr, seed):\n"
              "    dist.init_process_group('gloo', rank=rank, world_size=world_size,\n"
              "                            timeout=datetime.timedelta(seconds=600))\n"
              "    if rank == 1:\n        time.sleep(3600)\n    t = __import__('torch').ones(1)\n"
              "    dist.all_reduce(t)\n    return {}\n")
    nb = replace_cell(nb, r"^%%writefile ddp_worker\.py", worker)
    nb = replace_cell(nb, r"^def ddp_train\(", "from grader.course import distributed\n\n"
                      "def ddp_train(world_size=2, steps=5, lr=0.1, seed=0):\n"
                      "    return distributed.launch('ddp_worker:train_worker', world_size, (steps, lr, seed),"
                      " timeout=600)[0]\n")
    nb.cells = [c for c in nb.cells if not c.source.startswith("%%needs ddp_train")]  # the demo would wait too
    write(nb, d / "10_ddp.ipynb")


def ddp_solved(d: Path) -> None:
    write(exercises_only("10_ddp"), d / "10_ddp.ipynb")


def control_autograd(d: Path) -> None:
    write(exercises_only("05_autograd"), d / "05_autograd.ipynb")


def only(exercises: list[str], **overrides: str) -> dict[str, str]:
    return {e: overrides.get(e, "passed") for e in exercises}


COHORT = {
    "forward patches grad": (forward_patches_grad, {e: "tampered" for e in AUTOGRAD}),
    "del hangs": (del_hangs, only(AUTOGRAD, accumulate_step="timeout")),
    "getattr recurses": (getattr_recurses, only(AUTOGRAD, gradient_norm_penalty="error")),
    "backward hangs": (backward_hangs, only(AUTOGRAD, silu="timeout")),
    "autograd control": (control_autograd, only(AUTOGRAD)),
    "ddp rank hangs": (ddp_rank_hangs, only(DDP, ddp_train="timeout")),
    "ddp parallel one": (ddp_solved, only(DDP)),
    "ddp parallel two": (ddp_solved, only(DDP)),
}


def build(root: Path) -> Path:
    for student, (make, _) in COHORT.items():
        make(root / student)
    return root
