"""``SlaqClient``: the portal's REST API from Python scripts, over httpx."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

API = "/api/v1"


class SlaqError(Exception):
    """The portal refused a request; ``str()`` is a readable explanation."""

    def __init__(self, status_code: int, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.detail = detail


def describe_error(status_code: int, detail: Any) -> str:
    """Turn an error body's ``detail`` into lines such as
    ``params.learning_rate: must be at most 10``."""
    if isinstance(detail, list):
        lines = []
        for item in detail:
            if not isinstance(item, dict):
                lines.append(str(item))
                continue
            loc = [str(p) for p in item.get("loc", [])]
            if loc and loc[0] in ("body", "query", "path", "header"):
                loc = loc[1:]
            where = ".".join(loc)
            msg = str(item.get("msg", item))
            lines.append(f"{where}: {msg}" if where else msg)
        return "\n".join(lines) or f"HTTP {status_code}"
    if isinstance(detail, dict):
        return str(detail.get("message") or json.dumps(detail))
    if detail:
        return str(detail)
    return f"HTTP {status_code}"


class SlaqClient:
    """A signed-in connection to one portal.

    >>> client = SlaqClient("http://127.0.0.1:8000", token)   # doctest: +SKIP
    >>> job = client.submit({"algorithm": "mlp", "dataset": "digits"})  # doctest: +SKIP
    """

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __enter__(self) -> SlaqClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _raw(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The response of a successful call; an error status raises :class:`SlaqError`."""
        try:
            resp = self._http.request(method, f"{API}{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise SlaqError(0, f"cannot reach {self.base_url}: {exc}") from None
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail")
            except (ValueError, AttributeError):
                detail = resp.text.strip()[:500]
            raise SlaqError(resp.status_code, describe_error(resp.status_code, detail), detail)
        return resp

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self._raw(method, path, **kwargs)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    # -- signing in -------------------------------------------------------
    def create_token(self, email: str, password: str, name: str = "cli") -> str:
        """A new API token for ``email``; the portal shows it only this once."""
        body = self._request("POST", "/auth/token",
                             json={"email": email, "password": password, "token_name": name})
        return str(body["token"])

    def me(self) -> dict[str, Any]:
        return dict(self._request("GET", "/auth/me"))

    # -- jobs ------------------------------------------------------------
    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        return dict(self._request("POST", "/jobs", json=spec))

    def jobs(self, status: str | list[str] | None = None, limit: int = 50, offset: int = 0,
             **filters: Any) -> dict[str, Any]:
        """A page of jobs; ``filters`` are the list's query parameters (q,
        algorithm, dataset, experiment, tag, sort), left out when None."""
        params: dict[str, Any] = {"limit": limit, "offset": offset,
                                  **{k: v for k, v in filters.items() if v not in (None, [], "")}}
        if status:
            params["status"] = status
        return dict(self._request("GET", "/jobs", params=params))

    def job(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("GET", f"/jobs/{job_id}"))

    def losses(self, job_id: int, max_points: int = 2000) -> dict[str, Any]:
        return dict(self._request("GET", f"/jobs/{job_id}/losses",
                                  params={"max_points": max_points}))

    def cancel(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("POST", f"/jobs/{job_id}/cancel"))

    def bulk(self, action: str, *, ids: list[int] | None = None,
             status: str | None = None) -> dict[str, Any]:
        """Cancel, pause or resume the jobs ``ids``, or all of yours in ``status``."""
        body: dict[str, Any] = {"action": action}
        if ids is not None:
            body["ids"] = ids
        if status is not None:
            body["filter"] = {"status": status}
        return dict(self._request("POST", "/jobs/bulk", json=body))

    # -- experiments -------------------------------------------------------
    def submit_experiment(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Submit a sweep (see docs/experiments.md); all its jobs or none."""
        return dict(self._request("POST", "/experiments", json=spec))

    def experiment(self, experiment_id: int) -> dict[str, Any]:
        return dict(self._request("GET", f"/experiments/{experiment_id}"))

    def experiments(self, limit: int = 50, offset: int = 0) -> dict[str, Any]:
        return dict(self._request("GET", "/experiments",
                                  params={"limit": limit, "offset": offset}))

    def experiment_action(self, experiment_id: int, action: str) -> dict[str, Any]:
        """Cancel, pause or resume every job of the experiment."""
        return dict(self._request("POST", f"/experiments/{experiment_id}/{action}"))

    def label(self, kind: str, run_id: int, **labels: Any) -> dict[str, Any]:
        """Change a job's or an experiment's (``kind``) name, tags or note."""
        return dict(self._request("PATCH", f"/{kind}s/{run_id}", json=labels))

    def continue_job(self, job_id: int, **change: Any) -> dict[str, Any]:
        """Continue a finished job (``max_iterations``, ``target_loss``, ``tolerance``)."""
        return dict(self._request("POST", f"/jobs/{job_id}/continue", json=change))

    def extend_experiment(self, experiment_id: int, body: dict[str, Any]) -> dict[str, Any]:
        """Add configurations to an experiment (``space`` and/or ``configurations``)."""
        return dict(self._request("POST", f"/experiments/{experiment_id}/configurations",
                                  json=body))

    def delete(self, kind: str, run_id: int) -> None:
        """Delete a finished job or experiment with its data."""
        self._request("DELETE", f"/{kind}s/{run_id}")

    def checkpoint(self, job_id: int) -> tuple[bytes, str]:
        """The job's model file and the name the portal gives it."""
        resp = self._raw("GET", f"/jobs/{job_id}/checkpoint")
        return resp.content, _filename(resp, f"job-{job_id}-model.bin")

    def export(self, job_id: int, fmt: str = "csv") -> tuple[bytes, str]:
        """The job's loss and metrics history as CSV or JSON, and its file name."""
        resp = self._raw("GET", f"/jobs/{job_id}/export", params={"format": fmt})
        return resp.content, _filename(resp, f"job-{job_id}-losses.{fmt}")

    def pause(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("POST", f"/jobs/{job_id}/pause"))

    def resume(self, job_id: int) -> dict[str, Any]:
        return dict(self._request("POST", f"/jobs/{job_id}/resume"))

    def stream_points(self, job_id: int, after_iteration: int = 0,
                      idle_timeout: float = 1.0) -> Iterator[list[tuple[int, float]]]:
        """Batches of live ``(iteration, loss)`` points from the job's SSE stream.

        Ends (without error) when nothing arrives for ``idle_timeout`` seconds,
        so a caller can check the job's status and call again with the last
        iteration it saw.
        """
        timeout = httpx.Timeout(30.0, read=idle_timeout)
        try:
            with self._http.stream("GET", f"{API}/jobs/{job_id}/stream",
                                   params={"after_iteration": after_iteration},
                                   timeout=timeout) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    try:
                        detail = resp.json().get("detail")
                    except ValueError:
                        detail = resp.text
                    raise SlaqError(resp.status_code, describe_error(resp.status_code, detail),
                                    detail)
                event, data = "", []
                for line in resp.iter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        data.append(line[5:].strip())
                    elif not line:
                        if event == "points" and data:
                            payload = json.loads("\n".join(data))
                            yield [(int(i), float(v)) for i, v in payload.get("points", [])]
                        event, data = "", []
        except httpx.ReadTimeout:
            return
        except httpx.HTTPError as exc:
            raise SlaqError(0, f"live stream from {self.base_url} broke: {exc}") from None

    # -- datasets ----------------------------------------------------------
    def upload_dataset(self, path: str | Path, name: str, task: str,
                       label: str | None = None) -> dict[str, Any]:
        """Upload a CSV file as a dataset of your tenant (task ``text``: a
        UTF-8 text file, for the character-level language models)."""
        data = {"name": name, "task": task}
        if label is not None:
            data["label"] = label
        media = "text/plain" if task == "text" else "text/csv"
        with Path(path).open("rb") as fh:
            return dict(self._request("POST", "/datasets", data=data,
                                      files={"file": (Path(path).name, fh, media)},
                                      timeout=300))

    def upload_code(self, path: str | Path, name: str | None = None) -> dict[str, Any]:
        """Upload a trainer's Python source; jobs name it ``code:<id>``."""
        data = {"name": name} if name else {}
        with Path(path).open("rb") as fh:
            return dict(self._request("POST", "/code", data=data,
                                      files={"file": (Path(path).name, fh, "text/x-python")},
                                      timeout=120))

    def codes(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/code"))

    def datasets(self) -> list[dict[str, Any]]:
        return list(self._request("GET", "/datasets"))

    def delete_dataset(self, dataset_id: int) -> None:
        self._request("DELETE", f"/datasets/{dataset_id}")


def _filename(resp: httpx.Response, default: str) -> str:
    """The file name from Content-Disposition, reduced to a plain name."""
    match = re.search(r'filename="([^"/\\]+)"', resp.headers.get("Content-Disposition", ""))
    return match.group(1) if match else default
