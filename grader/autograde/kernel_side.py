"""The code that runs inside the student's kernel when grading; its text is sent with every request.

It is never imported there (the student's code could have replaced an imported module), and it
decides nothing: it calls the student's function on inputs the grader wrote and hands back plain
data (tensors, numbers, strings, containers) for the grader to judge in its own process.
It imports nothing from `grader`, and runs in a fresh namespace each time.
"""
import gc
import linecache
import os
import pickle
import sys
import traceback
import types

import torch

MODULE = "__grader_bridge__"     # this code, compiled once per kernel
SNAPSHOT = "__grader_snapshot__"  # a module in sys.modules holding the objects as they were before student code
BRIDGE_FILE = "<grader-bridge>"
SCENARIOS = "__grader_scenarios__"  # the package the scenario modules are installed under (see setup)
_PLAIN = (type(None), bool, int, float, str, bytes)  # what goes into the pickle as itself
_LIB_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__)) for m in (torch, os))


def _resolve(dotted):
    """The object at a dotted path, importing its top module; None when it does not exist."""
    parts = dotted.split(".")
    try:
        obj = __import__(parts[0])
        for part in parts[1:]:
            obj = getattr(obj, part)
    except Exception:
        return None
    return obj


def _shell():
    """The kernel's IPython shell, from any caller (a comm handler does not see the user's namespace)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _watched(protected):
    """Everything tampering would change: protected names, and every attribute of every grader module."""
    found = {name: _resolve(name) for name in protected}
    for modname, mod in sorted(sys.modules.items()):
        ours = modname in ("grader", SCENARIOS) or modname.startswith(("grader.", SCENARIOS + "."))
        if ours and mod is not None:
            for attr, value in list(vars(mod).items()):
                if not attr.startswith("__"):
                    found[f"{modname}.{attr}"] = value
    shell = _shell()
    if shell is not None:  # instance attributes hide the class's methods (ipykernel sets _showtraceback itself)
        for attr in ("showtraceback", "_showtraceback", "showsyntaxerror"):
            found[f"get_ipython().{attr}"] = vars(shell).get(attr)
    registry = sys.modules.get("grader.registry")
    for ex_id, ex in (getattr(registry, "_EXERCISES", None) or {}).items():
        found[f"grader exercise {ex_id}"] = tuple(c.fn for c in ex.checks if not c.hidden)  # hidden ones may load later
    return found


def setup(request):
    """Import the grader and torch with the notebook's folder off sys.path, and remember them as they are."""
    here = [p for p in sys.path if p in ("", ".", os.getcwd())]
    sys.path[:] = [p for p in sys.path if p not in here]
    try:
        for name in request["imports"]:
            __import__(name)
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


def pack(x, token, storages, opaque=None, depth=0):
    """Plain data as is; a tensor as a marker naming its storage (so views of one storage stay views of it,
    whatever their dtypes); sizes, dtypes, devices and complex numbers as markers; anything else as a
    token standing for an opaque object. The result pickles with builtins only: no class is ever named."""
    t = type(x)
    if t in _PLAIN:
        return x
    if t is torch.Size:
        return (token + "size", tuple(int(v) for v in x))
    if t is torch.dtype:
        return (token + "dtype", str(x).removeprefix("torch."))
    if t is torch.device:
        return (token + "device", str(x))
    if t is complex:
        return (token + "complex", x.real, x.imag)
    if t in (torch.Tensor, torch.nn.Parameter) and x.layout == torch.strided and x.device.type == "cpu":
        storage = x.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in storages:
            storages[key] = (len(storages), torch.empty(0, dtype=torch.uint8).set_(storage))
        return (token + "tensor", storages[key][0], str(x.dtype).removeprefix("torch."), tuple(x.shape),
                tuple(x.stride()), x.storage_offset(), bool(x.requires_grad))
    if depth < 8 and t in (tuple, list):
        return t(pack(v, token, storages, opaque, depth + 1) for v in x)
    if depth < 8 and t is dict and all(type(k) in (str, int) for k in x):
        return {k: pack(v, token, storages, opaque, depth + 1) for k, v in x.items()}
    if opaque is None:
        deep = " nested more than 8 levels deep" if t in (tuple, list, dict) else ""
        raise TypeError(f"cannot send a {t.__name__}{deep} to the kernel: only plain data crosses (tensors, numbers, "
                        "strings, sizes, dtypes, devices, and tuples, lists and dicts of them)")
    key = f"{token}{len(opaque)}"
    try:
        text = repr(x)[:200]
    except BaseException:
        text = f"<{t.__name__}>"
    opaque[key] = (t.__module__ if t.__module__ != "builtins" else "", t.__qualname__, text)
    return key


def storage_list(storages):
    """The storages pack met, in order, as bytes."""
    return [u8.numpy().tobytes() for _, u8 in sorted(storages.values(), key=lambda v: v[0])]


def storages_from(blobs):
    """One uint8 tensor per storage, for unpack to make every tensor of that storage a view of it."""
    return [torch.frombuffer(bytearray(b), dtype=torch.uint8) if b else torch.empty(0, dtype=torch.uint8)
            for b in blobs]


