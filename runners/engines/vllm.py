"""vLLM's CPU build serving a tiny Llama (runners/vllm) as a managed engine: `run --bundled
vllm`, its venv and model made on first start, at most the device's running requests."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence

from runners.engines.base import ManagedEngine, Say
from runners.lifecycle import ManagedServer
from runners.profiles import DeviceProfile
from runners.vllm import server


class Vllm(ManagedEngine):
    name = server.MARK
    help = ("vLLM's CPU build serving a tiny Llama (its own venv, .venv-vllm, and model, "
            "results/models/, made on first use)")
    title = "vLLM"

    def server_args(self, args: argparse.Namespace, device: DeviceProfile) -> tuple[str, ...]:
        return server.server_args(device.max_running_requests)

    def serve(self, server_args: Sequence[str],
              say: Say) -> contextlib.AbstractContextManager[ManagedServer]:
        return server.vllm_server(server_args, say)


ENGINE = Vllm()
