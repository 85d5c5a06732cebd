"""One name per knob (docs/VOCABULARY.md): the scheduler families, their block managers and the engine take the
same knob under the same name, by keyword only, and nothing in servelab takes a retired name."""

import ast
import inspect
import re
from pathlib import Path

import pytest

from servelab.engine.llm import LLM
from servelab.schedulers import async_scheduler, radix_scheduler, scheduler, spec_decode, vllm_scheduler

ROOT = Path(__file__).resolve().parents[1]
VOCABULARY = (ROOT / "docs" / "VOCABULARY.md").read_text(encoding="utf-8")
RETIRED = ("pool_size", "max_prefill_tokens", "max_running_requests", "disable_radix_cache", "num_gpu_blocks",
           "num_kvcache_blocks")
CONSTRUCTORS = [scheduler.BlockManager, scheduler.Scheduler, async_scheduler.AsyncScheduler, spec_decode.SpecScheduler,
                spec_decode.LookaheadBlockManager, radix_scheduler.RadixScheduler, vllm_scheduler.BlockPool,
                vllm_scheduler.KVCacheManager, vllm_scheduler.Scheduler, LLM]


def _ours() -> set[str]:
    """The names in the table's servelab column."""
    rows = [ln for ln in VOCABULARY.splitlines() if ln.startswith("| `")]
    return {re.match(r"\| `(\w+)`", ln)[1] for ln in rows}


@pytest.mark.parametrize("cls", CONSTRUCTORS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_knobs_are_keyword_only_and_named_from_the_vocabulary(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert positional in ([], ["model"]), f"{cls.__qualname__} takes {positional} by position"
    assert not any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params), f"{cls.__qualname__}: *args/**kwargs"
    knobs = {p.name for p in params} & (_ours() | set(RETIRED))
    assert knobs <= _ours(), f"{cls.__qualname__} takes {sorted(knobs - _ours())}: see docs/VOCABULARY.md"


def test_the_block_count_and_size_cannot_be_swapped():
    with pytest.raises(TypeError, match="positional"):
        scheduler.Scheduler(16, 4, 64)
    with pytest.raises(TypeError, match="positional"):
        vllm_scheduler.Scheduler(4, 16, 64, 8)


def test_no_servelab_function_takes_a_retired_name():
    found = []
    for path in (ROOT / "lib" / "servelab").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}({n})" for n in names if n in RETIRED]
    assert not found, "retired knob names (docs/VOCABULARY.md): " + ", ".join(found)


def test_one_sampling_params():
    from servelab.engine import llm
    assert llm.SamplingParams is scheduler.SamplingParams
    assert scheduler.SamplingParams(temperature=0).temperature == 0      # greedy
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        scheduler.SamplingParams(temperature=-0.5)
