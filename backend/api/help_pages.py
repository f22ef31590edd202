"""The user guide, served by the portal itself: ``/help/<name>`` is
``docs/<name>.md`` rendered to HTML, ``/help`` lists them.

Pages and messages link here (the model download's formats, uploading
trainer code) instead of naming a path in the source repository, which a
user of a running portal does not have. The documents are the project's own
files, rendered without raw HTML; links between them (``trainers.md``)
resolve here too, as ``.md`` is accepted on a name. Like every page but the
sign-in, it needs a session (the header shows who is signed in).
"""

from __future__ import annotations

import html
import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markdown_it import MarkdownIt

from backend.api.pages import security_headers
from backend.services.web_sessions import SESSION_COOKIE

DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_HEADERS = security_headers()

router = APIRouter(include_in_schema=False)

_SHELL = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title} · SLAQ portal</title>
  <link rel="icon" href="/static/favicon.svg" type="image/svg+xml">
  <link rel="stylesheet" href="/static/app.css">
  <script type="module" src="/static/js/pages/help.js"></script>
</head>
<body>
  <a class="skip-link" href="#main">Skip to content</a>
  <header class="site-header" id="site-header"></header>
  <main id="main" tabindex="-1">
    <article class="panel help-doc" id="help-doc">
{body}
    </article>
  </main>
</body>
</html>
"""


def _markdown() -> MarkdownIt:
    # No raw HTML from the documents, tables on (the guides use them).
    return MarkdownIt("commonmark", {"html": False}).enable("table")


def _title(text: str, fallback: str) -> str:
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return fallback


def _doc_path(name: str) -> Path | None:
    if not _NAME.fullmatch(name):
        return None
    path = DOCS_DIR / f"{name}.md"
    return path if path.is_file() else None


@lru_cache(maxsize=64)
def _render(name: str, mtime: float) -> tuple[str, str]:
    """(title, HTML body) of ``docs/<name>.md``; ``mtime`` keys the cache."""
    del mtime
    text = (DOCS_DIR / f"{name}.md").read_text(encoding="utf-8")
    return _title(text, name), _markdown().render(text)


def guides() -> list[tuple[str, str]]:
    """(name, title) of every guide under docs/, by name."""
    out = []
    for path in sorted(DOCS_DIR.glob("*.md")):
        if _NAME.fullmatch(path.stem):
            out.append((path.stem, _render(path.stem, path.stat().st_mtime)[0]))
    return out


def _signed_out(request: Request) -> Response | None:
    if SESSION_COOKIE in request.cookies:
        return None
    return RedirectResponse(f"/login?next={quote(request.url.path, safe='')}", status_code=303)


@router.get("/help")
def help_index(request: Request) -> Response:
    if (redirect := _signed_out(request)) is not None:
        return redirect
    items = "\n".join(f'      <li><a href="/help/{name}">{html.escape(title)}</a></li>'
                      for name, title in guides())
    body = (f"      <h1>Help</h1>\n      <p>The portal's guides.</p>\n"
            f'      <ul class="help-index">\n{items}\n      </ul>')
    return HTMLResponse(_SHELL.format(title="Help", body=body), headers=_HEADERS)


@router.get("/help/{name}")
def help_page(request: Request, name: str) -> Response:
    if (redirect := _signed_out(request)) is not None:
        return redirect
    path = _doc_path(name.removesuffix(".md"))
    if path is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no help page {name!r}; see /help")
    if name.endswith(".md"):  # a link between the documents: one address per page
        return RedirectResponse(f"/help/{path.stem}", status_code=301)
    title, body = _render(path.stem, path.stat().st_mtime)
    return HTMLResponse(_SHELL.format(title=html.escape(title), body=body), headers=_HEADERS)
