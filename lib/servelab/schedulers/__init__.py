"""Schedulers: what runs each step, and the KV blocks it holds.

nano-vllm's ``Sequence`` / ``BlockManager`` / ``Scheduler`` and its asynchronous and speculative variants, SGLang's
radix cache and the scheduler that works through it, and vLLM V1's token-budget scheduler. The drivers that step
them with a fake model live in :mod:`servelab.engine` (nano-vllm's, the radix scheduler's, V1's and the asynchronous
one; the speculative module still carries its own small loop). Imports only :mod:`servelab.analytic`.
"""
