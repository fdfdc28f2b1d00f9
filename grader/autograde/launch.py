"""Start a grading kernel: apply the memory limit, then hand over to ipykernel (as ipykernel_launcher does).

The limit is on the process's address space (RLIMIT_AS), soft and hard, so student code cannot raise it;
an allocation past it fails with MemoryError or torch's "can't allocate memory" instead of taking the machine.
It counts what the notebook adds on top of the kernel's own start-up (Python, ipykernel and torch imported),
because that start-up alone maps about 1 GiB with a CPU build of torch and several GiB with a CUDA build:
the same `--memory` then means the same thing on every machine.

In a sandbox (sandbox.py) the kernel's parent is the sandbox's own init, so ipykernel must not watch its
parent's pid (it would see pid 1 and exit); with a kernel user (`GRADER_KERNEL_UID`), the launcher starts as
root and drops to that user before anything of the notebook's can run.
"""
import os
import resource
import sys


def address_space() -> int:
    """Bytes of virtual memory this process has mapped now (VmSize), 0 where /proc is not there."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    # Started by file path, so the grader package is first imported inside the running kernel (where
    # `import grader` registers its cell magic). Neither this file's folder nor the notebook's folder may
    # shadow torch or grader while the kernel starts (ipykernel_launcher drops the latter too).
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] in ("", os.getcwd(), here):
        del sys.path[0]
    if os.environ.get("GRADER_SANDBOX"):
        os.environ.pop("JPY_PARENT_PID", None)
    if os.environ.pop("GRADER_PUBLIC", ""):
        # An editable install of the course puts a finder on sys.meta_path that maps every `grader.*` name
        # to the course repository, whatever `grader.__path__` says: the kernel gets the public package only.
        for finder in list(sys.meta_path):
            mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
            if isinstance(mapping, dict) and "grader" in mapping:
                sys.meta_path.remove(finder)
    uid = os.environ.pop("GRADER_KERNEL_UID", "")
    if uid:
        gid = int(os.environ.pop("GRADER_KERNEL_GID"))
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(int(uid), int(uid), int(uid))
    import torch  # noqa: F401  (every notebook imports it; counted in the baseline, not against the notebook)
    from ipykernel import kernelapp

    limit = int(os.environ.get("GRADER_MEMORY_LIMIT", "0"))
    if limit > 0:
        total = address_space() + limit
        resource.setrlimit(resource.RLIMIT_AS, (total, total))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    kernelapp.launch_new_instance()
