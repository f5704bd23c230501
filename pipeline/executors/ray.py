"""Ray: the executor of Ray tasks (`RayExecutor`), its start-up (an embedded local Ray, or a
cluster joined at RAY_ADDRESS), and a batched stage on Ray actors (`StageActorPool`). The only
module that imports Ray (on first use: importing it costs seconds)."""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from core.resources import Resources
from pipeline.executors.base import ONE_CPU, JobFn
from pipeline.executors.checkout import project_root, this_checkout_first
from pipeline.executors.cpus import cpu_cap
from pipeline.executors.jobs import ignore_report, make_bar, map_jobs, placed, reports_in_batches

if TYPE_CHECKING:
    from stages.base import ClipStage

log = logging.getLogger(__name__)


RAY_TOKEN_WARNING_LOGGER = "ray._private.authentication.authentication_token_setup"


class RayExecutor:
    """Ray tasks, placed by their declared resources. With RAY_ADDRESS set, joins that cluster;
    otherwise starts a local Ray (the embedded default) the first time it is used."""

    name = "ray"

    def __init__(self, num_cpus: int | None = None, progress: bool = True):
        self.num_cpus = num_cpus
        self.progress = progress
        self._counter: Any = None  # the progress counter actor of the current run
        self._bar: tqdm | None = None
        self._remote: dict[Resources, Any] = {}

    def start(self) -> None:
        self._ray()

    def close(self) -> None:
        """Shut down this process's Ray connection (and the embedded Ray it started)."""
        import ray

        ray.shutdown()
        self._remote.clear()  # remote functions belong to the connection that made them

    def slots(self) -> int:
        """CPUs of the whole cluster: how many one-CPU tasks can run at once."""
        return max(1, int(self._ray().cluster_resources().get("CPU", 1)))

    def shortfall(self, resources: Resources) -> str | None:
        """Why a task asking `resources` could never be placed on this cluster (Ray would wait
        for it forever), or None."""
        cluster = self._ray().cluster_resources()
        if resources.gpus > cluster.get("GPU", 0):
            return f"needs {resources.gpus:g} GPU(s); the Ray cluster has {cluster.get('GPU', 0):g}"
        return None

    def submit(self, fn: JobFn, job: Any, resources: Resources = ONE_CPU) -> Hashable:
        ray = self._ray()
        if resources not in self._remote:
            # A task rewrites its own outputs from scratch, so re-running it after a lost worker
            # is safe; exceptions raised by the job itself are not retried.
            self._remote[resources] = ray.remote(
                num_cpus=resources.cpus, num_gpus=resources.gpus, max_retries=1
            )(_run_with_counter)
        return self._remote[resources].remote(fn, job, self._counter)

    def wait(self, tasks: list[Hashable]) -> list[Hashable]:
        """The tasks that finished: back as soon as one does (its film's next step is submitted
        at once), at the latest after half a second (the progress bar's tick)."""
        ray = self._ray()
        done, _ = ray.wait(list(tasks), num_returns=1, timeout=0.5)
        if done:
            done, _ = ray.wait(list(tasks), num_returns=len(tasks), timeout=0)
        if self._counter is not None and self._bar is not None:
            self._bar.update(ray.get(self._counter.take.remote()))
        return done

    def result(self, task: Hashable) -> Any:
        return _result(self._ray(), task)

    @contextmanager
    def progress_bar(self, desc: str) -> Iterator[tqdm]:
        ray = self._ray()
        # The counter is an actor, so a worker process of its own: only for a bar that is shown.
        self._counter = _progress_counter(ray) if self.progress else None
        with make_bar(0, desc, self.progress) as bar:
            self._bar = bar
            try:
                yield bar
                if self._counter is not None:
                    bar.update(ray.get(self._counter.take.remote()))
            finally:
                if self._counter is not None:
                    ray.kill(self._counter)  # one per run: never leave it idling in a worker
                self._counter, self._bar = None, None

    def map(self, fn: JobFn, jobs: list, total: int, desc: str) -> list:
        return map_jobs(self, fn, jobs, total, desc)

    def _ray(self):
        return init_ray(self.num_cpus)


def init_ray(num_cpus: int | None = None):
    """Connect to RAY_ADDRESS if set, else start the embedded local Ray (once per process)."""
    import ray

    if not ray.is_initialized():
        # Ray warns on every start that it enabled token authentication by default: nothing for
        # the user to do (a cluster's own token is still used), so not worth a line in each run.
        logging.getLogger(RAY_TOKEN_WARNING_LOGGER).setLevel(logging.ERROR)
        address = os.environ.get("RAY_ADDRESS")
        began = time.perf_counter()
        if address:
            _join_cluster(ray, address)
        else:
            _start_embedded(ray, num_cpus)
        log.info(
            "ray started in %.1f s (%s)",
            time.perf_counter() - began,
            address or "embedded local cluster",
        )
    return ray


def _join_cluster(ray, address: str) -> None:
    """A cluster's workers were started by `ray start` on other machines, with environments of
    their own: the runtime_env tells them where this project's code is."""
    ray.init(
        address=address,
        include_dashboard=False,
        logging_level=logging.WARNING,
        log_to_driver=True,
        runtime_env={"env_vars": {"PYTHONPATH": project_root()}},
    )


