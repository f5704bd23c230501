"""Turn anime films into AnimeGamer training clips: orchestration (configuration, the executor,
the runner and its segments, the folder passes: quality, captions, review, report) and the CLI.
The record, the schema and the shards are core's; the stages are stages'."""

__version__ = "0.1.0"
