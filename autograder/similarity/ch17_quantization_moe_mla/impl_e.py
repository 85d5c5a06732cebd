# %% int4_weight_bytes
def int4_weight_bytes(model, group_size):
    keep16 = moe_mla.sixteen_bit_params(model)
    bits_per_weight = 4 + (16 + 4) / group_size
    return (model.param_count - keep16) * bits_per_weight / 8 + keep16 * 16 / 8
# %% experts_touched
def experts_touched(num_experts, experts_per_token, num_tokens):
    q = (num_experts - experts_per_token) / num_experts
    return sum(1 - q ** num_tokens for _ in range(num_experts))
# %% step_weight_bytes
def step_weight_bytes(model, num_tokens):
    if model.num_experts <= 0:
        return model.weight_bytes
    n_moe = model.num_layers - model.first_k_dense_layers
    expert_bytes = model.bytes_per_param * 3 * model.hidden_size * model.moe_intermediate_size
    non_routed = model.weight_bytes - n_moe * model.num_experts * expert_bytes
    routed_read = n_moe * expert_bytes * experts_touched(model.num_experts, model.experts_per_token, num_tokens)
    return non_routed + routed_read
# %% kv_bytes_per_gpu
def kv_bytes_per_gpu(model, tp):
    if model.kv_lora_rank:
        return model.kv_lora_rank * model.num_layers * model.bytes_per_kv_element + \
            model.qk_rope_head_dim * model.num_layers * model.bytes_per_kv_element
    kv_heads = model.num_kv_heads // tp
    if kv_heads < 1:
        kv_heads = 1
    return kv_heads * model.head_dim * model.num_layers * model.bytes_per_kv_element * 2
