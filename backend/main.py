"""The FastAPI application: routers, error shapes, and the static frontend."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import plotly
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from backend.api import (
    admin,
    admin_tokens,
    auth,
    catalog,
    cluster,
    code,
    continuing,
    datasets,
    docs,
    errors,
    experiments,
    health,
    help_pages,
    job_metrics,
    jobs,
    jobs_bulk,
    labels,
    live,
    metrics,
    pages,
    pools,
    what_if,
)
from backend.api.body_guard import JsonBodyGuard, json_safe
from backend.api.metrics import RequestMetrics
from backend.api.request_limit import ConcurrencyLimit
from backend.core.heap import freeze_startup_heap, relax_collector
from backend.core.settings import get_settings
from workers.trainers.registry import trainers

FRONTEND_DIR = Path(__file__).resolve().parent.parent / "frontend"
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def _warm_up() -> None:
    trainers()
    freeze_startup_heap()


@asynccontextmanager
async def _lifespan(_app: FastAPI) -> AsyncIterator[None]:
    # The trainer catalogue imports PyTorch (seconds). Loaded on first use, it
    # made the first submissions to each API process wait for it, several
    # threads at once; loaded beside startup, no request pays for it.
    relax_collector()
    threading.Thread(target=_warm_up, name="slaq-warm-catalogue", daemon=True).start()
    yield


def create_app() -> FastAPI:
    app = FastAPI(
        lifespan=_lifespan,
        title="SLAQ portal",
        version="1",
        # Served by backend.api.docs from local files: the defaults load a CDN.
        docs_url=None,
        redoc_url=None,
        description="Submit exploratory ML training jobs; a quality-driven scheduler "
        "gives each free worker slot to the job whose next chunk should improve it most.",
    )
    for router in (auth.router, jobs.router, live.router, catalog.router, admin.router,
                   cluster.router, health.router, pages.router, datasets.router,
                   admin_tokens.router, docs.router, help_pages.router):
        app.include_router(router)
    app.include_router(jobs_bulk.router)
    app.include_router(code.router)
    app.include_router(job_metrics.router)
    app.include_router(experiments.router)
    app.include_router(labels.router)
    app.include_router(continuing.router)
    app.include_router(pools.router)
    app.include_router(metrics.router)
    app.include_router(what_if.router)

    # Every service error (NotFound, Conflict, Invalid, Forbidden, TooLarge) in one place.
    errors.install(app)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI echoes the offending input; a value JSON cannot carry (a
        # non-finite number from a query string, say) must not turn the 422
        # into a 500.
        detail = [{key: json_safe(value) for key, value in error.items() if key != "url"}
                  for error in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.get("/static/vendor/plotly.min.js", include_in_schema=False)
    def plotly_js() -> FileResponse:
        return FileResponse(PLOTLY_JS, media_type="application/javascript")

    app.mount("/static", StaticFiles(directory=FRONTEND_DIR / "static"), name="static")
    app.add_middleware(JsonBodyGuard)
    app.add_middleware(ConcurrencyLimit, limit=get_settings().api_threads,
                       exempt_prefixes=("/static/",), exempt_suffixes=("/stream", "/events"))
    # Outermost, so a request's latency includes its wait for a place above.
    app.add_middleware(RequestMetrics, routes=app.router.routes)
    return app


app = create_app()
