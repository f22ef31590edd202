"""Signing in against a real portal: no account enumeration by timing, no
trust in a client's X-Forwarded-For, throttling that slows a guesser without
locking the owner out, a password policy, and no default passwords.

Each test talks from its own loopback address (any 127/8 source reaches the
API on 127.0.0.1), so the per-address counts of one test never reach another.
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import httpx
import pytest
from sqlalchemy import func, select
from sqlmodel import col
from starlette.requests import Request

from backend.api import client_address as client_address_module
from backend.api.client_address import client_address
from backend.core.db import engine_for, migrate, session_scope
from backend.core.models import Role, User
from backend.core.settings import Settings
from backend.rate_limit import PAIR_FREE_FAILURES, record_failure
from backend.security import hash_password, password_problem, verify_password
from backend.seed import SeedPasswordRefused, ensure_tenant, ensure_user, seed
from tests.utils.portal import ROOT, Portal, make_user_token
from tests.utils.waiting import wait_until

# One database: the subject is password checks, timing and lock-outs; account storage runs on
# both databases in test_tenant_scope and test_admin_tokens.
pytestmark = pytest.mark.one_database

LOGIN = "/api/v1/auth/login"
_hosts = itertools.count()


def _new_address() -> str:
    """A loopback address no other test in this run signs in from."""
    n = next(_hosts)
    return f"127.0.{n // 250 + 10}.{n % 250 + 2}"


@pytest.fixture
def address() -> str:
    return _new_address()


def _client(portal: Portal, address: str) -> httpx.Client:
    return httpx.Client(base_url=portal.base_url, timeout=30,
                        transport=httpx.HTTPTransport(local_address=address))


def _account(portal: Portal, *, password_hash: str = "") -> tuple[str, str]:
    """A fresh member account and its password; ``password_hash`` (of another
    password) skips the argon2 hashing."""
    email = f"{uuid4().hex[:12]}@login.test"
    password = "pw-" + email
    with session_scope(engine_for(portal.db_url)) as session:
        tenant = ensure_tenant(session, "login")
        if password_hash:
            session.add(User(tenant_id=tenant.id or 0, email=email, role=Role.member,
                             password_hash=password_hash))
            session.commit()
        else:
            ensure_user(session, email=email, password=password, tenant=tenant, role=Role.member)
    return email, password


def _guess_until_refused(client: httpx.Client, email: str,
                         headers: Iterator[dict[str, str]] | None = None) -> list[httpx.Response]:
    """Wrong passwords until a 429 (at most 10). The wait doubles with each
    failure past the free ones, so a 429 comes within a few guesses however
    slowly they arrive."""
    answers: list[httpx.Response] = []
    while len(answers) < 10 and (not answers or answers[-1].status_code != 429):
        answers.append(client.post(LOGIN, json={"email": email, "password": "a wrong guess"},
                                   headers=next(headers) if headers else None))
    return answers


def test_unknown_and_known_accounts_take_as_long(portal: Portal, address: str) -> None:
    """A wrong password costs one argon2 check whether or not the account
    exists, so the answer's timing does not reveal which emails have one."""
    rounds = 8
    # Fresh accounts: no pair reaches its back-off. One hash for all of them
    # saves seconds of setup and changes nothing about a check's cost.
    shared_hash = hash_password("the right one, never sent")
    known = [_account(portal, password_hash=shared_hash)[0] for _ in range(2 * rounds)]
    unknown = [f"nobody-{uuid4().hex[:12]}@login.test" for _ in range(2 * rounds)]

    def took(client: httpx.Client, email: str) -> float:
        start = time.perf_counter()
        answer = client.post(LOGIN, json={"email": email, "password": "a wrong guess"})
        elapsed = time.perf_counter() - start
        assert answer.status_code == 401, answer.text
        return elapsed

    with _client(portal, address) as client:
        took(client, f"warm-up-{uuid4().hex[:8]}@login.test")  # makes the throwaway hash
    ratios: list[float] = []
    for r in range(rounds):
        # Known, unknown, unknown, known: a load that drifts during a round
        # weighs on both kinds alike. A new address per round keeps the
        # per-address count below its back-off.
        with _client(portal, _new_address()) as client:
            known_times = [took(client, known[2 * r])]
            unknown_times = [took(client, unknown[2 * r]), took(client, unknown[2 * r + 1])]
            known_times.append(took(client, known[2 * r + 1]))
        ratios.append(statistics.median(known_times) / statistics.median(unknown_times))
    # Compared round by round, not over the whole run: on a shared machine the
    # load of other processes changes a check's cost several-fold within
    # seconds, which would swamp any difference between the two kinds.
    ratio = statistics.median(ratios)
    assert 1 / 1.2 <= ratio <= 1.2, ratios


