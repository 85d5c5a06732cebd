"""One engine configuration, built once and handed to each scheduler family (`Family.from_config(config)`).

The knobs are the ones every family takes under the same name (docs/VOCABULARY.md); a family's own knobs
(`eos`, `policy`, `page_size`, `num_speculative_tokens`, ...) go to `from_config` beside the config, by keyword.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["EngineConfig"]


def _check_int(name: str, value, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {value!r}")


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """The KV memory and the step limits of one engine.

    num_blocks, block_size: the KV pool, in blocks of block_size tokens. The block families (nano-vllm's,
    vLLM V1's, `LLM`) take both; vLLM V1 keeps block 0 as its null block, so it holds num_blocks - 1.
    kv_capacity_tokens: the same pool in tokens, num_blocks * block_size: the radix scheduler's slots.
    max_num_batched_tokens: the token budget of one step; max_num_seqs: most sequences in one step.
    enable_prefix_caching: reuse the KV of a shared prefix.
    """
    num_blocks: int
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    enable_prefix_caching: bool = True

    def __post_init__(self):
        for name in ("num_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs"):
            _check_int(name, getattr(self, name), 1)
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be True or False, got {self.enable_prefix_caching!r}")

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def regrouped(self, block_size: int) -> EngineConfig:
        """The same knobs with the pool cut into blocks of `block_size` tokens: kv_capacity_tokens // block_size
        blocks (a partial block at the end is dropped)."""
        _check_int("block_size", block_size, 1)
        num_blocks = self.kv_capacity_tokens // block_size
        if num_blocks < 1:
            raise ValueError(f"a pool of {self.kv_capacity_tokens} tokens holds no block of {block_size} tokens")
        return replace(self, num_blocks=num_blocks, block_size=block_size)
