"""The bridge between the grading process and a real student kernel: only data crosses, and it keeps its meaning."""
from __future__ import annotations

import pytest
import torch

from grader import registry, wire
from grader.autograde import tamper
from grader.autograde.bridge import RemoteFunction, load_reply
from grader.expect import CheckFailure, call
from grader.runner import CheckCrashed, CheckMemory, CheckTimeout
from grader.scenario import Opaque, tracing

CELLS = [
    "import torch, time, os\n"
    "def same(x, y): return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()\n"
    "def view_of(x): return x.t()\n"
    "def scale_in_place(x): x.mul_(2); return x\n"
    "class ShapeError(ValueError): pass\n"
    "def shape_error(): raise ShapeError('bad shape')\n"
    "def opaque(): return object()\n"
    "class Liar(torch.Tensor):\n    def __eq__(self, other): return True\n"
    "def liar(x): return x.as_subclass(Liar)\n"
    "def broadcast(a, b): return torch.broadcast_shapes(a, b)\n"
    "from torch import broadcast_shapes as bs\n"
    "def broadcast_alias(a, b): return bs(a, b)\n"
    "def offset_by_indexing(x, index): return x[tuple(index)].storage_offset()\n"
    "def offset(x, index): return x.storage_offset() + sum((i % n) * s for i, n, s in zip(index, x.shape, x.stride()))\n"
    "def hog(): return torch.empty(2**36)\n"
    "def spin():\n    while True: pass\n"
    "def die(): os._exit(1)\n"
    "def pair(): return (1, 2.5, 'x', None, [True], {'k': torch.ones(2)})\n"
    "def meta(x): return (x.shape, x.dtype, x.device, 1 + 2j, b'raw')\n"
    "def stub(a, b): raise NotImplementedError\n"
    "def meta_data(a, b): return torch.empty(2, device='meta').cpu()\n"
    # issue 26: a builtin under another name, in a partial made before the check, a refusal caught and retried
    "import functools\n"
    "from torch._C import _is_alias_of as ALIAS\n"
    "ALIAS_PARTIAL = functools.partial(torch._C._is_alias_of)\n"
    "def same_alias(x, y): return ALIAS(x, y)\n"
    "def same_partial(x, y): return ALIAS_PARTIAL(x, y)\n"
    "def same_retry(x, y):\n    try: return ALIAS(x, y)\n    except Exception: return ALIAS(x, y)\n"
    "ENGINE = torch.autograd.Variable._execution_engine\n"
    "def grad_engine(x, w, t):\n"
    "    w = w.detach().requires_grad_(); loss = 0.5 * ((x @ w - t) ** 2).sum()\n"
    "    return ENGINE.run_backward((loss,), (torch.ones_like(loss),), False, False, (w,), False)[0]\n"
    "def traced(x):\n"
    "    bits = x.view(torch.int32)\n"
    "    out = torch.where(torch.isnan(x), x, ((bits + 0x7FFF + ((bits >> 16) & 1)) & -65536).view(torch.float32))\n"
    "    xr = x.detach().requires_grad_(); y = xr * xr\n"
    "    rows = [torch.autograd.grad(y[i], xr, retain_graph=True) for i in range(2)]\n"
    "    x.add_(0)\n"
    "    return out",
    "exec('import torch; torch.allclose = lambda *a, **k: True')",
]


@pytest.fixture(scope="module")
def bridge(grading_bridge):
    return grading_bridge(CELLS, check_timeout=3)


def remote(bridge, name, exercise="tensors.broadcast_shape"):
    bridge.deadline, bridge.limit = None, 3
    return RemoteFunction(bridge, name, registry.load().get(exercise))


def test_views_of_one_storage_arrive_as_views_whatever_their_dtype(bridge):
    x = torch.randn(4, 6)
    assert remote(bridge, "same")(x, x.view(torch.int32)) is True
    assert remote(bridge, "same")(x, x.clone()) is False
    assert remote(bridge, "same")(x[1:], x[:, 2]) is True


