"""Schedulers: what runs each step, and the KV blocks it holds.

nano-vllm's ``Sequence`` / ``BlockManager`` / ``Scheduler`` and its asynchronous and speculative variants, SGLang's
radix cache and the scheduler that works through it, and vLLM V1's token-budget scheduler; ``config.EngineConfig``
holds the knobs they share, and each family builds from one (``from_config``). The drivers that step
them with a fake model live in :mod:`servelab.engine` (one module per family: driver, radix, v1, asynchronous,
speculative). Imports only :mod:`servelab.analytic`.
"""
