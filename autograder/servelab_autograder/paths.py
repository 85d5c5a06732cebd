"""Where a chapter's notebooks live (the course root, its source and released notebooks), and what its release
is made from (:func:`fingerprint`)."""

from __future__ import annotations

import hashlib
import json
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


def resolve(names: list[str], known: list[str]) -> list[str]:
    """The chapters ``names`` asks for, each given whole (``ch03_token_budget``) or by its short id (``ch03``, or
    ``3``); a ValueError that lists the chapters when one matches none."""
    out = []
    for name in names:
        short = f"ch{int(name):02d}" if name.isdigit() else name
        found = [a for a in known if a == name or a.split("_", 1)[0] == short]
        if len(found) != 1:
            raise ValueError(f"no chapter {name!r}: give its name or its short id, one of "
                             + ", ".join(f"{a.split('_', 1)[0]} ({a})" for a in known))
        out.append(found[0])
    return out


def source_notebook(root: Path, assignment: str) -> Path:
    return root / SOURCE_DIR / assignment / f"{assignment}.ipynb"


def release_notebook(root: Path, assignment: str, release_dir: Path | None = None) -> Path:
    return (release_dir or root / RELEASE_DIR) / assignment / f"{assignment}.ipynb"


def read_json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def visible_files(folder: Path) -> list[Path]:
    """Files under ``folder`` except dot-folders/files (.ipynb_checkpoints) and __pycache__."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*") if p.is_file() and not any(
        part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts))


def fingerprint(root: Path, assignment: str) -> str:
    """Hash of everything a chapter's release is made from: its source folder, the nbgrader
    configuration and nbgrader's version."""
    import nbgrader

    h = hashlib.sha256()
    h.update(f"nbgrader {nbgrader.__version__}\n".encode())
    for cfg in (root / "nbgrader_config.py", root / "autograder" / "nbgrader_config.py"):
        h.update(cfg.name.encode() + b"\0" + (cfg.read_bytes() if cfg.is_file() else b"") + b"\0")
    folder = root / SOURCE_DIR / assignment
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or any(p in ("__pycache__", ".ipynb_checkpoints") for p in rel.parts):
            continue
        h.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()
