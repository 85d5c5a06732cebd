"""Chapter 17's numbers: the weight dtype on chapter 9's roofline, a MoE step's bytes, sampled routing, MLA's KV."""

from __future__ import annotations

from servelab.analytic import capacity, costmodel, disaggregation, kv_tiers, moe_mla, serving
from servelab.analytic.serving import ServingPoint
from servelab.analytic.specs import DEEPSEEK_V3, H100_SXM, H200, LLAMA3_8B, MIXTRAL_8X7B
from servelab.claims.core import Claim

A = "ch17_quantization_moe_mla"
DS = dict(weight_dtype="fp8", tp=8)                  # DeepSeek-V3 on 8 H200s, fp8 weights
Q4_IN, Q4_OUT, Q4_PROMPT = 100e9, 5e9, 2000
FLEET = "a fleet for a day's tokens: a count of GPUs, not one step"


def _ds(batch: int, context: int = 2048) -> ServingPoint:
    return ServingPoint.decode(DEEPSEEK_V3, H200, batch, context, **DS)


def _full(model, **settings) -> ServingPoint:
    """A decode step whose sequences (16,384 tokens each, the last one shorter) fill the KV cache exactly."""
    cap = serving.check(ServingPoint.decode(model, H200, 1, 1, **settings)).kv_capacity
    full, rest = divmod(cap, 16384)
    return ServingPoint(model, H200, decode_contexts=(16383,) * full + ((rest - 1,) if rest else ()), **settings)


def ch17() -> list[Claim]:
    """Every number chapter 17 states, on the steps they describe."""
    return [*_headline(), *_quantization(), *_experts(), *_simulated(), *_mla(), *_interview(), *_drills()]


def _headline() -> list[Claim]:
    fp8 = serving.priced(DEEPSEEK_V3, H200, weight_dtype="fp8")[0]
    p64, p1 = _ds(64), _ds(1)
    out = []
    for cell in ("cell-03", "cell-27"):
        out += [Claim(A, cell, "DeepSeek-V3's parameters, B", DEEPSEEK_V3.param_count / 1e9, "{:.1f}B", p1),
                Claim(A, cell, "its active parameters, B", DEEPSEEK_V3.active_params / 1e9, "{:.1f}B", p1),
                Claim(A, cell, "share of the weights 64 sequences read", fp8.weight_bytes_read(64) / fp8.weight_bytes,
                      "reads {:.1%} of", p64),
                Claim(A, cell, "experts 64 tokens touch", moe_mla.experts_touched(256, 8, 64), "on {:.1f} of", p64),
                Claim(A, cell, "GB read a GPU at 64", p64.priced_model.weight_bytes_read(64) / 1e9, "{:.2f} GB", p64)]
    out += [Claim(A, "cell-03", "GB read a GPU at 1", p1.priced_model.weight_bytes_read(1) / 1e9, "reads {:.2f} GB",
                  p1),
            Claim(A, "cell-27", "the step at 64, ms", serving.check(p64).step_s * 1e3, "{:.2f} ms a step", p64)]
    return out


def _lever(w: str, kv: str) -> dict:
    pm, pg = serving.priced(LLAMA3_8B, H100_SXM, weight_dtype=w, kv_dtype=kv)
    full = Q4_PROMPT + round(Q4_OUT * Q4_PROMPT / Q4_IN)
    batch = capacity.kv_ceiling(pm, H100_SXM, full)
    return dict(pm=pm, pg=pg, ceiling=capacity.kv_ceiling(pm, H100_SXM, 2048),
                ridge=capacity.compute_ridge_batch(pm, pg, 256), knee=capacity.budget_knee(pm, pg, 64, 2048),
                step=serving.check(ServingPoint.decode(LLAMA3_8B, H100_SXM, 64, 2048, weight_dtype=w,
                                                       kv_dtype=kv)).step_s,
                prefill=capacity.prefill_s_per_token(pm, pg, Q4_PROMPT),
                apart=capacity.fleet_size(pm, pg, Q4_IN, Q4_OUT, Q4_PROMPT, batch).gpus,
                mixed=capacity.mixed_fleet_size(pm, pg, Q4_IN, Q4_OUT, Q4_PROMPT, batch).gpus)


