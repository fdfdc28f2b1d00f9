"""Call the student's functions in their kernel from the grading process, as if they were local.

A check written for the notebook (`same_storage(x, x.t())`) runs unchanged here: the student's
function is a `RemoteFunction`. Its arguments go to the kernel as a pickle of plain values, the
kernel runs the student's code (see kernel_side.py), and the reply comes back the same way but is
read by an unpickler that refuses every class: it builds numbers, strings, bytes and containers
and can run no code. Tensors travel as raw storage bytes plus shape, strides and offset.
So everything the checks compare lives in this process, out of the notebook's reach.
"""
from __future__ import annotations

import builtins
import io
import os
import pickle
import pickletools
import re
import secrets
import shutil
import stat
import tempfile
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from grader import guard
from grader import scenario as scenarios_api
from grader import wire
from grader.autograde import kernel_side
from grader.autograde.kernel import Ended, Limits, NotebookKernel, Outcome
from grader.autograde import warm
from grader.autograde.sandbox import Isolation
from grader.autograde.tamper import PROTECTED
from grader.expect import CheckFailure
from grader.registry import Exercise
from grader.runner import CheckCrashed, CheckMemory, CheckTimeout, forbidden_message
from grader.scenario import Opaque, opaque_class

MAX_REPLY_BYTES = wire.MAX_REPLY_BYTES
# Pickle opcodes a reply may hold: each makes at most one value (a memo read only a reference), so reading one
# within this costs bounded memory whatever it describes; a plain value takes one or two.
MAX_REPLY_OPCODES = 4 * wire.MAX_REPLY_ITEMS
# Names of what a notebook replaced, as the kernel reports them (dotted names, a few words): at most this many,
# each cut short, anything else masked; they reach the student's feedback.
MAX_TAMPERED = 20
_TAMPER_NAME = re.compile(r"[^\w .()'<>-]")
_SOURCE = Path(kernel_side.__file__).read_text(encoding="utf-8")
_WIRE_SOURCE = Path(wire.__file__).read_text(encoding="utf-8")
_GUARD_SOURCE = Path(guard.__file__).read_text(encoding="utf-8")
# Installs the guard, the wire and then the bridge module in the kernel, all from the grader's text (at setup, and
# again if the notebook deleted them); then each request is one short line, which IPython runs in about 2 ms.
_INSTALL = ("import sys as _s, types as _t\n"
            f"for _n, _f, _c in (({kernel_side.GUARD!r}, {kernel_side.GUARD_FILE!r}, {_GUARD_SOURCE!r}),\n"
            f"                   ({kernel_side.WIRE!r}, {kernel_side.WIRE_FILE!r}, {_WIRE_SOURCE!r}),\n"
            f"                   ({kernel_side.MODULE!r}, {kernel_side.BRIDGE_FILE!r}, {_SOURCE!r})):\n"
            "    _m = _t.ModuleType(_n)\n    _s.modules[_n] = _m\n    exec(compile(_c, _f, 'exec'), _m.__dict__)\n"
            "del _s, _t, _m, _n, _f, _c")
_SERVE = f"__import__('sys').modules[{kernel_side.MODULE!r}].serve"

SCENARIO_DIR = Path(scenarios_api.__file__).with_name("scenarios")


def scenario_sources() -> dict[str, str]:
    """Short name -> source of every scenario module, installed in each grading kernel before student code."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(SCENARIO_DIR.glob("*.py")) if p.stem != "__init__"}


class _PlainUnpickler(pickle.Unpickler):
    """Reads what the kernel wrote: builtin values only; any class or function named in it is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the reply names {module}.{name}; only plain values are accepted")


