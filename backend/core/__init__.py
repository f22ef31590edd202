"""Shared infrastructure every process stands on (API, scheduler, workers):
settings, the database and its models, Redis keys and clients, leases and
heartbeats, notifications, the loss-point store, run-time portal settings and
the uploaded-dataset file format. Nothing here imports from ``backend.api``,
``backend.services``, ``backend.scheduler`` or ``workers``.
"""
