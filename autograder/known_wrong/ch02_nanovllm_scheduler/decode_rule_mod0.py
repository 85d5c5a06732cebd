"""The decode rule len % block_size == 0 is off by one: a new block is taken when the last one fills up."""

REPLACE = {
    "needs_new_block": '''
def needs_new_block(seq_len, block_size):
    return seq_len % block_size == 0
''',
}
FAILS = ["test_needs_new_block"]
MESSAGE = "Pitfall: the decode rule len % block_size == 0 is off by one"
