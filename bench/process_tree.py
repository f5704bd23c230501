"""What a run costs across all its processes: the bench's one sampler of a process tree (the
driver, the process pool's fork server and workers, Ray's GCS, raylet and workers)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import psutil

# A process of the tree: its pid and start time (a pid alone may be reused within a run).
Key = tuple[int, float]
# Names a process, given the name it had at the last sample ("" at the first).
Namer = Callable[[psutil.Process, str], str]


class ProcessTree:
    """CPU seconds and peak resident memory of a process (by default this one) and all its
    descendants while the `with` block runs, sampled every `every` seconds on a thread of this
    process. A process that ends before the measurement does (the pool's workers, stopped when
    the run drops its executor; Ray's workers) counts with its CPU at its last sample; the CPU a
    process had spent before the block (this process's imports) does not count. Where `root` is
    this process, the sampler's own CPU counts as the run's.

    The memory is the sum of their RSS, which counts a page shared by several processes (the
    pool's workers share the fork server's) once in each, so it overstates the pool and Ray
    against one process: 12 idle workers, 1185 MiB of RSS against 244 MiB of PSS (the pool's
    review). PSS is not sampled because reading it costs about 3 ms a process, CPU that this bench
    would count as the run's.

    After the block: `cpu_seconds`, `peak` (bytes), `sizes` (how often the tree had each number
    of processes) and, given a `namer`, `by_name()`."""

    def __init__(self, root: int | None = None, every: float = 0.2, namer: Namer | None = None):
        self.root, self.every, self.namer = root, every, namer
        self.peak = 0
        self.cpu_seconds = 0.0
        self.sizes: Counter[int] = Counter()
        self.names: dict[Key, str] = {}
        self._cpu_seen: dict[Key, float] = {}
        self._stop = threading.Event()

    def __enter__(self) -> ProcessTree:
        _, self._cpu_before = self._read()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._cpu_seen.update(self._read()[1])
        self.cpu_seconds = sum(self._spent().values())

    def by_name(self) -> dict[str, list[float]]:
        """CPU seconds of each process, by the name its `namer` gave it."""
        names: dict[str, list[float]] = {}
        for key, cpu in self._spent().items():
            names.setdefault(self.names.get(key, ""), []).append(round(cpu, 1))
        return names

    def _spent(self) -> dict[Key, float]:
        return {k: cpu - self._cpu_before.get(k, 0.0) for k, cpu in self._cpu_seen.items()}

    def _sample(self) -> None:
        while not self._stop.is_set():
            rss, cpu = self._read()
            self.peak = max(self.peak, rss)
            self._cpu_seen.update(cpu)
            self._stop.wait(self.every)

    def _read(self) -> tuple[int, dict[Key, float]]:
        """The tree's summed resident memory and each process's CPU seconds, in one walk of it;
        nothing once the root has ended."""
        try:
            top = psutil.Process(self.root)
            tree = [top, *top.children(recursive=True)]
        except psutil.Error:
            return 0, {}
        self.sizes[len(tree)] += 1
        rss, cpu = 0, {}
        for proc in tree:
            try:
                with proc.oneshot():
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    key = (proc.pid, proc.create_time())
                if self.namer is not None:
                    self.names[key] = self.namer(proc, self.names.get(key, ""))
            except psutil.Error:
                continue
            cpu[key] = times.user + times.system
        return rss, cpu
