#!/usr/bin/env bash
# The test suite on every core, as `make test` and `make test-fast` run it:
#
#   scripts/test.sh [MARKERS] [PYTEST ARGS...]      e.g. scripts/test.sh "not slow" -x -k clips
#
# Two pytest runs at the same time, each ending in its own summary line:
#   1. the tests not marked `serial`, spread over one pytest-xdist worker per core;
#   2. the `serial` tests, one after another in a process of their own. They start Ray or a
#      cluster of it, and spend most of their time waiting on its start-up and its processes
#      (about 45 % of one core's worth of work for each core, measured alone): beside the first
#      run they use the cores it leaves idle, where after it they took two more minutes. Their
#      report is held back and printed after the first run's.
# Modules go to the workers costliest first (tests/scheduling.py; `--record-costs` refreshes the
# figures it orders by). MARKERS ("not slow" for test-fast) narrows both runs; select by marker
# through it, since a `-m` among the pytest arguments would replace the serial split. Every serial test is slow too
# (tests/conftest.py), so "not slow" skips the second run and the cost of its collection. A run
# that selects no test (exit 5, e.g. a file without serial tests) is not a failure unless
# neither run selects one.
# The exit status is the first run's if it failed, else the second's. PYTHON picks the
# interpreter (default .venv/bin/python); TEST_WORKERS the number of workers (default: the cores
# this process may use; 1 runs everything in one process, the serial tests after the others).
set -u
cd "$(dirname "$0")/.."

# Python keeps compiled modules (and pytest its rewritten test modules) in __pycache__, which git
# ignores. Where PYTHONDONTWRITEBYTECODE forbids that, every worker and every command a test runs
# compiles the project again: 1.7 s of each worker's collection, 0.2 s of each `animegamer` run.
unset PYTHONDONTWRITEBYTECODE

python=${PYTHON:-.venv/bin/python}
workers=${TEST_WORKERS:-$(nproc)}
markers=${1:-}
shift || true

narrowed() { # $1 and the caller's MARKERS, as one marker expression
    if [ -n "$markers" ]; then echo "($1) and ($markers)"; else echo "$1"; fi
}

# What conftest.py's `built_once` builds (a cut film, say) is built once for both runs.
ANIMEGAMER_TEST_BUILT=$(mktemp -d -t animegamer-tests.XXXXXX)
export ANIMEGAMER_TEST_BUILT
serial_log="$ANIMEGAMER_TEST_BUILT/serial.log"
serial_pid=""
finish() {
    if [ -n "$serial_pid" ]; then kill "$serial_pid" 2>/dev/null; fi
    rm -rf "$ANIMEGAMER_TEST_BUILT"
}
trap finish EXIT
trap 'exit 130' INT TERM

run_serial() {
    "$python" -m pytest -p no:xdist -m "$(narrowed serial)" "$@"
}

serial=5
if [ "$markers" != "not slow" ] && [ "$workers" -gt 1 ]; then
    run_serial "$@" >"$serial_log" 2>&1 &
    serial_pid=$!
fi

if [ "$workers" -gt 1 ]; then
    # a module's tests go to one worker: its module-scoped fixtures (a trained run, an S3
    # server, a cut film) are built once, as in one process. (--dist loadgroup with xdist_group
    # marks would spread them finer, but xdist 3.8.0 here sent marked tests of one group to
    # both workers.)
    spread=(-n "$workers" --dist loadscope)
else
    spread=(-p no:xdist)
fi
"$python" -m pytest "${spread[@]}" -m "$(narrowed "not serial")" "$@"
parallel=$?

if [ -n "$serial_pid" ]; then
    echo "---- the serial tests, run beside the others in one process:"
    tail -n +1 -f --pid="$serial_pid" "$serial_log"
    wait "$serial_pid"
    serial=$?
    serial_pid=""
elif [ "$markers" != "not slow" ]; then
    run_serial "$@"
    serial=$?
fi

if [ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ]; then
    exit 5
fi
for status in "$parallel" "$serial"; do
    if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
        exit "$status"
    fi
done
exit 0
