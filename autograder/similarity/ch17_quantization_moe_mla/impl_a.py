# %% int4_weight_bytes
def int4_weight_bytes(model, group_size):
    full_precision = moe_mla.sixteen_bit_params(model)
    quantized = model.param_count - full_precision
    groups = quantized / group_size
    bits = quantized * 4 + groups * (16 + 4)          # the weights, then one scale and one zero per group
    return bits / 8 + full_precision * 2
# %% experts_touched
def experts_touched(num_experts, experts_per_token, num_tokens):
    import math
    if experts_per_token == num_experts:
        return float(num_experts) if num_tokens else 0.0
    log_miss = num_tokens * math.log1p(-experts_per_token / num_experts)
    return num_experts * -math.expm1(log_miss)
# %% step_weight_bytes
def step_weight_bytes(model, num_tokens):
    if model.num_experts == 0:
        return model.weight_bytes
    moe_layer_count = model.num_layers - model.first_k_dense_layers
    expert_size = 3 * model.hidden_size * model.moe_intermediate_size * model.bytes_per_param
    idle = model.num_experts - experts_touched(model.num_experts, model.experts_per_token, num_tokens)
    return model.weight_bytes - moe_layer_count * idle * expert_size
# %% kv_bytes_per_gpu
def kv_bytes_per_gpu(model, tp):
    total = 0
    for _layer in range(model.num_layers):
        if model.kv_lora_rank > 0:
            total += (model.kv_lora_rank + model.qk_rope_head_dim) * model.bytes_per_kv_element
        else:
            local_heads = model.num_kv_heads // tp if model.num_kv_heads >= tp else 1
            total += local_heads * model.head_dim * 2 * model.bytes_per_kv_element
    return total
