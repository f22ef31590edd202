"""Regenerate ``python_docstrings.txt``: the docstrings of a fixed list of
Python standard-library modules and their public classes, functions and
methods, in source order. Run once with the Python the file was made with
(3.11); the text is the Python Software Foundation's, under the PSF License.

    .venv/bin/python data/corpus/make_corpus.py
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

MODULES = (
    "abc", "argparse", "base64", "bisect", "calendar", "collections", "contextlib", "copy",
    "csv", "dataclasses", "datetime", "decimal", "difflib", "enum", "fractions", "functools",
    "glob", "heapq", "hashlib", "html", "inspect", "io", "ipaddress", "itertools", "json",
    "logging", "math", "operator", "os", "pathlib", "pickle", "pprint", "queue", "random",
    "re", "sched", "secrets", "shlex", "shutil", "statistics", "string", "struct",
    "subprocess", "tarfile", "tempfile", "textwrap", "threading", "timeit", "typing",
    "unittest", "urllib.parse", "uuid", "warnings", "weakref", "zipfile",
)
LIMIT = 900_000
OUT = Path(__file__).with_name("python_docstrings.txt")


def _docs(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    parts = [f"Module {module_name}\n\n{inspect.getdoc(module) or ''}"]
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        doc = inspect.getdoc(obj)
        if doc:
            parts.append(f"{module_name}.{name}\n\n{doc}")
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not inspect.isfunction(member):
                    continue
                doc = inspect.getdoc(member)
                if doc:
                    parts.append(f"{module_name}.{name}.{attr}\n\n{doc}")
    return parts


def main() -> None:
    text = "\n\n\n".join(part for name in MODULES for part in _docs(name)).strip() + "\n"
    OUT.write_text(text[:LIMIT], encoding="utf-8")
    print(f"{OUT}: {len(text[:LIMIT]):,} characters")  # noqa: T201


if __name__ == "__main__":
    main()
