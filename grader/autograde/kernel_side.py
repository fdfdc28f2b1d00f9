"""The code that runs inside the student's kernel when grading; its text is sent with every request.

It is never imported there (the student's code could have replaced an imported module), and it
decides nothing: it calls the student's function on inputs the grader wrote and hands back plain
data (tensors, numbers, strings, containers) for the grader to judge in its own process.
It imports nothing from `grader`: what crosses (packing, the traceback filter) is the kernel's copy of
`grader/wire.py`, and what refuses forbidden calls and traces the student's call is its copy of `grader/guard.py`,
both installed from the grader's text just before this module.
"""
import asyncio
import gc
import os
import pickle
import signal
import sys
import types

import torch

MODULE = "__grader_bridge__"     # this code, compiled once per kernel
SNAPSHOT = "__grader_snapshot__"  # a module in sys.modules holding the objects as they were before student code
BRIDGE_FILE = "<grader-bridge>"
SCENARIOS = "__grader_scenarios__"  # the package the scenario modules are installed under (see setup)
WIRE = "__grader_wire__"          # grader/wire.py's text, compiled into the kernel just before this module
WIRE_FILE = "<grader-wire>"
GUARD = "__grader_guard__"        # grader/guard.py's text, compiled into the kernel before the wire
GUARD_FILE = "<grader-guard>"
# What set-up imports before the notebook runs (the public grader, whose checks bind torch's own functions then);
# the kernel template imports them once for every kernel it forks (template_main.py).
IMPORTS = ("torch", "numpy", "grader", "grader.notebook", "grader.runner", "grader.expect", "grader.registry",
           "grader.results", "grader.feedback", "grader.exercises", "grader.scenario")
_LIB_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) for m in (torch, os))

# In the kernel, the copy the bridge installed; in the grading process (which reads this module only for its
# names and its text) the package's own.
_wire = sys.modules[WIRE] if WIRE in sys.modules else __import__("grader.wire", fromlist=["_"])
pack, unpack, storage_list, storages_from = _wire.pack, _wire.unpack, _wire.storage_list, _wire.storages_from
_guard = sys.modules[GUARD] if GUARD in sys.modules else __import__("grader.guard", fromlist=["_"])
_resolve = _guard.resolve


def _shell():
    """The kernel's IPython shell, from any caller (a request handler does not see the user's namespace)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _watched(protected):
    """Everything tampering would change: protected names, and every attribute of every grader module."""
    found = {name: _resolve(name) for name in protected}
    for modname, mod in sorted(sys.modules.items()):
        ours = modname in ("grader", SCENARIOS, WIRE, GUARD) or modname.startswith(("grader.", SCENARIOS + "."))
        if ours and mod is not None:
            for attr, value in list(vars(mod).items()):
                if not attr.startswith("__"):
                    found[f"{modname}.{attr}"] = value
    shell = _shell()
    if shell is not None:  # instance attributes hide the class's methods (ipykernel sets _showtraceback itself)
        for attr in _wire.SHELL_ATTRS:
            found[f"get_ipython().{attr}"] = vars(shell).get(attr)
    registry = sys.modules.get("grader.registry")
    for ex in (registry.load().exercises if registry is not None else ()):
        found[f"grader exercise {ex.id}"] = tuple(c.fn for c in ex.public_checks())  # hidden ones may load later
    return found


def setup(request):
    """Import the grader and torch, and the modules of the names this chapter's checks forbid, with the notebook's
    folder off sys.path, and remember them as they are."""
    here = [p for p in sys.path if p in ("", ".", os.getcwd())]
    sys.path[:] = [p for p in sys.path if p not in here]
    try:
        for name in IMPORTS:
            __import__(name)
        # The template imported the grader before this kernel's IPython existed, so `%%needs` is registered now
        sys.modules["grader.needs"].register()
        for dotted in request.get("forbidden", ()):
            _resolve(dotted)  # imports what holds it now, not inside a check's time (guard.resolve)
    finally:
        sys.path[:0] = here
    # Scenario modules, from the grader's own text, as submodules of a private package: their relative
    # imports (`from . import common`) resolve to each other, never to files the notebook could reach.
    package = types.ModuleType(SCENARIOS)
    package.__path__ = []
    sys.modules[SCENARIOS] = package
    scenarios = request.get("scenarios") or {}
    for name in sorted(scenarios, key=lambda n: (n != "common", n)):
        mod = types.ModuleType(f"{SCENARIOS}.{name}")
        mod.__file__, mod.__package__ = f"<grader-scenario-{name}>", SCENARIOS
        sys.modules[mod.__name__] = mod
        exec(compile(scenarios[name], mod.__file__, "exec"), mod.__dict__)
        setattr(package, name, mod)
    snap = types.ModuleType(SNAPSHOT)
    snap.objects = _watched(request["protected"])
    snap.protected = list(request["protected"])
    sys.modules[SNAPSHOT] = snap
    return {}


def probe():
    """Names whose object is no longer the one setup saw, plus traceback-display overrides."""
    snap = sys.modules.get(SNAPSHOT)
    if snap is None:
        return ["the grader's record of the original objects (deleted)"]
    now = _watched(snap.protected)
    changed = []
    for name, obj in snap.objects.items():
        if name.startswith("grader exercise"):
            if now.get(name) != obj:
                changed.append(name)
        elif now.get(name, changed) is not obj:
            changed.append(name)
    shell = _shell()
    if shell is not None:
        if getattr(shell, "custom_exceptions", ()):
            changed.append("get_ipython().set_custom_exc")
    return sorted(set(changed))


def _namespace():
    """The notebook's variables."""
    shell = _shell()
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def names(request):
    ns = _namespace()
    kinds = {}
    for name in request["names"]:
        if name not in ns:
            kinds[name] = "missing"
        else:
            kinds[name] = "callable" if callable(ns[name]) else type(ns[name]).__name__
    return kinds


