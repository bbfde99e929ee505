"""Task streams for continual learning, and time-stamped online streams."""

from pyro_cl.data.cifar import load_cifar10, load_cifar100, split_cifar, split_cifar10
from pyro_cl.data.class_streams import (
    class_tasks,
    generative_digits,
    generative_mnist,
    generative_notmnist,
)
from pyro_cl.data.digits import permuted_digits, split_digits
from pyro_cl.data.domain_graph import (
    metadata_graph,
    spanning_order,
    transfer_path,
    transport_costs,
)
from pyro_cl.data.drift_data import (
    DriftTable,
    load_covertype,
    load_drift_table,
    load_elec2,
    load_gas_sensor,
    load_weather,
)
from pyro_cl.data.geodesic import geodesic_domains, transport_plan
from pyro_cl.data.mnist import load_mnist, permuted_mnist, split_mnist
from pyro_cl.data.notmnist import load_notmnist, split_notmnist
from pyro_cl.data.streams import (
    OnlineStream,
    TimeStep,
    batched_stream,
    batches_by_time,
    drift_stream,
    online_stream,
    rotating_logistic_stream,
    rotating_weights,
    two_moons_stream,
)
from pyro_cl.data.tasks import Task, TaskStream, permuted_tasks, split_tasks
from pyro_cl.data.toy import toy_2d_stream
from pyro_cl.data.uci import load_spambase, load_uci, load_wine

__all__ = [
    "class_tasks",
    "geodesic_domains",
    "metadata_graph",
    "spanning_order",
    "transfer_path",
    "transport_costs",
    "transport_plan",
    "generative_digits",
    "generative_mnist",
    "generative_notmnist",
    "DriftTable",
    "OnlineStream",
    "Task",
    "TaskStream",
    "TimeStep",
    "batched_stream",
    "batches_by_time",
    "drift_stream",
    "load_covertype",
    "load_drift_table",
    "load_elec2",
    "load_gas_sensor",
    "load_weather",
    "rotating_logistic_stream",
    "rotating_weights",
    "load_spambase",
    "load_uci",
    "load_wine",
    "online_stream",
    "two_moons_stream",
    "load_cifar10",
    "load_cifar100",
    "load_mnist",
    "load_notmnist",
    "permuted_digits",
    "permuted_mnist",
    "permuted_tasks",
    "split_cifar",
    "split_cifar10",
    "split_digits",
    "split_mnist",
    "split_notmnist",
    "split_tasks",
    "toy_2d_stream",
]
