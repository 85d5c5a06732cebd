"""A small decoder with the shape of Llama and Qwen3, in torch: what the capstone engine serves.

One forward pass takes a flat batch of tokens (`input_ids`, `positions`, both `[n]`) and hands each
layer's attention to a callable, so the same weights run under a contiguous per-sequence cache
(`ContiguousCache`, the plain loop the engine is measured against) or under the engine's paged KV cache.

    config = ModelConfig.tiny()                      # or ModelConfig.from_hf(json.load(...))
    model = Model.random(config, seed=0)             # seeded random weights
    model = load_checkpoint("path/to/llama-or-qwen3")  # config.json + *.safetensors, sharded or not

Supported checkpoints: `LlamaForCausalLM` (explicit `head_dim`, `rope_scaling` / `rope_parameters` of type
`llama3`, tied embeddings) and `Qwen3ForCausalLM` (RMSNorm on each query and key head before the rotary
embedding). Anything else is refused by name. Nothing is ever downloaded.

Parameter names are Hugging Face's own (`model.layers.0.self_attn.q_proj.weight`, ...), so a checkpoint's
tensors load by name and a missing or misshapen one is named in the error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen3ForCausalLM": "qwen3"}

# the capstone's model, trained by `make model` (scripts/train_tiny_model.py) and shipped with the package
TINY_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "tiny"

# Attention as the model sees it: (layer, q [n, heads, d], k [n, kv_heads, d], v [n, kv_heads, d]) -> [n, heads, d]
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class ModelConfig:
    architecture: str                 # "llama" or "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "llama3", "factor", "low_freq_factor", ...} or None
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 4096
    eos_token_id: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if self.architecture not in ARCHITECTURES.values():
            raise ValueError(f"architecture {self.architecture!r}: servelab.engine.model knows llama and qwen3")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{self.num_heads} query heads cannot share {self.num_kv_heads} KV heads evenly")

    @property
    def qk_norm(self) -> bool:
        return self.architecture == "qwen3"

    @classmethod
    def tiny(cls, architecture: str = "llama", **overrides) -> ModelConfig:
        """A model small enough for the interpreter and the 2-core machine: 2 layers, 4 query heads on 2 KV heads."""
        base = dict(architecture=architecture, vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2,
                    num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=1024)
        return cls(**{**base, **overrides})

    @classmethod
    def from_hf(cls, cfg: dict) -> ModelConfig:
        """From a Hugging Face `config.json` (as a dict). Refuses, by name, what this model does not implement."""
        names = cfg.get("architectures") or []
        arch = next((ARCHITECTURES[n] for n in names if n in ARCHITECTURES), None)
        if arch is None or cfg.get("model_type") not in ARCHITECTURES.values():
            what = ", ".join(names) or cfg.get("model_type") or "no architecture named"
            raise ValueError(f"unsupported architecture ({what}): servelab.engine.model loads "
                             f"{' and '.join(ARCHITECTURES)} checkpoints only")
        unsupported = [key for key, off in (("attention_bias", False), ("mlp_bias", False),
                                            ("use_sliding_window", False)) if cfg.get(key, off) != off]
        if cfg.get("hidden_act", "silu") != "silu":
            unsupported.append(f"hidden_act={cfg['hidden_act']}")
        rope = dict(cfg.get("rope_parameters") or {})          # transformers 5 writes this ...
        legacy = cfg.get("rope_scaling") or {}                    # ... older checkpoints this, and rope_theta
        rope.update({k: v for k, v in legacy.items() if k not in rope})
        if "type" in rope and "rope_type" not in rope:
            rope["rope_type"] = rope.pop("type")
        theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        kind = rope.get("rope_type", "default")
        if kind not in ("default", "llama3") or (kind == "llama3" and arch != "llama"):
            unsupported.append(f"rope_type={kind}")
        if unsupported:
            raise ValueError(f"unsupported in this {arch} checkpoint: {', '.join(unsupported)}")
        heads = int(cfg["num_attention_heads"])
        eos = cfg.get("eos_token_id")
        return cls(architecture=arch, vocab_size=int(cfg["vocab_size"]), hidden_size=int(cfg["hidden_size"]),
                   intermediate_size=int(cfg["intermediate_size"]), num_layers=int(cfg["num_hidden_layers"]),
                   num_heads=heads, num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads),
                   rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), rope_theta=theta,
                   rope_scaling=rope if kind == "llama3" else None,
                   tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                   max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
                   eos_token_id=tuple(eos if isinstance(eos, list) else [] if eos is None else [eos]))


# ------------------------------------------------------------------------------------------------
# rotary position embeddings


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """The rotation frequency of each pair of dimensions, [head_dim / 2], float32. Llama 3's scaling keeps the
    fast rotations, slows the slow ones by `factor`, and blends the band between the two wavelength limits."""
    d = config.head_dim
    inv = 1.0 / (config.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    s = config.rope_scaling
    if s is None:
        return inv
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_len = float(s["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    blend = ((old_len / wavelen - low) / (high - low)).clamp(0.0, 1.0)   # 0: slow end, 1: fast end
    scaled = torch.where(wavelen > old_len / low, inv / factor, inv)
    band = (wavelen <= old_len / low) & (wavelen >= old_len / high)
    scaled = torch.where(band, (1 - blend) * inv / factor + blend * inv, scaled)
    return scaled


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin for each token, [n, head_dim]: the two halves of a head rotate by the same angles."""
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each head of x [n, heads, d]: dimension i pairs with i + d/2 (the layout Llama's weights use)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos[:, None, :].to(x.dtype)) + (rotated * sin[:, None, :].to(x.dtype))


# ------------------------------------------------------------------------------------------------
# the layers


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.to(torch.float32)
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        c = config
        self.num_heads, self.num_kv_heads, self.head_dim = c.num_heads, c.num_kv_heads, c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_kv_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_heads * c.head_dim, c.hidden_size, bias=False)
        if c.qk_norm:
            self.q_norm = RMSNorm(c.head_dim, c.rms_norm_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_norm_eps)

    def forward(self, layer: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Attend):
        n = x.shape[0]
        q = self.q_proj(x).view(n, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(n, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):   # Qwen3 normalises each head before rotating it
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self.o_proj(attend(layer, q, k, v).reshape(n, self.num_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, layer, x, cos, sin, attend):
        x = x + self.self_attn(layer, self.input_layernorm(x), cos, sin, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Model(nn.Module):
    """The whole decoder. `forward(input_ids, positions, attend)` -> hidden states [n, hidden];
    `logits(hidden)` -> [n, vocab] (call it on the rows you sample from only)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.model = Decoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)

    @classmethod
    def random(cls, config: ModelConfig, seed: int = 0, scale: float = 0.2, dtype=torch.float32,
               device: str | torch.device = "cpu") -> Model:
        """Seeded random weights: matrices ~ N(0, scale^2 / fan_in * 64), norms around 1. The default scale
        gives logits with clear winners, so greedy decoding is not decided by rounding. The weights are drawn
        on `device` (a real model's shape is drawn where it will run; the values differ from the CPU's)."""
        with torch.device(device):
            model = cls(config).to(dtype)
        gen = torch.Generator(device=device).manual_seed(seed)
        with torch.no_grad():
            for name, p in sorted(model.named_parameters()):
                noise = torch.randn(p.shape, generator=gen, device=device, dtype=torch.float32)
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * noise)
                else:
                    p.copy_(noise * scale * (64 / p.shape[-1]) ** 0.5)
        return model.eval()

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        cos, sin = rope_cos_sin(positions, self.inv_freq)
        x = self.model.embed_tokens(input_ids)
        for i, layer in enumerate(self.model.layers):
            x = layer(i, x, cos, sin, attend)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()


# ------------------------------------------------------------------------------------------------
# attention over one sequence's contiguous cache: the plain loop


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: int = 0) -> torch.Tensor:
    """q [n, heads, d] for positions past..past+n-1 over k, v [past + n, kv_heads, d]: each query sees the keys
    at or before its own position. Query head h reads KV head h // (heads / kv_heads)."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(q.shape[-1])
    keys, queries = torch.arange(k.shape[0], device=q.device), past + torch.arange(q.shape[0], device=q.device)
    allowed = keys[None, :] <= queries[:, None]
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float()).to(q.dtype)


class ContiguousCache:
    """One sequence's K and V, grown one forward at a time: the cache a single-request loop keeps."""

    def __init__(self, num_layers: int):
        self.k: list[torch.Tensor | None] = [None] * num_layers
        self.v: list[torch.Tensor | None] = [None] * num_layers
        self.length = 0

    def attend(self, layer: int, q, k, v):
        past = 0 if self.k[layer] is None else self.k[layer].shape[0]
        self.k[layer] = k if self.k[layer] is None else torch.cat([self.k[layer], k])
        self.v[layer] = v if self.v[layer] is None else torch.cat([self.v[layer], v])
        if layer == 0:
            self.length = past + q.shape[0]
        return causal_attention(q, self.k[layer], self.v[layer], past)


@torch.no_grad()
def generate_alone(model: Model, prompt: list[int], max_tokens: int) -> list[int]:
    """Greedy decoding of one prompt with a contiguous cache: the answer batching must not change."""
    if not prompt:
        raise ValueError("the prompt is empty")
    cache = ContiguousCache(model.config.num_layers)
    device = next(model.parameters()).device      # the CPU, or the GPU a checkpoint was moved to
    ids, out = list(prompt), []
    step = torch.tensor(ids, device=device)
    for _ in range(max_tokens):
        positions = torch.arange(cache.length, cache.length + len(step), device=device)
        hidden = model(step, positions, cache.attend)
        token = int(model.logits(hidden[-1:]).argmax(-1))
        out.append(token)
        if token in model.config.eos_token_id:
            break
        step = torch.tensor([token], device=device)
    return out


# ------------------------------------------------------------------------------------------------
# checkpoints


def _tensors(folder: Path) -> dict[str, tuple[Path, str]]:
    """checkpoint tensor name -> (file, name) from model.safetensors or model.safetensors.index.json."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return {name: (folder / shard, name) for name, shard in weight_map.items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return {name: (single, name) for name in f.keys()}


def load_checkpoint(folder: str | Path, dtype: torch.dtype = torch.float32) -> Model:
    """A Llama or Qwen3 checkpoint folder (`config.json` + `*.safetensors`, sharded or not) as a Model.
    Every tensor the config implies must be there with its shape; the error names the first that is not."""
    from safetensors import safe_open

    folder = Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"{folder}: no config.json (a Hugging Face checkpoint folder holds one)")
    config = ModelConfig.from_hf(json.loads(cfg_path.read_text(encoding="utf-8")))
    model = Model(config)
    stored = _tensors(folder)
    wanted = dict(model.state_dict())
    if config.tie_word_embeddings:
        wanted.pop("lm_head.weight")      # the same tensor as the embedding
        stored.pop("lm_head.weight", None)
    extra = sorted(n for n in stored if n not in wanted and not n.endswith("rotary_emb.inv_freq"))
    if extra:
        raise ValueError(f"{folder}: tensors this {config.architecture} config does not use, e.g. {extra[0]!r} "
                         f"({len(extra)} in all): does config.json match the weights?")
    state = {}
    with ExitStack() as files:
        handles = {}   # one open file per shard
        for name, param in wanted.items():
            if name not in stored:
                raise ValueError(f"{folder}: the checkpoint has no tensor {name!r}")
            path, key = stored[name]
            if path not in handles:
                handles[path] = files.enter_context(safe_open(str(path), framework="pt"))
            tensor = handles[path].get_tensor(key)
            if tuple(tensor.shape) != tuple(param.shape):
                raise ValueError(f"{name}: shape {tuple(tensor.shape)} in the checkpoint, {tuple(param.shape)} "
                                 f"expected from config.json")
            state[name] = tensor
    model.load_state_dict(state, strict=False)
    return model.to(dtype).eval()
