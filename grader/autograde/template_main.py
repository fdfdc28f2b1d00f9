"""The kernel template: a process that has imported what every grading kernel imports (torch, ipykernel, and
torch._dynamo where the run's chapters need it) once, and forks each sandboxed kernel of a grading run from that
state (template.py starts it for the run; its workers send it the requests).

A kernel forked from here is what launch.py would have made, without its seconds of imports: for each request
the template forks a child that joins the namespaces of the sandbox bubblewrap made for the notebook (through
the sandbox's first process, its `door`), takes the sandbox's root as its own, and forks the kernel inside the
sandbox's PID namespace. The kernel then takes the notebook's environment and does every step of launch.py
after the imports, in the same order (drop to its user, the seccomp filter, the limits, its folder, the memory
cap) before any notebook code runs. The child outside waits for it and ends with it.

Run by file path from the public grader's folder, outside any sandbox (it must be able to enter one): standard
library, torch, ipykernel, matplotlib and the public grader's modules that every kernel's set-up imports (named on
its command line: kernel_side.IMPORTS), from this folder only (`import_public` checks), so that nothing of the
grading process is in the memory a kernel inherits. Its environment is a kernel's, without what differs per
notebook.
"""
import ctypes
import json
import os
import select
import socket
import sys

# The namespaces a kernel joins, user first (it grants the rights to join the rest) and mount last (after it,
# this process sees the sandbox's /proc, not this machine's).
NAMESPACES = ("user", "cgroup", "ipc", "uts", "net", "pid", "mnt")
_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, 0) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def _ns(pid: str, name: str) -> int:
    """The identity (inode) of a process's namespace; a PID namespace as its children will have it."""
    name = "pid_for_children" if name == "pid" and pid == "self" else name
    return os.stat(f"/proc/{pid}/ns/{name}").st_ino


