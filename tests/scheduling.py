"""How scripts/test.sh spreads the tests over pytest-xdist's workers: costliest scope first.

xdist's `--dist loadscope` sends a whole module to one worker, so a module's fixtures (a cut film,
an S3 server, a trained run) are built once. It orders the modules by their number of tests,
which says little of their cost: a one-test module that builds a real-size model came last and
kept one worker busy for 6 s while the other had nothing left (2026-11-26). Here the scopes run
costliest first (longest-processing-time first, which leaves only short ones for the end). A
scope's cost is the sum of the seconds its selected tests took in an earlier run, kept per test in
tests/costs.json, so that `make test-fast` orders by the fast tests alone:

    scripts/test.sh "" --record-costs     # the tests of the run get their new figures

A test missing from the file counts as the median test; a scope none of whose tests is in it (a new
module) goes first: a cheap one costs nothing there, a costly one would otherwise end the run
alone. A stale file only makes the order worse, never a result wrong.

Scopes are modules, except that the trainer's test modules and the caption engines' are one scope:
the first of their tests in a process imports transformers (trainer.build adds peft and diffusers:
about 5 CPU-s in all; the transformers engine's error test alone, 4.9), so one worker pays that
once instead of each.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from core.io import write_text_atomic

COSTS = Path(__file__).with_name("costs.json")
# scope -> the module path prefixes it holds
SHARED_SCOPES = {"transformers": ("tests/test_trainer_", "tests/test_caption_engines.py")}


def scope_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return next(
        (scope for scope, prefixes in SHARED_SCOPES.items() if module.startswith(prefixes)), module
    )


def read_costs() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(COSTS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}  # no file or a broken one: collection order


def pytest_addoption(parser):
    parser.addoption(
        "--record-costs",
        action="store_true",
        help="write each test's seconds in this run to tests/costs.json (the order of the next)",
    )


@pytest.hookimpl(trylast=True)  # after conftest's own changes to the items
def pytest_collection_modifyitems(config, items):
    """Every process (each xdist worker, a run without xdist) orders its items the same way:
    scopes by cost, costliest first, each scope's items in their own order."""
    costs = read_costs()
    usual = statistics.median(costs.values()) if costs else 0.0
    cost: dict[str, float] = defaultdict(float)
    known: set[str] = set()
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        scope = scope_of(item.nodeid)
        first_seen.setdefault(scope, index)
        cost[scope] += costs.get(item.nodeid, usual)
        if item.nodeid in costs:
            known.add(scope)

    def rank(indexed):
        index, item = indexed
        scope = scope_of(item.nodeid)
        return (-(cost[scope] if scope in known else float("inf")), first_seen[scope], index)

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]


@pytest.hookimpl(optionalhook=True)  # a run without xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class CostliestScopeFirst(LoadScopeScheduling):
        """loadscope over SHARED_SCOPES, in the workers' collection order (costliest first)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            # xdist would reorder the scopes by their number of tests
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return CostliestScopeFirst(config, log)


_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    """Each test's seconds on its worker (setup, call, teardown): the time it holds a worker,
    waits included, which is what the order is for. Gathered where reports arrive: the one
    process, or xdist's controller."""
    _seconds[report.nodeid] += report.duration


def pytest_sessionfinish(session):
    config = session.config
    if not config.getoption("--record-costs") or hasattr(config, "workerinput") or not _seconds:
        return
    costs = read_costs() | {nodeid: round(s, 2) for nodeid, s in _seconds.items()}
    ordered = dict(sorted(costs.items()))
    # atomic: the serial run (scripts/test.sh) may write its own tests at the same time
    write_text_atomic(json.dumps(ordered, indent=1) + "\n", COSTS)