def test_forwarded_for_from_an_untrusted_peer_is_ignored(portal: Portal, address: str) -> None:
    email, _ = _account(portal)
    spoofed = ({"X-Forwarded-For": f"203.0.113.{i}"} for i in itertools.count(1))
    with _client(portal, address) as client:
        answers = _guess_until_refused(client, email, spoofed)
    codes = [a.status_code for a in answers]
    # Were the header believed, every guess would come from a new address and
    # none would wait.
    assert codes[:PAIR_FREE_FAILURES] == [401] * PAIR_FREE_FAILURES, codes
    assert codes[-1] == 429, codes
    assert int(answers[-1].headers["Retry-After"]) >= 1
    assert "try again" in answers[-1].json()["detail"]


def test_guesses_from_one_address_do_not_lock_the_owner_out(portal: Portal) -> None:
    email, password = _account(portal)
    attacker, owner = _new_address(), _new_address()
    with _client(portal, attacker) as guesser:
        assert _guess_until_refused(guesser, email)[-1].status_code == 429
        # Many more failures than a test should wait through, straight into Redis.
        for _ in range(10):
            record_failure(portal.redis(), portal.keys, email, attacker)
        right = guesser.post(LOGIN, json={"email": email, "password": password})
        assert right.status_code == 429, "from the guessing address even the right one waits"
        assert int(right.headers["Retry-After"]) > 60
    with _client(portal, owner) as client:
        signed_in = client.post(LOGIN, json={"email": email, "password": password})
        assert signed_in.status_code == 200, signed_in.text
        assert signed_in.json()["email"] == email


def test_the_right_password_after_the_wait_succeeds_and_clears_the_count(
        portal: Portal, address: str) -> None:
    email, password = _account(portal)
    for _ in range(PAIR_FREE_FAILURES):
        record_failure(portal.redis(), portal.keys, email, address)
    with _client(portal, address) as client:
        def sign_in() -> httpx.Response | None:
            answer = client.post(LOGIN, json={"email": email, "password": password})
            assert answer.status_code in (200, 429), answer.text
            return answer if answer.status_code == 200 else None

        wait_until(sign_in, 30, "the back-off to pass")
        # Counted afresh: the free failures are free again.
        codes = [client.post(LOGIN, json={"email": email, "password": "wrong"}).status_code
                 for _ in range(PAIR_FREE_FAILURES)]
    assert codes == [401] * PAIR_FREE_FAILURES


@pytest.mark.parametrize("weak", ["password", "12345678", "{email}", "password1234",
                                  "aaaaaaaaaaaa"])
def test_weak_passwords_are_refused(portal: Portal, weak: str) -> None:
    admin = make_user_token(portal.db_url, tenant="platform", email="root@login.test",
                            role=Role.platform_admin)
    email = f"carol.{uuid4().hex[:8]}@login.test"
    with httpx.Client(base_url=portal.base_url, timeout=30,
                      headers={"Authorization": f"Bearer {admin}"}) as client:
        tenant_id = next(t["id"] for t in client.get("/api/v1/admin/tenants").json()
                         if t["name"] == "platform")
        refused = client.post("/api/v1/admin/users", json={
            "email": email, "password": weak.format(email=email), "tenant_id": tenant_id})
        assert refused.status_code == 422, refused.text
        problems = refused.json()["detail"]
        assert [p["loc"] for p in problems] == [["body", "password"]], problems
        accepted = client.post("/api/v1/admin/users", json={
            "email": email, "password": "plum-kettle-orbit-41", "tenant_id": tenant_id})
        assert accepted.status_code == 201, accepted.text