def unpack(x, token, storages, student=None):
    """The inverse of pack (opaque tokens stay strings for the receiver to handle); `student(name)` resolves
    a reference to one of the notebook's objects (a scenario's argument)."""
    t = type(x)
    if t is tuple and x and type(x[0]) is str and x[0].startswith(token):
        kind = x[0][len(token):]
        if kind == "student" and len(x) == 2 and student is not None:
            return student(x[1])
        if kind == "tensor" and len(x) == 7:
            _, index, dtype, shape, stride, offset, grad = x
            dt = getattr(torch, dtype)
            if not isinstance(dt, torch.dtype):
                raise ValueError(f"not a dtype: {dtype}")
            y = torch.empty(0, dtype=dt).set_(storages[index].untyped_storage(), offset, shape, stride)
            return y.requires_grad_() if grad and y.is_floating_point() else y
        if kind == "size" and len(x) == 2:
            return torch.Size(x[1])
        if kind == "dtype" and len(x) == 2 and isinstance(getattr(torch, x[1], None), torch.dtype):
            return getattr(torch, x[1])
        if kind == "device" and len(x) == 2:
            return torch.device(x[1])
        if kind == "complex" and len(x) == 3:
            return complex(x[1], x[2])
    if t in (tuple, list):
        return t(unpack(v, token, storages, student) for v in x)
    if t is dict:
        return {k: unpack(v, token, storages, student) for k, v in x.items()}
    return x


class Forbidden(Exception):
    pass


def _refusing_code(dotted):
    """Code that raises Forbidden(dotted) from any function it is swapped into (it runs in that function's globals)."""
    ns = {}
    exec(compile(f"def refused(*args, **kwargs):\n    raise __import__({MODULE!r}).Forbidden({dotted!r})\n",
                 "<forbidden>", "exec"), ns)
    return ns["refused"].__code__


def _student_frames(tb, limit=3):
    lines = []
    for fs in traceback.extract_tb(tb):
        if (fs.filename == BRIDGE_FILE or fs.filename.startswith("<grader-scenario")
                or os.path.abspath(fs.filename).startswith(_LIB_DIRS)):
            continue
        code = (fs.line or linecache.getline(fs.filename, fs.lineno)).strip()
        lines.append(f"in {fs.name}, line {fs.lineno}: {code}" if code else f"in {fs.name}, line {fs.lineno}")
    return " | ".join(lines[-limit:])


def _error(e):
    text = ""
    try:
        text = str(e)[:500]
    except BaseException:
        pass
    oom = isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and any(
        s in text for s in ("can't allocate memory", "out of memory", "not enough memory")))
    return {"mro": [c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"],
            "name": type(e).__name__, "message": text, "where": _student_frames(e.__traceback__),
            "oom": oom, "forbidden": e.args[0] if isinstance(e, Forbidden) else ""}


def _student_object(ns):
    """Resolve a name to the notebook's object; a missing one (e.g. lost with a skipped cell) raises when used."""
    def resolve(name):
        if name in ns:
            return ns[name]

        def missing(*a, **k):
            raise NameError(f"name {name!r} is not defined")
        missing.__name__ = name
        return missing
    return resolve


def _run(request, fn, args, kwargs, collect=False):
    """fn(*args, **kwargs) with the exercise's forbidden functions refused and torch seeded; the reply.

    With `collect`, the objects the call made (in reference cycles too) die before it returns, so a
    misbehaving `__del__` runs inside this call's time and is charged to this check."""
    token = request["token"]
    saved, codes = [], []
    for dotted in request["forbid"]:
        owner_path, attr = dotted.rsplit(".", 1)
        owner = _resolve(owner_path)

        def refuse(*a, _dotted=dotted, **k):
            raise Forbidden(_dotted)
        original = getattr(owner, attr)
        saved.append((owner, attr, original, attr in getattr(owner, "__dict__", {})))
        setattr(owner, attr, refuse)
        if (isinstance(original, types.FunctionType) and not original.__code__.co_freevars
                and all(f is not original for f, _ in codes)):  # aliases bound before the call refuse too
            codes.append((original, original.__code__))
            original.__code__ = _refusing_code(dotted)
    opaque, storages = {}, {}
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(request["seed"])
            result = fn(*args, **kwargs)
        reply = {"ok": True, "result": pack(result, token, storages, opaque)}
        del result
        if collect:
            gc.collect(1)  # the young generations: what this call made
    except BaseException as e:  # the student's exception is data for the grader, whatever it is
        reply = {"ok": False, "error": _error(e)}
    finally:
        for fn, code in reversed(codes):
            fn.__code__ = code
        for owner, attr, original, own in reversed(saved):
            if own or not isinstance(owner, type):
                setattr(owner, attr, original)
            else:  # inherited (Tensor.bfloat16 comes from TensorBase): leave no copy on the subclass
                delattr(owner, attr)
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
    args, kwargs = unpack((request["args"], request["kwargs"]), token, storages_from(request["storages"]),
                          _student_object(_namespace()))
    module = sys.modules.get(f"{SCENARIOS}.{request['module']}")
    fn = getattr(module, request["function"], None) if module is not None else None
    if fn is None:
        raise RuntimeError(f"the grader's scenario {request['module']}.{request['function']} is not installed")
    reply = _run(request, fn, args, kwargs, collect=True)
    reply["args"] = []
    return reply


def listen(request):
    """Answer the grader's comm messages from now on: each is one request, run without IPython's cell machinery.

    The grader waits on a FIFO; each finished request writes its number there.
    """
    fifo = os.open(request["fifo"], os.O_WRONLY)

    def on_open(comm, msg):
        def on_msg(msg):
            data = msg["content"]["data"]
            try:
                serve(data["op"], data["req"], data["resp"])
            finally:
                os.write(fifo, f"{data['n']}\n".encode())
        comm.on_msg(on_msg)

    _shell().kernel.comm_manager.register_target(request["target"], on_open)
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