class Forbidden(Exception):
    pass


_GRADER_FILES = (BRIDGE_FILE, WIRE_FILE, GUARD_FILE, "<forbidden>", "<grader-scenario")


def _student_frames(tb):
    return _wire.student_frames(tb, _LIB_DIRS, _GRADER_FILES)


def _error(e):
    text = ""
    try:
        text = str(e)[:500]
    except BaseException:
        pass
    oom = isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and any(
        s in text for s in ("can't allocate memory", "out of memory", "not enough memory")))
    # The kernel's file space (ENOSPC, or EFBIG past the file-size limit) and its process limit (fork's EAGAIN,
    # a thread that cannot start): limits of the grading kernel, reported as such, not as the student's error.
    disk = isinstance(e, OSError) and e.errno in (27, 28)
    processes = (isinstance(e, BlockingIOError) and e.errno == 11
                 or isinstance(e, RuntimeError) and "can't start new thread" in text)
    mro = [c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"]
    if (isinstance(e, NotImplementedError) and not getattr(e, "grader_stub", False)
            and not _wire.raised_by_own_code(e.__traceback__, _LIB_DIRS, _GRADER_FILES)):
        mro = [c.__name__ for c in RuntimeError.__mro__]  # torch's NotImplementedError is an error, not a stub
    return {"mro": mro,
            "name": type(e).__name__, "message": text, "where": _student_frames(e.__traceback__),
            "oom": oom, "disk": disk, "processes": processes,
            "forbidden": e.args[0] if isinstance(e, Forbidden) else ""}


def _student_object(ns, found=None):
    """Resolve a name to the notebook's object; a missing one (e.g. lost with a skipped cell) raises when used.
    Each object resolved is added to `found` (what the guard searches for forbidden objects the student holds)."""
    def resolve(name):
        if name in ns:
            if found is not None:
                found.append(ns[name])
            return ns[name]

        def missing(*a, **k):
            raise NameError(f"name {name!r} is not defined")
        missing.__name__ = name
        return missing
    return resolve


def _run(request, fn, args, kwargs, collect=False, roots=None):
    """fn(*args, **kwargs) under the exercise's guard (its forbidden calls refused, the trace recorded when the check
    asked for one) with torch seeded; the reply. A refusal the student's code caught still ends the call as refused.

    With `collect`, the objects the call made (in reference cycles too) die before it returns, so a
    misbehaving `__del__` runs inside this call's time and is charged to this check."""
    token = request["token"]
    guard = _guard.Guard(request["forbid"], Forbidden, (fn,) if roots is None else roots, request.get("trace"),
                         (args, kwargs))
    opaque, storages = {}, {}
    result = failed = trace = None
    try:
        with torch.random.fork_rng(devices=[]):
            _wire.seed(request["seed"])
            with guard:
                result = fn(*args, **kwargs)
    except BaseException as e:  # the student's exception is data for the grader, whatever it is
        failed = e
    try:
        if guard.refusals:
            failed = Forbidden(guard.refusals[0])
        trace = guard.data(args, result)
        if failed is not None:
            raise failed
        reply = {"ok": True, "result": pack(result, token, storages, opaque)}
        del result
        if collect:
            gc.collect(1)  # the young generations: what this call made
    except BaseException as e:
        reply = {"ok": False, "error": _error(e)}
    reply["trace"] = trace
    reply["args"] = [pack(a, token, storages) if type(a) in (torch.Tensor, torch.nn.Parameter) else None
                     for a in args]
    reply["opaque"], reply["storages"] = opaque, storage_list(storages)
    return reply


def call(request):
    """Call the student's function on the request's arguments, forbidding what the exercise forbids."""
    fn = _student_object(_namespace())(request["name"])
    args, kwargs = unpack((request["args"], request["kwargs"]), request["token"], storages_from(request["storages"]))
    return _run(request, fn, args, kwargs)


def scenario(request):
    """Run a scenario (a function of a scenario module installed at setup) on the notebook's objects."""
    token = request["token"]
    students = []
    args, kwargs = unpack((request["args"], request["kwargs"]), token, storages_from(request["storages"]),
                          _student_object(_namespace(), students))
    module = sys.modules.get(f"{SCENARIOS}.{request['module']}")
    fn = getattr(module, request["function"], None) if module is not None else None
    if fn is None:
        raise RuntimeError(f"the grader's scenario {request['module']}.{request['function']} is not installed")
    reply = _run(request, fn, args, kwargs, collect=True, roots=students)
    reply["args"] = []
    return reply


def listen(request):
    """Answer the grader's requests from now on, each a line on one FIFO, from the kernel's event loop between
    its messages: no comm message, status messages or stream flush per request (a round trip costs a quarter).

    The grader waits on another FIFO; each finished request writes its number there."""
    replies = os.open(request["fifo"], os.O_WRONLY)
    # Read and write: the kernel holds a writer itself, so the FIFO never reads as closed (epoll would then wake
    # the loop for ever).
    requests = os.open(request["requests"], os.O_RDWR | os.O_NONBLOCK)
    pending = [b""]

    def on_readable():
        try:
            pending[0] += os.read(requests, 65536)
        except BlockingIOError:
            return
        *lines, pending[0] = pending[0].split(b"\n")
        for line in lines:
            fields = line.split(b"\0")
            if len(fields) != 4:
                continue  # not the grader's: it writes four fields
            n, op, req, resp = (os.fsdecode(f) for f in fields)
            # As while ipykernel handles a message: SIGINT (the grader's interrupt on a timeout) raises
            # KeyboardInterrupt here; between messages the kernel ignores it.
            saved = signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                serve(op, req, resp)
            except BaseException:  # no reply file: the grader reports that the kernel wrote no readable reply
                pass
            finally:
                signal.signal(signal.SIGINT, saved)
                os.write(replies, f"{n}\n".encode())

    asyncio.get_running_loop().add_reader(requests, on_readable)
    return {}


def serve(op, request_path, response_path):
    """Read a request, run `op`, and write the reply (setup and probe say what was tampered with)."""
    if request_path:
        with open(request_path, "rb") as f:
            request = pickle.load(f)  # written by the grader
    else:
        request = {}
    ops = {"setup": setup, "names": names, "call": call, "scenario": scenario, "listen": listen}
    reply = ops[op](request) if op != "probe" else {}
    reply = dict(reply)
    reply["tampered"] = probe() if op in ("setup", "probe") else []
    try:
        data = pickle.dumps(reply, protocol=5)
    except BaseException as e:  # a result that cannot be sent is the student's problem, reported as data
        data = pickle.dumps({"ok": False, "error": _error(e), "args": [None] * len(request.get("args", ())),
                             "opaque": {}, "storages": [], "tampered": reply["tampered"]}, protocol=5)
    with open(response_path, "wb") as f:
        f.write(data)