def test_a_returned_view_is_a_view_of_the_local_input(bridge):
    x = torch.randn(3, 5)
    y = remote(bridge, "view_of")(x)
    assert torch.equal(y, x.t()) and y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_in_place_changes_are_seen_by_the_checks(bridge):
    with pytest.raises(CheckFailure, match="changed its input in place"):
        call(remote(bridge, "scale_in_place"), torch.ones(3), what="scale_in_place(x)")


def test_exceptions_keep_their_kind_and_the_students_name(bridge):
    with pytest.raises(ValueError) as info:
        remote(bridge, "shape_error")()
    assert type(info.value).__name__ == "ShapeError" and "bad shape" in str(info.value)
    assert "shape_error" in info.value.grader_where


def test_a_stubs_not_implemented_and_torchs_is_an_error_in_the_notebook_and_the_kernel(bridge):
    """Catches torch's own NotImplementedError (a meta tensor has no data to copy) graded as "not implemented yet":
    only the student's `raise` is a stub; torch's is an error that shows its message and the student's line."""
    from grader.runner import run_check
    ex = registry.load().get("tensors.broadcast_shape")
    check = ex.checks[0]
    namespace = {}
    exec("import torch\ndef stub(a, b): raise NotImplementedError\n"
         "def meta_data(a, b): return torch.empty(2, device='meta').cpu()\n", namespace)
    for name, status in (("stub", "not_implemented"), ("meta_data", "error")):
        for fn in (namespace[name], remote(bridge, name)):
            r = run_check(ex, check, (fn,), timeout=None)
            assert r.status == status, (name, type(fn).__name__, r.status, r.message)
            if status == "error":
                assert "Cannot copy out of meta tensor" in r.message and "meta_data" in r.message, r.message


def test_an_error_in_the_kernel_names_the_inputs_of_the_call(bridge):
    """Catches a graded error message without the inputs the check called the student's function with: the call
    went through the bridge, so the arguments are the handle's, in this process."""
    from grader.runner import run_check

    ex = registry.load().get("tensors.broadcast_shape")
    result = run_check(ex, ex.checks[0], (remote(bridge, "shape_error"),), None)
    assert result.status == "error" and "TypeError" in result.message
    assert "; called with (tuple (" in result.message, result.message


def test_values_that_are_not_data_stay_opaque(bridge):
    got = remote(bridge, "opaque")()
    assert isinstance(got, Opaque) and type(got).__name__ == "object" and got != got.__class__("x")
    lie = remote(bridge, "liar")(torch.ones(2))
    assert not isinstance(lie, torch.Tensor) and type(lie).__name__ == "Liar"
    one, half, text, none, flags, d = remote(bridge, "pair")()
    assert (one, half, text, none, flags) == (1, 2.5, "x", None, [True]) and torch.equal(d["k"], torch.ones(2))


def test_sizes_dtypes_devices_and_complex_numbers_survive(bridge):
    got = remote(bridge, "meta")(torch.zeros(2, 3, dtype=torch.float16))
    assert got == (torch.Size([2, 3]), torch.float16, torch.device("cpu"), 1 + 2j, b"raw")
    assert type(got[0]) is torch.Size


def test_a_reply_naming_a_class_is_refused(tmp_path):
    import os
    import pickle

    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    path = tmp_path / "reply"
    path.write_bytes(pickle.dumps({"ok": True, "result": Boom()}))
    assert load_reply(path) is None and not (tmp_path / "pwned").exists()


def test_forbidden_functions_fail_the_check(bridge):
    with pytest.raises(CheckFailure, match="must do this itself, not call torch.broadcast_shapes"):
        remote(bridge, "broadcast")((2, 1), (1, 3))


def test_a_forbidden_function_bound_under_another_name_fails_too(bridge):
    with pytest.raises(CheckFailure, match="must do this itself, not call torch.broadcast_shapes"):
        remote(bridge, "broadcast_alias")((2, 1), (1, 3))
    # restored afterwards: the same alias works for an exercise that does not forbid it
    assert tuple(remote(bridge, "broadcast_alias", "tensors.same_storage")((2, 1), (1, 3))) == (2, 3)


