"""An exercise as both sides of grading see it: its parameters, its reference, how its result is read and shown.

One :class:`Spec` per exercise, in the chapter's learner-facing module (``servelab_autograder.chNN``). The
learner's notebook uses it to explain a failing visible assert (:func:`diagnose`, run in the learner's own
kernel with the library's reference); the grader uses the same one, outside the learner's kernel, to judge
what the learner's code returned on the grader's cases (``servelab_autograder.judge.verdicts``). Either way the
learner's result first becomes plain data (:mod:`servelab_autograder.exercises.plain`, through
:func:`servelab_autograder.exercises.probe.answer`), so the two can never disagree about what the code returned.

A judgement is a message in the learner's terms, or None when the result is right: the call with its
arguments, what it returned, what was expected; the pitfall's name goes on the first line when one is known
(graders often show only an error's first line).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from servelab_autograder.exercises import common, plain, probe
from servelab_autograder.exercises.probe import answer

Shape = common.Shape   # raised by a normaliser: the result does not have the promised shape
SHORT = common.short_repr(24, 120)
ATLAS_DIR = Path(__file__).with_name("atlas")


def _identity(raw, args):
    return raw


@dataclass(frozen=True)
class Spec:
    """``name(*params)``, checked against ``reference``. ``norm(raw, args)`` turns a result into the plain value
    compared (raising :class:`Shape` in the learner's terms), ``show`` prints one, ``close(got, want)`` compares
    floats (None: exactly), ``show_args`` prints an argument by name, ``note(args, got, want)`` adds a sentence
    to the message of a wrong answer."""

    name: str
    params: tuple[str, ...]
    reference: Callable
    norm: Callable = _identity
    show: Callable = repr
    close: Callable | None = None
    show_args: Mapping[str, Callable] = field(default_factory=dict)
    note: Callable | None = None
    driver: str | None = None   # "servelab_autograder.chNN:drive_x": runs the function on plain-data args
    call: Callable | None = None  # args -> how the call reads in a message, when name(param=...) would not do
    alike: Callable | None = None  # (got, wrong) -> whether a pitfall explains got, when stricter than ``same``
    compact: Callable | None = None  # a result compared with ``close`` as the atlas keeps it (None: all of it)

    def run(self, fn, args):
        """``fn(*args)``, or through the driver (a stateful exercise: objects built from plain data, the
        function run on them, the run's trace returned as plain data): the same code on both sides."""
        return probe.driver(self.driver)(fn, *args) if self.driver else fn(*args)

    def call_text(self, args) -> str:
        if self.call is not None:
            return self.call(args)
        shown = (self.show_args.get(p, SHORT.repr)(a) for p, a in zip(self.params, args))
        return f"{self.name}({', '.join(f'{p}={s}' for p, s in zip(self.params, shown))})"

    def expected(self, args):
        return self.norm(self.run(self.reference, args if self.driver else copy.deepcopy(args)), args)

    def same(self, got, want) -> bool:
        return bool(self.close(got, want)) if self.close else got == want

    def explains(self, got, wrong) -> bool:
        """Whether a pitfall's result ``wrong`` is what came back (naming a pitfall is a message, not a verdict:
        it may look at more than the verdict does)."""
        return bool(self.alike(got, wrong)) if self.alike else self.same(got, wrong)

    def read(self, args, outcome: dict):
        """(message, None) for an outcome that is wrong before any comparison (it raised, changed its input,
        has the wrong shape), else (None, the normalised result)."""
        call = self.call_text(args)
        if "raised" in outcome:
            if outcome["raised"] == "NotImplementedError":
                return common.not_filled(call), None
            return f"{call} raised {outcome['raised']}: {outcome.get('message', '')}", None
        if not self.driver and plain.decode(outcome["after"]) != [plain.decode(plain.encode(a)) for a in args]:
            return f"{call} changed its input lists; leave the caller's data alone", None
        raw = plain.decode(outcome["ok"])
        try:
            return None, self.norm(raw, args)
        except Shape as e:
            return f"{call} returned {SHORT.repr(raw)}: {e}", None

    def judge(self, args, outcome: dict, pitfall: Callable | None = None) -> str | None:
        """The message for one call's ``outcome`` (a :func:`~servelab_autograder.exercises.probe.answer` entry), or None
        when it agrees with the reference. ``pitfall(args, got)``: the name of the known mistake that returns
        ``got`` on ``args``, or None."""
        msg, got = self.read(args, outcome)
        if msg is not None:
            return msg
        want = self.expected(args)
        if self.same(got, want):
            return None
        msg = f"{self.call_text(args)} returned {self.show(got)}; expected {self.show(want)}."
        if self.note is not None:
            msg += self.note(args, got, want)
        name = pitfall(args, got) if pitfall is not None else None
        return f"{name}\n{msg}" if name else msg


def request_call(spec: Spec, cases: list) -> dict:
    """One call of a probe request: the learner's function ``spec.name`` on ``cases`` (plain data)."""
    out = {"name": spec.name, "cases": cases}
    if spec.driver:
        out["driver"] = spec.driver
    return out


def call(fn, spec: Spec, args) -> dict:
    """What the grader's probe would hand back for ``fn(*args)``: the same plain data, made here."""
    name = spec.name
    request = {"calls": [request_call(spec, [plain.encode(list(args))])]}
    return json.loads(json.dumps(answer(request, {name: fn})))["calls"][0]["results"][0]


def _canonical(value) -> str:
    return json.dumps(plain.encode(value), sort_keys=True, separators=(",", ":"))


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:24]


def case_key(args) -> str:
    """A case's arguments as canonical text, or its digest when long (how a chapter's pitfall atlas is keyed)."""
    text = _canonical(list(args))
    return text if len(text) <= 160 else digest(text)


def atlas_value(spec: Spec, value):
    """A wrong result as the atlas stores it: plain data, or the digest of a long one that is compared exactly."""
    if spec.compact is not None:   # a few numbers of a large result that still tell the pitfalls apart
        return plain.encode(spec.compact(value))
    text = _canonical(value)
    return digest(text) if spec.close is None and len(text) > 160 else plain.encode(value)


def atlas_match(spec: Spec, got, stored) -> bool:
    if isinstance(stored, str) and stored.startswith("sha256:"):
        return digest(_canonical(got)) == stored
    return spec.explains(spec.compact(got) if spec.compact is not None else got, plain.decode(stored))


def diagnose(specs: Mapping[str, Spec], atlas: Mapping[str, Mapping], fn, args, name: str | None = None) -> str:
    """What is wrong with ``fn(*args)`` in the learner's terms, for a visible assert's message; a note that this
    input is handled correctly otherwise. ``atlas``: exercise -> {case key: [[pitfall, normalised wrong result],
    ...]}, what each known mistake returns on the chapter's fixed cases (``"$pitfalls"``: pitfall -> its message).
    Never raises."""
    name = name or getattr(fn, "__name__", "")
    spec = specs.get(name)
    if spec is None:
        return f"{name} gave an unexpected result for {SHORT.repr(args)}"
    wrong = atlas.get(name, {}).get(case_key(args), [])

    messages = atlas.get("$pitfalls", {})

    def pitfall(case, got):
        return next((messages.get(p, p) for p, value in wrong if atlas_match(spec, got, value)), None)

    try:
        return spec.judge(tuple(args), call(fn, spec, args), pitfall) or f"{spec.call_text(args)} is correct on " \
                                                                          "this input"
    except Exception as e:  # noqa: BLE001 - a message, whatever happens
        return f"{spec.call_text(args)}: the check itself failed ({type(e).__name__}: {e})"


def as_fields(obj, cls) -> dict:
    """A dataclass instance (a ModelSpec, a GPUSpec) as the plain dict of its fields; a dict is kept as it is. A field
    marked "omit at default" (a ModelSpec's experts and latent-KV fields) is left out while at its default, so a
    dense model's case reads, and hashes, as it did before those fields existed."""
    if isinstance(obj, dict):
        return obj
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls)
            if not (f.metadata.get("plain") == "omit at default" and getattr(obj, f.name) == f.default)}


