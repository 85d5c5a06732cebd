"""can_allocate checked the last block: the walk covers all num_blocks blocks."""

REPLACE = {
    "can_allocate": '''
def can_allocate(self, seq):
    h, hits, needed = -1, 0, seq.num_blocks
    for i in range(seq.num_blocks):
        tokens = seq.block(i)
        h = self.compute_hash(tokens, h)
        block_id = self.hash_to_block_id.get(h, -1)
        if block_id == -1 or self.blocks[block_id].token_ids != tokens:
            break
        hits += 1
        if block_id in self.used_block_ids:
            needed -= 1
    return hits if len(self.free_block_ids) >= needed else -1
''',
}
FAILS = ["test_can_allocate"]
MESSAGE = "Pitfall: can_allocate checked the last block"
