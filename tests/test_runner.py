"""The runner turns whatever a student's code does into a status, with seeded, isolated inputs."""
import random

import numpy as np
import pytest
import torch

import grader
from grader import registry
from grader.expect import expect
from grader.feedback import render_html, render_text
from grader.runner import run_exercise, run_namespace

EX = registry.exercise("testing.double", points=4)


@EX.check
def doubles_small(double):
    """doubles a small tensor"""
    x = torch.randn(3)
    expect(torch.equal(double(x), 2 * x), "double(x) should be 2 * x")


@EX.check
def doubles_ints(double):
    """doubles an int"""
    expect(double(21) == 42, "double(21) should be 42")


@EX.hidden
def secret(double):
    """a hidden case"""
    expect(double(-7) == -14, "double(-7) returned something other than -14 (SECRET)")


SEEN = registry.exercise("testing.seen", points=1, needs=("f",))


@SEEN.check
def records(f):
    """records the inputs it is given"""
    f(torch.randn(4))


def statuses(result):
    return [c.status for c in result.checks]


def test_correct_answer_passes_with_full_points():
    r = run_exercise("testing.double", lambda x: x * 2, hidden=True)
    assert r.status == "passed" and r.score == 4 and statuses(r) == ["passed"] * 3


def test_stub_is_not_implemented():
    def double(x):
        raise NotImplementedError

    r = run_exercise("testing.double", double, hidden=True)
    assert r.status == "not_implemented" and r.score == 0
    assert "not implemented yet" in render_text(r) and "Traceback" not in render_text(r)


def test_partial_credit_and_first_problem():
    r = run_exercise("testing.double", lambda x: x * 2 if not isinstance(x, int) or x > 0 else 0, hidden=True)
    assert statuses(r) == ["passed", "passed", "failed"]
    assert r.status == "failed" and r.score == pytest.approx(4 * 2 / 3, abs=0.01)


def test_hidden_message_never_shown():
    r = run_exercise("testing.double", lambda x: x * 2 if not isinstance(x, int) or x > 0 else 0, hidden=True)
    for text in (render_text(r), render_html(r), r.message):
        assert "SECRET" not in text and "-14" not in text
    assert "SECRET" in r.checks[2].message  # kept for the grader's own records


def test_public_run_skips_hidden():
    r = run_exercise("testing.double", lambda x: x * 2)
    assert [c.name for c in r.checks] == ["doubles_small", "doubles_ints"]


def test_student_exception_shows_last_frames_without_paths():
    def helper(x):
        return x.no_such_method()

    def double(x):
        return helper(x)

    r = run_exercise("testing.double", double)
    msg = r.checks[0].message
    assert r.status == "error" and msg.startswith("AttributeError")
    assert "in helper" in msg and "x.no_such_method()" in msg
    assert "/" not in msg.split("(", 1)[1]  # no file paths


def test_an_error_names_the_inputs_the_students_code_was_called_with():
    """Catches an error message that says what the code raised but not on what, while a failed value says both."""
    def double(x):
        y = x * 2
        return y.no_such_method()

    r = run_exercise("testing.double", double)
    first = r.checks[0].message
    assert r.status == "error" and "AttributeError" in first
    assert first.endswith("; called with (float32 tensor of shape (3,))"), first

    def double_or_not(x):  # returns, then the check's own comparison fails: no call of the student's is running
        return "two"
    r = run_exercise("testing.double", double_or_not)
    assert "called with" not in " ".join(c.message for c in r.checks)


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), RecursionError("deep"), MemoryError()])
def test_base_exceptions_become_errors(exc):
    def double(x):
        raise exc

    r = run_exercise("testing.double", double)
    assert r.status == "error" and statuses(r) == ["error", "error"]


def test_infinite_loop_times_out_and_other_checks_still_run():
    def double(x):
        while isinstance(x, int):
            pass
        return 2 * x

    r = run_exercise("testing.double", double, timeout=0.5)
    assert statuses(r) == ["passed", "timeout"] and r.status == "timeout"


def test_timeout_is_not_swallowed_by_student_except():
    def double(x):
        while True:
            try:
                while True:
                    pass
            except Exception:
                continue

    r = run_exercise("testing.double", double, timeout=0.3)
    assert statuses(r) == ["timeout", "timeout"]


