"""Block and offset swapped: slot % BLOCK_SIZE taken as the block and slot // BLOCK_SIZE as the row."""

REPLACE = {
    "store_kv_kernel": '''
@triton.jit
def store_kv_kernel(key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
                    stride_token, stride_head, stride_block, stride_slot, stride_kv_head,
                    BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    token = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)  # int64: block * stride can pass 2**31 in a big cache
    if slot >= 0:
        d = tl.arange(0, HEAD_DIM)
        src = token * stride_token + head * stride_head + d
        # wrong: block and row swapped
        dst = (slot % BLOCK_SIZE) * stride_block + (slot // BLOCK_SIZE) * stride_slot + head * stride_kv_head + d
        tl.store(k_cache_ptr + dst, tl.load(key_ptr + src))
        tl.store(v_cache_ptr + dst, tl.load(value_ptr + src))
''',
}
FAILS = ["test_store_kv_kernel"]
MESSAGE = "Pitfall: block and offset were swapped."
