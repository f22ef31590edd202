"""Validating a job spec against the algorithm and dataset catalogues."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from backend.core.models import Tenant, TrainerCode
from backend.core.upload_format import is_upload_ref, parse_upload_ref
from backend.services.errors import Invalid
from workers.datasets import DATASETS
from workers.datasets.params import ParamSpec
from workers.trainers.params_schema import ParamsError
from workers.trainers.params_schema import validate_params as validate_trainer_params
from workers.trainers.registry import Registered, TenantCode, UnknownTrainer, resolve

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


class SpecErrors(Invalid, ValueError):
    """Every problem found in a spec, each at its place in the request body."""

    def __init__(self, errors: list[SpecError]) -> None:
        super().__init__("; ".join(e.message for e in errors))
        self.errors = errors

    def detail(self) -> Any:
        return [{"loc": ["body", *e.loc], "msg": e.message, "type": "value_error"}
                for e in self.errors]


@dataclass(frozen=True)
class _Algorithm:
    """What admission needs of an algorithm: its tasks and how to check its params."""

    name: str
    tasks: tuple[str, ...]
    check: Callable[[Mapping[str, Any]], dict[str, Any]]


def _find_algorithm(algorithm: str, tenant_id: int, session: Session,
                    errors: list[SpecError]) -> _Algorithm | None:
    try:
        source = resolve(algorithm)
    except UnknownTrainer as exc:
        errors.append(SpecError(["algorithm"], f"unknown algorithm {algorithm!r}; choose one of "
                                f"{', '.join(exc.known)}, or code:<id> for your "
                                "uploaded trainer code"))
        return None
    if isinstance(source, TenantCode):
        return _find_code(source, tenant_id, session, errors)
    cls = source.cls

    def check(raw: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return validate_trainer_params(cls.Params, raw, f"algorithm {algorithm}").model_dump()
        except ParamsError as exc:
            raise SpecErrors([SpecError(["params", field] if field else ["params"], message)
                              for field, message in exc.problems]) from None

    return _Algorithm(algorithm, tuple(cls.tasks), check)


def _find_code(source: TenantCode, tenant_id: int, session: Session,
               errors: list[SpecError]) -> _Algorithm | None:
    algorithm, code_id = source.ref, source.code_id
    row = session.get(TrainerCode, code_id) if code_id is not None else None
    if row is None or row.tenant_id != tenant_id:
        errors.append(SpecError(["algorithm"], f"{algorithm!r}: no such uploaded trainer code; "
                                "see GET /api/v1/code"))
        return None
    tenant = session.get(Tenant, tenant_id)
    if tenant is None or not tenant.allow_code_uploads:
        errors.append(SpecError(["algorithm"], "your tenant may not run uploaded code; "
                                "a platform admin can allow it"))
        return None

    def check(raw: Mapping[str, Any]) -> dict[str, Any]:
        # The code's own Params model checks these inside the sandbox when the
        # job starts: importing tenant code here would run it in the portal.
        return dict(raw)

    return _Algorithm(algorithm, ("classification", "regression", "clustering", "text"), check)


def uses_gpu(algorithm: str) -> bool:
    """Whether the trainer gains from a GPU (uploaded code runs sandboxed on CPU)."""
    try:
        source = resolve(algorithm)
    except UnknownTrainer:
        return False
    return isinstance(source, Registered) and source.cls.uses_gpu


def validate_job_spec(
    *, algorithm: str, dataset: str, params: Mapping[str, Any],
    dataset_params: Mapping[str, Any], tenant_id: int, session: Session,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Returns (params, dataset_params) with defaults filled; raises SpecErrors.

    ``dataset`` may name an upload of tenant ``tenant_id`` as ``upload:<id>``.
    """
    errors: list[SpecError] = []
    algo = _find_algorithm(algorithm, tenant_id, session, errors)
    if is_upload_ref(dataset):
        return _validate_upload_spec(algo=algo, dataset=dataset, params=params,
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
    try:
        clean_params = algo.check(params)
    except SpecErrors as exc:
        errors.extend(exc.errors)
    try:
        clean_data = validate_params(data.params, dataset_params, loc=["dataset_params"])
    except SpecErrors as exc:
        errors.extend(exc.errors)
    if errors:
        raise SpecErrors(errors)
    return clean_params, clean_data


def _validate_upload_spec(
    *, algo: _Algorithm | None, dataset: str, params: Mapping[str, Any],
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
    if algo is not None and tasks and not set(algo.tasks) & set(tasks):
        errors.append(SpecError(["dataset"], (
            f"{algo.name} needs a {' or '.join(algo.tasks)} dataset; "
            f"{dataset} is for {' or '.join(tasks)}")))
    for name in dataset_params:
        errors.append(SpecError(["dataset_params", name],
                                f"unknown parameter {name!r}; uploaded datasets take none"))
    clean_params: dict[str, Any] = {}
    if algo is not None:
        try:
            clean_params = algo.check(params)
        except SpecErrors as exc:
            errors.extend(exc.errors)
    if errors:
        raise SpecErrors(errors)
    return clean_params, {}
