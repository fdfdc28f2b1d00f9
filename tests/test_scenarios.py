"""Scenarios: the same check code judges live objects in the notebook and, when grading, in a real kernel.

The data a scenario returns must be the same in both places, the kernel's copy of a scenario must be
the grader's own (installed before student code), and a notebook that patches the machinery a scenario
relies on must be noticed.
"""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from grader import registry
from grader.autograde import bridge
from grader.autograde.bridge import RemoteFunction, scenario_sources
from grader.scenario import SCENARIO_PACKAGE, Opaque, run_scenario, to_data
from grader.scenarios import common

MODULE_CELL = (
    "import torch, time\n"
    "from torch import nn\n"
    "class Stack(nn.Module):\n"
    "    def __init__(self, *layers):\n"
    "        super().__init__()\n"
    "        for i, layer in enumerate(layers):\n"
    "            self.add_module(str(i), layer)\n"
    "    def forward(self, x):\n"
    "        for layer in self.children():\n"
    "            x = layer(x)\n"
    "        return x\n"
    "class Lossy(nn.Module):  # keeps its layers in a plain list: parameters() cannot see them\n"
    "    def __init__(self, *layers):\n"
    "        super().__init__()\n"
    "        self.layers = list(layers)\n"
    "    def forward(self, x):\n"
    "        for layer in self.layers:\n"
    "            x = layer(x)\n"
    "        return x\n"
    "class Slow(nn.Module):\n"
    "    def __init__(self, *layers):\n"
    "        super().__init__()\n"
    "    def forward(self, x):\n"
    "        while True: pass\n"
    "def stub(x):\n"
    "    raise NotImplementedError\n"
)
PATCH_CELL = "import torch\n_real = torch.autograd.grad\nexec('torch.autograd.grad = lambda *a, **k: _real(*a, **k)')\n"
SPECS = [["Linear", 3, 4], ["ReLU"], ["Linear", 4, 2, {"bias": False}]]
FOR_TESTS = Path(__file__).with_name("scenarios_for_tests.py")


@pytest.fixture(scope="module")
def for_tests():
    """tests/scenarios_for_tests.py as the scenario module grader.scenarios.for_tests: imported here, and
    installed with the grader's own in every grading kernel started while this module's tests run."""
    name = f"{SCENARIO_PACKAGE}.for_tests"
    spec = importlib.util.spec_from_file_location(name, FOR_TESTS)
    module = importlib.util.module_from_spec(spec)
    grader_sources = bridge.scenario_sources
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        patch.setattr(bridge, "scenario_sources",
                      lambda: {**grader_sources(), "for_tests": FOR_TESTS.read_text(encoding="utf-8")})
        yield module


@pytest.fixture(scope="module")
def kernel_bridge(grading_bridge, for_tests):
    return grading_bridge([MODULE_CELL, PATCH_CELL])


def remote(bridge, name, exercise="tensors.same_storage"):
    bridge.deadline, bridge.limit = None, 5
    return RemoteFunction(bridge, name, registry.load().get(exercise))


def local_namespace() -> dict:
    ns: dict = {}
    exec(MODULE_CELL, ns)
    return ns


def test_a_scenario_gives_the_same_data_in_the_notebook_and_in_the_kernel(kernel_bridge, for_tests):
    x = torch.randn(5, 3)
    here = run_scenario(for_tests.forward_and_describe, local_namespace()["Stack"], SPECS, x, 7)
    there = run_scenario(for_tests.forward_and_describe, remote(kernel_bridge, "Stack"), SPECS, x, 7)
    assert here.keys() == there.keys()
    assert here["parameters"] == there["parameters"] == [("0.weight", (4, 3)), ("0.bias", (4,)), ("2.weight", (2, 4))]
    assert torch.equal(here["output"], there["output"])
    for name in here["grads"]:
        assert torch.equal(here["grads"][name], there["grads"][name])
    assert list(there["state_dict"]) == ["0.weight", "0.bias", "2.weight"]


