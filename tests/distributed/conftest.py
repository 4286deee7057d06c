"""A Ray cluster of two nodes on this machine (Ray's own multi-node test setup, each node its
own raylet and worker processes), shared by the module's tests and shut down after them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

NODE_CPUS = 2  # per node: each load worker an actor of one CPU, spread over both nodes


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    cluster_utils = pytest.importorskip(
        "ray.cluster_utils", reason="Ray is not installed here: make test-distributed installs it")
    cluster = cluster_utils.Cluster(initialize_head=True, head_node_args={"num_cpus": NODE_CPUS})
    cluster.add_node(num_cpus=NODE_CPUS)
    cluster.wait_for_nodes()
    yield cluster.address
    cluster.shutdown()
