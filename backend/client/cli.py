"""``slaq login | submit | status | watch | pause | resume | cancel | continue |
label | delete | checkpoint | export | upload | datasets | code | sweep``: the portal from a
shell, signed in with an API token.

``slaq login`` stores the portal URL and a fresh API token in
``~/.config/slaq/credentials.json`` (mode 0600); ``SLAQ_URL`` and
``SLAQ_TOKEN`` override them, so CI scripts need no file at all.
"""

from __future__ import annotations

import argparse
import getpass
import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

from backend.client import credentials
from backend.client.api import SlaqClient, SlaqError
from backend.core.safe_text import storable

COMMANDS = ("login", "submit", "status", "watch", "pause", "resume", "cancel", "continue",
            "label", "delete", "checkpoint", "export", "upload", "datasets", "code", "sweep")
"""The sub-commands this module handles (``backend.cli`` dispatches them here)."""

FINISHED = ("completed", "failed", "cancelled")
STATUS_POLL_SECONDS = 2.0
BAR_WIDTH = 20


class UsageError(Exception):
    """A bad command line, reported without a traceback."""


def _out(text: str = "") -> None:
    # Everything printed goes through here, much of it from the server: job
    # errors and trainer output quote tenant code, whose ESC sequences would
    # act on the user's terminal and whose lone surrogates would crash print.
    sys.stdout.write(storable(text) + "\n")
    sys.stdout.flush()


def _err(text: str) -> None:
    sys.stderr.write(storable(text) + "\n")
    sys.stderr.flush()


