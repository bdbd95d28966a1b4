"""A worker's share of one GPU, as the task host applies it before user code runs: the plan's
memory limit, TensorFlow's configuration calls, and MPS's environment where the node runs it.
Unit-tested everywhere; on a real GPU the limit is TensorFlow's own (LogicalDeviceConfiguration
with memory_limit: its allocator never takes more on that GPU)."""

from dataclasses import asdict, dataclass, field
from typing import Any

from training.spec import Resources
from training.supervisor.supervise import gpu_share_environment
from training.trial.strategy import gpu_memory_configure, strategy_plan

SHARE = Resources(gpus_per_worker=1, gpu_share_milli=250, gpu_memory_limit_mb=4096)


@dataclass
class ConfigCalls:
    """What a `tf.config` is asked: the calls and their arguments, in order."""

    calls: list[tuple[str, Any, Any]] = field(default_factory=list)

    @dataclass(frozen=True)
    class LogicalDeviceConfiguration:
        memory_limit: int | None = None

    def set_logical_device_configuration(self, device: Any, configs: Any) -> None:
        self.calls.append(("logical", device, configs))

    @property
    def experimental(self) -> "ConfigCalls":
        return self

    def set_memory_growth(self, device: Any, enable: bool) -> None:
        self.calls.append(("growth", device, enable))


def test_a_share_on_a_real_gpu_plans_one_device_with_the_memory_limit() -> None:
    plan = strategy_plan(resources=SHARE, physical_gpus=1)
    assert (plan.name, plan.devices_per_worker, plan.memory_limit_mb) == (
        "OneDeviceStrategy", 1, 4096)
    assert plan.reason.endswith("; 0.25 of one GPU, TensorFlow limited to 4096 MB of its memory")


def test_a_share_without_a_physical_gpu_or_known_memory_is_not_bounded_and_says_so() -> None:
    plan = strategy_plan(resources=SHARE, physical_gpus=0)
    assert plan.memory_limit_mb == 0 and plan.emulated
    assert plan.reason.endswith("(its memory is not bounded: no physical GPU)")
    unknown = Resources(gpus_per_worker=1, gpu_share_milli=250)
    plan = strategy_plan(resources=unknown, physical_gpus=1)
    assert plan.memory_limit_mb == 0 and plan.reason.endswith("not bounded: unknown)")


def test_whole_gpus_plan_no_limit() -> None:
    plan = strategy_plan(resources=Resources(gpus_per_worker=2), physical_gpus=2)
    assert plan.memory_limit_mb == 0


def test_the_limit_replaces_memory_growth_on_each_visible_gpu() -> None:
    config = ConfigCalls()
    gpu_memory_configure(config=config, gpus=["gpu0"], limit_mb=4096)
    assert config.calls == [
        ("logical", "gpu0", [ConfigCalls.LogicalDeviceConfiguration(memory_limit=4096)])]
    config = ConfigCalls()
    gpu_memory_configure(config=config, gpus=["gpu0", "gpu1"], limit_mb=0)
    assert config.calls == [("growth", "gpu0", True), ("growth", "gpu1", True)]


def test_mps_bounds_the_share_where_the_node_runs_it() -> None:
    assert gpu_share_environment(resources=SHARE) == {}
    with_mps = Resources(gpus_per_worker=1, gpu_share_milli=250, gpu_memory_limit_mb=4096,
                         gpu_mps=True)
    assert gpu_share_environment(resources=with_mps) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M",
    }
    whole = Resources(gpus_per_worker=1, gpu_mps=True)
    assert gpu_share_environment(resources=whole) == {}


def test_resources_travel_with_the_share() -> None:
    assert Resources.from_dict(asdict(SHARE)) == SHARE
