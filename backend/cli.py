"""The `slaq` command: run the portal or one of its parts, and tools."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path


def _logging() -> None:
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)


def _multiprocess_metrics(default: Path) -> None:
    """Several API processes: their request figures go to files in one
    directory (prometheus-client's multiprocess mode), so /metrics answers the
    same sum from any of them. Set before the processes import the client;
    an earlier run's files are removed first."""
    path = Path(os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(default.resolve())))
    path.mkdir(parents=True, exist_ok=True)
    for stale in path.glob("*.db"):
        stale.unlink()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Tools with their own argument parsers get the rest of the line untouched.
    if argv and argv[0] in ("simulate", "record-trace"):
        from backend.simulation import cli as sim_cli

        entry = sim_cli.simulate_main if argv[0] == "simulate" else sim_cli.record_trace_main
        return entry(argv[1:])
    from backend.client.cli import COMMANDS as CLIENT_COMMANDS

    if argv and argv[0] in CLIENT_COMMANDS:  # the REST client: login, submit, status, ...
        from backend.client.cli import main as client_main

        return client_main(argv)
    from backend.client.cli import command_summaries

    # The client commands have their own parser (they never touch the
    # database); list them here too so one --help shows everything.
    client_lines = "\n".join(f"    {name:<16}{text}" for name, text in command_summaries())
    parser = argparse.ArgumentParser(
        prog="slaq", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"talk to a running portal (API token from 'slaq login' or SLAQ_TOKEN):\n"
               f"{client_lines}\n\n'slaq COMMAND -h' describes a command's options.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                title="run and operate the portal")
    sub.add_parser("run", help="API, scheduler and workers together (the default setup)")
    sub.add_parser("api", help="the web API only")
    sub.add_parser("scheduler", help="the scheduler process only")
    worker = sub.add_parser("worker", help="worker slots: one Celery node per slot")
    worker.add_argument("--concurrency", type=int, default=None,
                        help="slots to run (default: WORKERS, else one per core)")
    worker.add_argument("--loglevel", default="INFO")
    worker.add_argument("--name", default="",
                        help="node name prefix (default slaq-PID); slot i is NAME-i@host")
    worker.add_argument("--pool", default=None,
                        help="the worker pool to join (default: WORKER_POOL, else cpu); its "
                        "slots run only chunks placed on that pool")
    sub.add_parser("migrate", help="apply database migrations")
    sub.add_parser("seed", help="create the platform admin and demo tenant")
    reset = sub.add_parser("reset-password",
                           help="give a user a new generated password and print it; "
                           "revokes their API tokens and browser sessions")
    reset.add_argument("email")
    sub.add_parser("simulate", help="compare policies in the simulator (see slaq simulate -h)")
    sub.add_parser("record-trace", help="record real loss curves for the simulator")
    if argv and not argv[0].startswith("-") and argv[0] not in sub.choices:
        # argparse would list only this parser's commands: name every one.
        parser.print_usage(sys.stderr)
        every = ", ".join([*sub.choices, *CLIENT_COMMANDS])
        sys.stderr.write(f"slaq: unknown command {argv[0]!r}; the commands are: {every}\n"
                         "'slaq --help' describes them.\n")
        return 2
    args = parser.parse_args(argv)
    _logging()
    from backend.core.settings import get_settings

    settings = get_settings()
    if args.command == "run":
        from backend.supervisor import run

        return run(settings)
    if args.command == "api":
        import uvicorn

        if settings.api_processes > 1 or os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            _multiprocess_metrics(settings.data_dir / "prometheus-api")

        # Off: uvicorn would take X-Forwarded-For from local clients as their
        # address; backend.api.client_address decides whom to believe.
        uvicorn.run("backend.main:app", host=settings.host, port=settings.port,
                    proxy_headers=False, workers=settings.api_processes,
                    log_level="warning",
                    # Longer than any client's pause between requests, so the server
                    # does not close a kept-alive connection just as it is reused.
                    timeout_keep_alive=75)
        return 0
    if args.command == "scheduler":
        from backend.scheduler.main import run_forever

        run_forever()
        return 0
    if args.command == "worker":
        if args.pool is not None:
            from backend.core.pools import check_pool_name

            try:
                os.environ["WORKER_POOL"] = check_pool_name(args.pool)
            except ValueError as bad:
                print(f"error: {bad}", file=sys.stderr)
                return 2
            get_settings.cache_clear()
            settings = get_settings()
        from backend.core.pools import pool_queue
        from backend.core.redis_conn import get_keys
        from workers.nodes import run_nodes

        return run_nodes(args.concurrency or settings.workers,
                         pool_queue(get_keys(), settings.worker_pool),
                         loglevel=args.loglevel, name=args.name, nice=settings.worker_nice)
    from backend.core.db import migrate, session_scope

    if args.command == "reset-password":
        from backend.seed import reset_password

        with session_scope() as session:
            done = reset_password(session, args.email)
        if done is None:
            print(f"error: no user {args.email.strip().lower()}", file=sys.stderr)
            return 1
        # The notes on stderr, the password alone on stdout: easy to capture.
        print(f"revoked {done.tokens_revoked} API token(s) and ended "
              f"{done.sessions_ended} browser session(s) of {args.email.strip().lower()}: "
              "they sign in again with the new password", file=sys.stderr)
        print(f"new password for {args.email.strip().lower()} (shown only this once):",
              file=sys.stderr)
        print(done.password)
        return 0
    migrate(settings.effective_database_url)
    if args.command == "seed":
        from backend.seed import SeedPasswordRefused, seed

        try:
            with session_scope() as session:
                seeded = seed(session, admin_email=settings.admin_email,
                              admin_password=settings.admin_password,
                              demo_tenant=settings.demo_tenant,
                              demo_password=settings.demo_password)
        except SeedPasswordRefused as refused:
            print(f"error: {refused}", file=sys.stderr)
            return 2
        print(f"platform admin:    {seeded.admin.describe()}")
        print(f"demo tenant admin: {seeded.demo.describe()}")
    print(f"database ready: {settings.effective_database_url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
