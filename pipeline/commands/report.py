"""`animegamer report`: write the HTML report of a film folder or a dataset folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from core.cli import UsageError, input_errors, work_errors
from pipeline.commands.film_paths import add_dataset_dir_argument, folder_for
from pipeline.inspection.report_options import ReportOptions

HELP = """Write a self-contained HTML report of a dataset: film facts, the crop box drawn on a
frame, a timeline of scenes, clips and drops, animated clip previews, histograms of motion scope,
captions and drop reasons, and stage timings. It opens from disk in any browser.

  animegamer report data/                    # every film under data/: data/report.html
  animegamer report data/<film> --out x.html # one film folder
  animegamer report film.mp4                 # the folder film.mp4 was cut into, under data/
  animegamer report data/ --ip Sintel        # the films of one IP: data/report-Sintel.html"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = ReportOptions()
    parser.add_argument(
        "path",
        type=Path,
        help="a film folder (OUT/<film>) or a dataset folder (OUT) written by `animegamer "
        "dataset`, or a film file that was cut into OUT (see --dataset-dir)",
    )
    parser.add_argument(
        "--out",
        help="HTML file to write (default: report.html in PATH, or report-<ip>.html with --ip)",
    )
    parser.add_argument("--ip", help="only the films of this IP (dataset folders)")
    add_dataset_dir_argument(parser)
    parser.add_argument(
        "--previews",
        type=int,
        default=defaults.max_previews,
        metavar="N",
        help="animated previews per film, evenly spaced over the film; 0 for "
        "none (default: %(default)s)",
    )
    parser.add_argument(
        "--preview-width",
        type=int,
        default=defaults.preview_width,
        metavar="PX",
        help="preview width in pixels (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    if args.preview_width < 16:
        raise UsageError(f"--preview-width {args.preview_width} is too small (>= 16)")
    options = ReportOptions(
        max_previews=args.previews, preview_width=args.preview_width, ip=args.ip
    )
    folder = folder_for(args.path, args.dataset_dir)
    # Only now the report's own imports (pandas, matplotlib: about a second): a bad argument or a
    # path that is not there is refused before them.
    from pipeline.inspection.explore import DatasetError, open_dataset
    from pipeline.inspection.report import select_films, write_report

    with input_errors(DatasetError):  # not a dataset, or no film of that IP (opening is lazy)
        select_films(open_dataset(folder), options.ip)
    # ValueError: a shard of another schema version; OSError: the report cannot be written
    with work_errors(ValueError, OSError):
        path = write_report(folder, args.out, options)
    print(path)
    return 0
