"""`animegamer report`: write the HTML report of a film folder or a dataset folder."""

from __future__ import annotations

import argparse
import sys

HELP = """Write a self-contained HTML report of a dataset: film facts, the crop box drawn on a
frame, a timeline of scenes, clips and drops, animated clip previews, histograms of motion scope,
captions and drop reasons, and stage timings. It opens from disk in any browser.

  animegamer report data/                    # every film under data/: data/report.html
  animegamer report data/<film> --out x.html # one film folder
  animegamer report data/ --ip Sintel        # the films of one IP: data/report-Sintel.html"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from pipeline.report import ReportOptions

    defaults = ReportOptions()
    parser.add_argument(
        "path",
        help="a film folder (OUT/<film>) or a dataset folder (OUT) written by `animegamer dataset`",
    )
    parser.add_argument(
        "--out",
        help="HTML file to write (default: report.html in PATH, or report-<ip>.html with --ip)",
    )
    parser.add_argument("--ip", help="only the films of this IP (dataset folders)")
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
    from pipeline.explore import DatasetError
    from pipeline.report import ReportOptions, write_report

    if args.preview_width < 16:
        print(
            f"animegamer report: --preview-width {args.preview_width} is too small (>= 16)",
            file=sys.stderr,
        )
        return 2
    options = ReportOptions(
        max_previews=args.previews, preview_width=args.preview_width, ip=args.ip
    )
    try:
        path = write_report(args.path, args.out, options)
    except (DatasetError, FileNotFoundError, ValueError) as exc:  # ValueError: shard schema version
        print(f"animegamer report: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0
