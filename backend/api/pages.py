"""The web portal's pages: static HTML shells whose ES modules call the same
REST API scripts use (same origin, session cookie, CSRF header).

Pages other than ``/login`` need a session cookie; without one the browser is
sent to ``/login?next=<page>`` before any HTML loads. Whether the cookie is
still valid is checked by the page itself (``GET /api/v1/auth/me``; a 401
also leads to ``/login``), so this router never touches the database.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from backend.services.web_sessions import SESSION_COOKIE

PAGES_DIR = Path(__file__).resolve().parents[2] / "frontend" / "pages"

# Scripts and styles from this origin only; Plotly sets inline styles and
# draws with data: URLs, hence the two exceptions.
_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data: blob:; connect-src 'self'; font-src 'self' data:; "
        "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _page(request: Request, name: str) -> Response:
    if SESSION_COOKIE not in request.cookies:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
    return FileResponse(PAGES_DIR / f"{name}.html", media_type="text/html", headers=_HEADERS)


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/jobs", status_code=303)


@router.get("/login")
def login_page() -> FileResponse:
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
