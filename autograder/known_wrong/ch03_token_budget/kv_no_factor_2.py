"""K and V are two tensors: KV bytes per token counted one vector per layer, forgetting the factor 2."""

REPLACE = {
    "kv_bytes_per_token": '''
def kv_bytes_per_token(model):
    # one vector per head per layer
    return model.num_layers * model.num_kv_heads * model.head_dim * model.bytes_per_kv_element
''',
}
FAILS = ["test_kv_bytes_per_token"]
MESSAGE = "Pitfall: K and V are two tensors"
