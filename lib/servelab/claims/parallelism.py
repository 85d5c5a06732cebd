"""Chapter 16's numbers: the KV cache and the step per TP degree, pipelines, experts over GPUs, CUDA graphs."""

from __future__ import annotations

import numpy as np

from servelab.analytic import capacity, serving
from servelab.analytic import parallelism as par
from servelab.analytic.costmodel import DEEPSEEK_V3, H100_SXM, H200, LLAMA31_8B
from servelab.analytic.parallelism import LLAMA31_70B
from servelab.analytic.serving import ServingPoint
from servelab.analytic.specs import DEFAULT_LINK_LATENCY_S, NVLINK_H100, RDMA_400G
from servelab.claims.core import Claim

A = "ch16_parallelism_and_cuda_graphs"
M70, M8, G = LLAMA31_70B, LLAMA31_8B, H100_SXM
NV, LAT = NVLINK_H100.bandwidth, DEFAULT_LINK_LATENCY_S
SIZES = capacity.cudagraph_capture_sizes(1024, 8192)


def _link(tp: int):
    return NVLINK_H100 if tp <= 8 else RDMA_400G       # 8 GPUs to a node


def _full(model, gpu, tp: int, tokens: int, **settings) -> ServingPoint:
    """A decode step at TP `tp` whose sequences hold exactly `tokens` of KV, each within the model's context."""
    longest = model.max_position_embeddings
    full, rest = divmod(tokens, longest)
    contexts = (longest - 1,) * full + ((rest - 1,) if rest else ())
    return ServingPoint(model, gpu, decode_contexts=contexts, tp=tp, link=_link(tp), **settings)


def _d70(tp: int) -> ServingPoint:
    return ServingPoint.decode(M70, G, 16, 2000, tp=tp, link=_link(tp))


def _d8(tp: int, batch: int = 64) -> ServingPoint:
    return ServingPoint.decode(M8, G, batch, 2000, tp=tp)


def ch16() -> list[Claim]:
    """Every number chapter 16 states, on the steps they describe."""
    return [*_degree(), *_ceilings(), *_tp_walk(), *_pipeline(), *_experts(), *_graphs(), *_simulated(),
            *_interview(), *_drills()]


def _kv() -> dict[int, int]:
    return {tp: par.kv_tokens_per_degree(M70, G, tp) for tp in (2, 4, 8, 16)}


def _degree() -> list[Claim]:
    kv = _kv()
    steps = {tp: serving.check(_d70(tp)) for tp in (2, 8, 16)}
    out = [Claim(A, "cell-01", "70B weights, GB", M70.weight_bytes / 1e9, "KV heads, {:.0f} GB of bf16 weights",
                 _d70(2)),
           Claim(A, "cell-01", "NVLink one way, GB/s", NV / 1e9, "({:.0f} GB/s each way", None,
                 "a link's bandwidth: an assumption the library states with its source"),
           Claim(A, "cell-01", "a hop's latency, us", LAT * 1e6, "{:.0f} us a hop", None,
                 "an assumed latency of one hop of a collective (specs.DEFAULT_LINK_LATENCY_S)"),
           Claim(A, "cell-03", "70B weights, GB", M70.weight_bytes / 1e9, "Llama-3.1-70B's {:.0f} GB", _d70(2))]
    for tp in (2, 4, 8, 16):
        fmt = {2: "{:,} tokens", 16: "only {:,}"}.get(tp, "{:,}")
        out.append(Claim(A, "cell-03", f"KV tokens at TP{tp}", kv[tp], fmt, _full(M70, G, tp, kv[tp])))
        out.append(Claim(A, "cell-12", f"KV tokens at TP{tp} (visible test)", kv[tp], f"({tp}, {{}})",
                         _full(M70, G, tp, kv[tp])))
    out += [Claim(A, "cell-03", "TP4 over TP2", kv[4] / kv[2], "({:.1f} times as many", _full(M70, G, 4, kv[4])),
            Claim(A, "cell-03", "step at TP2, ms", steps[2].step_s * 1e3, "from {:.2f} ms at TP2", _d70(2)),
            Claim(A, "cell-03", "step at TP8, ms", steps[8].step_s * 1e3, "to {:.2f} ms at TP8", _d70(8)),
            Claim(A, "cell-03", "all-reduces at TP8, ms", steps[8].comm_s * 1e3, "which {:.2f} ms are", _d70(8)),
            Claim(A, "cell-03", "step at TP16, ms", steps[16].step_s * 1e3, "it is\n{:.2f} ms again", _d70(16)),
            Claim(A, "cell-11", "KV tokens at TP4 (docstring)", kv[4], "= {:,}", _full(M70, G, 4, kv[4])),
            Claim(A, "cell-11", "weights per GPU at TP4, GB", M70.shard(4).weight_bytes / 1e9,
                  "{:.2f} GB of weights", _d70(4))]
    return out


