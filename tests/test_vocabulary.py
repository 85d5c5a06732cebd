"""One name per knob (docs/VOCABULARY.md): the scheduler families, their block managers and the engine take the
same knob under the same name, by keyword only, and nothing in servelab takes a retired name. One `EngineConfig`
holds those knobs and builds every family."""

import ast
import inspect
import re
from pathlib import Path

import pytest

from servelab.engine.llm import LLM
from servelab.engine.model import Model, ModelConfig
from servelab.schedulers import async_scheduler, radix_scheduler, scheduler, spec_decode, vllm_scheduler
from servelab.schedulers.config import EngineConfig

ROOT = Path(__file__).resolve().parents[1]
VOCABULARY = (ROOT / "docs" / "VOCABULARY.md").read_text(encoding="utf-8")
RETIRED = ("pool_size", "max_prefill_tokens", "max_running_requests", "disable_radix_cache", "num_gpu_blocks",
           "num_kvcache_blocks", "enable_caching")
CONSTRUCTORS = [scheduler.BlockManager, scheduler.Scheduler, async_scheduler.AsyncScheduler, spec_decode.SpecScheduler,
                spec_decode.LookaheadBlockManager, radix_scheduler.RadixScheduler, vllm_scheduler.BlockPool,
                vllm_scheduler.KVCacheManager, vllm_scheduler.Scheduler, LLM, EngineConfig]


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


CONFIG = EngineConfig(num_blocks=12, block_size=4, max_num_batched_tokens=32, max_num_seqs=3,
                      enable_prefix_caching=False)


def _knobs(sch) -> dict:
    """The knobs a built scheduler runs with, read from where each family keeps them."""
    knobs = {"max_num_batched_tokens": sch.max_num_batched_tokens, "max_num_seqs": sch.max_num_seqs}
    if isinstance(sch, radix_scheduler.RadixScheduler):
        return {**knobs, "kv_capacity_tokens": sch.kv_capacity_tokens,
                "enable_prefix_caching": not sch.tree_cache.disable}
    if isinstance(sch, vllm_scheduler.Scheduler):
        manager = sch.kv_cache_manager
        assert manager.enable_prefix_caching == manager.block_pool.enable_prefix_caching == sch.enable_prefix_caching
        blocks = len(manager.block_pool.blocks)
    else:
        manager = sch.block_manager
        blocks = len(manager.blocks)
    return {**knobs, "num_blocks": blocks, "block_size": manager.block_size,
            "kv_capacity_tokens": blocks * manager.block_size, "enable_prefix_caching": manager.enable_prefix_caching}


FAMILIES = [scheduler.Scheduler, async_scheduler.AsyncScheduler, spec_decode.SpecScheduler,
            radix_scheduler.RadixScheduler, vllm_scheduler.Scheduler]


@pytest.mark.parametrize("cls", FAMILIES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_family_built_from_one_config_has_its_knobs(cls):
    sch = cls.from_config(CONFIG)
    assert type(sch) is cls
    want = {"max_num_batched_tokens": 32, "max_num_seqs": 3, "kv_capacity_tokens": 48, "enable_prefix_caching": False}
    if cls is not radix_scheduler.RadixScheduler:
        want |= {"num_blocks": 12, "block_size": 4}
    assert _knobs(sch) == want
    assert CONFIG.kv_capacity_tokens == 48


def test_a_config_and_the_keywords_build_the_same_scheduler():
    assert _knobs(scheduler.Scheduler.from_config(CONFIG, eos=7)) == _knobs(scheduler.Scheduler(
        num_blocks=12, block_size=4, max_num_batched_tokens=32, max_num_seqs=3, enable_prefix_caching=False))
    assert spec_decode.SpecScheduler.from_config(CONFIG, num_speculative_tokens=5).num_speculative_tokens == 5
    with pytest.raises(TypeError, match="multiple values for keyword argument 'max_num_seqs'"):
        scheduler.Scheduler.from_config(CONFIG, max_num_seqs=8)      # the config holds that knob: no second value
    with pytest.raises(TypeError, match="unexpected keyword argument 'policy'"):
        scheduler.Scheduler.from_config(CONFIG, policy="lpm")        # nano-vllm is FCFS only


def test_the_engine_builds_its_scheduler_from_its_config():
    model = Model.random(ModelConfig.tiny(), seed=0)
    llm = LLM.from_config(model, CONFIG)
    assert llm.config == CONFIG and type(llm.scheduler) is scheduler.Scheduler and _knobs(llm.scheduler) == _knobs(
        scheduler.Scheduler.from_config(CONFIG))
    radix = LLM.from_config(model, CONFIG, cache="radix")
    assert type(radix.scheduler) is radix_scheduler.RadixScheduler and radix.scheduler.kv_capacity_tokens == 48
    assert LLM(model, num_blocks=12, block_size=4, max_num_batched_tokens=32, max_num_seqs=3,
               enable_prefix_caching=False).config == CONFIG


@pytest.mark.parametrize("knob", ["num_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs"])
@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "8", None])
def test_a_bad_knob_is_refused_by_name(knob, bad):
    with pytest.raises(ValueError, match=f"^{knob} must be an int >= 1, got {re.escape(repr(bad))}$"):
        EngineConfig(**{"num_blocks": 8, "block_size": 4, "max_num_batched_tokens": 16, "max_num_seqs": 2, knob: bad})


def test_the_config_is_frozen_and_checks_its_switch_and_regrouping():
    with pytest.raises(ValueError, match="enable_prefix_caching must be True or False, got 1"):
        EngineConfig(num_blocks=8, block_size=4, max_num_batched_tokens=16, max_num_seqs=2, enable_prefix_caching=1)
    with pytest.raises(TypeError):
        EngineConfig(8, 4, 16, 2)                                            # keywords only
    with pytest.raises(AttributeError):
        CONFIG.num_blocks = 3                                                # frozen
    assert CONFIG.regrouped(16) == EngineConfig(num_blocks=3, block_size=16, max_num_batched_tokens=32, max_num_seqs=3,
                                                enable_prefix_caching=False)
    assert CONFIG.regrouped(5).kv_capacity_tokens == 45                      # 48 tokens hold 9 blocks of 5
    with pytest.raises(ValueError, match="a pool of 48 tokens holds no block of 64 tokens"):
        CONFIG.regrouped(64)
