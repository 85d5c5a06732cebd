"""What the cost model prices: the model (its shapes), the GPU (its roofs and memory) and the links between GPUs.

Shapes come from each model's published config, the GPU figures from the vendors' datasheets; each preset says
where its numbers come from. A `ModelSpec` is a dense GQA model, or a mixture-of-experts model, or one with
multi-head latent attention (MLA), and `shard(tp)` is one GPU's part of it under tensor parallelism.

>>> LLAMA3_8B.kv_bytes_per_token, round(H100_SXM.ridge_flops_per_byte)
(131072, 295)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

__all__ = ["A100_PCIE", "DEEPSEEK_V3", "DEFAULT_LINK_LATENCY_S", "GPUSpec", "H100_SXM", "H200", "KiB", "LLAMA2_7B",
           "LLAMA31_8B", "LLAMA3_8B", "LinkSpec", "MISTRAL_7B", "MIXTRAL_8X7B", "MiB", "ModelSpec", "NVLINK_H100",
           "RDMA_400G"]

KiB = 1024
MiB = 1024 ** 2


def _check_positive(owner: str, **values):
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{owner}.{name} must be > 0, got {value!r}")


def _extension(default: int = 0):
    """A field for a model beyond a dense GQA one (experts, a latent KV): at its default the model is plain, and
    its plain form (what a grading case sends) leaves the field out, so a dense model's case is what it was."""
    return field(default=default, metadata={"plain": "omit at default"})


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer of the LLaMA family: GQA attention, gated (SwiGLU) MLP, RMSNorm; optionally
    mixture-of-experts MLPs (`num_experts` > 0) and multi-head latent attention (`kv_lora_rank` > 0).

    `kv_bytes_per_token` is what one token of context costs in the KV cache: a key and a value vector
    of kv_heads x head_dim elements in every layer (with MLA: one latent of kv_lora_rank elements and one rotary
    key of qk_rope_head_dim, shared by every head). The derived sizes are computed once and cached,
    since the simulator prices every step with them.

    A MoE layer holds `num_experts` routed experts and `num_shared_experts` always-on ones, each a SwiGLU MLP of
    `moe_intermediate_size`, and a router (hidden x experts); a token runs `experts_per_token` routed experts. The
    first `first_k_dense_layers` layers keep a dense MLP of `intermediate_size`. With MLA, `head_dim` is the
    query and key head size (a no-rotary part plus `qk_rope_head_dim`), `v_head_dim` the value's, and
    `q_lora_rank` the query's low-rank width (0: a full-rank query).

    >>> LLAMA2_7B.kv_bytes_per_token // KiB, LLAMA3_8B.kv_bytes_per_token // KiB
    (512, 128)
    >>> LLAMA2_7B.param_count
    6738415616
    >>> round(MIXTRAL_8X7B.param_count / 1e9, 2), round(MIXTRAL_8X7B.active_params / 1e9, 2)
    (46.7, 12.88)
    >>> DEEPSEEK_V3.kv_bytes_per_token          # 61 layers x (512 + 64) elements x 2 bytes
    70272
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    bytes_per_param: float = 2      # bf16 / fp16 weights
    bytes_per_kv_element: float = 2  # bf16 / fp16 KV cache; 1 for an fp8 cache
    tie_word_embeddings: bool = False
    max_position_embeddings: int | None = None  # the longest context the model takes; None: not stated
    num_experts: int = _extension()
    experts_per_token: int = _extension()
    moe_intermediate_size: int = _extension()
    num_shared_experts: int = _extension()
    first_k_dense_layers: int = _extension()
    kv_lora_rank: int = _extension()
    q_lora_rank: int = _extension()
    qk_rope_head_dim: int = _extension()
    v_head_dim: int = _extension()

    def __post_init__(self):
        owner = f"ModelSpec({self.name!r})"
        _check_positive(owner, num_layers=self.num_layers, hidden_size=self.hidden_size,
                        num_heads=self.num_heads, num_kv_heads=self.num_kv_heads, head_dim=self.head_dim,
                        intermediate_size=self.intermediate_size, vocab_size=self.vocab_size,
                        bytes_per_param=self.bytes_per_param, bytes_per_kv_element=self.bytes_per_kv_element)
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"{owner}: num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads}): each KV head serves a whole group of query heads")
        for name in ("num_experts", "experts_per_token", "moe_intermediate_size", "num_shared_experts",
                     "first_k_dense_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{owner}.{name} must be an integer >= 0, got {value!r}")
        if self.num_experts:
            if not 1 <= self.experts_per_token <= self.num_experts or not self.moe_intermediate_size:
                raise ValueError(f"{owner}: a MoE model needs 1 <= experts_per_token <= num_experts "
                                 f"({self.experts_per_token} of {self.num_experts}) and a moe_intermediate_size > 0")
            if self.first_k_dense_layers >= self.num_layers:
                raise ValueError(f"{owner}: first_k_dense_layers ({self.first_k_dense_layers}) leaves no MoE layer "
                                 f"of {self.num_layers}")
        elif self.experts_per_token or self.moe_intermediate_size or self.num_shared_experts:
            raise ValueError(f"{owner}: experts_per_token, moe_intermediate_size and num_shared_experts need "
                             f"num_experts > 0")
        if self.kv_lora_rank and not (0 < self.qk_rope_head_dim < self.head_dim and self.v_head_dim):
            raise ValueError(f"{owner}: an MLA model needs 0 < qk_rope_head_dim < head_dim "
                             f"({self.qk_rope_head_dim}, {self.head_dim}) and a v_head_dim > 0")
        if not self.kv_lora_rank and (self.q_lora_rank or self.qk_rope_head_dim or self.v_head_dim):
            raise ValueError(f"{owner}: q_lora_rank, qk_rope_head_dim and v_head_dim describe MLA: give kv_lora_rank")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @cached_property
    def layer_attention_params(self) -> int:
        """One layer's attention weights. GQA: q and o (heads x head_dim wide), k and v (kv_heads x head_dim). MLA:
        the query (through its low rank when q_lora_rank > 0), the shared down-projection to the latent and the
        rotary key, the up-projection of the latent to each head's key (no-rotary part) and value, and o."""
        h, heads = self.hidden_size, self.num_heads
        if not self.is_mla:
            return h * (2 * heads * self.head_dim + 2 * self.num_kv_heads * self.head_dim)
        q_out = heads * self.head_dim
        q = h * self.q_lora_rank + self.q_lora_rank * q_out if self.q_lora_rank else h * q_out
        kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * heads * (self.head_dim - self.qk_rope_head_dim + self.v_head_dim)
        return q + kv_down + kv_up + heads * self.v_head_dim * h

    @cached_property
    def expert_params(self) -> int:
        """One expert's weights: a SwiGLU MLP (gate, up, down) of moe_intermediate_size."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.first_k_dense_layers if self.is_moe else 0

    @cached_property
    def layer_matmul_params(self) -> int:
        """Weights of one dense layer's matmuls: attention and the MLP's gate, up and down projections."""
        return self.layer_attention_params + 3 * self.hidden_size * self.intermediate_size

    def _moe_layer_params(self, routed_experts: int) -> int:
        """One MoE layer's matmul weights when `routed_experts` of its routed experts count."""
        return (self.layer_attention_params + (routed_experts + self.num_shared_experts) * self.expert_params
                + self.hidden_size * self.num_experts)     # the router

    @cached_property
    def matmul_params(self) -> int:
        """The weights every token goes through: all layers' matmuls (not the embeddings or the LM head); in a MoE
        model only the experts a token is routed to (what its FLOPs count)."""
        if not self.is_moe:
            return self.num_layers * self.layer_matmul_params
        return (self.first_k_dense_layers * self.layer_matmul_params
                + self.num_moe_layers * self._moe_layer_params(self.experts_per_token))

    @cached_property
    def _stored_matmul_params(self) -> int:
        if not self.is_moe:
            return self.matmul_params
        return (self.first_k_dense_layers * self.layer_matmul_params
                + self.num_moe_layers * self._moe_layer_params(self.num_experts))

    @cached_property
    def _other_params(self) -> int:
        norms = (2 * self.num_layers + 1) * self.hidden_size   # two RMSNorms per layer and a final one
        if self.is_mla:   # MLA norms its latent (and its low-rank query) too
            norms += self.num_layers * (self.kv_lora_rank + self.q_lora_rank)
        return norms + self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    @cached_property
    def param_count(self) -> int:
        """Every weight the model stores (a MoE model: all its experts)."""
        return self._stored_matmul_params + self._other_params

    @cached_property
    def active_params(self) -> int:
        """The weights one token uses: param_count for a dense model; a MoE model counts its routed experts."""
        return self.matmul_params + self._other_params

    @cached_property
    def weight_bytes(self) -> float:
        return self.param_count * self.bytes_per_param

    def weight_bytes_read(self, num_tokens: int) -> float:
        """The weight bytes a step computing `num_tokens` tokens reads: all of them for a dense model. A MoE layer
        reads only the experts its tokens are routed to: with each token picking experts_per_token of num_experts
        uniformly at random, E x (1 - (1 - k/E)^n) of them are expected (routing in practice is less even).

        >>> round(MIXTRAL_8X7B.weight_bytes_read(1) / MIXTRAL_8X7B.weight_bytes, 3)   # 2 of 8 experts
        0.276
        """
        if not self.is_moe:
            return self.weight_bytes
        e = self.num_experts
        touched = e * (1.0 - (1.0 - self.experts_per_token / e) ** num_tokens)
        idle = self.num_moe_layers * (e - touched) * self.expert_params
        return self.weight_bytes - idle * self.bytes_per_param

    @cached_property
    def kv_bytes_per_token(self) -> float:
        if self.is_mla:
            return self.num_layers * (self.kv_lora_rank + self.qk_rope_head_dim) * self.bytes_per_kv_element
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_kv_element

    @cached_property
    def attention_flops_per_pair(self) -> float:
        """FLOPs of attention for one (query, key) pair over all layers and heads: 2 per multiply-add of q.k and of
        p.v. MLA is priced as it decodes, attending in the latent: q.k over kv_lora_rank + qk_rope_head_dim
        elements and p.v over kv_lora_rank, for every head."""
        if self.is_mla:
            return 2.0 * self.num_layers * self.num_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 4.0 * self.num_layers * self.num_heads * self.head_dim

    def shard(self, tp: int) -> ModelSpec:
        """One GPU's part of the model under tensor parallelism of degree `tp`: query heads, MLP and expert widths and
        the vocabulary (embedding and LM head) split `tp` ways; norms, the router and MLA's down-projections whole
        on every GPU. KV heads: max(1, kv_heads // tp) per GPU, so below `tp` KV heads each is copied on
        tp // kv_heads GPUs (as vLLM 0.33.0's `ModelConfig.get_num_kv_heads`); MLA's latent is whole on every GPU.

        >>> s = LLAMA3_8B.shard(16)                 # 8 KV heads on 16 GPUs: one each, every head twice
        >>> s.num_heads, s.num_kv_heads, s.kv_bytes_per_token / LLAMA3_8B.kv_bytes_per_token
        (2, 1, 0.125)
        >>> DEEPSEEK_V3.shard(8).kv_bytes_per_token == DEEPSEEK_V3.kv_bytes_per_token
        True
        """
        if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"tp must be an integer >= 1, got {tp!r}")
        if tp == 1:
            return self
        kv = self.num_kv_heads
        widths = {"num_heads": self.num_heads, "intermediate_size": self.intermediate_size,
                  "moe_intermediate_size": self.moe_intermediate_size}
        uneven = [f"{name} ({value})" for name, value in widths.items() if value % tp]
        if not self.is_mla and (kv % tp if kv >= tp else tp % kv):
            uneven.append(f"num_kv_heads ({kv}; below tp, tp must be a multiple of it)")
        if uneven:
            raise ValueError(f"{self.name} does not split {tp} ways: {', '.join(uneven)}")
        return replace(self, name=f"{self.name}, 1/{tp} (TP{tp})", num_heads=self.num_heads // tp,
                       num_kv_heads=self.num_heads // tp if self.is_mla else max(1, kv // tp),
                       intermediate_size=self.intermediate_size // tp,
                       moe_intermediate_size=self.moe_intermediate_size // tp,
                       vocab_size=-(-self.vocab_size // tp))


# Source: the published Hugging Face config of meta-llama/Llama-2-7b-hf (hidden_size 4096,
# intermediate_size 11008, 32 layers, 32 attention heads, num_key_value_heads 32, vocab_size 32000,
# untied embeddings), the same shapes as Table 1 of the Llama 2 paper (Touvron et al., 2023).
# KV per token in fp16: 2 (K and V) x 32 layers x 4096 x 2 bytes = 524,288 B = 512 KiB.
LLAMA2_7B = ModelSpec("LLaMA-2-7B", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=32, head_dim=128,
                      intermediate_size=11008, vocab_size=32000, max_position_embeddings=4096)

# Source: the published Hugging Face config of meta-llama/Meta-Llama-3-8B (hidden_size 4096,
# intermediate_size 14336, 32 layers, 32 attention heads, num_key_value_heads 8, vocab_size 128256,
# untied embeddings). GQA: 8 KV heads serve 32 query heads, so KV per token is a quarter of LLaMA-2-7B's:
# 2 x 32 x 8 x 128 x 2 bytes = 131,072 B = 128 KiB.
LLAMA3_8B = ModelSpec("Llama-3-8B", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                      intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192)

# Source: the published Hugging Face config of meta-llama/Llama-3.1-8B: the same shapes as Llama-3-8B
# (so the same 8.03B parameters and 128 KiB of KV per token); what changes is the context window,
# max_position_embeddings 131072 (128K tokens, through "llama3" RoPE scaling) instead of 8192. The
# roofline does not see RoPE, so this spec differs from LLAMA3_8B only by name: use it for prompts
# longer than 8K, which Llama-3-8B was not trained for.
LLAMA31_8B = ModelSpec("Llama-3.1-8B", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                       intermediate_size=14336, vocab_size=128256, max_position_embeddings=131072)


# Source: the Hugging Face config of mistralai/Mistral-7B-Instruct-v0.2 (Sarathi-Serve's 7B model): Llama-3-8B's
# layer shapes with a 32,000-token vocabulary and a 32K window, no sliding window in v0.2.
MISTRAL_7B = ModelSpec("Mistral-7B-v0.2", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                       intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768)

@dataclass(frozen=True)
class GPUSpec:
    """Peak dense bf16 tensor-core FLOP/s, HBM bandwidth (bytes/s) and HBM capacity (bytes).

    `ridge_flops_per_byte` is the arithmetic intensity where the two roofs meet: a step doing fewer
    FLOPs per byte moved than this is memory-bound.

    >>> round(H100_SXM.ridge_flops_per_byte)
    295
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    memory_bytes: float

    def __post_init__(self):
        _check_positive(f"GPUSpec({self.name!r})", peak_flops=self.peak_flops, hbm_bandwidth=self.hbm_bandwidth,
                        memory_bytes=self.memory_bytes)

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.peak_flops / self.hbm_bandwidth



# Source: NVIDIA H100 Tensor Core GPU datasheet, SXM column: BF16 Tensor Core 1,979 TFLOPS *with
# sparsity*, so 989 TFLOPS dense; bandwidth 3.35 TB/s (decimal units). Memory is what the board reports, not the
# datasheet's "80 GB": nvidia-smi shows 81,559 MiB total on an "NVIDIA H100 80GB HBM3" (the nvidia-smi table
# printed in NVIDIA/nccl issue #1264, driver 550.54.15), 85.52e9 bytes; an engine sizes its KV cache from this.
H100_SXM = GPUSpec("H100 SXM", peak_flops=989e12, hbm_bandwidth=3.35e12, memory_bytes=81_559 * MiB)

# Source: NVIDIA H200 Tensor Core GPU datasheet, SXM column: the same GH100 compute as the H100
# (BF16 1,979 TFLOPS with sparsity, 989 dense); HBM3e at 4.8 TB/s. Memory: the board's 143,771 MiB (150.76e9
# bytes) as nvidia-smi reports it, against the datasheet's "141 GB"; no public printout of this figure was found
# to cite, so treat it as approximate (it moves the KV capacity by well under 1% per 100 MiB).
H200 = GPUSpec("H200 SXM", peak_flops=989e12, hbm_bandwidth=4.8e12, memory_bytes=143_771 * MiB)


# Source: NVIDIA A100 datasheet, 80GB PCIe column: BF16 Tensor Core 312 TFLOPS dense (624 with sparsity), 1,935 GB/s;
# memory: the datasheet's decimal 80 GB (no nvidia-smi printout cited). Sarathi-Serve's 7B runs used this board.
A100_PCIE = GPUSpec("A100 80GB PCIe", peak_flops=312e12, hbm_bandwidth=1.935e12, memory_bytes=80e9)


# Source: the Hugging Face config of mistralai/Mixtral-8x7B-v0.1 (hidden_size 4096, intermediate_size 14336 per
# expert, 32 layers, 32 heads, 8 KV heads, num_local_experts 8, num_experts_per_tok 2, vocab_size 32000, a 32K
# window); every layer's MLP is a MoE layer. 46.7B parameters, 12.9B used per token (Mixtral of Experts, Jiang et
# al., 2024, section 2: "47B" and "13B").
MIXTRAL_8X7B = ModelSpec("Mixtral-8x7B", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, head_dim=128,
                         intermediate_size=14336, vocab_size=32000, max_position_embeddings=32768,
                         num_experts=8, experts_per_token=2, moe_intermediate_size=14336)

# Source: the Hugging Face config of deepseek-ai/DeepSeek-V3 (hidden_size 7168, 61 layers, 128 heads,
# first_k_dense_replace 3 with intermediate_size 18432, then n_routed_experts 256 of moe_intermediate_size 2048,
# num_experts_per_tok 8, n_shared_experts 1; MLA with q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128,
# qk_rope_head_dim 64, v_head_dim 128; vocab_size 129280, max_position_embeddings 163840). The main model only (the
# multi-token-prediction module left out): 671B parameters, 37B used per token (DeepSeek-V3 Technical Report,
# section 1 and 2.1).
DEEPSEEK_V3 = ModelSpec("DeepSeek-V3", num_layers=61, hidden_size=7168, num_heads=128, num_kv_heads=128,
                        head_dim=192, intermediate_size=18432, vocab_size=129280, max_position_embeddings=163840,
                        num_experts=256, experts_per_token=8, moe_intermediate_size=2048, num_shared_experts=1,
                        first_k_dense_layers=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
                        v_head_dim=128)


@dataclass(frozen=True)
class LinkSpec:
    """A link out of a GPU (to its host, to another GPU, to another node): `bandwidth` in bytes per second **in one
    direction** (a swap-out and a swap-in each use one), and where the figure comes from."""

    name: str
    bandwidth: float
    source: str

    def __post_init__(self):
        _check_positive("LinkSpec", bandwidth=self.bandwidth)


# NVLink 4 on an H100 SXM: 18 links, 900 GB/s per GPU with both directions added (NVIDIA's H100 datasheet), so
# 450 GB/s each way; a transfer inside one 8-GPU node. RDMA between nodes: one 400 Gb/s NIC (ConnectX-7, one per
# GPU in a DGX H100) is 400e9 / 8 = 50 GB/s each way at line rate.
NVLINK_H100 = LinkSpec("NVLink 4 (H100 SXM)", 450e9, "900 GB/s per GPU, both directions added: 450 GB/s each way")
RDMA_400G = LinkSpec("RDMA, 400 Gb/s NIC", 50e9, "400 Gb/s / 8 bits a byte = 50 GB/s each way, line rate")

# The fixed cost of one hop of a collective (one send-and-receive of a ring's step): launching it, the
# synchronisation between the GPUs, the link's own latency. A round figure, an assumption and not a measurement.
DEFAULT_LINK_LATENCY_S = 2e-6
