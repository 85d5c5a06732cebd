"""The engine: a decoder model, the runner that batches it, ``LLM``, and the fake-model driver.

``driver`` steps any scheduler family with a fake model (``drive``, one ``StepRecord``, the ``Family`` protocol,
nano-vllm's ``Engine``); ``radix``, ``v1``, ``asynchronous`` and ``speculative`` adapt the other families to it;
``model`` and ``llm`` run real weights through a scheduler and the Triton kernels; ``trace`` and
``prefix_compare`` tabulate runs.
Imports schedulers, kernels and analytic models; nothing below imports it.
"""

from servelab._moved import moved_names

# servelab.engine was the driver module before it became this package
__getattr__ = moved_names(__name__)
