"""Give the course kernel (`servelab`, installed by `make setup` with `ipykernel install --sys-prefix`) the
`%check` magic: its kernel.json starts IPython with ``--ext servelab_autograder.exercises.magic``. Idempotent.

    python scripts/kernelspec.py            # the kernel of this interpreter's prefix
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

EXT = "--ext=servelab_autograder.exercises.magic"


def add_magic(kernel_json: Path) -> list[str]:
    spec = json.loads(kernel_json.read_text(encoding="utf-8"))
    spec["argv"] = [a for a in spec["argv"] if not a.startswith("--ext=servelab_autograder")] + [EXT]
    kernel_json.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    return spec["argv"]


if __name__ == "__main__":
    path = Path(sys.prefix) / "share" / "jupyter" / "kernels" / "servelab" / "kernel.json"
    if not path.is_file():
        sys.exit(f"no servelab kernel at {path}: run `python -m ipykernel install --sys-prefix --name servelab` first")
    add_magic(path)
