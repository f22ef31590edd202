"""A small Python client for the portal's REST API, and the ``slaq`` commands
built on it (login, submit, status, watch, cancel, upload, datasets)."""

from backend.client.api import SlaqClient, SlaqError, describe_error

__all__ = ["SlaqClient", "SlaqError", "describe_error"]
