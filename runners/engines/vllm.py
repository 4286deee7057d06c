"""vLLM's CPU build serving a tiny Llama (runners/vllm) as a managed engine: `run --bundled
vllm`, its venv and model made on first start, at most the device's running requests."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

from runners.engines.base import ManagedEngine, Say
from runners.lifecycle import ManagedServer
from runners.profiles import DeviceProfile
from runners.vllm import server


@dataclass(frozen=True, slots=True)
class VllmOptions:
    """vLLM takes no `run` flags of its own: its server is sized by the device alone."""


class Vllm(ManagedEngine[VllmOptions]):
    name = server.MARK
    help = ("vLLM's CPU build serving a tiny Llama (its own venv, .venv-vllm, and model, "
            "results/models/, made on first use)")
    title = "vLLM"

    def options(self, args: argparse.Namespace) -> VllmOptions:
        return VllmOptions()

    def server_args(self, options: VllmOptions, device: DeviceProfile) -> tuple[str, ...]:
        return server.server_args(device.max_running_requests)

    def serve(self, server_args: Sequence[str],
              say: Say) -> contextlib.AbstractContextManager[ManagedServer]:
        return server.vllm_server(server_args, say)


ENGINE = Vllm()