def _fast_tmp() -> str | None:
    """A memory-backed folder for requests and replies where there is one (saving and loading there is 2x faster)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def load_reply(name: str | os.PathLike, dir_fd: int | None = None) -> dict | None:
    """The reply, if it is a plain file of plain values (a link or a FIFO is no reply); wire.TooLarge when it is
    over its budget in bytes or pickle opcodes, found before anything of it is built."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        if st.st_size > MAX_REPLY_BYTES:
            raise wire.TooLarge(f"more than {MAX_REPLY_BYTES / 2**20:g} MiB")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(MAX_REPLY_BYTES + 1)
        if len(data) > MAX_REPLY_BYTES:
            raise wire.TooLarge(f"more than {MAX_REPLY_BYTES / 2**20:g} MiB")
        _count_opcodes(data)
        reply = _PlainUnpickler(io.BytesIO(data)).load()
    except wire.TooLarge:
        raise
    except Exception:
        return None
    finally:
        os.close(fd)
    return reply if isinstance(reply, dict) else None


def _count_opcodes(data: bytes) -> None:
    """Refuse a pickle of more than MAX_REPLY_OPCODES opcodes (a million empty lists is small on disk, not in memory).
    Every opcode takes a byte at least, so a shorter pickle needs no count (nearly every reply: a check's calls
    make thousands)."""
    if len(data) <= MAX_REPLY_OPCODES:
        return
    for n, _ in enumerate(pickletools.genops(data)):
        if n >= MAX_REPLY_OPCODES:
            raise wire.TooLarge(f"more than {wire.MAX_REPLY_ITEMS:,} values")