def _quantization() -> list[Claim]:
    base, fp8, int4, kv8, both = (_lever(*d) for d in (("bf16", "bf16"), ("fp8", "bf16"), ("int4", "bf16"),
                                                         ("bf16", "fp8"), ("fp8", "fp8")))

    def dec(w="bf16", kv="bf16", b=64, ctx=2048):
        return ServingPoint.decode(LLAMA3_8B, H100_SXM, b, ctx, weight_dtype=w, kv_dtype=kv)

    def pre(w="bf16"):
        return ServingPoint(LLAMA3_8B, H100_SXM, prefill_chunks=(Q4_PROMPT,) * 4, weight_dtype=w)

    def knee(w, budget):          # the knee's step: 64 decodes at 2,048 and the chunk that fills the budget
        return ServingPoint(LLAMA3_8B, H100_SXM, decode_contexts=(2048,) * 64, prefill_chunks=(budget - 64,),
                            weight_dtype=w)

    keep = moe_mla.sixteen_bit_params(LLAMA3_8B)
    out = [
        Claim(A, "cell-07", "fp8 fleet apart", fp8["apart"], f"({base['apart']} GPUs to {{}} priced apart", None,
              FLEET),
        Claim(A, "cell-07", "fp8 fleet mixed", fp8["mixed"], f"{base['mixed']} to {{}} mixed", None, FLEET),
        Claim(A, "cell-07", "fp8 prefill a token, us", fp8["prefill"] * 1e6, "costs {:.2f} us a prompt", pre("fp8")),
        Claim(A, "cell-07", "bf16 prefill a token, us", base["prefill"] * 1e6, "instead of {:.2f}", pre()),
        Claim(A, "cell-07", "int4 prefill a token, us", int4["prefill"] * 1e6, "where it was ({:.2f} us", pre("int4")),
        Claim(A, "cell-07", "int4 fleet apart", int4["apart"], f"barely moves ({base['apart']} to {{}})", None, FLEET),
        Claim(A, "cell-07", "bf16 ridge", base["ridge"], "ridge falls from {}", dec(b=base["ridge"], ctx=255)),
        Claim(A, "cell-07", "int4 ridge", int4["ridge"], "to {} and",
              dec("int4", b=int4["ridge"], ctx=255)),
        Claim(A, "cell-07", "int4 step at 64 x 2048, ms", int4["step"] * 1e3, "fastest ({:.2f} ms for 64", dec("int4")),
        Claim(A, "cell-07", "bf16 KV ceiling", base["ceiling"], "ceiling ({} to", dec(b=base["ceiling"], ctx=2047)),
        Claim(A, "cell-07", "fp8 KV ceiling", kv8["ceiling"], "to {} sequences",
              dec(kv="fp8", b=kv8["ceiling"], ctx=2047)),
        Claim(A, "cell-07", "bf16 knee", base["knee"], "from {} to", knee("bf16", base["knee"])),
        Claim(A, "cell-07", "fp8 knee", fp8["knee"], "to {:,} tokens", knee("fp8", fp8["knee"])),
        Claim(A, "cell-07", "int4 knee", int4["knee"], "pulls it to {} (", knee("int4", int4["knee"])),
        Claim(A, "cell-07", "fp8 both: ridge", both["ridge"], "back at {}.",
              dec("fp8", "fp8", b=both["ridge"], ctx=255)),
        Claim(A, "cell-07", "int4 Llama-3-8B, GB", moe_mla.int4_weight_bytes(LLAMA3_8B, 128) / 1e9, "it is {:.2f} GB",
              dec("int4")),
        Claim(A, "cell-07", "0.5 B a parameter, GB", LLAMA3_8B.param_count * 0.5 / 1e9, "not {:.2f} GB", dec("int4")),
        Claim(A, "cell-07", "16-bit parameters, billions", keep / 1e9, "its {:.2f} billion", dec("int4")),
    ]
    for cell in ("cell-08", "cell-09"):
        out.append(Claim(A, cell, "int4 Llama-3-8B, GB (example)", moe_mla.int4_weight_bytes(LLAMA3_8B, 128) / 1e9,
                         "{:.2f}", dec("int4")))
    out += [Claim(A, "cell-09", "Mixtral's 16-bit share", moe_mla.sixteen_bit_params(MIXTRAL_8X7B)
                  / MIXTRAL_8X7B.param_count, "rest is {:.2%} of them",
                  ServingPoint.decode(MIXTRAL_8X7B, H200, 1, 2048, weight_dtype="int4")),
            Claim(A, "cell-08", "matmul weights", LLAMA3_8B.param_count - keep, "holds {:,} matmul", dec("int4")),
            Claim(A, "cell-08", "16-bit parameters", keep, "and {:,} 16-bit", dec("int4")),
            Claim(A, "cell-27", "fp8 prefill, us", fp8["prefill"] * 1e6, "({:.2f} us a token", pre("fp8")),
            Claim(A, "cell-27", "bf16 prefill, us", base["prefill"] * 1e6, "instead of {:.2f})", pre()),
            Claim(A, "cell-27", "fp8 fleet", fp8["apart"], f"from {base['apart']} H100s to {{}}.", None, FLEET),
            Claim(A, "cell-27", "KV ceilings", kv8["ceiling"], f"{base['ceiling']} to {{}} sequences",
                  dec(kv="fp8", b=kv8["ceiling"], ctx=2047)),
            Claim(A, "cell-27", "int4 fleet", int4["apart"], f"({base['apart']} to {{}})", None, FLEET),
            Claim(A, "cell-27", "int4 Llama-3-8B, GB", moe_mla.int4_weight_bytes(LLAMA3_8B, 128) / 1e9,
                  "Llama-3-8B {:.2f} GB", dec("int4"))]
    return out


