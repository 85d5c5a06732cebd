"""Clients with deadlines: they give up on a slow first token, and they come back when they are refused.

`Clients(deadline_s, abandon, retry)` gives every request a client who waits at most `deadline_s` seconds for its
first token: an admitted request that misses it is served-but-dead work (`SimResult.dead`, `dead_tokens`), a
waiting one leaves (`abandon`, `SimResult.abandoned`), and a refused one comes back after a `Backoff`.
`QueueCap(max_waiting)` and `BacklogAdmission` are refusal rules to pair with it; with `honour_retry_after=True` a
refused client waits max(its backoff, the Retry-After of a `RetryAfter` rule). The rules: docs/simulator.md.

>>> Backoff(base_s=0.5, cap_s=4.0, jitter=False).delays()
[0.5, 1.0, 2.0]
>>> Clients(deadline_s=2.0).abandon
True
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from servelab.analytic import queueing
from servelab.simulator.arrivals import _is_int
from servelab.simulator.state import ServingState


def _seconds(name: str, value, positive: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value) or value < 0 \
            or (positive and value == 0):
        raise ValueError(f"{name} must be a number {'> 0' if positive else '>= 0'} (seconds), got {value!r}")


@dataclass(frozen=True)
class Backoff:
    """Retry after min(cap_s, base_s * 2**attempt) seconds (attempt 0 is the first retry); with `jitter`, a
    uniform draw below that ("full jitter", from a `random.Random(seed)` per simulation), so that clients refused
    at the same moment do not all come back at the same moment. At most `max_retries` retries per request."""

    base_s: float
    cap_s: float
    jitter: bool = True
    max_retries: int = 3
    seed: int = 0

    def __post_init__(self):
        _seconds("base_s", self.base_s, positive=True)
        _seconds("cap_s", self.cap_s, positive=True)
        if not isinstance(self.jitter, bool):
            raise ValueError(f"jitter must be True or False, got {self.jitter!r}")
        if not _is_int(self.max_retries) or self.max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {self.max_retries!r}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        return queueing.retry_delay(attempt, self.base_s, self.cap_s, rng if self.jitter else None)

    def delays(self) -> list[float]:
        """The delays without jitter, one per retry (their ceilings with it)."""
        return [queueing.retry_delay(a, self.base_s, self.cap_s) for a in range(self.max_retries)]


@dataclass(frozen=True)
class Clients:
    """Every request's client: a deadline for the first token, whether the engine learns that it left
    (`abandon`), how it retries a refusal (`retry`, None: it does not), and whether it waits at least the refusal's
    Retry-After (`honour_retry_after`: max(backoff, Retry-After); a rule without the header leaves the backoff).
    The rules: docs/simulator.md."""

    deadline_s: float
    abandon: bool = True
    retry: Backoff | None = None
    honour_retry_after: bool = False

    def __post_init__(self):
        _seconds("deadline_s", self.deadline_s, positive=True)
        for name in ("abandon", "honour_retry_after"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.retry is not None and not isinstance(self.retry, Backoff):
            raise ValueError(f"retry must be a Backoff(base_s, cap_s, ...) or None, got {self.retry!r}")


@dataclass(frozen=True)
class QueueCap:
    """Refuse a request when `max_waiting` requests are already waiting (a queue-length cap).

    >>> QueueCap(100).max_waiting
    100
    """

    max_waiting: int

    def __post_init__(self):
        if not _is_int(self.max_waiting) or self.max_waiting < 0:
            raise ValueError(f"max_waiting must be an integer >= 0, got {self.max_waiting!r}")

    def __call__(self, state: ServingState, i: int) -> bool:
        return len(state.waiting) < self.max_waiting


def drop_expired(state: ServingState, now: float, expires_s) -> list[int]:
    """Remove from `state.waiting` the requests never admitted whose deadline (`expires_s[i]`) is before `now`;
    return their ids. Requests join the queue in the order of their attempts' arrivals, so the never-admitted
    ones are in order of their deadlines: the scan stops at the first that is still in time (admitted ones,
    preempted back to the front, are stepped over)."""
    waiting, front, gone = state.waiting, [], []
    started = state.first_scheduled_s
    while waiting:
        i = waiting[0]
        if not math.isnan(started[i]):
            front.append(waiting.popleft())
        elif expires_s[i] < now:
            gone.append(waiting.popleft())
        else:
            break
    waiting.extendleft(reversed(front))
    return gone
