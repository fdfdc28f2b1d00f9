"""What a grading kernel gives up before any notebook code runs (grader/autograde/confine.py), tried for real in
a fresh process: the system calls it can no longer make, what it still can, and the limits it cannot raise."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from grader.autograde import confine
from grader.autograde.sandbox import seccomp_library

LIBRARY = seccomp_library()
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp and these limits are Linux's")


def in_a_process(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `code` after `import confine` (the file the launcher loads), in a new interpreter."""
    prelude = f"import sys; sys.path.insert(0, {os.path.dirname(confine.__file__)!r}); import confine\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout)


needs_seccomp = pytest.mark.skipif(not LIBRARY, reason="no libseccomp on this machine (no syscall filter to test)")

REFUSED_AFTER_FILTER = '''
import ctypes, errno, os, tempfile
libc = ctypes.CDLL(None, use_errno=True)
target = tempfile.mkdtemp().encode()  # were the filter to fail, a mount lands here, and is undone
confine.filter_syscalls({library!r})
def refused(result):
    if result == 0:
        libc.umount2(target, 2)
    return result == -1 and ctypes.get_errno() == errno.EPERM
results = {{
    "mount": refused(libc.mount(b"none", target, b"tmpfs", 0, None)),
    "remount": refused(libc.mount(None, target, None, 32 | 4096, None)),
    "unshare a user namespace": refused(libc.unshare(0x10000000)),
    "unshare a mount namespace": refused(libc.unshare(0x00020000)),
    "setns": refused(libc.setns(0, 0)),
    "ptrace": refused(libc.ptrace(0, 0, None, None)),
    "keyctl": refused(libc.syscall(250, 0, 0, 0, 0, 0)) if os.uname().machine == "x86_64" else True,
}}
print(sorted(k for k, v in results.items() if not v))
'''


@needs_seccomp
def test_the_filter_refuses_mounts_namespaces_tracing_and_keys():
    """A kernel that could mount or make a user namespace could remount its read-only views (as root it did)."""
    run = in_a_process(REFUSED_AFTER_FILTER.format(library=LIBRARY))
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]", run.stdout


@needs_seccomp
def test_a_new_user_namespace_is_refused_through_clone_and_unshare_alike():
    """`unshare -U` (clone's flags are read by the filter; clone3, which hides them, answers ENOSYS)."""
    run = in_a_process(f'''
        import subprocess
        confine.filter_syscalls({LIBRARY!r})
        r = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
        print(r.returncode != 0)
    ''')
    assert run.stdout.strip() == "True", run.stdout + run.stderr


@needs_seccomp
def test_what_a_notebook_needs_still_works_under_the_filter():
    """Processes, threads, a subprocess, a torch matmul across threads, files and sockets on loopback."""
    run = in_a_process(f'''
        import os, socket, subprocess, threading, torch
        confine.filter_syscalls({LIBRARY!r})
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        assert os.waitpid(pid, 0)[1] >> 8 == 7
        t = threading.Thread(target=lambda: None); t.start(); t.join()
        assert subprocess.run(["true"]).returncode == 0
        torch.set_num_threads(2)
        assert torch.ones(64, 64).matmul(torch.ones(64, 64))[0, 0].item() == 64
        s = socket.socket(); s.bind(("127.0.0.1", 0)); s.close()
        print("ok")
    ''')
    assert run.stdout.strip() == "ok", run.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_a_dropped_kernel_cannot_get_root_back_and_cannot_pass_its_process_limit():
    """As root the kernel drops to an unprivileged uid of its own; then RLIMIT_NPROC holds (root is exempt from
    it) and neither the uid nor the limit can be raised again."""
    run = in_a_process('''
        import os, resource
        confine.drop_user(1_900_123_456, 1_900_123_456)
        confine.limit(processes=40, file_size=2**20)
        try:
            os.setuid(0)
            print("got root back")
        except PermissionError:
            pass
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (10_000, 10_000))
            print("raised the limit")
        except ValueError:
            pass
        pids = []
        try:
            for _ in range(200):
                pid = os.fork()
                if pid == 0:
                    import time; time.sleep(5); os._exit(0)
                pids.append(pid)
        except BlockingIOError:
            pass
        for pid in pids:
            os.kill(pid, 9); os.waitpid(pid, 0)
        print(len(pids))
    ''')
    assert run.returncode == 0, run.stderr
    assert "got root back" not in run.stdout and "raised the limit" not in run.stdout, run.stdout
    assert int(run.stdout.split()[-1]) < 40


def test_no_file_grows_past_the_file_size_limit():
    """RLIMIT_FSIZE: a write past it fails with EFBIG (Python ignores SIGXFSZ), the file stops at the limit."""
    run = in_a_process('''
        import os, tempfile
        confine.limit(processes=0, file_size=2**20)
        path = tempfile.mktemp()
        try:
            with open(path, "wb") as f:
                f.write(b"x" * (3 * 2**20))
        except OSError as e:
            print(e.errno)
        print(os.path.getsize(path))
        os.remove(path)
    ''')
    assert run.stdout.split() == ["27", str(2**20)], run.stdout + run.stderr
