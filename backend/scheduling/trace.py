"""Recorded loss curves that drive the simulator.

A trace is a JSON file of curves, each one real run of a portal algorithm to
convergence: per-iteration loss and seconds, plus the measured per-chunk
overhead (dispatch, checkpoint load and save). Format::

    {"format": "slaq-trace/1", "description": "...",
     "curves": [{"id": "mlp/digits/s0", "algorithm": "mlp", "dataset": "digits",
                 "params": {...}, "dataset_params": {...}, "seed": 0,
                 "max_iterations": 3000,
                 "stop_reason": "converged: ...", "chunk_overhead_seconds": 0.04,
                 "losses": [...], "seconds": [...],
                 "evaluations": {"val_loss": [[50, 0.41], [100, 0.33], ...]}}]}

``losses[i]`` is the loss after iteration ``i + 1``; the first reported loss
is the curve's reference start ``L_0`` and the last its ``L_final``, so its
normalised loss runs from 1 to 0 (DESIGN §7). ``evaluations`` (optional)
holds held-out metrics as ``[iteration, value]`` pairs, measured every
``eval_every`` iterations as a live job would (the sweep traces record
``val_loss`` so an experiment can be judged on it).

A trace recorded from a portal's own finished jobs (``slaq record-trace
--from-portal``) also holds when each job arrived, as ``"arrivals":
[{"curve_id": "job-7", "time": 0.0, "tenant_id": 2, "experiment_id": 5}, ...]``
(seconds from the first; ``experiment_id`` only for a sweep's
configurations); the simulator then replays that workload instead of
drawing one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACE_FORMAT = "slaq-trace/1"


@dataclass(frozen=True)
class TraceCurve:
    """One recorded run; see the module docstring for the fields."""

    id: str
    losses: tuple[float, ...]
    seconds: tuple[float, ...]
    algorithm: str = ""
    dataset: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    dataset_params: Mapping[str, Any] = field(default_factory=dict)
    seed: int = 0
    max_iterations: int = 0
    stop_reason: str = ""
    chunk_overhead_seconds: float = 0.0
    evaluations: Mapping[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.losses or len(self.losses) != len(self.seconds):
            raise ValueError(f"curve {self.id!r}: need equally long, non-empty losses and seconds")
        for name, points in self.evaluations.items():
            steps = [i for i, _ in points]
            if steps != sorted(set(steps)) or any(not 1 <= i <= len(self.losses) for i in steps):
                raise ValueError(f"curve {self.id!r}: {name} evaluations need increasing "
                                 f"iterations within 1..{len(self.losses)}")

    @property
    def iterations(self) -> int:
        return len(self.losses)

    @property
    def initial_loss(self) -> float:
        return self.losses[0]

    @property
    def final_loss(self) -> float:
        return self.losses[-1]

    @property
    def total_seconds(self) -> float:
        return float(sum(self.seconds))

    def normalised(self, loss: float) -> float:
        """``(L - L_final) / (L_0 - L_final)``, clipped to [0, 1] (noise can overshoot)."""
        span = self.initial_loss - self.final_loss
        if span <= 0:
            return 0.0
        return min(max((loss - self.final_loss) / span, 0.0), 1.0)

    def to_json(self, digits: int = 6) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "algorithm": self.algorithm, "dataset": self.dataset,
            "params": dict(self.params), "dataset_params": dict(self.dataset_params),
            "seed": self.seed,
            "max_iterations": self.max_iterations, "stop_reason": self.stop_reason,
            "chunk_overhead_seconds": round(self.chunk_overhead_seconds, 6),
            "losses": [float(f"{v:.{digits}g}") for v in self.losses],
            "seconds": [float(f"{v:.3g}") for v in self.seconds],
        }
        if self.evaluations:
            out["evaluations"] = {name: [[i, float(f"{v:.{digits}g}")] for i, v in points]
                                  for name, points in self.evaluations.items()}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TraceCurve:
        return cls(
            id=str(data["id"]), losses=tuple(float(v) for v in data["losses"]),
            seconds=tuple(float(v) for v in data["seconds"]),
            algorithm=str(data.get("algorithm", "")), dataset=str(data.get("dataset", "")),
            params=dict(data.get("params", {})),
            dataset_params=dict(data.get("dataset_params", {})), seed=int(data.get("seed", 0)),
            max_iterations=int(data.get("max_iterations") or len(data["losses"])),
            stop_reason=str(data.get("stop_reason", "")),
            chunk_overhead_seconds=float(data.get("chunk_overhead_seconds", 0.0)),
            evaluations={str(name): tuple((int(i), float(v)) for i, v in points)
                         for name, points in data.get("evaluations", {}).items()},
        )


@dataclass(frozen=True)
class Arrival:
    """Job number ``index`` submits curve ``curve_id`` at ``time`` seconds as
    ``tenant_id``, as a configuration of experiment ``experiment_id`` if set."""

    index: int
    time: float
    curve_id: str
    tenant_id: int = 1
    experiment_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"curve_id": self.curve_id, "time": round(self.time, 6),
                               "tenant_id": self.tenant_id}
        if self.experiment_id is not None:
            out["experiment_id"] = self.experiment_id
        return out


@dataclass(frozen=True)
class Trace:
    curves: tuple[TraceCurve, ...]
    description: str = ""
    arrivals: tuple[Arrival, ...] = ()
    """The recorded workload, if the trace has one (index = position)."""

    def curve(self, curve_id: str) -> TraceCurve:
        for curve in self.curves:
            if curve.id == curve_id:
                return curve
        raise KeyError(f"no curve {curve_id!r} in trace")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": TRACE_FORMAT, "description": self.description,
                               "curves": [c.to_json() for c in self.curves]}
        if self.arrivals:
            out["arrivals"] = [a.to_json() for a in self.arrivals]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trace:
        if data.get("format") != TRACE_FORMAT:
            raise ValueError(f"not a {TRACE_FORMAT} trace (format={data.get('format')!r})")
        curves = tuple(TraceCurve.from_json(c) for c in data["curves"])
        if len({c.id for c in curves}) != len(curves):
            raise ValueError("curve ids in a trace must be unique")
        ids = {c.id for c in curves}
        arrivals = tuple(Arrival(index=i, time=float(a["time"]), curve_id=str(a["curve_id"]),
                                 tenant_id=int(a.get("tenant_id", 1)),
                                 experiment_id=_optional_int(a.get("experiment_id")))
                         for i, a in enumerate(data.get("arrivals", ())))
        if any(not 0 <= a.time < float("inf") for a in arrivals):
            raise ValueError("arrival times must be finite seconds from 0")
        unknown = sorted({a.curve_id for a in arrivals} - ids)
        if unknown:
            raise ValueError(f"arrivals name curves the trace lacks: {', '.join(unknown[:5])}")
        return cls(curves=curves, description=str(data.get("description", "")),
                   arrivals=arrivals)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def load_trace(path: str | Path) -> Trace:
    return Trace.from_json(json.loads(Path(path).read_text()))


def save_trace(trace: Trace, path: str | Path) -> None:
    # One curve per line keeps the committed file diffable yet compact.
    data = trace.to_json()
    lines = [json.dumps(c, separators=(",", ":")) for c in data["curves"]]
    header = json.dumps({"format": data["format"], "description": data["description"]})
    body = ",\n".join(lines)
    tail = ""
    if "arrivals" in data:
        tail = ',\n"arrivals": [\n' + ",\n".join(
            json.dumps(a, separators=(",", ":")) for a in data["arrivals"]) + "\n]"
    Path(path).write_text(header[:-1] + ', "curves": [\n' + body + "\n]" + tail + "}\n")


def curves_by_id(curves: Sequence[TraceCurve]) -> dict[str, TraceCurve]:
    return {c.id: c for c in curves}
