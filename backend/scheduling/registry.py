"""The policy registry: policy name -> factory.

The live scheduler and the simulator both look policies up here, so they run
the same code. ``LIVE_POLICIES`` excludes simulation-only policies (``oracle``
and ``oracle-mix`` need true future curves, which only the simulator has: it
passes them as ``make_policy("oracle", true_curves=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from backend.scheduling.guards import ServiceFloor
from backend.scheduling.policies.fair import FairPolicy
from backend.scheduling.policies.fifo import FifoPolicy
from backend.scheduling.policies.las import LasPolicy
from backend.scheduling.policies.oracle import OraclePolicy, TrueCurve, TwoAxisOraclePolicy
from backend.scheduling.policies.slaq import SlaqPolicy
from backend.scheduling.policies.slaq_classic import SlaqClassicPolicy
from backend.scheduling.types import Policy


def _oracle(*, true_curves: Mapping[int, TrueCurve] | None = None, **options: Any) -> Policy:
    if true_curves is None:
        raise ValueError("oracle is simulation-only: pass true_curves={job_id: TrueCurve}")
    return OraclePolicy(true_curves=true_curves, **options)


def _oracle_mix(*, true_curves: Mapping[int, TrueCurve] | None = None, **options: Any) -> Policy:
    if true_curves is None:
        raise ValueError("oracle-mix is simulation-only: pass true_curves={job_id: TrueCurve}")
    return TwoAxisOraclePolicy(true_curves=true_curves, **options)


POLICIES: dict[str, Callable[..., Policy]] = {
    "fifo": FifoPolicy,
    "fair": FairPolicy,
    "las": LasPolicy,
    "slaq": SlaqPolicy,
    "slaq-classic": SlaqClassicPolicy,
    "oracle": _oracle,
    "oracle-mix": _oracle_mix,
}

SIMULATION_ONLY: frozenset[str] = frozenset({"oracle", "oracle-mix"})

DEFAULT_POLICY = "slaq"
"""The policy the live scheduler should start with."""

GUARDED: frozenset[str] = frozenset({"slaq", "oracle", "oracle-mix"})
"""Policies with a completion-time guard (their ``floor``, a
:class:`~backend.scheduling.guards.ServiceFloor`); the others ignore it."""

DEFAULT_COMPLETION_GUARD = ServiceFloor().fraction


class PolicyRun(NamedTuple):
    """One policy to run in a comparison, under the label its figures carry."""

    label: str
    policy: str
    completion_guard: float | None
    completion_weight: float | None = None
    """slaq's completion weight for this run; ``None``: the one in force."""


WEIGHTED: frozenset[str] = frozenset({"slaq"})
"""Policies with a completion term (slaq's ``completion_weight``)."""


def policy_runs(policies: Sequence[str], guards: Sequence[float] = (),
                in_force: float | None = None, weights: Sequence[float] = (),
                weight_in_force: float | None = None) -> list[PolicyRun]:
    """``policies`` in order, each ``GUARDED`` one once per completion guard in
    ``guards`` (none: once, at ``in_force``, or its default if that is
    ``None``), and each ``WEIGHTED`` one also once per completion weight in
    ``weights`` (none: the one in force). A run is labelled with the settings
    it runs at that are not the ones in force, ``"slaq (guard 0.6)"`` or
    ``"slaq (guard 0.6, weight 0.01)"``, so a label names the policy as the
    portal runs it only when it is that policy."""
    out: list[PolicyRun] = []
    for name in policies:
        if name not in GUARDED:
            out.append(PolicyRun(name, name, None))
            continue
        chosen: list[float | None] = list(guards) or [in_force]
        weighed: list[float | None] = \
            (list(weights) or [weight_in_force]) if name in WEIGHTED else [None]
        for guard in chosen:
            for weight in weighed:
                changed = [f"{what} {value:g}" for what, value, now in
                           (("guard", guard, in_force), ("weight", weight, weight_in_force))
                           if value is not None and value != now]
                label = f"{name} ({', '.join(changed)})" if changed else name
                out.append(PolicyRun(label, name, guard, weight))
    return out


def live_policy_names() -> list[str]:
    return sorted(name for name in POLICIES if name not in SIMULATION_ONLY)


def make_policy(name: str, *, completion_guard: float | None = None,
                completion_weight: float | None = None, **options: Any) -> Policy:
    """A fresh instance of the named policy; ``KeyError`` names the choices.

    ``completion_guard`` is the service floor's fraction for the policies in
    ``GUARDED`` (0 turns it off; ``None`` keeps the policy's default); the
    portal's admins set it, and the other policies have no such guard.
    ``completion_weight`` is slaq's completion term
    (:data:`~backend.scheduling.policies.slaq.COMPLETION_WEIGHT`), the
    operators' ``COMPLETION_WEIGHT``; other policies ignore it.
    ``options`` go to the policy's constructor (e.g. ``true_curves`` for
    ``oracle``, ``bounds`` or ``exploration`` for ``slaq``).
    """
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; choose one of {sorted(POLICIES)}") from None
    if completion_guard is not None and name in GUARDED:
        options = {"floor": ServiceFloor(fraction=completion_guard), **options}
    if completion_weight is not None and name == "slaq":
        options = {"completion_weight": completion_weight, **options}
    return factory(**options)
