"""Schedulers: what runs each step, and the KV blocks it holds.

nano-vllm's ``Sequence`` / ``BlockManager`` / ``Scheduler`` and its asynchronous and speculative variants, SGLang's
radix cache and the scheduler that works through it, and vLLM V1's token-budget scheduler. A scheduler never
runs a model: the drivers in :mod:`servelab.engine` do. Imports only :mod:`servelab.analytic`.
"""
