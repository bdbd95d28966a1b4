import factory
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from tfplatform.accounts.models import Team, User
from tfplatform.cluster.discovery import emulated_gpu_uuid
from tfplatform.cluster.models import Device, Node
from tfplatform.datasets.models import Dataset
from tfplatform.experiments.models import Environment, Experiment, Metric
from tfplatform.modelregistry.models import ModelLabel, ModelVersion, RegisteredModel
from tfplatform.notifications.models import Subscription
from tfplatform.searches.models import Search

PASSWORD = "correct-horse-battery-staple"
HASHED_PASSWORD = make_password(PASSWORD)


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"team-{n}")
    gpu_quota = 4


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")
    password = HASHED_PASSWORD
    team = None


class EnvironmentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Environment
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"env-{n}")
    image = "tensorflow/tensorflow:2.21.0"
    tensorflow_version = "2.21.0"
    gpu_capable = False


class ExperimentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Experiment

    owner = factory.SubFactory(UserFactory)
    team = factory.LazyAttribute(lambda o: o.owner.team)
    name = factory.Sequence(lambda n: f"experiment-{n}")
    model = "mlp"
    dataset = "digits"
    hyperparameters = factory.LazyFunction(
        lambda: {"epochs": 2, "batch_size": 32, "learning_rate": 0.01}
    )


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    hostname = factory.Sequence(lambda n: f"node-{n}")
    queue = factory.LazyAttribute(lambda o: f"node.{o.hostname}")
    state = Node.State.READY
    cpu_count = 2
    last_heartbeat = factory.LazyFunction(timezone.now)
    trial_runtime = Node.TrialRuntime.SANDBOX

    class Params:
        # A development node: trials run as plain processes, without isolation.
        unisolated = factory.Trait(trial_runtime=Node.TrialRuntime.PROCESS)


class DeviceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Device

    node = factory.SubFactory(NodeFactory)
    kind = Device.Kind.GPU
    index = factory.Sequence(lambda n: n)
    name = "emulated accelerator slot"
    emulated = True
    uuid = factory.LazyAttribute(
        lambda o: emulated_gpu_uuid(hostname=o.node.hostname, index=o.index)
        if o.kind == Device.Kind.GPU else ""
    )


def node_with_gpus(*, gpus: int) -> Node:
    """A node with `gpus` GPU slots and one CPU slot."""
    node = NodeFactory()
    for index in range(gpus):
        DeviceFactory(node=node, kind=Device.Kind.GPU, index=index)
    DeviceFactory(node=node, kind=Device.Kind.CPU, index=0)
    return node


class TrialFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = "experiments.Trial"

    experiment = factory.SubFactory(ExperimentFactory)
    restart_count = factory.Sequence(lambda n: n)


class MetricFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Metric

    trial = factory.SubFactory(TrialFactory)
    name = "loss"
    step = factory.Sequence(lambda n: n)
    value = factory.Sequence(lambda n: 1.0 / (n + 1))
    recorded_at = factory.LazyFunction(timezone.now)


class RegisteredModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RegisteredModel

    name = factory.Sequence(lambda n: f"model-{n}")
    owner = factory.SubFactory(UserFactory)


class ModelLabelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelLabel

    model = factory.SelfAttribute("version.model")
    version = factory.SubFactory("tests.factories.ModelVersionFactory")
    label = ModelLabel.Name.STABLE


class ModelVersionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ModelVersion

    model = factory.SubFactory(RegisteredModelFactory)
    version = factory.Sequence(lambda n: n + 1)
    path = factory.LazyAttribute(lambda o: f"/models/{o.model.name}/{o.version}")
    state = ModelVersion.State.AVAILABLE


class DatasetFactory(factory.django.DjangoModelFactory):
    """A registration as the service stores it; the folder need not exist unless read."""

    class Meta:
        model = Dataset

    owner = factory.SubFactory(UserFactory)
    team = factory.LazyAttribute(lambda o: o.owner.team)
    name = factory.Sequence(lambda n: f"shards-{n}")
    format = "parquet"
    train_uri = "/srv/data/train"
    validation_uri = "/srv/data/validation"
    features = factory.LazyFunction(lambda: {"pixels": {"dtype": "float32", "shape": [64]}})
    feature_order = factory.LazyFunction(lambda: ["pixels"])
    label = "label"
    label_spec = factory.LazyFunction(lambda: {"dtype": "int64", "shape": []})
    train_examples = 100
    validation_examples = 20
    num_classes = 10
    size_bytes = 4096


class SubscriptionFactory(factory.django.DjangoModelFactory):
    """By email, to the owner's address: no webhook address to resolve."""

    class Meta:
        model = Subscription

    owner = factory.SubFactory(UserFactory, email=factory.LazyAttribute(
        lambda o: f"{o.username}@example.com"))
    events = factory.LazyFunction(lambda: ["experiment.failed"])
    email = True


class SearchFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Search

    owner = factory.SubFactory(UserFactory)
    team = factory.LazyAttribute(lambda o: o.owner.team)
    name = factory.Sequence(lambda n: f"search-{n}")
    searcher = Search.Searcher.RANDOM
    space = factory.LazyFunction(
        lambda: {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}})
    max_trials = 4
    max_concurrent = 2
    max_epochs = 2
    model = "mlp"
    dataset = "digits"
