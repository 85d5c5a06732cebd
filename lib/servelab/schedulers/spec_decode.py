"""Speculative decoding inside the nano-vllm Scheduler: draft tokens in the budget, look-ahead slots, rollback.

A proposer guesses the next d <= k tokens (`seq.draft_token_ids`) and a decode step computes all 1 + d at once;
the drafts that match the target's own tokens in a row are accepted, plus the target's bonus token, so a step
appends 1 to d + 1 tokens (with greedy verification, exactly what plain decoding would). This module adds the
scheduler's side: drafts in the token budget, look-ahead blocks (`LookaheadBlockManager`) and rollback of rejected
drafts; docs/speculative_decoding.md says how each works. `servelab.engine.speculative` drives it and
`servelab.analytic.speculation` says what it buys.
"""

from __future__ import annotations

from servelab.schedulers.scheduler import BlockManager, SamplingParams, Scheduler, Sequence, SequenceStatus

__all__ = ["LookaheadBlockManager", "SamplingParams", "Sequence", "SpecScheduler", "fit_drafts", "ngram_propose"]


def _blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def fit_drafts(wanted: list[int], budget: int) -> list[int]:
    """Drafts each decoding sequence keeps under a token budget of `budget` tokens: every sequence's own token
    first (one each), then the drafts share what is left, in running order; the first sequences keep theirs.

    >>> fit_drafts([3, 3, 3], 8)         # 3 own tokens, then 5 drafts: 3 for the first, 2 for the second
    [3, 2, 0]
    >>> fit_drafts([4, 4], 2)            # the decodes alone fill the budget
    [0, 0]
    """
    left = budget - len(wanted)
    kept = []
    for w in wanted:
        d = min(w, max(0, left))
        kept.append(d)
        left -= d
    return kept


class LookaheadBlockManager(BlockManager):
    """The block manager of servelab.schedulers.scheduler, with slots for a sequence's draft tokens.

    A decoding sequence has KV for its first len - 1 tokens, so it holds ceil((len - 1) / block_size) blocks.
    A step that computes its last token and d drafts writes positions len - 1 .. len - 1 + d and needs
    ceil((len + d) / block_size) blocks; with d = 0 that is the one-block rule `needs_new_block`.
    """

    def blocks_short(self, seq: Sequence) -> int:
        """Blocks to take before the step: for the last token and every draft the step computes."""
        return max(0, _blocks_for(len(seq) + len(seq.draft_token_ids), self.block_size) - len(seq.block_table))

    def can_append(self, seq: Sequence) -> bool:
        return self.num_free_blocks >= self.blocks_short(seq)

    def may_append(self, seq: Sequence):
        for _ in range(self.blocks_short(seq)):
            seq.block_table.append(self._allocate_block())

    def rollback(self, seq: Sequence) -> int:
        """Give back the look-ahead blocks past the sequence's KV (they hold only rejected drafts); returns how
        many. Such a block was taken for this step and never hashed: its only reference is this sequence's."""
        keep = _blocks_for(seq.num_cached_tokens, self.block_size)
        released = 0
        while len(seq.block_table) > keep:
            block = self.blocks[seq.block_table.pop()]
            block.ref_count -= 1
            assert block.ref_count == 0 and block.hash == -1, "a look-ahead block is the sequence's alone"
            self._deallocate_block(block.block_id)
            released += 1
        return released


