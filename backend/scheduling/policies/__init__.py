"""Scheduling policies, one module each; see :mod:`backend.scheduling.registry`."""
