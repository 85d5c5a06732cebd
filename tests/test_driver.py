"""One driver for every scheduler family: each family's adapter meets the Family protocol, and every run is a list
of the one StepRecord (the old record names are that class)."""

import pytest

from servelab.engine import asynchronous, radix, speculative, v1
from servelab.engine.driver import Engine, Family, StepRecord, drive, expected
from servelab.schedulers import vllm_scheduler as vs
from servelab.schedulers.async_scheduler import AsyncScheduler
from servelab.schedulers.radix_scheduler import RadixScheduler, Req
from servelab.schedulers.scheduler import SamplingParams, Scheduler, Sequence
from servelab.schedulers.spec_decode import SpecScheduler


def _seqs():
    return [Sequence([1, 2, 3], SamplingParams(max_tokens=3), name="A"),
            Sequence([4, 5], SamplingParams(max_tokens=2), name="B")]


def test_every_family_meets_the_protocol_and_records_the_one_step_record():
    cfg = dict(num_blocks=8, block_size=4, max_num_batched_tokens=16)
    runs = {
        "nano": drive(Engine(Scheduler(**cfg)), _seqs()),
        "radix": drive(radix.RadixEngine(RadixScheduler(kv_capacity_tokens=32, max_num_batched_tokens=16)),
                       [Req([1, 2, 3], 3, name="A"), Req([4, 5], 2, name="B")]),
        "v1": drive(v1.V1Engine(vs.Scheduler(block_size=4, num_blocks=8, max_num_batched_tokens=16, max_num_seqs=4)),
                    [vs.Request("A", [1, 2, 3], 3), vs.Request("B", [4, 5], 2)]),
        "async": drive(asynchronous.AsyncEngine(AsyncScheduler(**cfg)), _seqs(), overlap=True),
        "spec": drive(speculative.SpecEngine(SpecScheduler(**cfg), lambda seq, k: []), _seqs()),
    }
    for family, trace in runs.items():
        assert trace and all(type(r) is StepRecord for r in trace), family
        assert [r.step for r in trace] == list(range(len(trace))), family
        assert sorted(n for r in trace for n in r.finished) == ["A", "B"], family
        assert not trace[-1].waiting and not trace[-1].running, family
    assert [r.kind for r in runs["v1"]] == ["M"] * len(runs["v1"]) and runs["v1"][-1].output.step >= 0
    assert runs["nano"][0].free_blocks == runs["nano"][0].extra["free_blocks"]
    adapters = [Engine(Scheduler(**cfg)), radix.RadixEngine(RadixScheduler(kv_capacity_tokens=32,
                                                                          max_num_batched_tokens=16)),
                v1.V1Engine(vs.Scheduler(block_size=4, num_blocks=8, max_num_batched_tokens=16, max_num_seqs=4)),
                asynchronous.AsyncEngine(AsyncScheduler(**cfg)), speculative.SpecEngine(SpecScheduler(**cfg), None)]
    for adapter in adapters:
        assert isinstance(adapter, Family), type(adapter).__name__


def test_the_old_record_names_are_the_one_record():
    assert radix.RadixStepRecord is StepRecord and v1.StepRecord is StepRecord


def test_an_extra_reads_as_an_attribute_and_a_missing_one_raises():
    record = StepRecord(step=0, is_prefill=True, scheduled=[("A", 3)], cached=[("A", 0)], preempted=[],
                        extra={"free_blocks": 5})
    assert record.free_blocks == 5 and record.kind == "P" and record.num_batched_tokens == 3
    with pytest.raises(AttributeError, match="no attribute 'lengths'"):
        record.lengths  # noqa: B018


def test_overlap_generates_what_the_synchronous_loop_generates():
    sync, ahead = _seqs(), _seqs()
    drive(Engine(Scheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16)), sync)
    drive(asynchronous.AsyncEngine(AsyncScheduler(num_blocks=8, block_size=4, max_num_batched_tokens=16)), ahead,
          overlap=True)
    assert [s.completion_token_ids for s in ahead] == [s.completion_token_ids for s in sync] == \
        [expected([1, 2, 3], 3), expected([4, 5], 2)]