def test_same_inputs_every_time_and_student_rng_untouched():
    seen = []
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)
    state = torch.get_rng_state()
    py, npy = random.random, np.random.rand
    for _ in range(2):
        run_exercise("testing.seen", lambda x: seen.append(x.clone()))
    assert torch.equal(seen[0], seen[1])
    assert torch.equal(torch.get_rng_state(), state)
    random.seed(5), np.random.seed(7)
    assert (py(), npy()) == (random.seed(5) or random.random(), np.random.seed(7) or np.random.rand())


def test_student_global_settings_restored():
    torch.set_default_dtype(torch.float64)
    try:
        run_exercise("testing.seen", lambda x: None)
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        run_exercise("testing.seen", lambda x: None)
        assert not torch.is_grad_enabled()


def test_wrong_number_of_objects_is_an_error_not_a_crash():
    r = run_exercise("testing.double")
    assert r.status == "error" and "double" in r.message


def test_check_never_raises(capsys):
    grader.check("no_such.exercise", lambda: None)
    grader.check("testing.double", lambda x: 1 / 0)
    out = capsys.readouterr().out
    assert "could not run the checks" in out and "ZeroDivisionError" in out


def test_run_namespace_reports_missing_names():
    results = run_namespace({"double": lambda x: 2 * x}, chapter="testing")
    by_id = {r.exercise: r for r in results}
    assert by_id["testing.double"].status == "passed"
    assert by_id["testing.seen"].status == "missing" and "f" in by_id["testing.seen"].message


def test_html_is_escaped_and_deterministic():
    def double(x):
        raise ValueError("<script>alert(1)</script>")

    a = render_html(run_exercise("testing.double", double))
    b = render_html(run_exercise("testing.double", double))
    assert a == b and "<script>" not in a and "&lt;script&gt;" in a


def test_registry_rejects_bad_declarations():
    with pytest.raises(ValueError):
        registry.exercise("no_dot", points=1)
    with pytest.raises(ValueError):
        registry.exercise("testing.double", points=1)
    with pytest.raises(KeyError, match="known"):
        registry.load().get("testing.nope")


@pytest.mark.parametrize("forbid, why", [(("broadcast_shapes",), "not a dotted name"),
                                         (("torch.broadcast shapes",), "not a dotted name"),
                                         ("torch.sum", "the string"),
                                         (("no_such_module_anywhere.f",), "not installed")],
                         ids=["undotted", "not_an_identifier", "a_string", "unknown_module"])
def test_a_forbid_entry_that_names_nothing_is_an_error_at_registration(forbid, why):
    """Catches a misspelled forbid entry that would refuse nothing, silently (issue 26: fail loudly); a function this
    torch lacks is still accepted (and skipped when checking: it cannot be called)."""
    with pytest.raises(ValueError, match=why):
        registry.exercise("testing.bad_forbid", points=1, forbid=forbid)
    assert "testing.bad_forbid" not in [e.id for e in registry.load().exercises]


def test_a_forbidden_function_this_torch_lacks_is_accepted_and_skipped():
    ex = registry.exercise("testing.lacks", points=1, needs=("f",), forbid=("torch._no_such_helper_in_any_release",))
    try:
        ex.check(lambda f: expect(f() == 1, "f() should be 1"))
        assert run_exercise("testing.lacks", lambda: 1).status == "passed"
    finally:
        registry._DECLARED.pop("testing.lacks")  # test_every_forbidden_name_exists holds the course to the pin


def test_assert_all_pass_refuses_a_chapter_without_exercises():
    """Catches a solution's last cell that passes with no check run: a misspelled chapter key, or a kernel that
    imported another grader (seen when a chapter was added by the README's recipe)."""
    from grader.runner import assert_all_pass

    with pytest.raises(AssertionError, match="chapter 'no_such_chapter' has no exercise"):
        assert_all_pass({}, "no_such_chapter")
    with pytest.raises(AssertionError, match="checks that fail on the solutions"):  # a chapter with exercises runs
        assert_all_pass({}, "testing")


