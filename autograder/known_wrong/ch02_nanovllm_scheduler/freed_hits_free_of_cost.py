"""Hits on freed blocks were counted as free of cost: every hit is subtracted from the blocks needed."""

REPLACE = {
    "can_allocate": '''
def can_allocate(self, seq):
    h, hits, needed = -1, 0, seq.num_blocks
    for i in range(seq.num_blocks - 1):
        tokens = seq.block(i)
        h = self.compute_hash(tokens, h)
        block_id = self.hash_to_block_id.get(h, -1)
        if block_id == -1 or self.blocks[block_id].token_ids != tokens:
            break
        hits += 1
        needed -= 1                        # a cached block is never taken from the free list
    return hits if len(self.free_block_ids) >= needed else -1
''',
}
FAILS = ["test_can_allocate"]
MESSAGE = "Pitfall: hits on freed blocks were counted as free of cost"