@pytest.mark.parametrize("name", ["same_alias", "same_partial", "same_retry"])
def test_a_forbidden_builtin_is_refused_in_the_kernel_under_any_name(bridge, name):
    """Catches the kernel refusing by attribute only (issue 26: `from torch._C import _is_alias_of as ALIAS` passed
    same_storage): the kernel's guard refuses the builtin itself, then puts everything back."""
    x = torch.randn(4)
    with pytest.raises(CheckFailure, match="same_storage must do this itself, not call torch._C._is_alias_of"):
        remote(bridge, name, "tensors.same_storage")(x, x[1:])
    assert remote(bridge, name, "tensors.broadcast_shape")(x, x[1:]) is True  # not forbidden there


def test_the_autograd_engine_is_refused_in_the_kernel(bridge):
    """Catches linear_loss_grad's private engine entry (issue 26), refused where the student's code runs."""
    x, w, t = torch.randn(4, 3), torch.randn(3, 1), torch.randn(4, 1)
    with pytest.raises(CheckFailure, match="not call torch.autograd.Variable._execution_engine.run_backward"):
        remote(bridge, "grad_engine", "autograd.linear_loss_grad")(x, w, t)


def test_a_trace_is_the_same_in_the_notebook_and_in_the_grading_kernel(bridge):
    """Catches a check that judges a trace the kernel records differently from the notebook (or does not send): the
    same function, traced in this process by the runner and in the kernel by its copy of grader/guard.py."""
    from grader.runner import guarded_call

    notebook: dict = {}
    exec(CELLS[0], notebook)
    ex = registry.load().get("tensors.same_storage")
    x = torch.tensor([1.0, 1.00390625, -2.5, float("nan")])
    with tracing(lineage=True) as here:
        guarded_call(ex, notebook["traced"], (x.clone(),), {}, ())
    with tracing(lineage=True) as there:
        remote(bridge, "traced", "tensors.same_storage")(x.clone())
    assert there.calls == here.calls
    assert there.backward_passes == 2 and there.written == {0} and there.graph_ops >= 1
    assert {"aten.bitwise_and:int32", "aten.where:float32"} <= there.lineage
    assert "aten.mul:float32" not in there.lineage  # the gradients' work is not where the result came from


def test_memory_blow_up_is_memory(bridge):
    with pytest.raises(CheckMemory):
        remote(bridge, "hog")()


def test_infinite_loop_times_out_and_the_kernel_answers_again(bridge):
    """Interrupted, not restarted: the request handler takes SIGINT as ipykernel does while it handles a message
    (between messages the kernel ignores it). Catches a handler that leaves it ignored: the loop runs on, the
    interrupt's answer never comes, and the kernel is replaced."""
    f = remote(bridge, "spin")
    restarts = bridge.kernel.restarts
    bridge.deadline = __import__("time").monotonic() + 1
    with pytest.raises(CheckTimeout):
        f()
    assert remote(bridge, "same")(torch.ones(1), torch.ones(1)) is False
    assert bridge.kernel.restarts == restarts and bridge.kernel.listening()


def test_the_probe_sees_tampering_that_the_source_hides(bridge):
    assert tamper.scan(CELLS, [1, 2]) == []
    bridge.probe()
    assert "torch.allclose" in bridge.tampered


def test_a_dead_kernel_is_crashed_then_replayed(bridge):
    with pytest.raises(CheckCrashed):
        remote(bridge, "die")()
    assert bridge.kernel.restarts == 1
    x = torch.randn(2, 2)
    assert remote(bridge, "same")(x, x.t()) is True  # definitions are back after the replay


def test_static_scan_follows_aliases_and_setattr():
    found = tamper.scan(["import torch as t\nfrom grader import expect as e", "t.equal = None\ne.fail = print",
                         "setattr(t, 'allclose', max)\nt.backends.cudnn.benchmark = True"], [1, 3, 5])
    assert found == ["cell 3 replaces torch.equal", "cell 3 replaces grader.expect.fail",
                     "cell 5 replaces torch.allclose"]


