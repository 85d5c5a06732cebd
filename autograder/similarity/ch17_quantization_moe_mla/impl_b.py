# %% int4_weight_bytes
def int4_weight_bytes(model, group_size):
    bf16_part = moe_mla.sixteen_bit_params(model)
    n = model.param_count - bf16_part
    weights = n / 2
    scales = n / group_size * 2
    zeros = n / group_size / 2
    return weights + scales + zeros + 2 * bf16_part
# %% experts_touched
def experts_touched(num_experts, experts_per_token, num_tokens):
    untouched = num_experts * (1 - experts_per_token / num_experts) ** num_tokens
    return num_experts - untouched
# %% step_weight_bytes
def step_weight_bytes(model, num_tokens):
    if not model.num_experts:
        return model.weight_bytes
    per_expert = 3 * model.hidden_size * model.moe_intermediate_size * model.bytes_per_param
    routed_total = per_expert * model.num_experts * (model.num_layers - model.first_k_dense_layers)
    always = model.weight_bytes - routed_total
    share = experts_touched(model.num_experts, model.experts_per_token, num_tokens) / model.num_experts
    return always + share * routed_total
# %% kv_bytes_per_gpu
def kv_bytes_per_gpu(model, tp):
    if model.kv_lora_rank:
        elements = model.kv_lora_rank + model.qk_rope_head_dim      # one shared latent, copied to all GPUs
    else:
        elements = 2 * model.head_dim * max(model.num_kv_heads // tp, 1)
    return elements * model.num_layers * model.bytes_per_kv_element
