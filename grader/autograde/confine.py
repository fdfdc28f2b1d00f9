"""What a grading kernel gives up before any notebook code runs: its user, the system calls that change the
machine, and resources beyond its share.

Standard library only, and no `grader` import: the kernel's launcher (launch.py) loads this file from its own
folder (the public grader's, read-only in the sandbox) while the kernel still holds the rights it drops here.
Each step is refused loudly: a kernel that cannot confine itself does not start.
"""
from __future__ import annotations

import ctypes
import os
import resource

# System calls no notebook needs and an escape would: mounting, entering or making namespaces, kernel keys,
# modules and BPF, tracing other processes, rebooting, swap, the kernel log, accounting and io_uring (whose
# operations a filter cannot see). Each refused with EPERM; a name this architecture lacks is skipped.
REFUSED = ("mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
           "fsmount", "fspick", "mount_setattr", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf",
           "ptrace", "process_vm_readv", "process_vm_writev", "perf_event_open", "userfaultfd", "init_module",
           "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "syslog",
           "acct", "quotactl", "quotactl_fd", "open_by_handle_at", "lookup_dcookie", "io_uring_setup",
           "io_uring_enter", "io_uring_register")
# clone() with any of these flags makes a namespace (a user namespace would hand back every capability in it).
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
EPERM, ENOSYS = 1, 38

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_MASKED_EQ = 7


class _ArgCmp(ctypes.Structure):
    """libseccomp's `struct scmp_arg_cmp`: compare one system call argument."""
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def drop_user(uid: int, gid: int) -> None:
    """Become `uid`/`gid` for good, with no supplementary groups (and, from root, no capabilities left)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError(f"the kernel could not drop to uid {uid}")


def filter_syscalls(library: str) -> int:
    """Install the seccomp filter through `library` (libseccomp); returns how many system calls it refuses.

    clone3 answers ENOSYS, so the C library falls back to clone, whose flags the filter can read."""
    lib = ctypes.CDLL(library, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise RuntimeError("libseccomp could not start a filter")
    refused = 0

    def rule(name: str, errno: int, *compare: _ArgCmp) -> None:
        nonlocal refused
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:
            return
        args = (_ArgCmp * len(compare))(*compare) if compare else None
        if lib.seccomp_rule_add_array(ctx, _ERRNO | errno, number, len(compare), args) != 0:
            raise RuntimeError(f"libseccomp refused the rule for {name}")
        refused += 1

    try:
        for name in REFUSED:
            rule(name, EPERM)
        for flag in NAMESPACE_FLAGS:
            rule("clone", EPERM, _ArgCmp(0, _MASKED_EQ, flag, flag))
        rule("clone3", ENOSYS)
        if lib.seccomp_load(ctx) != 0:
            raise RuntimeError(f"the seccomp filter could not be loaded (errno {ctypes.get_errno()})")
    finally:
        lib.seccomp_release(ctx)
    return refused


def limit(processes: int, file_size: int) -> None:
    """Cap the kernel's processes and threads (all it and its children start), the size of any one file it
    writes, and core dumps; soft and hard, so the notebook cannot raise them again."""
    if processes > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    if file_size > 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def wait_for(fifo: str, seconds: float) -> bool:
    """Block until the grader writes a line to `fifo` (True), or `seconds` pass (False). Opened for reading and
    writing, so that no writer yet is not an end of file (Linux's FIFOs allow it)."""
    import select
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], seconds)
        return bool(ready) and bool(os.read(fd, 64))
    finally:
        os.close(fd)


def unpack_stage(stage: str, folder: str) -> None:
    """Copy the notebook's starting files (its folder, the course data, $HOME) from the read-only `stage` into
    its own size-limited `folder`; the grader's exchange folder there is bound already and is left out."""
    for entry in os.scandir(stage):
        if entry.name == "grader":
            continue
        _copy(entry.path, os.path.join(folder, entry.name))


def _copy(source: str, target: str) -> None:
    """Files, folders and links as they are; what does not fit the folder's size is left behind, as on a full disk."""
    if os.path.islink(source):
        os.symlink(os.readlink(source), target)
    elif os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
        for entry in os.scandir(source):
            _copy(entry.path, os.path.join(target, entry.name))
    else:
        try:
            with open(source, "rb") as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        except OSError:
            pass
