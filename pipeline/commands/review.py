"""`animegamer review`: a local page to accept or reject clips and correct their captions."""

from __future__ import annotations

import argparse
import logging
import sys

HELP = """Serve a local review page (on 127.0.0.1 only) for a film or dataset folder: looping clip
previews with their time range, motion level, quality flags and caption fields, filters, keyboard
shortcuts to accept, reject and move between clips, and checked caption corrections. Decisions go
to review.parquet beside each film's shards and win over the automatic ones everywhere.

  animegamer review data/                 # every film under data/, at http://127.0.0.1:8765/
  animegamer review data/<film> --port 9000"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.inspection.review_server import DEFAULT_PORT

    parser.add_argument(
        "path",
        help="a film folder (OUT/<film>) or a dataset folder (OUT) written by `animegamer dataset`",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help="port on 127.0.0.1 (default: %(default)s; 0 picks a free one)",
    )
    parser.add_argument(
        "--ip",
        help="IP name or manifest path whose protagonists a clip may be given "
        "(default: the films' own IP)",
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from core.cli import UsageError, input_errors
    from pipeline.inspection.explore import DatasetError
    from pipeline.inspection.review_server import make_server

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port (0-65535)")
    with input_errors(DatasetError, FileNotFoundError, ValueError):
        try:
            server = make_server(args.path, args.port, args.ip)
        except OSError as exc:  # the port is taken: the user's choice of port, so exit 2 too
            if isinstance(exc, FileNotFoundError):
                raise
            raise UsageError(f"cannot listen on port {args.port}: {exc.strerror}") from exc
    clips = server.app.snapshot().table.num_rows
    films = len(server.app.snapshot().slugs)
    print(f"reviewing {clips} clips of {films} film(s) at {server.url} (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