class SpecScheduler(Scheduler):
    """Prefill first as before; a decode step computes each sequence's last token and its drafts.

    The proposer runs between steps and sets `seq.draft_token_ids` (at most `num_speculative_tokens`; fewer near
    `max_tokens`, since tokens past it would be thrown away). `postprocess` takes, per sequence, the tokens the
    step appends: for a decode step the accepted drafts and the bonus token
    (`servelab.engine.speculative.accept_greedy`), for a prefill step the one sampled token, as a list of one.
    """

    def __init__(self, *, num_blocks: int, block_size: int, max_num_batched_tokens: int, max_num_seqs: int = 8,
                 eos: int = -1, enable_prefix_caching: bool = True, num_speculative_tokens: int = 3):
        super().__init__(num_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                         max_num_seqs=max_num_seqs, eos=eos, enable_prefix_caching=enable_prefix_caching)
        if isinstance(num_speculative_tokens, bool) or not isinstance(num_speculative_tokens, int) \
                or num_speculative_tokens < 0:
            raise ValueError(f"num_speculative_tokens must be an int >= 0, got {num_speculative_tokens!r}")
        bm = self.block_manager
        self.block_manager = LookaheadBlockManager(num_blocks=len(bm.blocks), block_size=bm.block_size,
                                                   enable_prefix_caching=bm.enable_prefix_caching)
        self.num_speculative_tokens = num_speculative_tokens
        self.num_draft_tokens = 0       # drafts scheduled (and so computed)
        self.num_accepted_tokens = 0    # drafts the target agreed with
        self.num_released_blocks = 0    # look-ahead blocks given back by rollbacks
        self.num_cut_draft_tokens = 0   # drafts proposed but left out for want of budget

    def add(self, seq: Sequence):
        super().add(seq)
        seq.draft_token_ids = []

    def max_drafts(self, seq: Sequence) -> int:
        """Drafts worth proposing: k, or fewer when the step would pass `max_tokens` (it appends up to d + 1)."""
        return max(0, min(self.num_speculative_tokens, seq.max_tokens - seq.num_completion_tokens - 1))

    def _fit_drafts(self):
        """Cut drafts to the token budget: each decoding sequence's own token first, then the drafts share what
        is left, in running order (the first sequences keep theirs)."""
        decoding = list(self.running)[:self.max_num_seqs]
        wanted = [min(len(seq.draft_token_ids), self.max_drafts(seq)) for seq in decoding]
        for seq, d in zip(decoding, fit_drafts(wanted, self.max_num_batched_tokens)):
            self.num_cut_draft_tokens += len(seq.draft_token_ids) - d
            del seq.draft_token_ids[d:]

    def schedule(self) -> tuple[list[Sequence], bool]:
        self._fit_drafts()
        seqs, is_prefill = super().schedule()   # the look-ahead block manager takes the drafts' slots
        if not is_prefill:
            for seq in seqs:
                seq.num_scheduled_tokens = 1 + len(seq.draft_token_ids)
                self.num_draft_tokens += len(seq.draft_token_ids)
        return seqs, is_prefill

    def preempt(self, seq: Sequence):
        seq.draft_token_ids = []
        super().preempt(seq)

    def postprocess(self, seqs: list[Sequence], token_ids: list[list[int]], is_prefill: bool) -> list[Sequence]:
        """Append each sequence's accepted drafts and bonus token, roll back past them, free finished ones.
        Returns the sequences that finished this step."""
        if is_prefill:
            return super().postprocess(seqs, [t[0] for t in token_ids], is_prefill)
        finished = []
        for seq, tokens in zip(seqs, token_ids, strict=True):
            accepted = len(tokens) - 1
            if not 0 <= accepted <= len(seq.draft_token_ids) or tokens[:accepted] != seq.draft_token_ids[:accepted]:
                raise ValueError(f"{seq.name}: a step appends its accepted drafts and one bonus token, got {tokens} "
                                 f"for drafts {seq.draft_token_ids}")
            seq.draft_token_ids = []
            stop, n = False, 0
            for token in tokens:
                seq.append_token(token)
                n += 1
                if (not seq.ignore_eos and token == self.eos) or seq.num_completion_tokens == seq.max_tokens:
                    stop = True
                    break
            # the KV that stays valid: the last token's and the accepted drafts' up to a stop (a stopping token
            # has no KV to keep); only blocks made of those tokens are complete, so only they are hashed
            self.num_accepted_tokens += min(accepted, n)
            seq.num_scheduled_tokens = 1 + min(accepted, n - 1)
            self.block_manager.hash_blocks(seq)
            seq.num_cached_tokens += seq.num_scheduled_tokens
            seq.num_scheduled_tokens = 0
            if stop:
                seq.status = SequenceStatus.FINISHED
                self.block_manager.deallocate(seq)
                self.running.remove(seq)
                finished.append(seq)
            else:
                self.num_released_blocks += self.block_manager.rollback(seq)
        return finished


def ngram_propose(token_ids: list[int], k: int, min_n: int = 1, max_n: int = 3) -> list[int]:
    """Prompt-lookup drafting: find the longest n-gram (min_n <= n <= max_n) that ends the sequence and also
    occurs earlier in it (its earliest occurrence), and propose the up to k tokens that followed it there.

    >>> ngram_propose([5, 1, 2, 3, 9, 9, 1, 2], k=3)      # [1, 2] occurred at position 1, followed by 3, 9, 9
    [3, 9, 9]
    >>> ngram_propose([1, 2, 3], k=3)                     # no n-gram repeats: no drafts
    []
    """
    if not 1 <= min_n <= max_n:
        raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
    total = len(token_ids)
    for n in range(min(max_n, total - 1), min_n - 1, -1):
        suffix = token_ids[total - n:]
        for j in range(total - n):
            if token_ids[j:j + n] == suffix:
                return list(token_ids[j + n:j + n + k])
    return []