def test_a_module_that_hides_its_parameters_is_seen_as_such(kernel_bridge, for_tests):
    there = run_scenario(for_tests.forward_and_describe, remote(kernel_bridge, "Lossy"), SPECS, torch.randn(2, 3), 0)
    assert there["parameters"] == [] and there["state_dict"] == {}


def test_objects_that_are_not_data_come_back_opaque(kernel_bridge, for_tests):
    got = run_scenario(for_tests.call, remote(kernel_bridge, "Stack"))
    assert isinstance(got, Opaque) and type(got).__name__ == "Stack"
    assert isinstance(to_data(torch.nn.Linear(2, 2)), Opaque)


def test_a_stub_raises_not_implemented_through_a_scenario(kernel_bridge, for_tests):
    with pytest.raises(NotImplementedError):
        run_scenario(for_tests.call, remote(kernel_bridge, "stub"), 1)


def test_a_hanging_forward_times_out_and_the_kernel_recovers(kernel_bridge, for_tests):
    from grader.runner import CheckTimeout
    import time

    kernel_bridge.limit, kernel_bridge.deadline = 2, time.monotonic() + 2
    slow = RemoteFunction(kernel_bridge, "Slow", registry.load().get("tensors.same_storage"))
    with pytest.raises(CheckTimeout):
        run_scenario(for_tests.forward_and_describe, slow, SPECS, torch.randn(2, 3), 0)
    assert isinstance(run_scenario(for_tests.call, remote(kernel_bridge, "Stack")), Opaque)  # the kernel answers again


def test_patching_autograd_in_the_notebook_is_noticed(kernel_bridge):
    kernel_bridge.probe()
    assert "torch.autograd.grad" in kernel_bridge.tampered


def test_scenario_modules_import_nothing_but_torch_numpy_and_the_standard_library():
    allowed_roots = {"torch", "numpy", "math", "os", "io", "gc", "sys", "random", "tempfile", "pathlib", "pickle",
                     "time", "signal", "socket", "subprocess", "threading", "contextlib", "itertools", "functools",
                     "collections", "typing", "copy", "hashlib", "zlib", "struct", "importlib", "types", "shutil",
                     "resource", "weakref", "datetime", "statistics", "mmap", "tracemalloc", "ctypes", "re"}
    for name, source in scenario_sources().items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                roots = set() if node.level else {(node.module or "").split(".")[0]}
            else:
                continue
            assert roots <= allowed_roots, f"scenarios/{name}.py imports {roots - allowed_roots}"


def test_only_scenario_functions_can_be_run():
    with pytest.raises(ValueError, match="not a scenario"):
        run_scenario(len, [1])
    assert Path(common.__file__).parent.name == "scenarios"


def test_to_data_is_the_wire_round_trip():
    """A notebook's run_scenario delivers what grading's bridge delivers (one wire, grader/wire.py): views of
    one storage stay views of one copy, sizes, dtypes, devices and complex numbers survive, a live object or
    data nested deeper than MAX_DEPTH becomes an Opaque named like its class."""
    from grader.wire import MAX_DEPTH
    base = torch.arange(6.0, requires_grad=True)
    x = {"a": base, "b": base.detach()[1:4], "size": torch.Size([2, 3]), "dt": torch.bfloat16,
         "dev": torch.device("cpu"), "z": 1 + 2j, "mod": torch.nn.ReLU()}
    y = to_data(x)
    assert y["a"].requires_grad and torch.equal(y["a"].detach(), base.detach())
    assert y["a"].untyped_storage().data_ptr() == y["b"].untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert y["b"].storage_offset() == 1 and y["size"] == torch.Size([2, 3]) and y["dt"] is torch.bfloat16
    assert y["dev"] == torch.device("cpu") and y["z"] == 1 + 2j
    assert isinstance(y["mod"], Opaque) and type(y["mod"]).__name__ == "ReLU" and y["mod"] != x["mod"]
    deep: list = [1]
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    got, levels = to_data(deep), 0
    while type(got) is list:
        got, levels = got[0], levels + 1
    assert isinstance(got, Opaque) and levels == MAX_DEPTH
