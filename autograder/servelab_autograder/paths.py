"""Where a chapter's notebooks live: the course root, its source and released notebooks."""

from __future__ import annotations

import os
from pathlib import Path

SOURCE_DIR = "solutions"
RELEASE_DIR = "course"


def repo_root() -> Path:
    """The course root: $SERVELAB_ROOT, else the checkout this package lives in."""
    env = os.environ.get("SERVELAB_ROOT")
    return Path(env).resolve() if env else Path(__file__).resolve().parents[2]


def chapters(root: Path | None = None) -> list[str]:
    """Every assignment: a folder solutions/<a>/ holding <a>.ipynb."""
    src = (root or repo_root()) / SOURCE_DIR
    if not src.is_dir():
        return []
    return sorted(d.name for d in src.iterdir() if (d / f"{d.name}.ipynb").is_file())


def source_notebook(root: Path, assignment: str) -> Path:
    return root / SOURCE_DIR / assignment / f"{assignment}.ipynb"


def release_notebook(root: Path, assignment: str, release_dir: Path | None = None) -> Path:
    return (release_dir or root / RELEASE_DIR) / assignment / f"{assignment}.ipynb"