def model_and_gpu() -> dict:
    """The plain form of a `model` and a `gpu` argument: their fields (a driver rebuilds them)."""
    from servelab.analytic.costmodel import GPUSpec, ModelSpec

    return {"model": lambda v: as_fields(v, ModelSpec), "gpu": lambda v: as_fields(v, GPUSpec)}


DEFAULT = "(default)"   # a case's argument left out of the call, so the function's own default is graded too


def passed(**kwargs) -> dict:
    """The keyword arguments a driver passes: those a case does not leave out (:data:`DEFAULT`)."""
    return {k: v for k, v in kwargs.items() if v != DEFAULT}


def plain_case(specs: Mapping[str, Spec], name: str, args, kwargs, defaults: Mapping | None = None,
               plain: Mapping | None = None) -> tuple:
    """The plain-data case for the call ``name(*args, **kwargs)`` as a notebook writes it: every parameter of the
    exercise in order, ``defaults[name]`` filled in, each value through ``plain[parameter]`` (e.g. a model as its
    fields). A chapter's table makes its fixed cases the same way, so a visible assert's input finds its pitfalls
    in the atlas."""
    params = specs[name].params
    values = {**(defaults or {}).get(name, {}), **dict(zip(params, args)), **kwargs}
    plain = plain or {}
    return tuple(plain[p](values[p]) if p in plain else values[p] for p in params)


def diagnose_call(specs: Mapping[str, Spec], assignment: str, fn, args, kwargs, name: str | None = None,
                  defaults: Mapping | None = None, plain: Mapping | None = None) -> str:
    """`diagnose` for a call written with keyword arguments and defaults (`plain_case` makes the case). Never
    raises."""
    name = name or getattr(fn, "__name__", "")
    if name not in specs:
        return f"{name} gave an unexpected result"
    try:
        case = plain_case(specs, name, args, kwargs, defaults, plain)
    except Exception as e:  # noqa: BLE001 - a message, whatever the assert passed
        return f"{name}: the assert's arguments could not be read ({type(e).__name__}: {e})"
    return diagnose(specs, atlas(assignment), fn, case, name)


def diagnose_cases(specs: Mapping[str, Spec], assignment: str, fn, name: str, cases, exercise: str,
                   reference: str = "the reference") -> str:
    """A stateful chapter's visible-assert message: what is wrong with ``fn`` on the first of ``cases`` (a
    callable making them: the chapter's workloads) it gets wrong, or a note that it agrees on all. Never raises."""
    try:
        cases = cases()
    except Exception as e:  # noqa: BLE001 - a message, whatever happens
        return f"{exercise}: the check itself failed ({type(e).__name__}: {e})"
    for args in cases:
        msg = diagnose(specs, atlas(assignment), fn, args, name)
        if not msg.endswith("is correct on this input"):
            return msg
    return f"{exercise} agrees with {reference} on the chapter's workloads: the failing assert checks something else"


def atlas_path(assignment: str) -> Path:
    return ATLAS_DIR / f"{assignment}.json"


@functools.cache
def atlas(assignment: str) -> dict:
    """What each of the chapter's pitfalls returns on its fixed cases (made by ``python -m
    servelab_autograder.judge.verdicts`` from the known-wrong patches); {} when there is none."""
    try:
        return json.loads(atlas_path(assignment).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
