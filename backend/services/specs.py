"""Validating a job spec against the algorithm and dataset catalogues."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from backend.core.upload_format import is_upload_ref, parse_upload_ref
from workers.algorithms import ALGORITHMS
from workers.algorithms.params import ParamSpec
from workers.datasets import DATASETS

if TYPE_CHECKING:
    from sqlmodel import Session


class SpecError(ValueError):
    """A spec problem at ``loc`` (a path inside the request body)."""

    def __init__(self, loc: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.loc = tuple(loc)
        self.message = message


def validate_params(
    specs: Sequence[ParamSpec], raw: Mapping[str, Any], *, loc: Sequence[str]
) -> dict[str, Any]:
    """Check ``raw`` against ``specs`` and fill defaults.

    Strict on purpose: a string where a number belongs is refused rather than
    parsed, so a typo in a script is caught at submit time.
    """
    known = {spec.name: spec for spec in specs}
    errors: list[SpecError] = []
    for name in raw:
        if name not in known:
            errors.append(SpecError([*loc, name], f"unknown parameter {name!r}; "
                                    f"known: {', '.join(sorted(known)) or 'none'}"))
    clean: dict[str, Any] = {}
    for name, spec in known.items():
        if name not in raw:
            clean[name] = spec.default
            continue
        value = raw[name]
        if spec.type != "choice" and not isinstance(value, (int, float)) or isinstance(
            value, bool
        ):
            errors.append(SpecError([*loc, name], f"{name} must be a number, got {value!r}"))
            continue
        try:
            clean[name] = spec.coerce(value)
        except ValueError as exc:
            errors.append(SpecError([*loc, name], str(exc)))
    if errors:
        raise SpecErrors(errors)
    return clean


class SpecErrors(ValueError):
    def __init__(self, errors: list[SpecError]) -> None:
        super().__init__("; ".join(e.message for e in errors))
        self.errors = errors


def validate_job_spec(
    *, algorithm: str, dataset: str, params: Mapping[str, Any],
    dataset_params: Mapping[str, Any], tenant_id: int, session: Session,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns (params, dataset_params) with defaults filled; raises SpecErrors.

    ``dataset`` may name an upload of tenant ``tenant_id`` as ``upload:<id>``.
    """
    errors: list[SpecError] = []
    algo = ALGORITHMS.get(algorithm)
    if algo is None:
        errors.append(SpecError(["algorithm"], f"unknown algorithm {algorithm!r}; choose one of "
                                f"{', '.join(sorted(ALGORITHMS))}"))
    if is_upload_ref(dataset):
        return _validate_upload_spec(algorithm=algorithm, dataset=dataset, params=params,
                                     dataset_params=dataset_params, errors=errors,
                                     tenant_id=tenant_id, session=session)
    data = DATASETS.get(dataset)
    if data is None:
        errors.append(SpecError(["dataset"], f"unknown dataset {dataset!r}; choose one of "
                                f"{', '.join(sorted(DATASETS))}"))
    if errors:
        raise SpecErrors(errors)
    assert algo is not None and data is not None
    if not set(algo.tasks) & set(data.tasks):
        raise SpecErrors([SpecError(["dataset"], (
            f"{algorithm} needs a {' or '.join(algo.tasks)} dataset; "
            f"{dataset} is for {' or '.join(data.tasks)}"))])
    clean_params: dict[str, Any] = {}
    clean_data: dict[str, Any] = {}
    for target, specs, raw, loc in (
        (clean_params, algo.params, params, "params"),
        (clean_data, data.params, dataset_params, "dataset_params"),
    ):
        try:
            target.update(validate_params(specs, raw, loc=[loc]))
        except SpecErrors as exc:
            errors.extend(exc.errors)
    if errors:
        raise SpecErrors(errors)
    return clean_params, clean_data


def _validate_upload_spec(
    *, algorithm: str, dataset: str, params: Mapping[str, Any],
    dataset_params: Mapping[str, Any], errors: list[SpecError], tenant_id: int,
    session: Session,
) -> tuple[dict[str, Any], dict[str, Any]]:
    from backend.services.uploads import find_upload, upload_tasks

    upload_id = parse_upload_ref(dataset)
    tasks: tuple[str, ...] = ()
    if upload_id is None:
        errors.append(SpecError(["dataset"], f"{dataset!r}: an uploaded dataset is named "
                                "upload:<id>, with the id from GET /api/v1/datasets"))
    else:
        row = find_upload(session, upload_id, tenant_id)
        if row is None:
            errors.append(SpecError(["dataset"], f"uploaded dataset {upload_id} not found; "
                                    "see GET /api/v1/datasets"))
        else:
            tasks = upload_tasks(row.task)
    algo = ALGORITHMS.get(algorithm)
    if algo is not None and tasks and not set(algo.tasks) & set(tasks):
        errors.append(SpecError(["dataset"], (
            f"{algorithm} needs a {' or '.join(algo.tasks)} dataset; "
            f"{dataset} is for {' or '.join(tasks)}")))
    for name in dataset_params:
        errors.append(SpecError(["dataset_params", name],
                                f"unknown parameter {name!r}; uploaded datasets take none"))
    clean_params: dict[str, Any] = {}
    if algo is not None:
        try:
            clean_params = validate_params(algo.params, params, loc=["params"])
        except SpecErrors as exc:
            errors.extend(exc.errors)
    if errors:
        raise SpecErrors(errors)
    return clean_params, {}
