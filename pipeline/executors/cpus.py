"""How many CPUs this process may keep busy (its cores, bounded by a cgroup CPU quota), and
holding a thread and what it starts to a number of them."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def usable_cpus() -> int:
    """How many CPUs this process may keep busy: the cores it may run on (its affinity), fewer
    where a cgroup CPU quota (a container's --cpus, a Kubernetes CPU limit) allows less time. A
    quota of 1.5 CPUs counts as 2: two workers use the whole quota (each throttled to three
    quarters of a core), where one would leave half a CPU idle (Ray truncates to 1: ray/_private/
    utils.py, get_num_cpus)."""
    cores = len(allowed_cores()) or os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return min(cores, max(1, math.ceil(quota))) if quota else cores


CGROUP_ROOT = Path("/sys/fs/cgroup")


OWN_CGROUP = Path("/proc/self/cgroup")


def cgroup_cpu_quota() -> float | None:
    """CPUs of time per second this process's cgroup may use, or None (no quota). cgroup v2:
    `cpu.max` ("QUOTA PERIOD" or "max PERIOD") of this process's cgroup and every ancestor, the
    smallest; v1: the `cpu` controller's cfs_quota_us over cfs_period_us (-1: none)."""
    quotas = [q for q in (*_v2_quotas(), _v1_quota()) if q is not None]
    return min(quotas, default=None)


def _v2_quotas() -> list[float | None]:
    try:
        lines = OWN_CGROUP.read_text().splitlines()
    except OSError:
        lines = []
    own = next((line[3:] for line in lines if line.startswith("0::")), "/")
    folder = CGROUP_ROOT / own.lstrip("/")
    quotas = []
    for level in (folder, *folder.parents):
        if level == CGROUP_ROOT.parent:
            break
        quotas.append(_ratio(level / "cpu.max", None))
    return quotas


def _v1_quota() -> float | None:
    folder = CGROUP_ROOT / "cpu"
    return _ratio(folder / "cpu.cfs_quota_us", folder / "cpu.cfs_period_us")


def _ratio(quota_file: Path, period_file: Path | None) -> float | None:
    """A quota over its period, from one file ("QUOTA PERIOD") or two; None: no file, no quota."""
    try:
        words = quota_file.read_text().split()
        if period_file is not None:
            words += period_file.read_text().split()
        quota, period = int(words[0]), int(words[1])
    except (OSError, ValueError, IndexError):  # "max", -1 parses but is no quota: below
        return None
    return quota / period if quota > 0 and period > 0 else None


def allowed_cores() -> list[int]:
    """The cores this process may run on (Linux; elsewhere unknown: [])."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@contextmanager
def cpu_cap(num_cpus: int | None) -> Iterator[None]:
    """Hold the calling thread, and every thread and process it starts meanwhile, to the first
    `num_cpus` of the cores it may use (None or at least that many: no change). Linux only;
    elsewhere no change."""
    allowed = allowed_cores()
    if not num_cpus or not allowed or num_cpus >= len(allowed):
        yield
        return
    os.sched_setaffinity(0, allowed[:num_cpus])
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)