class Bridge:
    """The grading side of one kernel: requests go in files under a private folder, replies come back the same way."""

    def __init__(self, kernel: NotebookKernel, forbidden: tuple[str, ...] = ()) -> None:
        self.kernel = kernel
        self.forbidden = forbidden  # what the chapter's exercises forbid: its modules are imported at setup
        # With a sandbox, in the notebook's own folder (the only one its kernel can reach). That folder is the
        # notebook's to write, so every file here is opened relative to this folder's descriptor, never
        # followed through a link, and only ever created anew: a link planted by the notebook leads nowhere.
        self.folder = (kernel.private_dir("bridge-") if kernel.isolation is not None
                       else Path(tempfile.mkdtemp(prefix="grader-bridge-", dir=_fast_tmp())))
        self._dir = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        self.tampered: set[str] = set()      # what the notebook replaced, by name (found before any hidden check)
        self.tampered_in_hidden = False        # it replaced something while hidden checks ran (no names: see probe)
        self.salt = ""                         # set while a hidden check runs: the run's secret (runner.seed_for)
        self.deadline: float | None = None   # set per check: all its calls share the check's time
        self.limit = 0.0
        self._n = 0

    def close(self) -> None:
        if self._dir < 0:
            return
        for name in os.listdir(self._dir):
            try:
                os.unlink(name, dir_fd=self._dir)
            except IsADirectoryError:
                shutil.rmtree(name, dir_fd=self._dir, ignore_errors=True)
            except OSError:
                pass
        os.close(self._dir)
        self._dir = -1
        try:
            os.rmdir(self.folder)
        except OSError:
            pass  # a folder the notebook filled or replaced goes with the notebook's own folder

    def _write(self, name: str, data: bytes) -> None:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=self._dir)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def _unlink(self, name: str) -> None:
        try:
            os.unlink(name, dir_fd=self._dir)
        except OSError:
            pass

    # ---------------------------------------------------------------- requests

    def request(self, op: str, payload: dict | None, timeout: float) -> tuple[Outcome, dict | None]:
        self._n += 1
        req = self.folder / f"{self._n}.req" if payload is not None else None
        resp = self.folder / f"{self._n}.resp"
        for p in (req, resp):  # whatever the notebook left under these names goes first
            if p is not None:
                self._unlink(p.name)
        if req is not None:
            self._write(req.name, pickle.dumps(payload, protocol=5))
        if self.kernel.listening():
            outcome = self.kernel.post({"op": op, "req": str(req) if req else "", "resp": str(resp), "n": self._n},
                                       timeout)
        else:
            code = f"{_SERVE}{(op, str(req) if req else '', str(resp))!r}"
            outcome = self.kernel.call(code, timeout)
            if outcome.status == "error" and outcome.ename == "KeyError" and kernel_side.MODULE in outcome.evalue:
                self.kernel.call(_INSTALL, 30)
                outcome = self.kernel.call(code, timeout)
        reply = None
        if outcome.status == "ok":
            try:
                reply = self._load(resp.name)
                if reply is not None:
                    wire.measure(reply)
            except wire.TooLarge as e:
                reply, outcome = None, Outcome(Ended.ERROR, "TooLarge", str(e))
            if reply is None and outcome.status == "ok":
                outcome = Outcome(Ended.ERROR, "BridgeError", "the kernel wrote no readable reply")
        for p in (req, resp):
            if p is not None:
                self._unlink(p.name)
        return outcome, reply

    def _load(self, name: str) -> dict | None:
        return load_reply(name, self._dir)

    def setup(self) -> Outcome:
        self.kernel.call(_INSTALL, 60)
        outcome, reply = self.request("setup", {"protected": list(PROTECTED),
                                                "forbidden": list(self.forbidden), "scenarios": scenario_sources()},
                                      120)
        self._tampered(reply, names=True)
        listening, _ = self.request("listen", {"fifo": self.kernel.fifo_path,
                                               "requests": self.kernel.requests_path}, 30)
        if listening.status == "ok":
            self.kernel.start_listening()
        return outcome

    def probe(self, after_hidden: bool = False) -> None:
        """Ask the kernel what the notebook replaced. After hidden checks its answer is only yes or no: the names
        come from the notebook's process, which by then has seen hidden inputs and could spell them out there."""
        _, reply = self.request("probe", None, 30)
        self._tampered(reply, names=not after_hidden)

    def _tampered(self, reply: dict | None, names: bool) -> None:
        found = reply.get("tampered") if reply is not None else None
        if not isinstance(found, list) or not found:
            return
        if names:
            self.tampered.update(_TAMPER_NAME.sub("?", str(t))[:120] for t in found[:MAX_TAMPERED])
        elif any(str(t) not in self.tampered for t in found):
            self.tampered_in_hidden = True

    def names(self, wanted: list[str]) -> dict[str, str]:
        outcome, reply = self.request("names", {"names": wanted}, 30)
        if reply is None:
            return {}
        return {k: str(v) for k, v in reply.items() if k in wanted}

    # ---------------------------------------------------------------- calls

    def call(self, name: str, exercise: Exercise, args: tuple, kwargs: dict) -> Any:
        """Run the student's `name(*args, **kwargs)` in the kernel: its result, or its exception raised here."""
        return self._run("call", {"name": name}, exercise, args, kwargs, copy_back=True)

    def scenario(self, module: str, function: str, exercise: Exercise, args: tuple, kwargs: dict) -> Any:
        """Run scenario `module.function` in the kernel, the student's handles among the arguments resolved there."""
        return self._run("scenario", {"module": module, "function": function}, exercise, args, kwargs)

    def _run(self, op: str, what: dict, exercise: Exercise, args: tuple, kwargs: dict, copy_back: bool = False) -> Any:
        remaining = (self.deadline - time.monotonic()) if self.deadline is not None else self.kernel.limits.check_timeout
        if remaining <= 0:
            raise CheckTimeout(self.limit)
        token = "\0grader-opaque-" + secrets.token_hex(8) + "-"
        call = f"{exercise.id}:{what.get('name') or what.get('function')}:{self._n}"
        seed = zlib.crc32(f"{self.salt}:{call}".encode() if self.salt else call.encode())
        storages: dict = {}
        refs = _student_refs((tuple(args), dict(kwargs)), token)
        packed_args, packed_kwargs = wire.pack(refs, token, storages)
        trace = scenarios_api.current_trace()
        payload = {**what, "args": packed_args, "kwargs": packed_kwargs, "seed": seed,
                   "forbid": list(exercise.forbid), "token": token, "storages": wire.storage_list(storages),
                   "trace": trace.request if trace is not None else None}
        outcome, reply = self.request(op, payload, remaining)
        if outcome.status == "timeout":
            self.kernel.recover(outcome)
            raise CheckTimeout("the notebook's time ran out" if outcome.evalue == "notebook" else self.limit)
        if outcome.status == "dead":
            exhausted, self.kernel.exhausted = self.kernel.exhausted, ""
            self.kernel.restart()
            if exhausted:
                raise CheckMemory(exhausted, "file space")
            raise CheckCrashed("while running the student's code; os._exit, a segfault or the memory limit")
        if reply is None and outcome.ename == "TooLarge":
            raise CheckFailure(f"{what.get('name') or exercise.name} returned {outcome.evalue} (its result and "
                               "arguments together): far more than the exercise asks for")
        if reply is None:
            raise RuntimeError(f"the kernel could not run the check: {outcome.ename}: {outcome.evalue}")
        try:
            remote_args, result = wire.unpack((list(reply.get("args") or []), reply.get("result")), token,
                                                     wire.storages_from(list(reply.get("storages") or [])))
        except Exception as e:  # a reply that does not decode is the student's doing (or a grader bug): not a pass
            raise RuntimeError(f"the kernel's reply could not be read ({type(e).__name__})") from None
        if trace is not None:  # what the call did, recorded in the kernel, for the check that asked (grader/guard.py)
            trace.add(reply.get("trace"))
        if copy_back:
            self._copy_back(args, remote_args)
        if not reply.get("ok"):
            raise self._exception(reply.get("error") or {}, exercise)
        return self._decode(result, token, reply.get("opaque") or {}, args if copy_back else (), remote_args)

    @staticmethod
    def _copy_back(local: tuple, remote: list) -> None:
        """Make the student's in-place changes to an argument visible here, where the check looks for them."""
        for a, r in zip(local, remote):
            if not isinstance(a, torch.Tensor) or not isinstance(r, torch.Tensor):
                continue
            same = (a.shape, a.stride(), a.storage_offset(), a.dtype) == (r.shape, r.stride(), r.storage_offset(), r.dtype)
            if same and bool(((a.detach() == r) | (a.detach().isnan() & r.isnan())).all()):
                continue
            with torch.no_grad():
                a.set_(r)

    def _exception(self, err: dict, exercise: Exercise) -> BaseException:
        if err.get("forbidden"):
            return CheckFailure(forbidden_message(exercise, str(err["forbidden"])))
        limits = self.kernel.limits
        if err.get("oom"):
            return CheckMemory(f"{limits.memory / 2**30:g} GiB, its files included")
        if err.get("disk"):
            return CheckMemory(f"{limits.files / 2**20:.0f} MiB of files in its folder, /tmp and /dev/shm together",
                               "file space")
        if err.get("processes"):
            return CheckMemory(f"{limits.processes} processes and threads at once", "processes")
        base: type = RuntimeError
        for name in err.get("mro") or []:
            cls = getattr(builtins, str(name), None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                base = cls
                break
        name = str(err.get("name") or base.__name__)
        cls = base if name == base.__name__ else opaque_class("", name, base)
        e = cls(str(err.get("message", "")))
        e.grader_where = str(err.get("where", ""))
        return e

    def _decode(self, x: Any, token: str, opaque: dict, local_args: tuple, remote_args: list) -> Any:
        if isinstance(x, str) and x.startswith(token) and x in opaque:
            module, qualname, text = (str(v) for v in opaque[x])
            return opaque_class(module, qualname, Opaque)(text)
        if isinstance(x, torch.Tensor):
            return self._rebase(x, local_args, remote_args)
        if type(x) in (tuple, list):
            return type(x)(self._decode(v, token, opaque, local_args, remote_args) for v in x)
        if type(x) is dict:
            return {k: self._decode(v, token, opaque, local_args, remote_args) for k, v in x.items()}
        return x

    @staticmethod
    def _rebase(t: torch.Tensor, local_args: tuple, remote_args: list) -> torch.Tensor:
        """A result that is a view of an argument becomes a view of the local argument, as it was in the notebook."""
        ptr = t.untyped_storage().data_ptr()
        for a, r in zip(local_args, remote_args):
            if (isinstance(a, torch.Tensor) and isinstance(r, torch.Tensor) and r.untyped_storage().data_ptr() == ptr
                    and ptr != 0 and a.untyped_storage().nbytes() == r.untyped_storage().nbytes()):
                return torch.empty(0, dtype=t.dtype).set_(a.untyped_storage(), t.storage_offset(), t.shape, t.stride())
        return t


def _student_refs(x: Any, token: str, depth: int = 0) -> Any:
    """Arguments with every RemoteFunction replaced by a reference the kernel resolves to the notebook's object."""
    if isinstance(x, RemoteFunction):
        return (token + "student", x.__name__)
    if depth < wire.MAX_DEPTH and type(x) in (tuple, list):
        return type(x)(_student_refs(v, token, depth + 1) for v in x)
    if depth < wire.MAX_DEPTH and type(x) is dict:
        return {k: _student_refs(v, token, depth + 1) for k, v in x.items()}
    return x


class RemoteFunction:
    """The student's function or class as the checks see it: calling it runs the original in the kernel, and
    `grader.scenario.run_scenario` with it among the arguments runs the scenario there."""

    _grader_remote_ = True

    def __init__(self, bridge: Bridge, name: str, exercise: Exercise) -> None:
        self._bridge, self._exercise = bridge, exercise
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._bridge.call(self.__name__, self._exercise, args, kwargs)

    def _grader_scenario_(self, module: str, function: str, args: tuple, kwargs: dict) -> Any:
        return self._bridge.scenario(module, function, self._exercise, args, kwargs)

    def __repr__(self) -> str:
        return f"<student function {self.__name__}>"


class KernelDidNotStart(RuntimeError):
    """The grading kernel could not be started: the machine's problem, not the student's."""


@contextmanager
def grading_kernel(sources: list[str], cwd: Path, limits: Limits, *, isolation: Isolation | None = None,
                   folder: Path | None = None, phases: dict[str, float] | None = None,
                   ahead: NotebookKernel | None = None, forbidden: tuple[str, ...] = ()) -> Iterator[Bridge]:
    """A kernel that has run the notebook's cells once, with the bridge installed after every (re)start; the
    seconds its start and its cells took are added to `phases`. `ahead`: a kernel started ahead for this
    notebook (warm.py), whose folder holds the notebook's files now. While this one runs, the next notebook's
    kernel is started ahead.

    Everything it started is ended on the way out, whatever the body raised."""
    phases = phases if phases is not None else {}
    bridge: Bridge | None = None
    kernel = ahead or NotebookKernel(sources, cwd, limits, isolation=isolation, folder=folder)
    kernel.adopt(sources, lambda k: bridge.setup())
    bridge = Bridge(kernel, forbidden)
    try:
        started = time.monotonic()
        try:
            if ahead is not None:
                kernel.go()
                kernel.connect()
            else:
                kernel.start()
        except Exception as e:
            raise KernelDidNotStart(f"the grading kernel did not start: {type(e).__name__}: {e}") from e
        warm.AHEAD.prepare(limits, isolation, Path(kernel.folder).parent.parent)
        ran = time.monotonic()
        kernel.run_cells()
        phases["start"] = phases.get("start", 0.0) + ran - started
        phases["cells"] = phases.get("cells", 0.0) + time.monotonic() - ran
        yield bridge
    finally:
        kernel.close()
        bridge.close()