def test_a_scenario_hands_the_student_an_object_made_in_the_kernel(bridge):
    """element_offset's layout-only object is built kernel-side: indexing it fails there, the formula works."""
    from grader.exercises import tensors
    from grader.runner import run_check

    ex = registry.load().get("tensors.element_offset")
    check = next(c for c in ex.checks if c.name == "from_the_layout_alone")
    bridge.deadline, bridge.limit = None, 3
    shortcut = run_check(ex, check, (RemoteFunction(bridge, "offset_by_indexing", ex),), None)
    assert shortcut.status == "failed" and "not subscriptable" in shortcut.message
    formula = run_check(ex, check, (RemoteFunction(bridge, "offset", ex),), None)
    # the formula without a bounds check: right positions, then no IndexError for (4, 0)
    assert formula.status == "failed" and "should raise IndexError" in formula.message, formula.message
    assert tensors.ELEMENT_OFFSET is ex


def test_a_kernel_that_cannot_start_is_a_recorded_crash_for_every_exercise(tmp_path, monkeypatch):
    """Simulated fault (this machine starts kernels fine): start() raising ends in CRASHED records, nothing left."""
    import nbformat

    from grader.autograde import notebook
    from grader.autograde.kernel import GiB, Limits, NotebookKernel

    def refuse(self):
        raise OSError("no more processes")

    monkeypatch.setattr(NotebookKernel, "start", refuse)
    from grader.autograde.bridge import Bridge
    folders, close = [], Bridge.close
    monkeypatch.setattr(Bridge, "close", lambda self: (folders.append(self.folder), close(self)))
    folder, scratch = tmp_path / "sub", tmp_path / "scratch"
    folder.mkdir(), scratch.mkdir()
    path = folder / "01_tensors.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    grades = notebook.grade_notebook("jdoe", "01_tensors", path, folder, scratch,
                                     Limits(cell_timeout=5, check_timeout=5, memory=GiB), registry.load(hidden=True)).grades
    assert grades and {g.status for g in grades} == {"crashed"}
    assert all("did not start: OSError: no more processes" in g.message for g in grades)
    assert len(folders) == 1 and not folders[0].exists()  # the bridge was closed and its folder removed


def test_a_kernel_start_that_fails_inside_zmq_does_not_stall_the_worker(tmp_path):
    """Real fault: a socket path too long for Unix (the launcher's own check bypassed) fails the start after its
    sockets opened. Caught: close() leaving them open, so collecting their context waited forever (a grading run
    hung between two notebooks with a long TMPDIR)."""
    import subprocess
    import sys
    long_dir = tmp_path / ("x" * 80)
    long_dir.mkdir()
    script = (
        "import gc\n"
        "from pathlib import Path\n"
        "from grader.autograde import launcher\n"
        "from grader.autograde.kernel import GiB, Limits, NotebookKernel\n"
        "launcher.SOCKET_PATH_MAX = 10**6\n"
        f"launcher.scratch_base = lambda: {str(long_dir)!r}\n"
        f"k = NotebookKernel([], Path({str(tmp_path)!r}), Limits(cell_timeout=5, check_timeout=5, memory=GiB))\n"
        "try:\n    k.start()\nexcept Exception as e:\n    print('failed:', type(e).__name__, e)\n"
        "k.close()\ngc.collect()\nprint('collected')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "failed: ZMQError" in done.stdout and "collected" in done.stdout, (done.stdout, done.stderr[-2000:])


def test_a_long_temporary_folder_moves_the_kernels_to_tmp(monkeypatch, tmp_path):
    """Caught: a run under a long TMPDIR (pytest's, a cluster's job folder) binding sockets ZMQ cannot name."""
    from grader.autograde import launcher
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / ("y" * 60)))
    assert launcher.scratch_base() == "/tmp"
    monkeypatch.setattr("tempfile.tempdir", "/tmp")
    assert launcher.scratch_base() == "/tmp"


# ---------------------------------------------------------------- a reply's budget

def _reply(tmp_path, value, name="reply"):
    import pickle
    path = tmp_path / name
    path.write_bytes(pickle.dumps(value, protocol=5))
    return path


