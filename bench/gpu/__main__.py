"""`python -m bench.gpu` (`make bench-gpu`): runs the driver, bench/gpu/cli.py."""

from bench.gpu.cli import main

raise SystemExit(main())
