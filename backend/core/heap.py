"""Garbage-collector settings for long-running server processes.

CPython's cyclic collector runs a young-generation pass each time live
container objects grow by 700. One API request builds and drops a few
thousand (ORM rows, Pydantic models, JSON), so under load the collector ran
thousands of times a minute and promoted the objects of requests in flight,
making the full passes over the whole heap (every imported module, the
trainer catalogue) frequent too: about 8% of an API process's CPU under 200
clients, growing with the number of requests in flight.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net new container objects between young-generation passes: above what a
request leaves behind, so its temporaries are freed by reference counting
before a pass sees them."""


def relax_collector() -> None:
    """Young passes after :data:`YOUNG_THRESHOLD` objects, not 700."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_startup_heap() -> None:
    """Exclude everything alive now (modules, caches loaded at startup) from
    every later collection: it lives as long as the process."""
    gc.collect()
    gc.freeze()
