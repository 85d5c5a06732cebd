"""Text workloads for the engine on its trained model: a shared system prompt, then a question of the course's own.

    text_requests(10, seed=0)      # [(arrival step, prompt text, tokens to generate), ...]

Every other prompt begins with `SYSTEM_PROMPT` (its full blocks are prefix-cache hits once a first request
with it has been through postprocess); the others are a question alone. Chapter 07 serves these, and `make bench`
times 64 of them on the engine and on transformers' `generate()`.
"""

from __future__ import annotations

import random

# chapter 07's engine on these prompts: 24 blocks of 4 token slots (too few for four requests at once: the scheduler
# preempts), at most 16 tokens a step (long prompts are chunked), at most 4 sequences a step
CHAPTER_ENGINE = dict(block_size=4, num_blocks=24, max_num_batched_tokens=16, max_num_seqs=4)
# `make bench`'s workload against transformers (scripts/bench_hf.py), and the size of transformers' static batches
# (the engine holds as many sequences at most)
BENCH_WORKLOAD = dict(n=64, seed=0, min_tokens=16, max_tokens=96)
BENCH_BATCH = 16

SYSTEM_PROMPT = ("You are a tutor for a course on serving large language models. Answer in the course's words: "
                 "blocks, the scheduler, the KV cache, prefill and decode. ")

QUESTIONS = (
    "The scheduler",
    "A prefill step",
    "The KV cache of a sequence",
    "When no block is free,",
    "The prefix cache",
    "Chunked prefill",
    "A decode step reads",
    "The radix cache",
    "Continuous batching",
    "The token budget",
    "Preemption by recompute",
    "Paged attention",
    "The block table of a sequence",
    "Speculative decoding",
    "The roofline of a decode step",
    "Each request",
)


def text_requests(n: int = 10, seed: int = 0, max_arrival: int = 6, min_tokens: int = 4,
                  max_tokens: int = 24) -> list[tuple[int, str, int]]:
    """(arrival step, prompt, tokens to generate) for `n` requests: every other prompt is the system prompt and a
    question, the others a question alone; questions, arrivals (steps 0..max_arrival) and output lengths drawn
    from `seed`."""
    if n < 1 or max_arrival < 0 or not 1 <= min_tokens <= max_tokens:
        raise ValueError("n >= 1, max_arrival >= 0 and 1 <= min_tokens <= max_tokens")
    rng = random.Random(seed)
    out = []
    for i in range(n):
        question = rng.choice(QUESTIONS)
        prompt = SYSTEM_PROMPT + question if i % 2 == 0 else question
        out.append((rng.randint(0, max_arrival), prompt, rng.randint(min_tokens, max_tokens)))
    return out
