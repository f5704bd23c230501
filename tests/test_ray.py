"""The Ray executor end to end, once: same shards as the in-process executor."""

from __future__ import annotations

import pytest
from conftest import BIKES, local_config

from core.shards import read_clips
from pipeline.ip import load_ip
from pipeline.runner import run_film


@pytest.mark.slow
def test_ray_executor_matches_local(tmp_path, bikes_dataset):
    import ray

    config = local_config(run__executor="ray", run__num_cpus=2, run__segment_seconds=4)
    try:
        result = run_film(BIKES, tmp_path, config, load_ip(None))
    finally:
        ray.shutdown()
    assert result.ok, result.message
    assert result.summary.segments == 2
    ray_clips = list(read_clips(result.film_dir))
    local_clips = list(read_clips(bikes_dataset))
    # segment boundaries are forced scene boundaries, so compare only clips far from them
    boundary = result.summary.segment_boundaries[0]
    far = [c for c in local_clips if c.end_frame <= boundary or c.start_frame >= boundary + 50]
    by_id = {c.clip_id: c for c in ray_clips}
    assert far, "bikes.mp4 should have clips away from the boundary"
    for clip in far:
        assert clip.clip_id in by_id
        assert by_id[clip.clip_id].video == clip.video
