"""environment.yml and pyproject.toml must name the same pinned packages and Python."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    pins = project["dependencies"] + [d for group in project["optional-dependencies"].values() for d in group]
    return project["requires-python"], pins


def _environment_yml():
    text = (ROOT / "environment.yml").read_text()
    python = re.search(r"^\s*-\s*python=(\S+)", text, re.M).group(1)
    pip_pins = re.findall(r"^\s{6}-\s*([A-Za-z0-9_.\-\[\]]+==\S+)\s*$", text, re.M)
    return python, pip_pins


def test_every_dependency_is_pinned_exactly():
    _, pins = _pyproject()
    loose = [p for p in pins if "==" not in p]
    assert not loose, f"pin these in pyproject.toml with ==: {loose}"


def test_environment_yml_matches_pyproject():
    requires_python, pins = _pyproject()
    python, env_pins = _environment_yml()
    assert sorted(env_pins) == sorted(pins), (
        f"only in pyproject.toml: {sorted(set(pins) - set(env_pins))}; "
        f"only in environment.yml: {sorted(set(env_pins) - set(pins))}")
    assert requires_python == f">={python}", f"pyproject requires {requires_python}, environment.yml has {python}"
    assert "-e ." in (ROOT / "environment.yml").read_text(), "environment.yml must install servelab itself"


def test_torch_is_the_cpu_build_that_installs_here():
    _, pins = _pyproject()
    assert "torch==2.13.0" in pins


def test_every_package_is_installed():
    """A non-editable install (the hub's course environment) holds only the packages pyproject.toml lists."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for top, folder in (("servelab", ROOT / "lib" / "servelab"),
                        ("servelab_autograder", ROOT / "autograder" / "servelab_autograder")):
        for init in folder.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join([top, *init.parent.relative_to(folder).parts]))
    assert found == listed, f"unlisted: {sorted(found - listed)}; listed but missing: {sorted(listed - found)}"