def command_summaries() -> list[tuple[str, str]]:
    """(command, one-line help) of every client command, for ``slaq --help``."""
    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return [(choice.dest, choice.help or "") for choice in sub._choices_actions]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="slaq", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    login = sub.add_parser("login", help="sign in and store an API token")
    login.add_argument("--url", help=f"portal URL (default $SLAQ_URL or {credentials.DEFAULT_URL})")
    login.add_argument("--email")
    login.add_argument("--password", help="prompted for when missing")
    login.add_argument("--token-name", default=None, help="label of the new token")

    submit = sub.add_parser("submit", help="submit a training job; prints its id")
    submit.add_argument("algorithm", nargs="?")
    submit.add_argument("dataset", nargs="?", help="a catalogue dataset or upload:<id>")
    submit.add_argument("--file", type=Path, help="a JSON job spec; flags override its fields")
    submit.add_argument("--param", "-p", action="append", default=[], metavar="K=V",
                        help="algorithm parameter (repeat); V is parsed as JSON when it can be")
    submit.add_argument("--dataset-param", action="append", default=[], metavar="K=V")
    submit.add_argument("--max-iterations", type=int)
    submit.add_argument("--tolerance", type=_optional_float, metavar="T|none",
                        default=argparse.SUPPRESS,
                        help="convergence tolerance; none disables. Left out: 1e-4, but only "
                        "without --target-loss (a target runs to it)")
    submit.add_argument("--target-loss", type=float)
    submit.add_argument("--window", type=int,
                        help="values in each of the two windows the convergence test "
                        "compares (iterations; evaluations with val_loss). Left out: 10")
    submit.add_argument("--seed", type=int)
    submit.add_argument("--eval-every", type=int, metavar="N",
                        help="held-out evaluation every N iterations (0: never; default 50)")
    submit.add_argument("--quality-metric", choices=["loss", "val_loss"],
                        help="what scheduling and --target-loss follow (default loss)")
    submit.add_argument("--name")

    status = sub.add_parser("status", help="a table of your jobs (searched, filtered, "
                                           "sorted), or one job in detail")
    status.add_argument("job_id", nargs="?", type=int)
    status.add_argument("--status", dest="status_filter", action="append",
                        choices=["queued", "running", "paused", *FINISHED],
                        help="only jobs in this status (repeat for several)")
    status.add_argument("--search", "-q", metavar="TEXT", help="part of the name or note")
    status.add_argument("--algorithm")
    status.add_argument("--dataset")
    status.add_argument("--tag", action="append", default=[],
                        help="only jobs with this tag (repeat: with every one)")
    status.add_argument("--sort", metavar="KEY",
                        help="a column (name, created_at, current_loss, progress, ...) or "
                        "metric:NAME for the latest held-out value; --sort=-KEY descending "
                        "(default -id: newest first)")
    status.add_argument("--limit", type=int, default=20)
    status.add_argument("--offset", type=int, default=0)
    status.add_argument("--json", action="store_true", help="print the raw JSON")

    for verb, what in (("pause", "pause jobs (each keeps its checkpoint)"),
                       ("resume", "resume paused jobs from their checkpoints")):
        control = sub.add_parser(verb, help=what)
        control.add_argument("job_ids", type=int, nargs="+", metavar="job_id")

    more = sub.add_parser("continue", help="continue a finished job from its checkpoint "
                                           "(more iterations, another stopping rule), or add "
                                           "configurations to an experiment")
    more.add_argument("run_id", type=int, metavar="ID")
    more.add_argument("--max-iterations", type=int, metavar="N",
                      help="the job's new iteration limit (more than it has done)")
    more.add_argument("--target-loss", type=_optional_float, metavar="X|none",
                      default=argparse.SUPPRESS, help="a new target; none removes it")
    more.add_argument("--tolerance", type=_optional_float, metavar="T|none",
                      default=argparse.SUPPRESS,
                      help="a new convergence tolerance; none turns the test off")
    more.add_argument("--experiment", action="store_true", help="ID is an experiment")
    more.add_argument("--add", action="append", default=[], metavar="K=V,K=V",
                      help="(experiment) one configuration: a value for each swept "
                      "parameter (repeat for several)")
    more.add_argument("--space", type=Path, metavar="FILE",
                      help="(experiment) a JSON object of axes to add or widen, as in a "
                      "sweep spec's space; the experiment's sampler samples it")

    label = sub.add_parser("label", help="rename a job or experiment, set its tags or note")
    label.add_argument("run_id", type=int, metavar="ID")
    label.add_argument("--experiment", action="store_true", help="ID is an experiment")
    label.add_argument("--name")
    label.add_argument("--tag", action="append", dest="tags", metavar="TAG",
                       help="the new tags (repeat); replaces the old ones")
    label.add_argument("--no-tags", action="store_true", help="remove every tag")
    label.add_argument("--note", help="free text (- reads it from standard input)")

    delete = sub.add_parser("delete", help="delete a finished job or experiment with its data")
    delete.add_argument("run_id", type=int, metavar="ID")
    delete.add_argument("--experiment", action="store_true", help="ID is an experiment")
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask to confirm")

    checkpoint = sub.add_parser("checkpoint", help="download a job's model (its latest "
                                                   "checkpoint) to a file")
    checkpoint.add_argument("job_id", type=int)
    checkpoint.add_argument("--output", "-o", type=Path,
                            help="file or folder (default: the portal's file name, here)")

    export = sub.add_parser("export", help="download a job's loss and metrics history")
    export.add_argument("job_id", type=int)
    export.add_argument("--format", choices=["csv", "json"], default="csv")
    export.add_argument("--output", "-o", type=Path,
                        help="file or folder (default: standard output)")

    watch = sub.add_parser("watch", help="follow a job's loss live until it finishes")
    watch.add_argument("job_id", type=int)

    cancel = sub.add_parser("cancel", help="cancel jobs: by id, or every job of yours in a "
                                           "status (--status queued), in one request")
    cancel.add_argument("job_ids", type=int, nargs="*", metavar="job_id")
    cancel.add_argument("--status", choices=["queued", "running", "paused"],
                        help="cancel every job of yours in this status")

    upload = sub.add_parser("upload", help="upload a CSV (or, --task text, a text file) as a "
                                           "dataset of your tenant")
    upload.add_argument("path", type=Path)
    upload.add_argument("--name", help="default: the file name without its extension")
    upload.add_argument("--task", required=True,
                        choices=["classification", "regression", "clustering", "text"],
                        help="text: UTF-8 text for the character-level language models")
    upload.add_argument("--label", help="label column name or index (default: the last)")

    sub.add_parser("datasets", help="your tenant's uploaded datasets")

    code = sub.add_parser("code", help="upload a trainer or a loop script (.py), or list uploads")
    code_sub = code.add_subparsers(dest="code_command", required=True)
    code_upload = code_sub.add_parser(
        "upload", help="upload a .py trainer or loop script; prints code:<id>")
    code_upload.add_argument("path", type=Path)
    code_upload.add_argument("--name", help="default: the file name without .py")
    code_sub.add_parser("list", help="your tenant's uploaded trainers")

    sweep = sub.add_parser("sweep", help="submit an experiment (a sweep of configurations) "
                                         "from a JSON spec; prints its id and job ids")
    sweep.add_argument("spec", type=Path,
                       help="the experiment spec (/help/experiments on the portal)")
    status.add_argument("--experiment", type=int, metavar="ID",
                        help="an experiment's jobs, best first by its objective")
    return parser


