# %% int4_weight_bytes
def int4_weight_bytes(model, group_size):
    sixteen = moe_mla.sixteen_bit_params(model)
    four = model.param_count - sixteen
    metadata = (four / group_size) * (2 + 0.5)
    return 2 * sixteen + 0.5 * four + metadata
# %% experts_touched
def experts_touched(num_experts, experts_per_token, num_tokens):
    from math import comb
    escape_one = comb(num_experts - 1, experts_per_token) / comb(num_experts, experts_per_token)
    return num_experts * (1 - escape_one ** num_tokens)
# %% step_weight_bytes
def step_weight_bytes(model, num_tokens):
    E = model.num_experts
    if E == 0:
        return model.weight_bytes
    layers = np.arange(model.num_layers)
    is_moe = layers >= model.first_k_dense_layers
    expert = 3 * model.hidden_size * model.moe_intermediate_size * model.bytes_per_param
    saved = np.where(is_moe, (E - experts_touched(E, model.experts_per_token, num_tokens)) * expert, 0.0)
    return model.weight_bytes - float(saved.sum())
# %% kv_bytes_per_gpu
def kv_bytes_per_gpu(model, tp):
    mla = model.kv_lora_rank > 0
    per_layer = (model.kv_lora_rank + model.qk_rope_head_dim) if mla else \
        2 * model.head_dim * (model.num_kv_heads // tp or 1)
    return per_layer * model.num_layers * model.bytes_per_kv_element
