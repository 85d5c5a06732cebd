"""The cache holds num_kv_heads heads, not num_heads: KV bytes counted over the query heads (no GQA saving)."""

REPLACE = {
    "kv_bytes_per_token": '''
def kv_bytes_per_token(model):
    # a key and a value for every attention head
    return 2 * model.num_layers * model.num_heads * model.head_dim * model.bytes_per_kv_element
''',
}
FAILS = ["test_kv_bytes_per_token"]
MESSAGE = "Pitfall: the cache holds num_kv_heads heads, not num_heads"