def _optional_float(text: str) -> float | None:
    if text.strip().lower() in ("none", "null", "off"):
        return None
    return float(text)


def _pairs(items: list[str], flag: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} wants KEY=VALUE, got {item!r}")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out[key.strip()] = value
    return out


def _client(url: str | None = None) -> SlaqClient:
    creds = credentials.load()
    if not creds.token:
        raise UsageError("not signed in: run `slaq login` or set SLAQ_TOKEN")
    return SlaqClient(url or creds.url, creds.token)


def _login(args: argparse.Namespace) -> int:
    url = (args.url or credentials.load().url).rstrip("/")
    email = args.email or input("Email: ").strip()
    password = args.password if args.password is not None else getpass.getpass("Password: ")
    name = args.token_name or f"cli@{socket.gethostname()}"[:100]
    with SlaqClient(url) as anonymous:
        token = anonymous.create_token(email, password, name)
    with SlaqClient(url, token) as client:
        me = client.me()
    path = credentials.save(url, token)
    _out(f"signed in to {url} as {me['email']} ({me['role']}, tenant {me['tenant_name']}); "
         f"token saved in {path}")
    return 0


def _spec(args: argparse.Namespace) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if args.file is not None:
        try:
            loaded = json.loads(args.file.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {args.file}: {exc}") from None
        if not isinstance(loaded, dict):
            raise UsageError(f"{args.file} must hold a JSON object (a job spec)")
        spec = loaded
    if args.algorithm:
        spec["algorithm"] = args.algorithm
    if args.dataset:
        spec["dataset"] = args.dataset
    if "algorithm" not in spec or "dataset" not in spec:
        raise UsageError("give ALGORITHM and DATASET (or --file spec.json)")
    if args.param:
        spec["params"] = {**spec.get("params", {}), **_pairs(args.param, "--param")}
    if args.dataset_param:
        spec["dataset_params"] = {**spec.get("dataset_params", {}),
                                  **_pairs(args.dataset_param, "--dataset-param")}
    stopping = dict(spec.get("stopping") or {})
    for field in ("max_iterations", "target_loss", "window"):
        if getattr(args, field) is not None:
            stopping[field] = getattr(args, field)
    if hasattr(args, "tolerance"):
        stopping["tolerance"] = args.tolerance
    if stopping:
        spec["stopping"] = stopping
    if args.seed is not None:
        spec["seed"] = args.seed
    if args.eval_every is not None:
        spec["eval_every"] = args.eval_every
    if args.quality_metric is not None:
        spec["quality_metric"] = args.quality_metric
    if args.name is not None:
        spec["name"] = args.name
    return spec


def _submit(args: argparse.Namespace) -> int:
    spec = _spec(args)
    with _client() as client:
        job = client.submit(spec)
    _out(str(job["id"]))
    return 0


def _fmt_loss(value: Any) -> str:
    return "-" if value is None else f"{float(value):.6g}"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)


