"""Chapter 03's drills with numbers drawn per learner (``exercises.variants``); the notebook reaches them as
``_grade.drill_numbers()`` (``exercises.ch03``). Each draw keeps the drill's sense: LLaMA-2-7B's contexts within its
4,096-token window, a long prompt of whole chunks within Llama-3.1-8B's, a prompt longer than the newcomer by at
least 1% (so the rate's numerator counts within the 0.1% tolerance).
"""

from __future__ import annotations

from servelab_autograder.exercises import variants


def _long(rng) -> dict:
    chunk = rng.choice((8192, 16384))
    chunks = rng.randrange(4, 8) if chunk == 16384 else rng.randrange(6, 13)   # never the walkthrough's 131,072
    return {"prompt": chunk * chunks, "chunk": chunk, "budget": chunk + 64, "chunks": chunks}


def _fcfs(rng) -> dict:
    budget = rng.choice((1024, 2048, 4096))
    chunks = rng.randrange(49152 // budget, 98304 // budget + 1)       # well past the walkthrough's 32,768 tokens
    return {"prompt": budget * chunks, "budget": budget, "chunks": chunks}


def _aging(rng) -> dict:
    prompt = rng.choice((16384, 32768, 65536, 131072))
    return {"prompt": prompt, "newcomer": rng.randrange(prompt // 100, prompt // 10, 64),
            "wait_s": rng.randrange(2, 11)}


_SAME = "LLaMA-2-7B on one {gpu}, every sequence at {context} tokens of context, 0.5 ms overhead per step: the largest "
DRILLS = (
    variants.Variant("drill_1", {"gpu": "H100", "context": 4000, "target_ms": 12},
                     lambda rng: {"gpu": "H100", "context": rng.randrange(1000, 4001, 250),
                                  "target_ms": rng.choice((10, 12, 15))},
                     _SAME + "decode batch that meets a {target_ms} ms TPOT target (exactly)"),
    variants.Variant("drill_2", {"prompt": 65536, "budget": 2048, "chunks": 32}, _fcfs,
                     "Llama-3.1-8B on one H100, {budget}-token budget, first come first served: one {prompt:,}-token "
                     "prompt, then ten 256-token prompts right behind it. About how long (s) does each short request "
                     "wait for its first token? Count {chunks} chunk steps of the long prompt and one {budget}-token "
                     "step for the short ones (within 5%)"),
    variants.Variant("drill_3", {"prompt": 98304, "chunk": 16384, "budget": 16448, "chunks": 6}, _long,
                     "Llama-3.1-8B on one H100, chunks of {chunk:,} tokens beside 64 decoders at 2048 tokens of "
                     "context (a budget of {budget:,}): the chats' longest inter-token gap (s) while a "
                     "{prompt:,}-token prompt is prefilled, i.e. the step of its last chunk (within 3%)", key="long"),
    variants.Variant("drill_4", {"prompt": 98304, "chunk": 16384, "budget": 16448, "chunks": 6}, _long,
                     "the same {prompt:,}-token prompt in chunks of {chunk:,}: for how long (s) are new arrivals "
                     "locked out? Count the {chunks} chunk steps alone (within 5%)", key="long"),
    variants.Variant("drill_5", {"tpot_ms": 30, "ttft_s": 1.0, "decodes": 128},
                     lambda rng: {"tpot_ms": rng.choice((25, 30, 40)), "ttft_s": rng.choice((0.5, 1.0, 2.0)),
                                  "decodes": rng.choice((64, 96, 128))},
                     "Llama-3.1-8B on one H100, TPOT target {tpot_ms} ms, TTFT target {ttft_s:g} s, {decodes} decoders "
                     "at 2048 tokens of context, chunks on up to 8000 cached tokens: the admission limit in tokens "
                     "(within 2%)"),
    variants.Variant("drill_6", {"gpu": "H100"}, lambda rng: {"gpu": rng.choice(("H100", "H200"))},
                     "Llama-3-8B on one {gpu}, a step that prefills one chunk and nothing else (no prefix, no "
                     "decodes): the fewest tokens in the chunk for which the step is compute-bound, its compute time "
                     "at least its memory time (exactly)"),
    variants.Variant("drill_7", {"gpu": "H200", "context": 2048, "target_ms": 12},
                     lambda rng: {"gpu": "H200", "context": rng.randrange(1000, 4001, 250),
                                  "target_ms": rng.choice((10, 12, 15))},
                     _SAME + "decode batch that meets a {target_ms} ms TPOT target (exactly)"),
    variants.Variant("drill_8", {"prompt": 65536, "newcomer": 512, "wait_s": 4}, _aging,
                     "shortest-prompt-first with aging, a {prompt:,}-token prompt behind a steady stream of "
                     "{newcomer}-token prompts: the smallest `aging_rate` (tokens a second) at which, after waiting "
                     "{wait_s} s, it is ahead of (or ties) a {newcomer}-token prompt arriving that moment (within "
                     "0.1%)"),
)


def drill_numbers(who: str | None = None) -> variants.Mine:
    """Print the drills with this learner's numbers and return them: ``mine.drill_1.context`` and so on."""
    return variants.show(DRILLS, who)
