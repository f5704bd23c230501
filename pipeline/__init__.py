"""Turn anime films into AnimeGamer training clips: orchestration and the CLI. The record, the
schema and the shards are core's; the stages are stages'.

The package is in rooms, each below the ones that import it (tests/test_layering.py holds the
order; docs/architecture.md draws it):
- `executors/`: where a job runs (this process, a process pool, Ray), one contract;
- `data/`: what every room reads: configuration, IP manifests, the manifest, review decisions,
  the output folder's summary;
- `passes/`: the folder-level passes (quality, near duplicates, captioning a folder);
- `running/`: running films (runner, scheduler, film tasks, segments, finalize);
- `inspection/`: the notebook API, the report, the review page's server;
- `commands/` and `cli.py`: the `animegamer` console script, one module per sub-command.

Modules that lived directly in `pipeline/` before the rooms keep their old import path
(`pipeline.explore`, `pipeline.runner`, ...): `pipeline.moved` maps each to its room.
"""

from pipeline.moved import install_old_paths

__version__ = "0.1.0"

install_old_paths()