def _status(args: argparse.Namespace) -> int:
    if getattr(args, "experiment", None) is not None:
        return _experiment_status(args)
    with _client() as client:
        if args.job_id is not None:
            job = client.job(args.job_id)
            if args.json:
                _out(json.dumps(job, indent=2))
                return 0
            stop = job["stopping"]
            facts = [
                ("job", f"{job['id']}  {job['name']}"),
                ("status", job["status"] + (f" (queue position {job['queue_position']})"
                                            if job.get("queue_position") else "")),
                ("algorithm", job["algorithm"]), ("dataset", job["dataset"]),
                ("params", json.dumps(job["params"])),
                ("progress", f"{job['iterations_done']}/{stop['max_iterations']} iterations "
                             f"({100 * job['progress']:.0f}%)"),
                ("loss", f"{_fmt_loss(job['current_loss'])} (initial "
                         f"{_fmt_loss(job['initial_loss'])}, best {_fmt_loss(job['best_loss'])})"),
            ]
            if job.get("last_eval"):
                # The held-out metrics as the job page shows them, with their iteration.
                facts.append(("held-out", ", ".join(
                    f"{k}={_fmt_loss(v)}" for k, v in sorted(job["last_eval"].items()))
                    + f" (iteration {job.get('last_eval_iteration') or '-'})"))
            if job.get("tags"):
                facts.append(("tags", ", ".join(job["tags"])))
            if job.get("note"):
                facts.append(("note", job["note"]))
            explanation = job.get("explanation") or {}
            if explanation.get("summary"):
                # Plain words first; the scheduler's technical reason after it.
                facts.append(("now", explanation["summary"]))
                if explanation.get("detail"):
                    facts.append(("why", explanation["detail"]))
            else:  # a portal from before explanations
                facts.append(("scheduler", job.get("scheduler_reason") or "-"))
                if job.get("end_reason"):
                    facts.append(("ended", job["end_reason"]))
            if job.get("error") and job["error"] != explanation.get("detail"):
                facts.append(("error", job["error"]))
            _out(_table([[k + ":", v] for k, v in facts]))
            return 0
        page = client.jobs(status=args.status_filter, limit=args.limit, offset=args.offset,
                           q=args.search, algorithm=args.algorithm, dataset=args.dataset,
                           tag=args.tag, sort=args.sort)
    if args.json:
        _out(json.dumps(page, indent=2))
        return 0
    if not page["items"]:
        _out("no jobs match" if _filtered(args) else "no jobs")
        return 0
    rows = [["ID", "STATUS", "ALGORITHM", "DATASET", "ITER", "LOSS", "HELD-OUT", "DONE",
             "NAME", "TAGS"]]
    for job in page["items"]:
        rows.append([str(job["id"]), job["status"], job["algorithm"], job["dataset"],
                     str(job["iterations_done"]), _fmt_loss(job["current_loss"]),
                     _held_out(job, args.sort), f"{100 * job['progress']:.0f}%", job["name"],
                     ",".join(job.get("tags") or [])])
    _out(_table(rows))
    if page["total"] > len(page["items"]):
        _out(f"({len(page['items'])} of {page['total']} jobs from {args.offset + 1}; "
             "--limit and --offset for more)")
    return 0


def _filtered(args: argparse.Namespace) -> bool:
    return bool(args.status_filter or args.search or args.algorithm or args.dataset
                or args.tag)


def _held_out(job: dict[str, Any], sort: str | None) -> str:
    """The latest evaluation: the metric sorted on if it is one, else val_loss or the first."""
    metrics = job.get("last_eval") or {}
    if not metrics:
        return "-"
    wanted = (sort or "").lstrip("-").removeprefix("metric:")
    name = wanted if wanted in metrics else "val_loss" if "val_loss" in metrics \
        else sorted(metrics)[0]
    return f"{name}={_fmt_loss(metrics[name])}"


def _bar(done: int, total: int) -> str:
    frac = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
    filled = int(round(frac * BAR_WIDTH))
    return f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {100 * frac:3.0f}%"


