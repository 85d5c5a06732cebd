"""The worked examples in the library's docstrings are true: every module of the layers that hold formulas and
simulations runs its doctests (a stale example teaches a wrong number)."""

import doctest
import importlib
import pkgutil

import pytest

import servelab

PACKAGES = ("analytic", "simulator", "schedulers", "claims")
MODULES = sorted(f"servelab.{pkg}.{m.name}" for pkg in PACKAGES
                 for m in pkgutil.iter_modules([f"{servelab.__path__[0]}/{pkg}"]))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} docstring examples fail"
