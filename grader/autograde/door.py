"""The first process of a sandbox whose kernel is forked into it from the kernel template (template_main.py):
it holds the sandbox open until that kernel ends, so that the kernel manager, which started bubblewrap with this
inside, sees the kernel end when bubblewrap does. Then bubblewrap ends, and with its PID namespace everything
the notebook left running.

The kernel is the first process after this one to appear in the sandbox's PID namespace (its init is 1). Run
as `python -I -S door.py`: standard library only, nothing imported that could be shadowed; started as root
(bubblewrap run by root leaves it the right to change user), it becomes nobody at once.
"""
import os
import select
import sys
import time

ARRIVAL_SECONDS = 120  # a kernel that has not arrived by then never will: the grading worker gave up on it


NOBODY = 65534  # the door needs no rights to wait: as root, it gives them up before the kernel arrives


def main() -> int:
    if os.geteuid() == 0:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)
    me = os.getpid()
    deadline = time.monotonic() + ARRIVAL_SECONDS
    while time.monotonic() < deadline:
        arrived = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me))
        if arrived:
            try:
                kernel = os.pidfd_open(arrived[0])
            except ProcessLookupError:
                return 1  # it came and went already
            select.select([kernel], [], [])
            return 0
        time.sleep(0.005)
    return 1


if __name__ == "__main__":
    sys.exit(main())
