"""scripts/train_tiny_model.py is bitwise reproducible on one machine and thread count: the tokenizer trained twice
on the shipped corpus is the same, and 20 training steps run twice from the seed give the same weights, bit for
bit (a run from another seed does not). The shipped checkpoint's shape is the script's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from servelab.engine.model import TINY_CHECKPOINT, ModelConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def T():
    spec = importlib.util.spec_from_file_location("_train_tiny", ROOT / "scripts" / "train_tiny_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def deterministic():
    threads, before = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)
    torch.set_num_threads(threads)


def test_twenty_steps_twice_give_the_same_bits(T, deterministic):
    train_docs, held_docs = T.split(T.read_corpus())
    assert held_docs and len(train_docs) > 10 * len(held_docs)
    first, second = T.train_tokenizer(train_docs), T.train_tokenizer(train_docs)
    assert first.to_str() == second.to_str() and first.get_vocab_size() == T.VOCAB
    ids = T.encode(first, train_docs)
    config = ModelConfig(**T.SHAPE)
    runs = [T.train(ids, config, steps=steps, seed=seed, log_every=0, batch=2) for seed, steps in ((0, 20), (0, 20),
                                                                                                  (1, 1))]
    a, b, c = (r.state_dict() for r in runs)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
    with torch.no_grad():     # and it learned: a uniform guess over 2,048 tokens costs ln 2048 = 7.6 nats
        assert float(T.loss_on(runs[0], ids[:4 * (T.SEQ_LEN + 1)].view(4, -1))) < 7.5


def test_the_shipped_checkpoint_is_the_scripts_shape(T):
    config = ModelConfig.from_hf(json.loads((TINY_CHECKPOINT / "config.json").read_text()))
    want = ModelConfig(**T.SHAPE)
    assert config == want
    readme = (TINY_CHECKPOINT / "README.md").read_text()
    assert f"the bar, set before training | {T.BAR_BITS_PER_BYTE} bits/byte: met" in readme