def _experts() -> list[Claim]:
    mx1, mx8 = (ServingPoint.decode(MIXTRAL_8X7B, H200, b, 2048) for b in (1, 8))
    shard = _ds(1)
    ridge_mx = moe_mla.moe_ridge_batch(MIXTRAL_8X7B, H200, 256)
    ridge_ds = moe_mla.moe_ridge_batch(shard.priced_model, shard.priced_gpu, 256)
    beyond = "a batch past the KV cache: the ridge is where two lines cross, and no step there can run"
    out = [
        Claim(A, "cell-10", "Mixtral's parameters, B", MIXTRAL_8X7B.param_count / 1e9, "{:.1f}B parameters", mx1),
        Claim(A, "cell-10", "Mixtral's active, B", MIXTRAL_8X7B.active_params / 1e9, "{:.1f}B a token", mx1),
        Claim(A, "cell-10", "DeepSeek-V3's parameters, B", DEEPSEEK_V3.param_count / 1e9, "{:.1f}B parameters",
              shard),
        Claim(A, "cell-10", "DeepSeek-V3's active, B", DEEPSEEK_V3.active_params / 1e9, "{:.1f}B a token", shard),
        Claim(A, "cell-10", "experts 64 tokens leave untouched", 256 - moe_mla.experts_touched(256, 8, 64),
              "leave {:.1f} untouched", _ds(64)),
        Claim(A, "cell-18", "Mixtral's ridge at 256", ridge_mx, "past {:,} sequences",
              ServingPoint.decode(MIXTRAL_8X7B, H200, ridge_mx, 255, max_num_seqs=2048)),
        Claim(A, "cell-18", "DeepSeek-V3's ridge at 256", ridge_ds, "8 H200s at {:,},", None, beyond),
        Claim(A, "cell-18", "a TP8 node's KV tokens", serving.check(shard).kv_capacity, "cache ({:,} tokens)",
              _full(DEEPSEEK_V3, **DS)),
        Claim(A, "cell-27", "DeepSeek-V3's ridge, rounded", round(ridge_ds, -2), "at about {:,}", None, beyond),
    ]
    for cell in ("cell-13", "cell-14"):
        out += [Claim(A, cell, "Mixtral's weights, GB", MIXTRAL_8X7B.weight_bytes / 1e9, "holds {:.2f} GB", mx1),
                Claim(A, cell, "Mixtral, one token, GB", moe_mla.step_weight_bytes(MIXTRAL_8X7B, 1) / 1e9,
                      "reads {:.2f} GB", mx1),
                Claim(A, cell, "Mixtral, eight tokens, GB", moe_mla.step_weight_bytes(MIXTRAL_8X7B, 8) / 1e9,
                      "read {:.2f} GB", mx8)]
    return out


def _simulated() -> list[Claim]:
    from servelab.simulator.moe import sample_routing

    even = sample_routing(256, 8, 64, layers=58, seed=1)
    skewed = sample_routing(256, 8, 64, layers=58, seed=1, skew=1.0)
    p = _ds(64)
    return [
        Claim(A, "cell-18", "skewed: experts touched at 64", skewed.touched.mean(), "touches {:.1f} experts", p),
        Claim(A, "cell-18", "uniform: experts touched at 64", moe_mla.experts_touched(256, 8, 64), "instead of {:.1f}",
              p),
        Claim(A, "cell-18", "skewed: busiest over mean", skewed.imbalance.mean(), "gets {:.2f} times", p),
        Claim(A, "cell-18", "uniform: busiest over mean", even.imbalance.mean(), "instead of {:.2f}.", p),
    ]


def _layouts() -> dict:
    out = {}
    for name, m in (("mla", DEEPSEEK_V3), ("gqa", moe_mla.attention_variant(DEEPSEEK_V3, 8)),
                    ("mha", moe_mla.attention_variant(DEEPSEEK_V3, 128))):
        pt = ServingPoint.decode(m, H200, 1, 4096, **DS)
        per_gpu, gpu = pt.priced_model, pt.priced_gpu
        out[name] = dict(model=m, point=pt, kv=m.kv_bytes_per_token, kv_gpu=per_gpu.kv_bytes_per_token,
                         tokens=costmodel.kv_capacity_tokens(per_gpu, H200),
                         swap=kv_tiers.break_even_bandwidth(per_gpu, gpu, 1024),
                         link=disaggregation.break_even_bandwidth(per_gpu, gpu, 4000, 0.020, layerwise=False))
    return out


