"""Describe the machine a verdict was measured on: GPU, driver, clocks, torch and CUDA versions."""

from __future__ import annotations

import functools
import platform
import socket
import subprocess

import torch

from sandbox.verdict import Environment

_SMI_FIELDS = ("name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks.max.mem",
               "power.limit", "temperature.gpu")


def _nvidia_smi(index: int) -> dict[str, str]:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--id={index}", f"--query-gpu={','.join(_SMI_FIELDS)}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.split(",")]
    return dict(zip(_SMI_FIELDS, values)) if len(values) == len(_SMI_FIELDS) else {}


@functools.cache
def device_name(device: str) -> str:
    """A stable name for the device model: baselines and leaderboards are kept per model."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return f"cpu:{platform.processor() or platform.machine()}"


def describe(device: str, isolation: str) -> Environment:
    dev = torch.device(device)
    env = Environment(
        device=device,
        device_name=device_name(device),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        python=platform.python_version(),
        isolation=isolation,
        hostname=socket.gethostname(),
    )
    if dev.type == "cuda":
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        smi = _nvidia_smi(index)
        env.compute_capability = f"{major}.{minor}"
        env.driver = smi.get("driver_version")
        env.clocks = {k: v for k, v in smi.items() if k not in ("name", "driver_version")}
    return env
