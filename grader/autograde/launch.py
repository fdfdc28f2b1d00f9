"""Start a grading kernel: apply the memory limit, then hand over to ipykernel (as ipykernel_launcher does).

The limit is the process's address space (RLIMIT_AS), soft and hard, so student code cannot raise it;
an allocation past it fails with MemoryError or torch's "can't allocate memory" instead of taking the machine.
"""
import os
import resource
import sys

if __name__ == "__main__":
    limit = int(os.environ.get("GRADER_MEMORY_LIMIT", "0"))
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # The notebook's folder must not shadow torch or grader while the kernel starts (ipykernel_launcher does the same).
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance()