def test_password_policy_explains_itself() -> None:
    assert password_problem("password", email="a@b.test") == "must be at least 10 characters long"
    said = password_problem("carol.jones@example.com", email="carol.jones@example.com")
    assert said is not None and said.startswith("too easy to guess: ")
    assert password_problem("password1234", email="a@b.test") is not None
    assert password_problem("plum-kettle-orbit-41", email="a@b.test") is None


def test_no_default_password(portal: Portal, address: str, tmp_path: Path,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADMIN_PASSWORD", raising=False)
    monkeypatch.delenv("DEMO_PASSWORD", raising=False)
    settings = Settings(_env_file=None)
    assert settings.admin_password == "" and settings.demo_password == ""
    admin_email, tenant = f"admin-{uuid4().hex[:8]}@login.test", f"demo-{uuid4().hex[:8]}"

    def seeded(db_url: str) -> tuple[str | None, str | None, bool]:
        with session_scope(engine_for(db_url)) as session:
            result = seed(session, admin_email=admin_email, admin_password=settings.admin_password,
                          demo_tenant=tenant, demo_password=settings.demo_password)
        return result.admin.password, result.demo.password, result.admin.created

    admin_password, demo_password, created = seeded(portal.db_url)
    assert created and admin_password and demo_password
    assert admin_password not in ("admin", demo_password)
    assert password_problem(admin_password, email=admin_email) is None
    assert seeded(portal.db_url) == (None, None, False), "shown once, when made"

    with _client(portal, address) as client:
        assert client.post(LOGIN, json={"email": admin_email,
                                        "password": "admin"}).status_code == 401
        right = client.post(LOGIN, json={"email": admin_email, "password": admin_password})
        assert right.status_code == 200, right.text
        assert right.json()["role"] == "platform_admin"
        demo = client.post(LOGIN, json={"email": f"demo@{tenant}.example.com",
                                        "password": demo_password})
        assert demo.status_code == 200, demo.text

    other_db = f"sqlite:///{tmp_path / 'other.db'}"
    migrate(other_db)
    other_password = seeded(other_db)[0]
    assert other_password and other_password != admin_password

    with session_scope(engine_for(other_db)) as session:
        stored = session.execute(
            select(User).where(col(User.email) == admin_email)).scalar_one()
    assert other_password not in stored.password_hash
    assert verify_password(stored.password_hash, other_password)


def _slaq(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("ADMIN_PASSWORD", "DEMO_PASSWORD")}
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=ROOT,
                          env={**clean, **env}, capture_output=True, text=True, timeout=120,
                          check=False)


def test_weak_seed_passwords_are_refused(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'seed.db'}"
    migrate(db_url)
    with session_scope(engine_for(db_url)) as session, \
            pytest.raises(SeedPasswordRefused, match="ADMIN_PASSWORD is refused"):
        seed(session, admin_email="admin@example.com", admin_password="admin",
             demo_tenant="demo")
    done = _slaq("seed", DATABASE_URL=db_url, DEMO_PASSWORD="12345678")
    assert done.returncode == 2
    assert "DEMO_PASSWORD is refused: must be at least 10 characters long" in done.stderr
    with session_scope(engine_for(db_url)) as session:
        made = session.execute(select(func.count()).select_from(User)).scalar_one()
    assert made == 0, "nothing is made with a refused password"


