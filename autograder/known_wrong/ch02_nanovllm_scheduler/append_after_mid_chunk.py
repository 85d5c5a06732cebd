"""The sampled token was appended after a mid-chunk prefill: postprocess keeps every sample."""

REPLACE = {
    "postprocess": '''
def postprocess(self, seqs, token_ids, is_prefill):
    finished = []
    for seq, token_id in zip(seqs, token_ids):
        self.block_manager.hash_blocks(seq)
        seq.num_cached_tokens += seq.num_scheduled_tokens
        seq.num_scheduled_tokens = 0
        seq.append_token(token_id)         # every sampled token is kept, even mid-prompt
        if (not seq.ignore_eos and token_id == self.eos) or seq.num_completion_tokens == seq.max_tokens:
            seq.status = SequenceStatus.FINISHED
            self.block_manager.deallocate(seq)
            self.running.remove(seq)
            finished.append(seq)
    return finished
''',
}
FAILS = ["test_postprocess", "test_lesson_step2"]
MESSAGE = "Pitfall: the sampled token was appended after a mid-chunk prefill"
