"""Where ``slaq login`` keeps the portal URL and API token, and how the
environment (``SLAQ_URL``, ``SLAQ_TOKEN``) overrides them."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"
"""The portal ``slaq run`` starts, used when nothing else names one."""


def credentials_path(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME/slaq/credentials.json``, by default under ``~/.config``."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "slaq" / "credentials.json"


@dataclass(frozen=True)
class Credentials:
    url: str
    token: str | None


def save(url: str, token: str, env: Mapping[str, str] | None = None) -> Path:
    """Store URL and token readable by the owner only (0600, directory 0700)."""
    path = credentials_path(env)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": url, "token": token}, fh)
            fh.write("\n")
        os.chmod(tmp, 0o600)  # in case the file existed with wider permissions
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load(env: Mapping[str, str] | None = None) -> Credentials:
    """Stored credentials with ``SLAQ_URL`` / ``SLAQ_TOKEN`` taking precedence."""
    env = os.environ if env is None else env
    stored: dict[str, str] = {}
    path = credentials_path(env)
    if path.is_file():
        try:
            raw = json.loads(path.read_text())
            if isinstance(raw, dict):
                stored = {k: v for k, v in raw.items() if isinstance(v, str)}
        except (OSError, ValueError):
            stored = {}
    url = env.get("SLAQ_URL") or stored.get("url") or DEFAULT_URL
    token = env.get("SLAQ_TOKEN") or stored.get("token")
    return Credentials(url=url.rstrip("/"), token=token or None)
