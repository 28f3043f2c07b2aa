"""The registry server: benchmarks, datasets, models, associations, verified results and a
hash-chained audit log (FastAPI + SQLAlchemy 2 + Alembic; SQLite by default, PostgreSQL)."""
