"""The engine: a decoder model, the runner that batches it, ``LLM``, and the fake-model drivers.

``driver`` steps any scheduler with a fake model (``Engine``, ``drive``, ``StepRecord``); ``model`` and ``llm``
run real weights through a scheduler and the Triton kernels; ``trace`` and ``prefix_compare`` tabulate runs.
Imports schedulers, kernels and analytic models; nothing below imports it.
"""

from servelab._moved import moved_names

# servelab.engine was the driver module before it became this package
__getattr__ = moved_names(__name__)
