"""Class 8: reads secrets and other submissions: /etc/shadow, host /proc/1/environ, the repo, builds.

expect: runtime_error
task: cross_entropy
diagnosis: contained: nothing readable
"""
import glob
import os

import torch.nn as nn

TARGETS = ["/etc/shadow", "/root/.bash_history", "/root/.pyenv/version", "/work/main/pyproject.toml",
           "/work/main/.git/config", "/work/main/data", "/home", "/var/lib/postgresql", "/run/postgresql"]


def probe():
    leaked = []
    for path in TARGETS:
        try:
            if os.path.isdir(path):
                if os.listdir(path):
                    leaked.append(path)
            else:
                with open(path, "rb") as fh:
                    fh.read(1)
                leaked.append(path)
        except OSError:
            pass
    try:
        with open("/proc/1/environ", "rb") as fh:
            env = fh.read()
        if b"DATABASE_URL" in env or b"HOME=/root" in env:
            leaked.append("/proc/1/environ")
    except OSError:
        pass
    for pattern in ("/build/../*", "/**/*.db", "/**/judge*.sqlite*"):
        for hit in glob.glob(pattern, recursive=False):
            if hit.endswith((".db", ".sqlite", ".sqlite3")):
                leaked.append(hit)
    return leaked


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        leaked = probe()
        if leaked:
            raise RuntimeError(f"ESCAPED: read {leaked}")
        raise RuntimeError("contained: nothing readable outside the sandbox")
