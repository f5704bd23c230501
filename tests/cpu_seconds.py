"""`--cpu-durations=N`, a pytest plugin of tests/conftest.py: CPU seconds per test."""

from __future__ import annotations

import pytest

# ---------------------------------------------------------------- CPU seconds per test

# Wall-clock durations (`--durations`) on a shared machine measure the neighbours as much as the
# tests. `--cpu-durations=N` also counts CPU seconds per test (setup, call and teardown; this
# process and the children it waited for, such as FFmpeg or a moto server, but not Ray's
# workers, which are not its children) and prints the N costliest and the session's total. Under
# pytest-xdist each worker measures its own tests and sends the figure with the test's teardown
# report; the workers are children the controller waits for, so its session total counts them.
_cpu_seconds: dict[str, float] = {}


def pytest_addoption(parser):
    parser.addoption(
        "--cpu-durations",
        type=int,
        default=None,
        metavar="N",
        help="print the N tests that took the most CPU seconds (0: all) and the total",
    )


def _cpu_now() -> float:
    import resource

    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_CPU_STARTED = pytest.StashKey[float]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[_CPU_STARTED] = _cpu_now()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when == "teardown":
        spent = _cpu_now() - item.stash[_CPU_STARTED]
        outcome.get_result().user_properties.append(("cpu_seconds", spent))


def pytest_runtest_logreport(report):
    """Where the figures are gathered: in the one process, or in xdist's controller."""
    if report.when == "teardown":
        _cpu_seconds.update(
            (report.nodeid, v) for k, v in report.user_properties if k == "cpu_seconds"
        )


def pytest_terminal_summary(terminalreporter, config):
    count = config.getoption("--cpu-durations")
    if count is None or not _cpu_seconds:
        return
    ranked = sorted(_cpu_seconds.items(), key=lambda item: -item[1])
    terminalreporter.section(f"CPU seconds per test ({len(ranked)} tests)")
    for nodeid, seconds in ranked[: count or None]:
        terminalreporter.write_line(f"{seconds:7.2f}s  {nodeid}")
    terminalreporter.write_line(f"{sum(_cpu_seconds.values()):7.2f}s  in all tests")
    terminalreporter.write_line(f"{_cpu_now():7.2f}s  the whole session (imports, collection)")
