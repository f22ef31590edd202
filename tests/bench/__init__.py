"""Benchmarks: plain scripts run as ``python -m tests.bench.<name>``.

No file here is named ``test_*.py``, so the normal test run never collects
them; they print tables and write HTML reports instead of asserting times.
"""