def test_seed_prints_once_and_reset_password_sets_a_new_one(tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'seed.db'}"
    first = _slaq("seed", DATABASE_URL=db_url)
    assert first.returncode == 0, first.stderr
    line = next(x for x in first.stdout.splitlines() if x.startswith("platform admin:"))
    shown = line.split()[4]
    assert "shown only this once" in line
    again = _slaq("seed", DATABASE_URL=db_url)
    assert again.returncode == 0, again.stderr
    assert shown not in again.stdout and "slaq reset-password admin@example.com" in again.stdout

    reset = _slaq("reset-password", "Admin@Example.com", DATABASE_URL=db_url)
    assert reset.returncode == 0, reset.stderr
    new = reset.stdout.strip()
    assert new and new != shown
    with session_scope(engine_for(db_url)) as session:
        admin = session.execute(
            select(User).where(col(User.email) == "admin@example.com")).scalar_one()
        assert verify_password(admin.password_hash, new)
        assert not verify_password(admin.password_hash, shown)
    missing = _slaq("reset-password", "nobody@example.com", DATABASE_URL=db_url)
    assert missing.returncode == 1 and "no user nobody@example.com" in missing.stderr


def test_reset_password_revokes_the_users_tokens_and_sessions(portal: Portal,
                                                              address: str) -> None:
    """A reset means the old password may have leaked: what it opened must close,
    in the running API at once (no wait for its caller cache to lapse)."""
    email, password = _account(portal)
    other_email, other_password = _account(portal)
    with _client(portal, address) as browser, _client(portal, address) as bystander:
        assert browser.post(LOGIN, json={"email": email, "password": password}).status_code \
            == 200
        token = browser.post("/api/v1/auth/token", json={"email": email, "password": password})
        assert token.status_code == 201, token.text
        bearer = {"Authorization": f"Bearer {token.json()['token']}"}
        assert bystander.post(LOGIN, json={"email": other_email,
                                           "password": other_password}).status_code == 200
        with _client(portal, address) as api:
            assert api.get("/api/v1/jobs", headers=bearer).status_code == 200
            assert browser.get("/api/v1/auth/me").status_code == 200

            reset = _slaq("reset-password", email, DATABASE_URL=portal.db_url,
                          REDIS_URL=portal.redis_url, REDIS_PREFIX=portal.prefix)
            assert reset.returncode == 0, reset.stderr
            assert "revoked 1 API token(s) and ended 1 browser session(s)" in reset.stderr
            new_password = reset.stdout.strip()

            assert api.get("/api/v1/jobs", headers=bearer).status_code == 401
            assert browser.get("/api/v1/auth/me").status_code == 401
            # Only that user's: another user's session goes on.
            assert bystander.get("/api/v1/auth/me").status_code == 200
            assert browser.post(LOGIN, json={"email": email,
                                             "password": new_password}).status_code == 200


def _request(peer: str, forwarded: list[str]) -> Request:
    return Request({"type": "http", "method": "POST", "path": LOGIN, "client": (peer, 40000),
                    "headers": [(b"x-forwarded-for", h.encode()) for h in forwarded]})


@pytest.mark.parametrize(("trusted", "peer", "forwarded", "expected"), [
    ([], "198.51.100.7", ["203.0.113.9"], "198.51.100.7"),
    (["10.0.0.1"], "198.51.100.7", ["203.0.113.9"], "198.51.100.7"),
    (["10.0.0.1"], "10.0.0.1", [], "10.0.0.1"),
    (["10.0.0.1"], "10.0.0.1", ["forged, 203.0.113.9"], "203.0.113.9"),
    (["10.0.0.0/24"], "10.0.0.1", ["forged", "203.0.113.9, 10.0.0.2"], "203.0.113.9"),
    (["10.0.0.0/24"], "10.0.0.1", ["10.0.0.3, 10.0.0.2"], "10.0.0.3"),
])
def test_client_address_believes_only_trusted_proxies(
        monkeypatch: pytest.MonkeyPatch, trusted: list[str], peer: str, forwarded: list[str],
        expected: str) -> None:
    settings = Settings(_env_file=None, trusted_proxies=trusted)
    monkeypatch.setattr(client_address_module, "get_settings", lambda: settings)
    assert client_address(_request(peer, forwarded)) == expected


def test_trusted_proxies_setting_reads_a_comma_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.1, 192.168.0.0/16")
    assert Settings(_env_file=None).trusted_proxies == ["10.0.0.1", "192.168.0.0/16"]
    monkeypatch.setenv("TRUSTED_PROXIES", "not-an-address")
    with pytest.raises(ValueError, match="not-an-address"):
        Settings(_env_file=None)
