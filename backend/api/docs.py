"""The API's documentation pages, Swagger UI at ``/docs`` and ReDoc at
``/redoc``, served with their scripts and styles from this origin.

FastAPI's own pages load both from a CDN, so they are blank on a network that
cannot reach it; the files here come from the ``fastapi-offline`` package.
Swagger UI is started by a small script under ``/static/js/`` rather than an
inline one, so these pages keep a strict Content-Security-Policy (scripts from
this origin only); ReDoc starts itself from its ``<redoc>`` element.
"""

from __future__ import annotations

from functools import cache
from html import escape
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, HTTPException, status
from fastapi.openapi.docs import get_swagger_ui_oauth2_redirect_html
from fastapi.responses import FileResponse, HTMLResponse, Response

from backend.api.pages import security_headers

ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS_URL = "/static/vendor/docs"
OPENAPI_URL = "/openapi.json"

# ReDoc's sidebar footer shows a logo from its CDN. "data:," is no image, so
# ReDoc's own error handler drops the <img>: nothing is fetched from elsewhere.
_REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_ASSETS = {
    "swagger-ui-bundle.js": "application/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "application/javascript",
    "favicon.png": "image/png",
}

# As the portal's pages (backend/api/pages.py), plus what the two viewers
# need: ReDoc and Swagger UI set inline styles, ReDoc may run its search in a
# blob: worker. The OAuth2 redirect page is FastAPI's, with an inline script.
_HEADERS = security_headers("worker-src 'self' blob:")

router = APIRouter(include_in_schema=False)


def _shell(title: str, head: str, body: str) -> HTMLResponse:
    html = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{escape(title)} · SLAQ portal</title>
  <link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
{head}
</head>
<body>
<nav class="docs-bar" aria-label="Portal">
  <a class="docs-brand" href="/jobs">SLAQ portal</a>
  <a href="/docs">Swagger UI</a>
  <a href="/redoc">ReDoc</a>
  <a href="{OPENAPI_URL}">openapi.json</a>
</nav>
{body}
</body>
</html>
"""
    return HTMLResponse(html, headers=_HEADERS)


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    head = (f'  <link rel="stylesheet" href="{ASSETS_URL}/swagger-ui.css">\n'
            '  <link rel="stylesheet" href="/static/docs.css">\n'
            f'  <script src="{ASSETS_URL}/swagger-ui-bundle.js" defer></script>\n'
            '  <script src="/static/js/docs-init.js" defer></script>')
    body = (f'<div id="swagger-ui" data-openapi-url="{OPENAPI_URL}" '
            'data-oauth2-redirect-url="/docs/oauth2-redirect">'
            '<p class="docs-loading">Loading the API reference…</p></div>')
    return _shell("API reference", head, body)


@router.get("/docs/oauth2-redirect")
def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
def redoc() -> HTMLResponse:
    head = (f'  <script src="{ASSETS_URL}/redoc.standalone.js" defer></script>\n'
            '  <link rel="stylesheet" href="/static/docs.css">')
    body = f'<redoc spec-url="{OPENAPI_URL}"></redoc>'
    return _shell("API reference (ReDoc)", head, body)


@cache
def _redoc_js() -> bytes:
    return (ASSETS_DIR / "redoc.standalone.js").read_bytes().replace(_REDOC_CDN_LOGO, b"data:,")


@router.get(f"{ASSETS_URL}/{{name}}")
def docs_asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no documentation asset {name!r}")
    headers = {"Cache-Control": "public, max-age=86400"}
    if name == "redoc.standalone.js":
        return Response(_redoc_js(), media_type=media_type, headers=headers)
    return FileResponse(ASSETS_DIR / name, media_type=media_type, headers=headers)
