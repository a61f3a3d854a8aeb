"""Adapters to the rest of a Python stack, each behind its own extra: :mod:`.otel` (OpenTelemetry
traces and metrics, ``shardq[otel]``), :mod:`.errors` (task failures to Sentry or any logging-based
tracker), :mod:`.asgi` (FastAPI / Starlette lifespan and dashboard mount). Nothing here is imported
by the library itself: it reaches them only through :mod:`shardq.instrumentation`."""
