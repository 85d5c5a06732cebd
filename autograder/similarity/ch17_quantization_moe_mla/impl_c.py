# %% int4_weight_bytes
def int4_weight_bytes(model, group_size):
    kept = moe_mla.sixteen_bit_params(model)
    bytes_each = 1 / 2 + 5 / (2 * group_size)
    return (model.param_count - kept) * bytes_each + kept * 2
# %% experts_touched
def experts_touched(num_experts, experts_per_token, num_tokens):
    p_free = 1.0
    for _ in range(num_tokens):
        p_free *= 1.0 - experts_per_token / num_experts
        if p_free == 0.0:
            break
    return num_experts * (1.0 - p_free)
# %% step_weight_bytes
def step_weight_bytes(model, num_tokens):
    result = model.weight_bytes
    if model.num_experts > 0:
        one = model.hidden_size * model.moe_intermediate_size * 3 * model.bytes_per_param
        hit = experts_touched(model.num_experts, model.experts_per_token, num_tokens)
        for _ in range(model.first_k_dense_layers, model.num_layers):
            result -= (model.num_experts - hit) * one
    return result
# %% kv_bytes_per_gpu
def kv_bytes_per_gpu(model, tp):
    b = model.bytes_per_kv_element
    if model.kv_lora_rank == 0:
        heads_here = max(1, model.num_kv_heads // tp)
        return model.num_layers * heads_here * model.head_dim * b * 2
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    return latent * model.num_layers * b
