"""A finished sequence's blocks were not freed: postprocess forgets deallocate on finish."""

REPLACE = {
    "postprocess": '''
def postprocess(self, seqs, token_ids, is_prefill):
    finished = []
    for seq, token_id in zip(seqs, token_ids):
        self.block_manager.hash_blocks(seq)
        seq.num_cached_tokens += seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        if is_prefill and seq.num_cached_tokens < seq.num_tokens:
            continue                       # mid-chunk: the logits are for a prompt position
        seq.append_token(token_id)
        if (not seq.ignore_eos and token_id == self.eos) or seq.num_completion_tokens == seq.max_tokens:
            seq.status = SequenceStatus.FINISHED
            self.running.remove(seq)
            finished.append(seq)
    return finished
''',
}
FAILS = ["test_postprocess", "test_lesson_step2"]
MESSAGE = "Pitfall: a finished sequence's blocks were not freed"
