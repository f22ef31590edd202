"""Simulation front end: trace recording, the ``slaq simulate`` CLI and HTML reports.

The simulator itself is part of the pure core (:mod:`backend.scheduling.simulator`);
this package adds what touches the outside world: the training algorithms
(recording traces), argparse, files and Plotly.
"""