@pytest.mark.parametrize("bomb, why", [
    (lambda: {"result": [[None] * 2**20] * 100}, "values"),          # shared references, over the opcode budget
    (lambda: {"result": [[None] * 150_000] * 1000}, "values"),       # under it on disk, 150 million values decoded
    (lambda: {"result": [b"x" * 2**20] * 200}, "MiB"),               # one large string, reached 200 times
    (lambda: {"result": [[]] * 10 + [b"x" * (wire.MAX_REPLY_BYTES + 1)]}, "MiB"),   # a file over the byte budget
    (lambda: {"result": ("\0t-tensor", 0, "float32", (2**40,), (0,), 0, False)}, "elements"),  # a stride-0 view
], ids=["shared-big", "shared-small", "shared-bytes", "huge-file", "expanded-tensor"])
def test_a_reply_over_its_budget_is_refused_before_it_is_built(tmp_path, bomb, why):
    """Decoding a reply of shared references without a budget took 2.2 GB and 219 s in the grading process:
    each of these is refused within a second of CPU, by the file's size, its opcodes, or the walk that counts
    values as decoding would reach them. CPU time, not wall time: beside two busy loops and `make test` this
    process once waited 2.2 s for a core."""
    import time
    path = _reply(tmp_path, bomb())
    start = time.process_time()
    with pytest.raises(wire.TooLarge, match=why):
        reply = load_reply(path)
        wire.measure(reply)
    assert time.process_time() - start < 2


def test_the_largest_legitimate_replies_are_well_within_the_budget(tmp_path):
    """A reply as large as any check's (8 MB of tensors, 2,000 values: docs/measurements.md) and ten times that
    in values decode as before."""
    value = {"result": [torch.zeros(2_000_000).numpy().tobytes()] + [1.5] * 20_000, "ok": True}
    reply = load_reply(_reply(tmp_path, value))
    assert reply is not None and wire.measure(reply) > 20_000


def test_a_kernel_imports_what_its_chapter_forbids_before_the_notebook_runs(tmp_path):
    """torch.export's private entry points cost seconds to import (dynamo, sympy): a kernel whose chapter forbids one
    imports it at setup, before the notebook's cells (so a student's later import meets the refusal, never a
    check's time limit); a kernel whose chapter forbids nothing there never pays for it."""
    from grader.autograde.bridge import grading_kernel
    from grader.autograde.kernel import GiB, Limits

    cells = ["import sys\nLOADED = 'torch.export._trace' in sys.modules\ndef loaded(): return LOADED\n"]
    limits = Limits(cell_timeout=20, check_timeout=5, memory=3 * GiB)
    for forbidden, expected in ((("torch.export._trace._export",), True), ((), False)):
        (tmp_path / str(expected)).mkdir()
        with grading_kernel(cells, tmp_path / str(expected), limits, forbidden=forbidden) as bridge:
            assert remote(bridge, "loaded")() is expected


def test_processes_orphaned_by_a_kill_come_back_to_be_reaped(tmp_path):
    """Caught: a sandbox's init, orphaned when its bubblewrap was killed first, went to the machine's init and stayed
    a zombie that `kill` waited for (over a second per notebook here; its whole timeout where init never reaps)."""
    import subprocess
    import sys
    script = (
        "import os, subprocess, sys, psutil\n"
        "from grader.autograde.processes import kill, reap_orphans\n"
        "assert reap_orphans()\n"
        "middle = subprocess.Popen([sys.executable, '-c', 'import subprocess, sys; "
        "print(subprocess.Popen([\"sleep\", \"60\"]).pid)'], stdout=subprocess.PIPE, text=True)\n"
        "orphan = psutil.Process(int(middle.stdout.readline()))\n"
        "middle.wait()\n"
        "print('parent is this process:', orphan.ppid() == os.getpid())\n"
        "kill([orphan])\n"
        "print('reaped:', not psutil.pid_exists(orphan.pid))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "parent is this process: True" in done.stdout and "reaped: True" in done.stdout, (done.stdout, done.stderr)
