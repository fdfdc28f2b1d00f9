"""The bridge between the grading process and a real student kernel: only data crosses, and it keeps its meaning."""
from __future__ import annotations

import pytest
import torch

from grader import registry, wire
from grader.autograde import tamper
from grader.autograde.bridge import RemoteFunction, load_reply
from grader.expect import CheckFailure, call
from grader.runner import CheckCrashed, CheckMemory, CheckTimeout
from grader.scenario import Opaque

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
    "def meta(x): return (x.shape, x.dtype, x.device, 1 + 2j, b'raw')",
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


def test_memory_blow_up_is_memory(bridge):
    with pytest.raises(CheckMemory):
        remote(bridge, "hog")()


def test_infinite_loop_times_out_and_the_kernel_answers_again(bridge):
    f = remote(bridge, "spin")
    bridge.deadline = __import__("time").monotonic() + 1
    with pytest.raises(CheckTimeout):
        f()
    assert remote(bridge, "same")(torch.ones(1), torch.ones(1)) is False


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
    each of these is refused within a second, by the file's size, its opcodes, or the walk that counts values
    as decoding would reach them."""
    import time
    path = _reply(tmp_path, bomb())
    start = time.perf_counter()
    with pytest.raises(wire.TooLarge, match=why):
        reply = load_reply(path)
        wire.measure(reply)
    assert time.perf_counter() - start < 2


def test_the_largest_legitimate_replies_are_well_within_the_budget(tmp_path):
    """A reply as large as any check's (8 MB of tensors, 2,000 values: docs/measurements.md) and ten times that
    in values decode as before."""
    value = {"result": [torch.zeros(2_000_000).numpy().tobytes()] + [1.5] * 20_000, "ok": True}
    reply = load_reply(_reply(tmp_path, value))
    assert reply is not None and wire.measure(reply) > 20_000