def enter(door: int, cwd: str) -> None:
    """Join the sandbox that holds process `door` (every namespace of it that differs from this one's) and take
    its root and `cwd`; refuse loudly when any namespace is not the door's afterwards."""
    wanted = {name: _ns(str(door), name) for name in NAMESPACES}
    fds = {name: os.open(f"/proc/{door}/ns/{name}", os.O_RDONLY) for name in NAMESPACES
           if _ns("self", name) != wanted[name]}
    root = os.open(f"/proc/{door}/root", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in NAMESPACES[:-1]:
            if name in fds:
                _setns(fds[name])
        wrong = [name for name in NAMESPACES[:-1] if _ns("self", name) != wanted[name]]
        if wrong:
            raise OSError(f"the kernel is not in the sandbox's {', '.join(wrong)} namespace")
        if "mnt" in fds:
            _setns(fds["mnt"])
        os.fchdir(root)
        os.chroot(".")
        os.chdir(cwd)
    finally:
        for fd in [*fds.values(), root]:
            os.close(fd)


def spawn(request: dict) -> int:
    """Fork a child that enters the sandbox and forks the kernel there; the kernel's process id (this machine's)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # outside the sandbox's PID namespace until its own child
        try:
            os.close(read)
            os.closerange(3, write)  # the listener and the workers' connections are the template's, not its own
            os.closerange(write + 1, 65536)
            enter(request["door"], request["cwd"])
            kernel = os.fork()
            if kernel == 0:
                os.close(write)
                run_kernel(request)  # never returns
            os.write(write, str(kernel).encode())
            os.close(write)
            os.waitpid(kernel, 0)
        except BaseException as e:  # noqa: BLE001
            os.write(write, f"{type(e).__name__}: {e}".encode()[:500])
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read().decode(errors="replace")
    if not data.isdigit():
        raise OSError(f"the kernel could not enter its sandbox: {data or 'no answer'}")
    return int(data)


def run_kernel(request: dict) -> None:
    """In the sandbox: the notebook's environment and command line, then launch.py's steps after its imports."""
    try:
        os.setsid()
        os.closerange(3, 65536)
        os.environ.clear()
        os.environ.update(request["env"])
        forget_matplotlib_folders()
        launch.drop_import_settings()  # the template did the imports they were for
        sys.argv = request["argv"]
        launch.start(launch.confine_kernel())
    except SystemExit as e:
        os._exit(e.code if isinstance(e.code, int) else 1)
    except BaseException:
        os._exit(1)
    os._exit(0)


def forget_matplotlib_folders() -> None:
    """matplotlib keeps the config and cache folders it found first (the template's, which no sandbox holds): the
    kernel's next call looks again, in its own environment (MPLCONFIGDIR, in its home), as a launched kernel's does.
    Its memo is the closure of matplotlib's `_logged_cached` (tests/test_template.py checks the folders)."""
    mpl = sys.modules.get("matplotlib")
    if mpl is None:
        return
    for getter in (mpl.get_configdir, mpl.get_cachedir):
        cells = dict(zip(getter.__code__.co_freevars, getter.__closure__ or ()))
        cells["called"].cell_contents = False


def serve(listener: socket.socket) -> None:
    """Each grading worker connects once; when the imports are done, each connection is told so and then sends
    one request at a time (a JSON object: door, cwd, env, argv), each answered ({"pid"} or {"error"}). Children
    that ended are reaped between requests. Runs until the grading process ends it."""
    workers: list[socket.socket] = []
    while True:
        readable, _, _ = select.select([listener, *workers], [], [], 1.0)
        _reap()
        for sock in readable:
            if sock is listener:
                worker, _ = listener.accept()
                worker.send(b'{"ready": true}')
                workers.append(worker)
                continue
            message = sock.recv(1 << 22)
            if not message:
                workers.remove(sock)
                sock.close()
                continue
            try:
                answer = {"pid": spawn(json.loads(message))}
            except Exception as e:  # noqa: BLE001  (any failure is the worker's to report, this process lives on)
                answer = {"error": f"{type(e).__name__}: {e}"}
            sock.send(json.dumps(answer).encode())


def import_public(names: list[str], folder: str) -> None:
    """Import `names`; refuse to serve (SystemExit: kernels then start through launch.py) if any `grader` module
    came from anywhere but the public grader in `folder`, the copy the release ships (no hidden checks)."""
    import importlib

    for name in names:
        importlib.import_module(name)
    public = os.path.join(folder, "grader", "")
    wrong = sorted(n for n, m in sys.modules.items() if n.split(".")[0] == "grader"
                   and not (getattr(m, "__file__", None) or "").startswith(public))
    if wrong:
        raise SystemExit(f"grader modules from outside the public grader {public}: {', '.join(wrong[:5])}")


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


if __name__ == "__main__":
    _libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0)  # gone with the grading process that started it
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import launch  # beside this file: the kernel's launcher, whose steps a forked kernel takes
    sys.path.remove(here)
    launch.prepare_imports()
    import torch  # noqa: F401,E402  (what launch.py imports)
    if sys.argv[2] == "dynamo":  # what the first optimizer or FLOP count imports, where the run's chapters have one
        import torch._dynamo  # noqa: F401,E402
    from ipykernel import ipkernel, kernelapp  # noqa: F401,E402  (ipkernel: what the app imports as it starts)
    try:  # and the debugger its kernel makes as it starts (debugpy: some 130 modules, 0.04 CPU-s a kernel)
        import ipykernel.debugger  # noqa: F401,E402
    except ImportError:
        pass
    # What every chapter's first cell imports: half a CPU-second per kernel. Its font list and settings come from
    # the folder template.py gave (MPLCONFIGDIR: the font list alone, no matplotlibrc), as a kernel's fresh home.
    import matplotlib.pyplot  # noqa: F401,E402
    # The public grader, as set-up imports it in each kernel (a tenth of a CPU-second); set-up then registers
    # `%%needs` in the kernel's shell, which does not exist here.
    import_public(sys.argv[3:], here)

    serve(socket.socket(fileno=int(sys.argv[1])))
