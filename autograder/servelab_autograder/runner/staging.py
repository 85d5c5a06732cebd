"""The grader's staging folders: one per grading process, named so that a later grader can sweep those whose
owner was killed."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from servelab_autograder.runner import sandbox

STAGING_PREFIX = "servelab-grade-"


def sweep_stale_staging() -> list[Path]:
    """Remove the staging folders (and sandbox mounts) of graders that were killed; returns them."""
    swept = []
    for staging in Path(tempfile.gettempdir()).glob(STAGING_PREFIX + "*"):
        try:
            owner = int((staging / "owner.pid").read_text(encoding="utf-8"))
            os.kill(owner, 0)
            continue  # its grader still runs
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue  # not ours to judge (no owner file yet, or someone else's)
        for box in staging.glob("s[0-9]*"):
            sandbox.sweep(box)
        shutil.rmtree(staging, ignore_errors=True)
        swept.append(staging)
    return swept
