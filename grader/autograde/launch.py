"""Start a grading kernel: confine it, then hand over to ipykernel (as ipykernel_launcher does).

Before anything of the notebook's can run, in this order (confine.py does each step):
- with a kernel uid (`GRADER_KERNEL_UID`: the grader runs as root), drop to that unprivileged user for good;
- install the seccomp filter (`GRADER_SECCOMP` names libseccomp): no mounts, namespaces, tracing, modules;
- cap processes and threads (`GRADER_PROCESSES`), the size of any file (`GRADER_FILE_SIZE`), core dumps;
- import torch and ipykernel;
- set ipykernel up (its sockets, its threads, IPython's shell), none of the notebook's files there yet;
- a kernel started ahead of its notebook (`GRADER_WAIT`) waits until the grader has put the notebook's files in
  place; in a sandbox, copy them from the read-only stage into its own size-limited folder (`GRADER_STAGE` to
  `GRADER_FOLDER`) and work in `GRADER_CWD`;
- cap the address space (RLIMIT_AS) at what the start-up mapped before ipykernel's set-up plus
  `GRADER_MEMORY_LIMIT`;
- run ipykernel.

The memory limit is soft and hard, so student code cannot raise it; an allocation past it fails with MemoryError
or torch's "can't allocate memory" instead of taking the machine. It counts what the notebook adds on top of
the kernel's own start-up (Python, ipykernel and torch imported), because that start-up alone maps about 1 GiB
with a CPU build of torch and several GiB with a CUDA build: the same `--memory` then means the same thing on
every machine.

In a sandbox (sandbox.py) the kernel's parent is the sandbox's own init, so ipykernel must not watch its
parent's pid (it would see pid 1 and exit).

A grading worker's sandboxed kernels are instead forked from the kernel template (template_main.py), which did
the imports once; each then takes the steps above but the imports, in the same order (`confine_kernel`, `start`).
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


def confine_kernel():
    """Every step above that comes before torch, from the environment the grader set; the confine module, for
    the steps after."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    try:
        import confine
    finally:
        sys.path.remove(here)
    sys.modules.pop("confine", None)
    env = os.environ
    nice = int(env.pop("GRADER_WAIT_NICE", "0"))
    if nice:  # started ahead: it only uses what the machine leaves idle until the grader sets it back (kernel.go)
        os.nice(nice)
    uid = env.pop("GRADER_KERNEL_UID", "")
    if uid:
        confine.drop_user(int(uid), int(env.pop("GRADER_KERNEL_GID")))
    library = env.pop("GRADER_SECCOMP", "")
    if library:
        confine.filter_syscalls(library)
    confine.limit(int(env.pop("GRADER_PROCESSES", "0")), int(env.pop("GRADER_FILE_SIZE", "0")))
    return confine


def _enter_folder(confine) -> None:
    """A kernel started ahead of its notebook waits here for the grader to put the notebook's files in place
    (`GRADER_WAIT`, a FIFO); then, sandboxed, they are copied into the kernel's own folder and it moves there."""
    env = os.environ
    wait = env.pop("GRADER_WAIT", "")
    if wait and not confine.wait_for(wait, WAIT_SECONDS):
        sys.exit(0)  # no notebook came: the grading worker is gone
    stage = env.pop("GRADER_STAGE", "")
    if stage:
        confine.unpack_stage(stage, env.pop("GRADER_FOLDER"))
    cwd = env.pop("GRADER_CWD", "")
    if cwd:
        os.chdir(cwd)


WAIT_SECONDS = 3600  # how long a kernel started ahead waits for its notebook


def drop_import_settings() -> bool:
    """Take out of the environment what only the imports read: in a sandbox, JPY_PARENT_PID (ipykernel reads it when
    imported); and GRADER_PUBLIC, whether the public grader must be the only one (returned)."""
    if os.environ.get("GRADER_SANDBOX"):
        os.environ.pop("JPY_PARENT_PID", None)
    return bool(os.environ.pop("GRADER_PUBLIC", ""))


def prepare_imports() -> None:
    """Before torch and ipykernel are imported: neither this file's folder nor the notebook's may shadow them (or
    grader), an editable install's finder must not map `grader` to the course repository, and in a sandbox
    ipykernel must not watch its parent (JPY_PARENT_PID, read when ipykernel is imported)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and sys.path[0] in ("", os.getcwd(), here):
        del sys.path[0]
    if drop_import_settings():
        # An editable install of the course puts a finder on sys.meta_path that maps every `grader.*` name
        # to the course repository, whatever `grader.__path__` says: the kernel gets the public package only.
        for finder in list(sys.meta_path):
            mapping = getattr(sys.modules.get(getattr(finder, "__module__", "")), "MAPPING", None)
            if isinstance(mapping, dict) and "grader" in mapping:
                sys.meta_path.remove(finder)


def start(confined) -> None:
    """After the imports: ipykernel's set-up (its sockets, threads and shell), the notebook's folder, the memory
    cap, then ipykernel runs (never returns while it does). A kernel started ahead sets ipykernel up while it
    waits for its notebook, so the notebook waits only for its files to be copied; the cap still counts the set-up,
    from the address space mapped before it, as when it came after the wait."""
    from ipykernel import kernelapp

    limit = int(os.environ.get("GRADER_MEMORY_LIMIT", "0"))
    total = address_space() + limit
    app = kernelapp.IPKernelApp.instance()
    app.initialize()
    _enter_folder(confined)
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (total, total))
    app.start()


if __name__ == "__main__":
    # Started by file path, so the grader package is first imported inside the running kernel (where
    # `import grader` registers its cell magic). The notebook's files are not even in its folder until torch
    # and ipykernel are imported. A kernel forked from the template (template_main.py) takes the same steps.
    confined = confine_kernel()
    prepare_imports()
    import torch  # noqa: F401  (every notebook imports it; counted in the baseline, not against the notebook)
    from ipykernel import kernelapp  # noqa: F401

    start(confined)