def test_a_destructor_that_hangs_ends_as_a_timeout():
    """Python ignores exceptions raised in __del__: the alarm must repeat, and the check still time out."""
    import time as _time

    from grader import registry
    from grader.runner import run_check

    class Sticky:
        def __del__(self):
            while True:
                _time.sleep(0.01)

    def hangs_in_del():
        s = Sticky()
        del s

    ex = registry.load().get("tensors.same_storage")
    check = registry.Check("x", "a destructor that never returns", lambda fn: fn(), False, 1.0, None)
    start = _time.monotonic()
    r = run_check(ex, check, (hangs_in_del,), timeout=0.5)
    assert r.status == "timeout" and _time.monotonic() - start < 5


FORBIDS = registry.exercise("testing.forbids", points=1, needs=("f",),
                            forbid=("torch.broadcast_shapes", "torch.Tensor.bfloat16"))


@FORBIDS.check
def runs_f(f):
    """calls f"""
    f()


def test_forbidden_functions_are_refused_under_every_name_and_restored_after():
    """Replacing torch.broadcast_shapes misses a name bound before the check; its swapped code catches that too."""
    from torch import broadcast_shapes as alias  # what `from torch import broadcast_shapes` in a notebook binds

    original_code = torch.broadcast_shapes.__code__
    for f in (lambda: torch.broadcast_shapes((2,), (1,)), lambda: alias((2,), (1,)),
              lambda: torch.ones(2).bfloat16()):
        r = run_exercise("testing.forbids", f)
        assert r.status == "failed" and "must do this itself, not call torch." in r.checks[0].message
    assert torch.broadcast_shapes.__code__ is original_code and alias((2,), (1,)) == torch.Size([2])
    assert "bfloat16" not in torch.Tensor.__dict__  # inherited from TensorBase: no copy left on the subclass
    assert torch.ones(1).bfloat16().dtype == torch.bfloat16


def test_every_forbidden_name_exists():
    """A forbid entry that names nothing would make every call of that exercise fail in the grading kernel (found as
    the guard finds it: importing the submodules on its path, as a grading kernel's setup does)."""
    from grader import guard

    for ex in registry.load(hidden=True).exercises:
        for dotted in ex.forbid:
            owner_path, attr = dotted.rsplit(".", 1)
            owner = guard.resolve(owner_path)
            assert owner is not None and hasattr(owner, attr), f"{ex.id} forbids {dotted}, which does not exist"


def _inputs_seen(salt: str) -> tuple[list, list]:
    """What same_storage's public and hidden checks called it with, under the grading run's secret `salt`."""
    seen: dict[bool, list] = {False: [], True: []}
    ex = registry.load(hidden=True).get("tensors.same_storage")
    from grader.runner import run_check
    for check in ex.checks:
        def recording(a, b, hidden=check.hidden):
            seen[hidden].append((tuple(a.shape), a.flatten()[:3].tolist()))
            return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        run_check(ex, check, (recording,), None, salt)
    return seen[False], seen[True]


def test_each_grading_run_draws_new_hidden_inputs_and_the_same_public_ones():
    """Caught: hidden inputs fixed for ever, which a student resubmitting many times maps. Public checks keep
    their seeds (the notebook shows what grading checks); a run's secret changes the hidden ones, and the same
    secret replays them."""
    public_a, hidden_a = _inputs_seen("run-a")
    public_b, hidden_b = _inputs_seen("run-b")
    assert public_a == public_b == _inputs_seen("")[0]
    assert hidden_a != hidden_b
    assert _inputs_seen("run-a")[1] == hidden_a


def test_the_seed_before_each_call_is_torch_manual_seed_without_its_cost(monkeypatch):
    """wire.seed draws what torch.manual_seed does on the CPU, but records no stack for a GPU not started (torch's
    lazy CUDA, XPU and MTIA seeding each formatted one: milliseconds at each of a notebook's hundreds of calls)."""
    import traceback

    from grader import wire

    torch.manual_seed(7)
    want = torch.rand(5), torch.randn(3, 2)
    monkeypatch.setattr(traceback, "format_stack", lambda *a, **k: pytest.fail("a stack was formatted"))
    wire.seed(7)
    got = torch.rand(5), torch.randn(3, 2)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