def _mla() -> list[Claim]:
    lay = _layouts()
    mla, gqa, mha = lay["mla"], lay["gqa"], lay["mha"]
    p = mla["point"]
    out = [Claim(A, "cell-20", "MLA bytes a token", mla["kv"], "is {:,} bytes", p),
           Claim(A, "cell-20", "MHA over MLA", mha["kv"] / mla["kv"], "bytes, {:.0f} times more", mha["point"]),
           Claim(A, "cell-20", "GQA-8 over MLA", gqa["kv"] / mla["kv"], "KV heads, {:.1f}", gqa["point"]),
           Claim(A, "cell-21", "MLA bytes a token (example)", mla["kv"], "costs {:,} bytes", p),
           Claim(A, "cell-25", "GQA-8 over MLA, one GPU", gqa["kv"] / mla["kv"], "costs {:.1f} times", gqa["point"]),
           Claim(A, "cell-25", "GQA-8 per GPU, KiB", gqa["kv_gpu"] / 1024, "a GPU,\n{:.1f} KiB", gqa["point"]),
           Claim(A, "cell-25", "MLA per GPU, KiB", mla["kv_gpu"] / 1024, "whole {:.1f} KiB", p),
           Claim(A, "cell-25", "MLA tokens a node", mla["tokens"], "holds {:,} tokens", _full(DEEPSEEK_V3, **DS)),
           Claim(A, "cell-25", "GQA-8 tokens a node", gqa["tokens"], "and\n{:,} of GQA-8",
                 _full(gqa["model"], **DS)),
           Claim(A, "cell-25", "MLA swap break-even, GB/s", mla["swap"] / 1e9, "from\n{:.2f} GB/s", p),
           Claim(A, "cell-25", "MLA P/D link, GB/s", mla["link"] / 1e9, "needs {:.2f} GB/s", p),
           Claim(A, "cell-25", "MHA link over MLA link", mha["link"] / mla["link"], "about {:.0f} times less",
                 mha["point"])]
    for cell in ("cell-27",):
        out += [Claim(A, cell, "MLA bytes a token", mla["kv"], "{:,} bytes a token", p),
                Claim(A, cell, "MHA over MLA", mha["kv"] / mla["kv"], "{:.0f} times less than MHA", mha["point"]),
                Claim(A, cell, "GQA-8 over MLA", gqa["kv"] / mla["kv"], "and {:.1f} times less", gqa["point"]),
                Claim(A, cell, "GQA-8 per GPU, KiB", gqa["kv_gpu"] / 1024, "GQA-8 costs {:.1f} KiB", gqa["point"]),
                Claim(A, cell, "MLA per GPU, KiB", mla["kv_gpu"] / 1024, "and MLA {:.1f} KiB", p),
                Claim(A, cell, "MLA swap break-even", mla["swap"] / 1e9, "from {:.2f} GB/s", p),
                Claim(A, cell, "MLA P/D link", mla["link"] / 1e9, "needs {:.2f} GB/s", p)]
    return out


def _interview() -> list[Claim]:
    p64 = _ds(64)
    return [Claim(A, "cell-27", "experts 64 tokens pick", 64 * 8, "pick {} experts", p64),
            Claim(A, "cell-27", "int4 at 0.5 B a parameter, GB", LLAMA3_8B.param_count * 0.5 / 1e9, "not {:.2f}.",
                  ServingPoint.decode(LLAMA3_8B, H100_SXM, 64, 2048, weight_dtype="int4"))]


def _drills() -> list[Claim]:
    fp8_kv = serving.priced(DEEPSEEK_V3, H200, kv_dtype="fp8")[0]
    return [
        Claim(A, "cell-28", "drill 1", moe_mla.experts_touched(256, 8, 24), "drill_1 = {:.1f} experts", _ds(24)),
        Claim(A, "cell-28", "drill 2", moe_mla.step_weight_bytes(MIXTRAL_8X7B, 4) / 1e9, "drill_2 = {:.2f} GB",
              ServingPoint.decode(MIXTRAL_8X7B, H200, 4, 2048)),
        Claim(A, "cell-28", "drill 3", moe_mla.kv_bytes_per_gpu(fp8_kv, 8) / 1024, "drill_3 = {:.2f} KiB",
              ServingPoint.decode(DEEPSEEK_V3, H200, 1, 2048, kv_dtype="fp8", **DS)),
        Claim(A, "cell-28", "drill 4", moe_mla.int4_weight_bytes(MIXTRAL_8X7B, 128) / 1e9, "drill_4 = {:.2f} GB",
              ServingPoint.decode(MIXTRAL_8X7B, H200, 1, 2048, weight_dtype="int4")),
    ]
