"""The web portal's pages: static HTML shells whose ES modules call the same
REST API scripts use (same origin, session cookie, CSRF header).

Pages other than ``/login`` need a session cookie; without one the browser is
sent to ``/login?next=<page>`` before any HTML loads. Whether the cookie is
still valid is checked by the page itself (``GET /api/v1/auth/me``; a 401
also leads to ``/login``), so these pages never touch the database. ``/login``
does, once: a browser with a live session goes straight on to ``next``, so the
sign-in page itself never has to ask (and be answered 401).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from backend.api.deps import SessionDep
from backend.services.web_sessions import SESSION_COOKIE, find_session

PAGES_DIR = Path(__file__).resolve().parents[2] / "frontend" / "pages"

def security_headers(*extra_csp: str) -> dict[str, str]:
    """Headers for every HTML page the portal serves. Scripts and styles come
    from this origin only; Plotly sets inline styles and draws with data:
    URLs, hence the two exceptions. ``extra_csp`` adds directives."""
    csp = "; ".join(("default-src 'self'", "script-src 'self'",
                     "style-src 'self' 'unsafe-inline'", "img-src 'self' data: blob:",
                     "connect-src 'self'", "font-src 'self' data:", *extra_csp,
                     "object-src 'none'", "base-uri 'self'", "form-action 'self'",
                     "frame-ancestors 'none'"))
    return {"Content-Security-Policy": csp, "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "same-origin", "Cache-Control": "no-cache"}


_HEADERS = security_headers()

router = APIRouter(include_in_schema=False)


def _page(request: Request, name: str) -> Response:
    if SESSION_COOKIE not in request.cookies:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    return FileResponse(PAGES_DIR / f"{name}.html", media_type="text/html", headers=_HEADERS)


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/jobs", status_code=303)


def _safe_next(target: str | None) -> str:
    """``next`` if it is a path on this site: not ``//host``, nor ``/\\host`` or
    a path with control characters, which browsers may read as ``//host``."""
    if (target and target.startswith("/") and not target.startswith(("//", "/login"))
            and not any(c == "\\" or ord(c) < 0x20 or ord(c) == 0x7F for c in target)):
        return target
    return "/jobs"


@router.get("/login")
def login_page(request: Request, session: SessionDep) -> Response:
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie and find_session(session, cookie) is not None:
        return RedirectResponse(_safe_next(request.query_params.get("next")), status_code=303)
    return FileResponse(PAGES_DIR / "login.html", media_type="text/html", headers=_HEADERS)


@router.get("/jobs")
def jobs_page(request: Request) -> Response:
    return _page(request, "jobs")


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: int) -> Response:
    return _page(request, "job")


@router.get("/submit")
def submit_page(request: Request) -> Response:
    return _page(request, "submit")


@router.get("/cluster")
def cluster_page(request: Request) -> Response:
    return _page(request, "cluster")


@router.get("/admin")
def admin_page(request: Request) -> Response:
    return _page(request, "admin")


@router.get("/datasets")
def datasets_page(request: Request) -> Response:
    return _page(request, "datasets")


@router.get("/account")
def account_page(request: Request) -> Response:
    return _page(request, "account")


@router.get("/compare")
def compare_page(request: Request) -> Response:
    return _page(request, "compare")


@router.get("/experiments")
def experiments_page(request: Request) -> Response:
    return _page(request, "experiments")


# Before /experiments/{experiment_id}, which would otherwise read "new" as an id.
@router.get("/experiments/new")
def sweep_page(request: Request) -> Response:
    return _page(request, "sweep")


@router.get("/experiments/{experiment_id}")
def experiment_page(request: Request, experiment_id: int) -> Response:
    return _page(request, "experiment")
