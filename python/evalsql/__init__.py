"""evalsql in Python: every evalsql function inside a datafusion-python session.

    from datafusion import SessionContext
    import evalsql

    ctx = SessionContext()
    evalsql.register(ctx, judge={"model": "gpt-4o-mini"})
    ctx.register_parquet("runs", "data/qa.parquet")
    ctx.sql("SELECT model, avg(f1_score(response, ground_truth)) FROM runs GROUP BY model").to_pandas()

The functions are evalsql's own, compiled in and handed to datafusion-python through
DataFusion's FFI: the values are the command line's, bit for bit. The LLM judges run each
batch on evalsql's judge engine (its limiter, cache, retries, batch mode and budgets); a
datafusion-python session cannot hold ``SET evalsql.judge.*``, so their settings are given
to :func:`register` (or changed later with :meth:`Registration.set`). API keys come only
from the environment, as for the command line (``OPENAI_API_KEY``, ``AZURE_OPENAI_*``, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

from datafusion import SessionContext, udaf, udf, udtf, udwf

from . import _native

__all__ = ["Registration", "functions", "register"]
__version__ = _native.__version__


def _text(value: Any) -> str:
    """A setting's value as `SET` would take it (`True` is ``true``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


class Registration:
    """What :func:`register` installed in a session: the function names and the judge and
    target settings they share."""

    def __init__(self, names: list[str], settings: Any) -> None:
        self.names = names
        self._settings = settings

    def set(self, key: str, value: Any) -> None:
        """Changes one setting for the later queries, e.g. ``set("judge.threshold", 4)``
        (keys as after ``evalsql.`` in ``SET evalsql.judge.threshold = 4``)."""
        self._settings.set(key, _text(value))

    def start_query(self) -> None:
        """Restarts the judge budgets (``max_cost_usd``, ``max_calls``, ``max_tokens``),
        which otherwise count every judge call since :func:`register`."""
        self._settings.start_query()

    def __repr__(self) -> str:
        return f"<evalsql.Registration of {len(self.names)} functions>"


def register(
    ctx: SessionContext,
    *,
    judge: Mapping[str, Any] | None = None,
    target: Mapping[str, Any] | None = None,
    rubrics: Iterable[str | PathLike[str]] = (),
) -> Registration:
    """Registers every evalsql function in ``ctx`` by name: text, retrieval and agent
    metrics, statistics aggregates and window functions, the judges, safety metrics and
    targets, and the table functions (``read_otlp``, ``judge_cache``).

    ``judge`` and ``target`` take every ``evalsql.judge.*`` / ``evalsql.target.*`` key
    without its prefix (``{"model": ..., "base_url": ..., "max_concurrency": 8, "cache":
    ..., "threshold": 4, "mode": "batch", "max_cost_usd": 5, "dry_run": True, ...}``), on top
    of the environment variables the command line reads. ``rubrics`` are directories of
    custom rubric files, each ``*.md`` a judge function.
    """
    fns, settings = _native.functions(
        judge={str(k): _text(v) for k, v in (judge or {}).items()},
        target={str(k): _text(v) for k, v in (target or {}).items()},
        rubric_dirs=[str(p) for p in rubrics],
    )
    for f in fns:
        if f.kind == "scalar":
            ctx.register_udf(udf(f))
        elif f.kind == "aggregate":
            ctx.register_udaf(udaf(f))
        elif f.kind == "window":
            ctx.register_udwf(udwf(f))
        else:
            ctx.register_udtf(udtf(f, f.name))
    return Registration([f.name for f in fns], settings)


def functions() -> list[dict[str, str]]:
    """Every evalsql function with its kind, section, call syntax, return type and
    description (what ``evalsql functions`` prints)."""
    keys = ("name", "kind", "section", "syntax", "returns", "description")
    listed = [dict(zip(keys, row)) for row in _native.catalogue()]
    listed += [
        {
            "name": "read_otlp",
            "kind": "table",
            "section": "Agent metrics",
            "syntax": "read_otlp('path-or-URL')",
            "returns": "one row per span",
            "description": "OpenTelemetry traces (OTLP/JSON as the Collector's file "
            "exporter writes them) as a table, GenAI and OpenInference attributes as "
            "columns.",
        },
        {
            "name": "judge_cache",
            "kind": "table",
            "section": "AI-assisted quality metrics",
            "syntax": "judge_cache([path])",
            "returns": "one row per cached judgement",
            "description": "The judge cache as a table.",
        },
    ]
    return listed
