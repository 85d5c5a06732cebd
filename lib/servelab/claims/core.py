"""The claim record and the serving points many chapters' claims share (see servelab.claims)."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.analytic import capacity, costmodel
from servelab.analytic.costmodel import GPUSpec, ModelSpec
from servelab.analytic.serving import ServingPoint

__all__ = ["Claim", "ceiling_point", "full_cache"]


@dataclass(frozen=True)
class Claim:
    assignment: str
    cell: str                        # the nbformat id of the cell whose source or output states it
    name: str
    value: float
    fmt: str                         # how the cell prints it, e.g. "{:,}" or "{:.1f} ms"
    point: ServingPoint | None
    why_no_point: str = ""           # when `point` is None: why the number describes no single step

    def __post_init__(self):
        if self.point is None and not self.why_no_point:
            raise ValueError(f"claim {self.name!r}: give the serving point it describes, or why it describes none")

    @property
    def text(self) -> str:
        return self.fmt.format(self.value)


def full_cache(model: ModelSpec, gpu: GPUSpec, max_context: int | None = None, **settings) -> ServingPoint:
    """A decode step whose sequences hold exactly the KV cache's capacity, each within the model's context: the
    point a KV-capacity figure describes (one token more and `serving.check` refuses it)."""
    cap = costmodel.kv_capacity_tokens(model, gpu)
    longest = max_context or model.max_position_embeddings or cap
    full, rest = divmod(cap, longest)
    contexts = (longest - 1,) * full + ((rest - 1,) if rest else ())
    return ServingPoint(model, gpu, decode_contexts=contexts, **settings)


def ceiling_point(model: ModelSpec, gpu: GPUSpec, context_len: int) -> ServingPoint:
    """The KV ceiling's batch: as many sequences as fit, each holding `context_len` tokens after this step."""
    return ServingPoint.decode(model, gpu, capacity.kv_ceiling(model, gpu, context_len), context_len - 1)
