"""Floor 5, a front end: the report a person would rather look at than read (`streamdump report`).

One self-contained HTML file of a capture (or many, or a Spark run's output): a summary,
throughput, publish and request latency over time, consumers' credit and lag, a timeline of
connections and the findings with the filters that show them. data.py gathers what a report
holds from an analysis session or a Spark run's documents, charts.py draws it with matplotlib,
page.py lays it out. matplotlib is an optional extra: `missing()` says in one line when it is
not there.
"""

from __future__ import annotations


def missing() -> str | None:
    """What this machine lacks to draw a report, in one line; None when nothing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "the report draws its charts with matplotlib: pip install 'streamdump[report]'"
    return None
