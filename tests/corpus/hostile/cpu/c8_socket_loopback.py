"""Class 8: connects to the service's database and API ports on loopback; says what it reached.

The sandbox has its own network namespace, so every connection fails: the verdict reports "contained".

expect: runtime_error
task: kl_div
diagnosis: contained: no connection
"""
import socket

import torch.nn as nn


def probe():
    reached = []
    for port in (5432, 8000, 6379, 3306):
        s = socket.socket()
        s.settimeout(1.0)
        try:
            s.connect(("127.0.0.1", port))
            reached.append(port)
        except OSError:
            pass
        finally:
            s.close()
    return reached


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        reached = probe()
        if reached:
            raise RuntimeError(f"ESCAPED: connected to ports {reached}")
        raise RuntimeError("contained: no connection to any loopback port")
