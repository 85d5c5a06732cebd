"""Old module paths kept for notebooks released before the library was split into layer packages.

Each old path (``servelab.costmodel``) is a module of three lines that calls :func:`moved`: importing it warns
with a ``DeprecationWarning`` naming the new place, and every name is looked up there. ``OLD_PATHS`` lists
them all, and ``MOVED_NAMES`` the names that left a module that still exists (tests/test_layers.py imports
each).
"""

from __future__ import annotations

import importlib
import warnings

OLD_PATHS: dict[str, str | tuple[str, ...]] = {  # old path -> where its names are now (the first that has it)
    **{f"servelab.{m}": f"servelab.analytic.{m}" for m in (
        "batching", "capacity", "costmodel", "fairness", "kv_tiers", "queueing", "serving", "workloads")},
    **{f"servelab.{m}": f"servelab.schedulers.{m}" for m in (
        "radix_cache", "scheduler")},
    "servelab.async_scheduler": ("servelab.schedulers.async_scheduler", "servelab.engine.asynchronous"),
    "servelab.vllm_scheduler": ("servelab.schedulers.vllm_scheduler", "servelab.engine.v1"),
    "servelab.spec_decode": ("servelab.schedulers.spec_decode", "servelab.analytic.speculation",
                             "servelab.engine.speculative"),
    "servelab.radix_scheduler": ("servelab.schedulers.radix_scheduler", "servelab.engine.radix"),
    **{f"servelab.{m}": f"servelab.engine.{m}" for m in ("llm", "model", "prefix_compare", "trace")},
    "servelab.plots_async": "servelab.plots.asynchronous",
    "servelab.kernels.bench": "servelab.kernels.cases",     # the runner itself is scripts/bench_kernels.py
    **{f"servelab.plots_{m}": f"servelab.plots.{m}" for m in (
        "capacity", "engine", "fairness", "kv", "queueing", "radix", "serving", "spec")},
}

MOVED_NAMES = {  # module -> {name: where it is now}
    "servelab.engine": {n: "servelab.engine.driver" for n in ("Engine", "StepRecord", "drive", "expected",
                                                              "fake_model")},
    "servelab.plots": {n: "servelab.plots.batching" for n in ("plot_batch_slots", "plot_free_blocks")},
    "servelab.simulator.speculative": {"simulated_speedup": "servelab.simulator.speedup"},
}


def moved(old: str, table: dict[str, str | tuple[str, ...]] | None = None):
    """Warn that module ``old`` has moved, and return the module ``__getattr__`` that finds its names there
    (``table``: old path -> new place, ``OLD_PATHS`` unless given)."""
    new = (OLD_PATHS if table is None else table)[old]
    new = (new,) if isinstance(new, str) else new
    # stacklevel 3: past this function and the old module, to the import statement (importlib's frames are skipped)
    warnings.warn(f"{old} has moved to {' and '.join(new)}: import it from there", DeprecationWarning, stacklevel=3)

    def __getattr__(name: str):
        for place in new:
            module = importlib.import_module(place)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {old!r} has no attribute {name!r}")

    return __getattr__


def moved_names(module: str):
    """A module ``__getattr__`` for the names that have left ``module`` (or an old module of the same path):
    ``MOVED_NAMES[module]`` maps each to the module that holds it now, and each lookup warns."""
    names = MOVED_NAMES[module]

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} has moved to {names[name]}.{name}: import it from there",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(names[name]), name)

    return __getattr__