def _ceilings() -> list[Claim]:
    c256 = {tp: capacity.running_ceilings(M70.shard(tp), G, 256) for tp in (2, 4, 8, 16)}
    c2k = {tp: capacity.running_ceilings(M70.shard(tp), G, 2048) for tp in (2, 8)}

    def full(tp: int, context: int, n: int) -> ServingPoint:
        """n sequences' KV at `context` tokens each in the cache: max_num_seqs of them decoding, the rest held."""
        run = min(n, 1024)
        return ServingPoint.decode(M70, G, run, context - 1, resident_tokens=(n - run) * context, tp=tp,
                                   link=_link(tp))

    return [
        Claim(A, "cell-06a", "KV ceiling at 256, TP2", c256[2].kv, "holds {:,} sequences at TP2",
              full(2, 256, c256[2].kv)),
        Claim(A, "cell-06a", "KV ceiling at 256, TP4", c256[4].kv, "{:,} at TP4", full(4, 256, c256[4].kv)),
        Claim(A, "cell-06a", "KV ceiling at 256, TP8", c256[8].kv, "{:,} at TP8", full(8, 256, c256[8].kv)),
        Claim(A, "cell-06a", "compute ridge at 256, TP2-8", c256[4].compute_ridge, "stays at\n{} from TP2",
              ServingPoint.decode(M70, G, c256[4].compute_ridge, 256, tp=4)),
        Claim(A, "cell-06a", "compute ridge at 256, TP16", c256[16].compute_ridge, "rises to {},",
              ServingPoint.decode(M70, G, c256[16].compute_ridge, 256, tp=16, link=RDMA_400G)),
        Claim(A, "cell-06a", "KV ceiling at 2,048, TP2", c2k[2].kv, "({:,} sequences at TP2", full(2, 2048, c2k[2].kv)),
        Claim(A, "cell-06a", "KV ceiling at 2,048, TP8", c2k[8].kv, "{:,} at TP8)", full(8, 2048, c2k[8].kv)),
    ]


def _tp_walk() -> list[Claim]:
    one = serving.all_reduce_s(64 * M70.hidden_size * 2, 8)
    comm = par.tp_comm_s(M70, 64, 8, NV, LAT)
    p64 = ServingPoint.decode(M70, G, 64, 2000, tp=8)
    s4, s8 = serving.check(_d8(4)), serving.check(_d8(8))

    def roof(f):
        return max(f.compute_s, f.memory_s)

    return [
        Claim(A, "cell-05", "one all-reduce of 64 tokens at TP8, us", one * 1e6, "takes {:.2f} us", p64),
        Claim(A, "cell-05", "a step's all-reduces, ms", comm * 1e3, "160 of them, {:.2f} ms", p64),
        Claim(A, "cell-05", "their latency, ms", par.tp_comm_s(M70, 0, 8, NV, LAT) * 1e3,
              "of which {:.2f} ms are the hops' latency", p64),
        Claim(A, "cell-08", "one all-reduce (docstring), us", one * 1e6, "is {:.2f} us", p64),
        Claim(A, "cell-08", "a step's all-reduces (docstring), ms", comm * 1e3, "= {:.2f} ms", p64),
        Claim(A, "cell-09", "a step's all-reduces (visible test), ms", comm * 1e3, "== {:.2f}", p64),
        Claim(A, "cell-09", "an 8,192-token chunk's all-reduces without latency, ms",
              par.tp_comm_s(M70, 8192, 8, NV, 0.0) * 1e3, "== {:.2f}",
              ServingPoint(M70, G, prefill_chunks=(8192,), tp=8, link_latency_s=0.0)),
        Claim(A, "cell-07", "TP4 step, ms", s4.step_s * 1e3, "only from {:.2f}", _d8(4)),
        Claim(A, "cell-07", "TP8 step, ms", s8.step_s * 1e3, "to {:.2f} ms", _d8(8)),
        Claim(A, "cell-07", "roofline saved, ms", (roof(s4) - roof(s8)) * 1e3, "({:.2f} ms saved)", _d8(8)),
        Claim(A, "cell-07", "all-reduces added, ms", (s8.comm_s - s4.comm_s) * 1e3, "double ({:.2f} ms\nmore)",
              _d8(8)),
    ]


