"""Turn anime films into AnimeGamer training clips: orchestration, records, schema and shards."""

__version__ = "0.1.0"