def _watch(args: argparse.Namespace) -> int:
    tty = sys.stdout.isatty()
    with _client() as client:
        job = client.job(args.job_id)
        total = int(job["stopping"]["max_iterations"])
        _out(f"job {job['id']}: {job['algorithm']} on {job['dataset']} ({job['status']})")
        last_iteration = 0
        last_status = job["status"]
        checked = time.monotonic()

        def show(iteration: int, loss: float) -> None:
            line = f"iteration {iteration:>7}/{total}  loss {loss:<12.6g} {_bar(iteration, total)}"
            if tty:
                sys.stdout.write("\r" + line)
                sys.stdout.flush()
            else:
                _out(line)

        def drain(idle: float) -> None:
            nonlocal last_iteration
            for batch in client.stream_points(args.job_id, last_iteration, idle_timeout=idle):
                fresh = [(i, v) for i, v in batch if i > last_iteration]
                if fresh:
                    last_iteration = fresh[-1][0]
                    show(*fresh[-1])

        while last_status not in FINISHED:
            for batch in client.stream_points(args.job_id, last_iteration, idle_timeout=1.0):
                fresh = [(i, v) for i, v in batch if i > last_iteration]
                if fresh:
                    last_iteration = fresh[-1][0]
                    show(*fresh[-1])
                if time.monotonic() - checked >= STATUS_POLL_SECONDS:
                    break
            job = client.job(args.job_id)
            checked = time.monotonic()
            if job["status"] != last_status and job["status"] not in FINISHED:
                if tty:
                    sys.stdout.write("\n")
                summary = (job.get("explanation") or {}).get("summary")
                reason = job.get("scheduler_reason")
                _out(summary if summary else f"status {job['status']}"
                     + (f": {reason}" if reason else ""))
            last_status = job["status"]
        drain(0.5)  # points streamed just before the job finished
        if tty:
            sys.stdout.write("\n")
        ending = job.get("end_reason") or job["status"]
        _out(f"job {job['id']} {job['status']} after {job['iterations_done']} iterations: "
             f"loss {_fmt_loss(job['current_loss'])} (best {_fmt_loss(job['best_loss'])}); "
             f"{ending}")
        if job.get("error") and job["error"] != ending:
            _out(f"error: {job['error']}")
    return 0 if job["status"] == "completed" else 1


def _cancel(args: argparse.Namespace) -> int:
    if bool(args.job_ids) == bool(args.status):
        _err("give job ids or --status, not both")
        return 2
    with _client() as client:
        if len(args.job_ids) == 1:
            # One job keeps the per-job route, which says why it cannot be cancelled.
            job = client.cancel(args.job_ids[0])
            _out(f"job {job['id']} {job['status']}")
            return 0
        result = client.bulk("cancel", ids=args.job_ids or None, status=args.status)
    _out(f"cancelled {result['changed']} jobs")
    return 0


def _upload(args: argparse.Namespace) -> int:
    if not args.path.is_file():
        raise UsageError(f"no such file: {args.path}")
    name = args.name or args.path.stem
    with _client() as client:
        ds = client.upload_dataset(args.path, name, args.task, args.label)
    _out(f"{ds['dataset']}  {ds['name']}: {ds['rows']} rows, {ds['columns']} features"
         + (f", {ds['n_classes']} classes" if ds["n_classes"] else "") + f" ({ds['task']})")
    return 0


def _datasets(_args: argparse.Namespace) -> int:
    with _client() as client:
        rows = client.datasets()
    if not rows:
        _out("no uploaded datasets")
        return 0
    table = [["DATASET", "NAME", "TASK", "ROWS", "FEATURES", "CLASSES"]]
    table += [[d["dataset"], d["name"], d["task"], str(d["rows"]), str(d["columns"]),
               str(d["n_classes"] or "-")] for d in rows]
    _out(_table(table))
    return 0


