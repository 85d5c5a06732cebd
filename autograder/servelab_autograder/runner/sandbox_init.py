"""The first process of every grading sandbox, run as its user: ``python -I -S sandbox_init.py LIMITS -- ARGV``.

It sets the resource limits (``LIMITS``: JSON, rlimit name -> value), asks the kernel's OOM killer to pick
the sandbox first, starts ``ARGV`` in a session of its own and waits for it. Being the command's parent
(instead of exec'ing it) matters twice: inside a PID namespace an exec'd ipykernel would be the child of
PID 1 and think its parent had exited, and in a session of its own the kernel's interrupt (it signals its
process group) reaches the kernel and its children only. Standard library only: it runs with ``-I -S``.
"""

import json
import os
import resource
import signal
import subprocess
import sys


def main() -> int:
    limits, sep, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    if sep != "--" or not argv:
        print("usage: sandbox_init.py LIMITS -- ARGV", file=sys.stderr)
        return 2
    for name, value in json.loads(limits).items():
        resource.setrlimit(getattr(resource, name), (value, value))
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    child = subprocess.Popen(argv, start_new_session=True)

    def forward(signum, _frame):
        try:
            os.killpg(child.pid, signal.SIGKILL if signum == signal.SIGTERM else signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, lambda *_: None)  # interrupts are the kernel's, by message
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
