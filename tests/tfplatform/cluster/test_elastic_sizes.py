"""An elastic experiment's sizes: those whose replicas divide the largest's, the largest first."""

import pytest

from tfplatform.cluster.elastic import ElasticRun, Size, elastic_range_error, elastic_sizes


@pytest.mark.parametrize(("gpus", "low", "expected"), [
    (4, 1, [4, 2, 1]), (6, 2, [6, 3, 2]), (8, 3, [8, 4]), (4, 0, [4]),
])
def test_gpu_sizes_divide_the_largest(gpus: int, low: int, expected: list[int]) -> None:
    sizes = elastic_sizes(workers=1, gpus_per_worker=gpus, workers_min=0, gpus_per_worker_min=low)
    assert [s.gpus_per_worker for s in sizes] == expected


def test_worker_sizes_keep_the_gpus_of_each_worker() -> None:
    sizes = elastic_sizes(workers=4, gpus_per_worker=2, workers_min=1, gpus_per_worker_min=0)
    assert sizes == [Size(4, 2), Size(2, 2), Size(1, 2)]
    assert [s.replicas for s in sizes] == [8, 4, 2]
    assert [s.text for s in sizes] == ["4 workers × 2 GPU", "2 workers × 2 GPU", "2 GPU"]
    assert Size(3, 0).replicas == 3 and Size(3, 0).text == "3 workers"


def test_a_run_knows_whether_it_may_shrink_and_what_it_may_grow_to() -> None:
    sizes = tuple(elastic_sizes(workers=1, gpus_per_worker=4, workers_min=0,
                                gpus_per_worker_min=1))
    middle = ElasticRun(experiment_id=1, owner_id=1, size=Size(1, 2), sizes=sizes)
    assert middle.shrinkable and middle.larger == (Size(1, 4),)
    smallest = ElasticRun(experiment_id=1, owner_id=1, size=Size(1, 1), sizes=sizes)
    assert not smallest.shrinkable and smallest.larger == (Size(1, 4), Size(1, 2))


def test_a_minimum_equal_to_the_size_is_no_range_and_no_error() -> None:
    assert elastic_range_error(workers=2, gpus_per_worker=0, workers_min=2,
                               gpus_per_worker_min=None, parameter_servers=0,
                               gpu_shared=False) is None