def _pipeline() -> list[Claim]:
    pts = {(t, p): ServingPoint.decode(M70, G, 128 // p, 2000, tp=t, pp=p) for t, p in ((8, 1), (4, 2), (2, 4))}
    f = {k: serving.check(v) for k, v in pts.items()}
    why = "the idle share of a pipeline that drains: a schedule's arithmetic, no step"
    out = [Claim(A, "cell-13", "bubble 4 x 4", par.bubble_fraction(4, 4), "(the **bubble**: {:.0%} for 4", None, why),
           Claim(A, "cell-13", "bubble 4 x 16", par.bubble_fraction(4, 16), "{:.0%} for 16", None, why)]
    for (t, p), text in (((8, 1), "in one batch, {:.2f} ms"), ((4, 2), "two batches of 64, {:.2f} ms"),
                         ((2, 4), "four of 32, {:.2f} ms")):
        out.append(Claim(A, "cell-13", f"TP{t} x PP{p} token gap, ms", f[(t, p)].step_s * 1e3, text, pts[(t, p)]))
        out.append(Claim(A, "cell-13", f"TP{t} x PP{p} tokens/s", 128 / f[(t, p)].step_s, "{:,.0f} tokens/s",
                         pts[(t, p)]))
    return out


def _experts() -> list[Claim]:
    d, dg = serving.priced(DEEPSEEK_V3, H200, "fp8")
    kv_tp, kv_dp = par.mla_group_kv_tokens(d, H200, 8, False), par.mla_group_kv_tokens(d, H200, 8, True)
    tp_pt = _full(DEEPSEEK_V3, H200, 8, kv_tp, weight_dtype="fp8")
    dp_why = "data-parallel attention's KV and weights: a layout the serving model does not price (parallelism.py)"
    moe_why = "a MoE layer's expert ridge or all-to-all: parallelism.py's closed forms, beyond the serving model"
    return [
        Claim(A, "cell-15", "dense ridge, tokens", G.ridge_flops_per_byte * M8.bytes_per_param / 2,
              "from about\n{:.0f} tokens", ServingPoint.decode(M8, G, 295, 64)),
        Claim(A, "cell-15", "the ridge, FLOPs a byte", G.ridge_flops_per_byte, "the ridge, {:.0f} FLOPs a byte", None,
              "the GPU's peak FLOP/s over its bandwidth"),
        Claim(A, "cell-15", "DeepSeek-V3's expert ridge, tokens", par.expert_ridge_tokens(DEEPSEEK_V3, G),
              "only from {:,} tokens", None, moe_why),
        Claim(A, "cell-15", "E / k", DEEPSEEK_V3.num_experts // DEEPSEEK_V3.experts_per_token, "E / k = {} times",
              None, moe_why),
        Claim(A, "cell-15", "all-to-all bytes, MB", par.all_to_all_bytes(128, 7168, 8, 8) / 1e6, "send {:.1f} MB",
              None, moe_why),
        Claim(A, "cell-15", "all-to-all a step, ms", par.all_to_all_s(DEEPSEEK_V3, 128, 8) * 1e3, "{:.2f} ms a step",
              None, moe_why),
        Claim(A, "cell-15", "MLA KV at TP8", kv_tp, "TP8 holds {:,} tokens", tp_pt),
        Claim(A, "cell-15", "weights per GPU at TP8, GB", par.weights_per_gpu(d, 8, False) / 1e9, "({:.1f} GB of",
              tp_pt),
        Claim(A, "cell-15", "MLA KV with DP attention", kv_dp, "holds {:,} (", None, dp_why),
        Claim(A, "cell-15", "DP over TP", kv_dp / kv_tp, "({:.1f} times as many)", None, dp_why),
        Claim(A, "cell-15", "weights per GPU with DP attention, GB", par.weights_per_gpu(d, 8, True) / 1e9,
              "with {:.1f} GB of weights", None, dp_why),
        Claim(A, "cell-18", "the docstring's all-to-all bytes", par.all_to_all_bytes(128, 7168, 8, 8, 2),
              "= {:,.0f} bytes", None, moe_why),
    ]


def _graphs() -> list[Claim]:
    g = {(b, m): par.graph_step(M8, G, b, 512, SIZES, m) for b, m in ((512, "full"), (513, "full"),
                                                                          (512, "piecewise"), (257, "full"),
                                                                          (256, "full"))}

    def pt(b: int, pad: int = 0) -> ServingPoint:
        return ServingPoint(M8, G, decode_contexts=(512,) * b + (0,) * pad)

    launch = "an assumed launch cost times a count of kernels: an overhead, no step"
    return [
        Claim(A, "cell-20", "kernels a layer", par.KERNELS_PER_LAYER, "about {} a layer", None, launch),
        Claim(A, "cell-20", "kernels a step", M8.num_layers * par.KERNELS_PER_LAYER, "{} for\nLlama-3.1-8B", None,
              launch),
        Claim(A, "cell-20", "capture sizes", len(SIZES), "{} sizes with an H100's defaults", None,
              "vLLM's default capture sizes, counted"),
        Claim(A, "cell-20", "pieces a size", M8.num_layers + 1, "{} pieces a size", None, launch),
        Claim(A, "cell-20", "a launch, us", par.LAUNCH_S * 1e6, "taken as {:.0f} us", None, launch),
        Claim(A, "cell-20", "eager launches, ms", par.launch_overhead_s(M8, "eager") * 1e3, "add {:.1f} ms", None,
              launch),
        Claim(A, "cell-20", "piecewise launches, ms", par.launch_overhead_s(M8, "piecewise") * 1e3,
              "piecewise ones {:.2f} ms", None, launch),
        Claim(A, "cell-20", "512 in a full graph, ms", g[(512, "full")].step_s * 1e3, "take\n{:.2f} ms", pt(512)),
        Claim(A, "cell-20", "512 piecewise, ms", g[(512, "piecewise")].step_s * 1e3, "({:.2f} ms piecewise)",
              pt(512)),
        Claim(A, "cell-20", "513 eager, ms", g[(513, "full")].step_s * 1e3, "513 take {:.2f} ms", pt(513)),
        Claim(A, "cell-20", "257 padded to 272, ms", g[(257, "full")].step_s * 1e3, "{:.3f} ms against",
              pt(257, 272 - 257)),
        Claim(A, "cell-20", "256, ms", g[(256, "full")].step_s * 1e3, "{:.3f} ms for 256", pt(256)),
    ]


def _simulated() -> list[Claim]:
    from servelab.simulator import Requests, fixed_lengths, poisson_arrivals
    from servelab.simulator.parallel import simulate_tp_decode

    n, out = 3000, []
    why = "a mean over a simulated run of thousands of requests, against its closed form"
    for tp, rate in ((1, 20.0), (2, 40.0), (4, 60.0)):
        reqs = Requests(poisson_arrivals(n, rate, seed=1), fixed_lengths(n, 2000), fixed_lengths(n, 256))
        res = simulate_tp_decode(reqs, M8, G, tp=tp)
        diff = np.nanmean(res.tpot[n // 10:]) / par.tp_decode_tpot(M8, G, tp, rate, 2000, 256)[0] - 1
        assert abs(diff) < 0.05
        out.append(Claim(A, "cell-27", f"TP{tp} simulated vs closed form", diff, "{:+.1%}", None, why))
    reqs = Requests(poisson_arrivals(n, 40.0, seed=2), fixed_lengths(n, 200), fixed_lengths(n, 256))
    capped = simulate_tp_decode(reqs, M8, G, tp=1, capture_sizes=capacity.cudagraph_capture_sizes(1024, 8192, 64))
    default = simulate_tp_decode(reqs, M8, G, tp=1, capture_sizes=SIZES)
    return out + [
        Claim(A, "cell-27", "eager steps with graphs up to 64", capped.eager_steps, "{:,} steps run eagerly", None,
              why),
        Claim(A, "cell-27", "TPOT with graphs up to 64, ms", np.nanmean(capped.tpot[n // 10:]) * 1e3,
              "TPOT is {:.2f} ms", None, why),
        Claim(A, "cell-27", "TPOT with the default sizes, ms", np.nanmean(default.tpot[n // 10:]) * 1e3,
              "{:.2f} ms with the default sizes", None, why),
    ]


def _interview() -> list[Claim]:
    kv = _kv()
    s4, s8 = serving.check(_d8(4)), serving.check(_d8(8))
    steps = {tp: serving.check(_d70(tp)) for tp in (8, 16)}
    pts = {(t, p): ServingPoint.decode(M70, G, 128 // p, 2000, tp=t, pp=p) for t, p in ((8, 1), (4, 2))}
    f = {k: serving.check(v) for k, v in pts.items()}
    d = serving.priced(DEEPSEEK_V3, H200, "fp8")[0]
    kv_tp = par.mla_group_kv_tokens(d, H200, 8, False)
    out = [Claim(A, "cell-29", f"KV at TP{tp}", kv[tp], "{:,} tokens at TP2" if tp == 2 else f"{{:,}} at TP{tp}"
                 if tp != 16 else "{:,}.", _full(M70, G, tp, kv[tp])) for tp in (2, 4, 8, 16)]
    out += [
        Claim(A, "cell-29", "8B TP4 step, ms", s4.step_s * 1e3, "TP4\n{:.2f} ms a step", _d8(4)),
        Claim(A, "cell-29", "8B TP8 step, ms", s8.step_s * 1e3, "TP8 {:.2f} ms", _d8(8)),
        Claim(A, "cell-29", "8B TP4 all-reduces, ms", s4.comm_s * 1e3, "all-reduces {:.2f} and", _d8(4)),
        Claim(A, "cell-29", "8B TP8 all-reduces, ms", s8.comm_s * 1e3, "and {:.2f} ms", _d8(8)),
        Claim(A, "cell-29", "70B TP16 step, ms", steps[16].step_s * 1e3, "steps\n{:.2f} ms", _d70(16)),
        Claim(A, "cell-29", "70B TP8 step, ms", steps[8].step_s * 1e3, "against {:.2f} at TP8", _d70(8)),
        Claim(A, "cell-29", "TP8 tokens/s", 128 / f[(8, 1)].step_s, "TP8 makes {:,.0f} tokens/s", pts[(8, 1)]),
        Claim(A, "cell-29", "TP8 token gap, ms", f[(8, 1)].step_s * 1e3, "at a\n{:.2f} ms token gap", pts[(8, 1)]),
        Claim(A, "cell-29", "TP4 x PP2 tokens/s", 128 / f[(4, 2)].step_s, "TP4 x PP2 {:,.0f}", pts[(4, 2)]),
        Claim(A, "cell-29", "TP4 x PP2 token gap, ms", f[(4, 2)].step_s * 1e3, "at {:.2f} ms. PP", pts[(4, 2)]),
        Claim(A, "cell-29", "DeepSeek-V3's expert ridge", par.expert_ridge_tokens(DEEPSEEK_V3, G),
              "step holds {:,} tokens", None, "a MoE layer's expert ridge: parallelism.py's closed form"),
        Claim(A, "cell-29", "MLA KV at TP8", kv_tp, "TP8 holds {:,} tokens",
              _full(DEEPSEEK_V3, H200, 8, kv_tp, weight_dtype="fp8")),
        Claim(A, "cell-29", "MLA KV with DP attention", par.mla_group_kv_tokens(d, H200, 8, True),
              "DP attention {:,}.", None, "data-parallel attention: a layout the serving model does not price"),
        Claim(A, "cell-29", "512 in a graph, ms", par.graph_step(M8, G, 512, 512, SIZES).step_s * 1e3,
              "{:.2f} ms at 512", ServingPoint.decode(M8, G, 512, 512)),
        Claim(A, "cell-29", "513 eager, ms", par.graph_step(M8, G, 513, 512, SIZES).step_s * 1e3,
              "{:.2f} ms at 513", ServingPoint.decode(M8, G, 513, 512)),
    ]
    return out


def _drills() -> list[Claim]:
    d1 = par.kv_tokens_per_degree(M70, H200, 4)
    why = "a drill whose answer is no step's number (a schedule's share, padding rows, an expert ridge)"
    return [
        Claim(A, "cell-30", "drill 1", par.tp_comm_s(M8, 256, 4, NV, LAT) * 1e3, "drill_1 = {:.2f} ms",
              ServingPoint(M8, G, prefill_chunks=(256,), tp=4)),
        Claim(A, "cell-30", "drill 2", d1, "drill_2 = {:,}", _full(M70, H200, 4, d1)),
        Claim(A, "cell-30", "drill 3", par.bubble_fraction(8, 16), "drill_3 = {:.2f}", None, why),
        Claim(A, "cell-30", "drill 4", par.pad_to_graph(261, SIZES) - 261, "drill_4 = {}", None, why),
        Claim(A, "cell-30", "drill 5", par.expert_ridge_tokens(*serving.priced(DEEPSEEK_V3, H200, "fp8")),
              "drill_5 = {:,}", None, why),
    ]


__all__ = ["ch16"]