def _code(args: argparse.Namespace) -> int:
    with _client() as client:
        if args.code_command == "upload":
            if not args.path.is_file():
                raise UsageError(f"no such file: {args.path}")
            row = client.upload_code(args.path, args.name)
            _out(f"{row['algorithm']}  {row['name']} ({row.get('contract', 'trainer')}, "
                 f"{row['size']} bytes): submit jobs with `slaq submit {row['algorithm']} "
                 "DATASET`")
            return 0
        rows = client.codes()
    if not rows:
        _out("no uploaded trainers")
        return 0
    table = [["ALGORITHM", "NAME", "CONTRACT", "FILE", "BYTES", "UPLOADED"]]
    table += [[r["algorithm"], r["name"], r.get("contract", ""), r["filename"], str(r["size"]),
               str(r["created_at"])[:19].replace("T", " ")] for r in rows]
    _out(_table(table))
    return 0


def _sweep(args: argparse.Namespace) -> int:
    try:
        spec = json.loads(args.spec.read_text())
    except OSError as exc:
        raise UsageError(f"cannot read {args.spec}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise UsageError(f"{args.spec} is not valid JSON: {exc}") from None
    if not isinstance(spec, dict):
        raise UsageError(f"{args.spec} must hold a JSON object")
    with _client() as client:
        experiment = client.submit_experiment(spec)
    _out(f"experiment {experiment['id']}: {len(experiment['job_ids'])} jobs")
    _out(" ".join(str(i) for i in experiment["job_ids"]))
    return 0


def _experiment_status(args: argparse.Namespace) -> int:
    with _client() as client:
        exp = client.experiment(args.experiment)
    if args.json:
        _out(json.dumps(exp, indent=2))
        return 0
    objective = exp["objective"]
    _out(f"experiment {exp['id']}  {exp['name']}: {exp['status']}, objective "
         f"{objective.get('metric')} ({objective.get('mode')}), best job "
         f"{exp['best_job_id'] or '-'} at {_fmt_loss(exp['best_value'])}")
    maximise = objective.get("mode") == "max"
    jobs = sorted(exp["jobs"], key=lambda j: (j["objective_value"] is None,
                                              (-1 if maximise else 1) * (j["objective_value"]
                                                                         or 0.0)))
    rows = [["ID", "STATUS", "ITER", "OBJECTIVE", "PARAMS", "NOTE"]]
    swept = list(exp["space"])
    for job in jobs:
        params = ", ".join(f"{k}={job['params'].get(k)}" for k in swept)
        rows.append([str(job["id"]), job["status"], str(job["iterations_done"]),
                     _fmt_loss(job["objective_value"]), params,
                     job["end_reason"] if job["stopped_early"] else ""])
    _out(_table(rows))
    return 0


def _control(args: argparse.Namespace) -> int:
    failed = 0
    with _client() as client:
        for job_id in args.job_ids:
            try:
                job = getattr(client, args.command)(job_id)
            except SlaqError as exc:
                # One job that cannot change does not stop the others.
                _err(f"job {job_id}: {exc}")
                failed += 1
                continue
            _out(f"job {job['id']} {job['status']}")
    return 1 if failed else 0


def _kind(args: argparse.Namespace) -> str:
    return "experiment" if args.experiment else "job"


def _label(args: argparse.Namespace) -> int:
    change: dict[str, Any] = {}
    if args.name is not None:
        change["name"] = args.name
    if args.no_tags and args.tags:
        raise UsageError("give --tag or --no-tags, not both")
    if args.no_tags:
        change["tags"] = []
    elif args.tags:
        change["tags"] = [t for tag in args.tags for t in tag.split(",") if t.strip()]
    if args.note is not None:
        change["note"] = sys.stdin.read() if args.note == "-" else args.note
    if not change:
        raise UsageError("nothing to change: give --name, --tag, --no-tags or --note")
    with _client() as client:
        run = client.label(_kind(args), args.run_id, **change)
    _out(f"{_kind(args)} {run['id']}: {run['name'] or '(no name)'}"
         + (f"  tags {', '.join(run['tags'])}" if run.get("tags") else "  no tags"))
    return 0


def _continue(args: argparse.Namespace) -> int:
    if args.experiment:
        return _extend(args)
    if args.add or args.space is not None:
        raise UsageError("--add and --space add configurations to an experiment: "
                         "add --experiment")
    change: dict[str, Any] = {}
    if args.max_iterations is not None:
        change["max_iterations"] = args.max_iterations
    for field in ("target_loss", "tolerance"):
        if hasattr(args, field):
            change[field] = getattr(args, field)
    with _client() as client:
        job = client.continue_job(args.run_id, **change)
    stop = job["stopping"]
    _out(f"job {job['id']} {job['status']}: continues from iteration "
         f"{job['iterations_done']} to at most {stop['max_iterations']}")
    return 0


def _extend(args: argparse.Namespace) -> int:
    if args.max_iterations is not None or hasattr(args, "target_loss") or \
            hasattr(args, "tolerance"):
        raise UsageError("an experiment gains configurations (--add, --space); continue "
                         "its jobs one by one with `slaq continue JOB_ID`")
    body: dict[str, Any] = {}
    if args.space is not None:
        try:
            space = json.loads(args.space.read_text())
        except OSError as exc:
            raise UsageError(f"cannot read {args.space}: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise UsageError(f"{args.space} is not valid JSON: {exc}") from None
        if not isinstance(space, dict):
            raise UsageError(f"{args.space} must hold a JSON object of axes")
        body["space"] = space
    if args.add:
        body["configurations"] = [_pairs([p for p in item.split(",") if p.strip()], "--add")
                                  for item in args.add]
    if not body:
        raise UsageError("nothing to add: give --add K=V,... or --space FILE")
    with _client() as client:
        exp = client.extend_experiment(args.run_id, body)
    added = exp["added"]
    _out(f"experiment {exp['id']}: {len(added)} job{'s' if len(added) != 1 else ''} added, "
         f"{len(exp['job_ids'])} in all")
    _out(" ".join(str(i) for i in added))
    return 0


def _delete(args: argparse.Namespace) -> int:
    kind = _kind(args)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"deleting {kind} {args.run_id} cannot be undone: add --yes "
                             "to confirm when not at a terminal")
        answer = input(f"Delete {kind} {args.run_id} and all its data? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            _out("nothing deleted")
            return 1
    with _client() as client:
        client.delete(kind, args.run_id)
    _out(f"deleted {kind} {args.run_id}")
    return 0


def _save(data: bytes, filename: str, output: Path | None) -> Path:
    target = output or Path(filename)
    if target.is_dir():
        target = target / filename
    target.write_bytes(data)
    return target


def _checkpoint(args: argparse.Namespace) -> int:
    with _client() as client:
        data, filename = client.checkpoint(args.job_id)
    path = _save(data, filename, args.output)
    _out(f"saved {path} ({len(data)} bytes); /help/models says how to load it")
    return 0


def _export(args: argparse.Namespace) -> int:
    with _client() as client:
        data, filename = client.export(args.job_id, args.format)
    if args.output is None:
        sys.stdout.write(storable(data.decode("utf-8", errors="replace")))
        sys.stdout.flush()
        return 0
    path = _save(data, filename, args.output)
    _err(f"saved {path}")
    return 0


HANDLERS = {"login": _login, "submit": _submit, "status": _status, "watch": _watch,
            "pause": _control, "resume": _control, "cancel": _cancel, "continue": _continue,
            "label": _label,
            "delete": _delete, "checkpoint": _checkpoint, "export": _export,
            "upload": _upload, "datasets": _datasets, "code": _code, "sweep": _sweep}


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        return HANDLERS[args.command](args)
    except UsageError as exc:
        _err(f"slaq {args.command}: {exc}")
        return 2
    except SlaqError as exc:
        lines = str(exc).splitlines() or [f"HTTP {exc.status_code}"]
        for line in lines:
            _err(f"error: {line}")
        if exc.status_code == 401:
            _err("hint: sign in again with `slaq login` (or check SLAQ_TOKEN)")
        return 1
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