def _start_embedded(ray, num_cpus: int | None) -> None:
    """Ray's processes on this machine are this process's children and inherit its environment
    and CPU affinity: so no runtime_env (one would give the tasks a second worker pool, started
    after the first, its own imports paid again), and `num_cpus` pins them to that many cores."""
    with _children_inherit(num_cpus):
        ray.init(
            # "local", not None: given None, Ray joins whatever cluster its address file names,
            # and a `ray start` cluster that died without `ray stop` leaves that file behind
            # (ray.init then waits forever on the dead address).
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=True,
        )


@contextmanager
def _children_inherit(num_cpus: int | None) -> Iterator[None]:
    """While Ray starts its processes: this project's root first on PYTHONPATH (the workers
    import the same code as the driver, whatever else is installed), workers at this process's
    niceness rather than Ray's default 15 (unless RAY_worker_niceness says otherwise: the
    embedded Ray stands in for this process, which a busy machine would not slow down by
    itself), and this thread held to `num_cpus` cores (processes it starts inherit that mask).
    All restored afterwards. RAY_worker_niceness is an increment over the raylet's niceness, which
    is this process's (the raylet is its child): 0 keeps the workers at it (given this process's
    own niceness, a driver at 5 had its workers at 10)."""
    niceness = os.environ.get("RAY_worker_niceness", "0")
    with this_checkout_first({"RAY_worker_niceness": niceness}), cpu_cap(num_cpus):
        yield


def _run_with_counter(fn, job, counter):
    import ray

    with reports_in_batches(counter.add.remote if counter is not None else ignore_report) as report:
        return placed(fn(job, report), ray.get_runtime_context().get_node_id())


def _progress_counter(ray):
    @ray.remote(num_cpus=0)
    class ProgressCounter:
        def __init__(self):
            self.count = 0

        def add(self, n: int) -> None:
            self.count += n

        def take(self) -> int:
            taken, self.count = self.count, 0
            return taken

    return ProgressCounter.remote()


def _result(ray, future):
    try:
        return ray.get(future)
    except Exception as exc:  # a task's own exception arrives wrapped; unwrap for the caller
        cause = getattr(exc, "cause", None)
        return cause if isinstance(cause, Exception) else exc


class StageActorPool:
    """A batched stage on Ray actors: one actor per replica (a loaded model), each placed with the
    stage's declared `resources`. Batches go to whichever actor is free; results come back in
    submission order, each with the batch it answers."""

    def __init__(self, stage: ClipStage, workers: int | None):
        ray = init_ray()
        self.ray, self.stage = ray, stage
        resources = stage.resources
        count = workers or _replicas_that_fit(ray, resources)
        if resources.gpus and count * resources.gpus > ray.cluster_resources().get("GPU", 0):
            raise RuntimeError(
                f"{stage.name}: {count} replicas x {resources.gpus} GPU(s) do not fit "
                f"the cluster's {ray.cluster_resources().get('GPU', 0)} GPU(s)"
            )
        actor_class = ray.remote(num_cpus=resources.cpus, num_gpus=resources.gpus)(_StageActor)
        self.actors = [actor_class.remote(stage) for _ in range(count)]
        try:
            ray.get([a.ready.remote() for a in self.actors])  # load errors surface here
        except ray.exceptions.RayError as exc:
            self.close()
            cause = getattr(exc, "cause", None) or exc
            raise RuntimeError(f"{stage.name}: a replica failed to start: {cause}") from None
        log.info("%s: %d Ray actor(s), %s GPU(s) each", stage.name, count, resources.gpus)

    def map(self, batches):
        free, in_flight, results, next_out = list(self.actors), {}, {}, 0
        for index, batch in enumerate(batches):
            if not free:
                next_out = yield from self._drain_one(in_flight, free, results, batches, next_out)
            actor = free.pop()
            in_flight[actor.process_batch.remote(batch)] = (index, actor)
        while in_flight:
            next_out = yield from self._drain_one(in_flight, free, results, batches, next_out)

    def _drain_one(self, in_flight, free, results, batches, next_out):
        [ref], _ = self.ray.wait(list(in_flight), num_returns=1)
        index, actor = in_flight.pop(ref)
        results[index] = self.ray.get(ref)
        free.append(actor)
        while next_out in results:  # hand results out in batch order
            yield batches[next_out], results.pop(next_out)
            next_out += 1
        return next_out

    def take_stats(self) -> Counter[str]:
        """The stage's counts since the last call, summed over the actors."""
        total: Counter[str] = Counter()
        for stats in self.ray.get([a.stats.remote() for a in self.actors]):
            total.update(stats)
        return total

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)


class _StageActor:
    def __init__(self, stage: ClipStage):
        self.stage = stage
        self.stage.setup()

    def ready(self) -> bool:
        return True

    def process_batch(self, clips: list) -> list:
        return self.stage.process_batch(clips)

    def stats(self) -> Counter[str]:
        return self.stage.take_stats()


def _replicas_that_fit(ray, resources) -> int:
    available = ray.cluster_resources()
    if resources.gpus:
        gpus = int(available.get("GPU", 0) // resources.gpus)
        if gpus < 1:
            raise RuntimeError(
                f"the stage needs {resources.gpus} GPU(s) per replica; "
                f"the Ray cluster has {available.get('GPU', 0)}"
            )
        return gpus
    return 1
