"""Pass JupyterLab's log through unchanged and, once the server is up, say in one line where to open it.

    jupyter lab ... 2>&1 | python scripts/lab_url.py

The URL with its token is otherwise one of some thirty start-up lines. Ctrl-C is the lab's to answer: this filter
ignores it and passes the lab's shutdown prompt through, then ends with the lab's output.
"""

from __future__ import annotations

import os
import re
import signal
import sys

URL = re.compile(r"https?://(?:127\.0\.0\.1|localhost)(?::\d+)?/\S*\?token=\w+")


def banner(url: str) -> str:
    return f"\n==> JupyterLab is up: open {url}  (Ctrl-C twice stops it)\n\n"


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seen, said = "", False
    while chunk := os.read(0, 65536):
        os.write(1, chunk)
        if said:
            continue
        seen = (seen + chunk.decode("utf-8", errors="replace"))[-8192:]
        match = URL.search(seen)
        if match and "\n" in seen[match.end():]:   # the whole URL line is out: say it once, after it
            os.write(1, banner(match.group(0)).encode())
            said = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
