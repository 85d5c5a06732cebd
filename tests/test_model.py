"""servelab.engine.model runs a Llama or Qwen3 checkpoint exactly as Hugging Face transformers does.

Tiny random models are built with transformers itself (from a config: nothing is downloaded), saved with
`save_pretrained` and loaded into servelab.engine.model by the tensors' own names. Their weights are drawn with a
large initializer range so that the logits have clear winners: greedy decoding is then decided by the model,
not by float rounding, and where a step's top-2 gap is still below fp32 noise the test says so and stops
comparing there.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

from servelab.engine import model as sm  # noqa: E402

NEAR_TIE = 1e-4   # a top-2 logit gap below this is fp32 noise for these sizes


def _hf_llama(tmp_path, **kw):
    cfg = transformers.LlamaConfig(
        vocab_size=96, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, initializer_range=0.25,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 16}, tie_word_embeddings=True, eos_token_id=None,
        bos_token_id=None, **kw)
    return _save(transformers.LlamaForCausalLM(cfg), tmp_path / "llama")


def _hf_qwen3(tmp_path, **kw):
    cfg = transformers.Qwen3Config(
        vocab_size=96, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=6,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, initializer_range=0.25,
        tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, **kw)
    return _save(transformers.Qwen3ForCausalLM(cfg), tmp_path / "qwen3")


def _save(hf, folder, **kw):
    torch.manual_seed(0)
    with torch.no_grad():   # norms away from 1, so a wrong norm cannot hide
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
    hf.eval()
    hf.save_pretrained(folder, **kw)
    return hf, folder


BUILDERS = {"llama": _hf_llama, "qwen3": _hf_qwen3}


def _prompt(n=12, vocab=96, seed=1):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("arch", BUILDERS)
def test_logits_equal_transformers(arch, tmp_path):
    hf, folder = BUILDERS[arch](tmp_path)
    ours = sm.load_checkpoint(folder)
    ids = _prompt()
    with torch.no_grad():
        want = hf(ids[None]).logits[0]
        cache = sm.ContiguousCache(ours.config.num_layers)
        got = ours.logits(ours(ids, torch.arange(len(ids)), cache.attend))
    top2 = want.topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).max() > 0.1, "the logits are nearly flat: the comparison would prove little"
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (got - want).abs().max()


@pytest.mark.parametrize("arch", BUILDERS)
def test_greedy_generate_equals_transformers(arch, tmp_path):
    hf, folder = BUILDERS[arch](tmp_path)
    ours = sm.load_checkpoint(folder)
    ids = _prompt(seed=2)
    n = 16
    with torch.no_grad():
        out = hf.generate(ids[None], max_new_tokens=n, do_sample=False, use_cache=True,
                          output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    want = out.sequences[0, len(ids):].tolist()
    gaps = [float(s[0].topk(2).values[0] - s[0].topk(2).values[1]) for s in out.scores]
    got = sm.generate_alone(ours, ids.tolist(), n)
    tie = next((i for i, g in enumerate(gaps) if g < NEAR_TIE), None)
    if tie is not None:   # said, not flaked: compare up to the near tie only
        print(f"{arch}: step {tie}'s top-2 gap {gaps[tie]:.2e} is below fp32 noise; compared {tie} tokens")
    assert got[:tie] == want[:tie], (got, want)


def test_a_sharded_checkpoint_loads(tmp_path):
    hf, _ = _hf_llama(tmp_path)
    folder = tmp_path / "sharded"
    hf.save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    ours = sm.load_checkpoint(folder)
    ids = _prompt()
    with torch.no_grad():
        cache = sm.ContiguousCache(ours.config.num_layers)
        got = ours.logits(ours(ids, torch.arange(len(ids)), cache.attend))
        assert torch.allclose(got, hf(ids[None]).logits[0], atol=1e-4, rtol=1e-4)


def test_a_missing_or_misshapen_tensor_is_named(tmp_path):
    from safetensors.torch import load_file, save_file

    _, folder = _hf_qwen3(tmp_path)
    path = folder / "model.safetensors"
    tensors = load_file(path)
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"no tensor 'model\.layers\.1\.self_attn\.k_norm\.weight'"):
        sm.load_checkpoint(folder)
    tensors["model.layers.1.self_attn.k_norm.weight"] = torch.ones(9)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"model\.layers\.1\.self_attn\.k_norm\.weight: shape \(9,\) in the "
                                         r"checkpoint, \(8,\) expected"):
        sm.load_checkpoint(folder)


def test_an_unsupported_architecture_is_refused_by_name(tmp_path):
    _, folder = _hf_llama(tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(architectures=["MistralForCausalLM"], model_type="mistral")
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"unsupported architecture \(MistralForCausalLM\).*LlamaForCausalLM"):
        sm.load_checkpoint(folder)
    with pytest.raises(ValueError, match="attention_bias"):
        sm.ModelConfig.from_hf({**cfg, "architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                "attention_bias": True})


def test_legacy_rope_keys_read_as_the_new_ones():
    new = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 8, "hidden_size": 8,
           "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
           "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    old = {**{k: v for k, v in new.items() if k != "rope_parameters"}, "rope_theta": 500000.0,
           "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}}
    assert sm.ModelConfig.from_hf(new) == sm.ModelConfig.from_hf(old)
    assert sm.ModelConfig.from_hf(new).rope_theta == 500000.0


def test_random_weights_are_seeded():
    config = sm.ModelConfig.tiny("qwen3")
    ids = _prompt(vocab=config.vocab_size)

    def logits(seed):
        m = sm.Model.random(config, seed=seed)
        with torch.no_grad():
            return m.logits(m(ids, torch.arange(len(ids)), sm.ContiguousCache(config.num_layers).attend))

    assert torch.equal(logits(3), logits(3)) and not torch.allclose(logits(3), logits(4))
    top2 = logits(3).topk(2, dim=-1).values
    assert (top2[:, 0] - top2[:, 1]).min() > NEAR_TIE * 10, "random logits too flat for greedy decoding"
