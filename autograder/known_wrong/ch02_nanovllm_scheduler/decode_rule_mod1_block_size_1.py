"""len % block_size == 1 never fires at block size 1: nano-vllm's form of the rule."""

REPLACE = {
    "needs_new_block": '''
def needs_new_block(seq_len, block_size):
    return seq_len % block_size == 1
''',
}
FAILS = ["test_needs_new_block"]
MESSAGE = "Pitfall: len % block_size == 1 never fires at block size 1"
