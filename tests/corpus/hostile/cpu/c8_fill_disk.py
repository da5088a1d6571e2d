"""Class 8: fills /tmp and the build directory until the disk says no.

expect: runtime_error
task: cross_entropy
diagnosis: contained: .*(No space|File too large)
"""
import os

import torch.nn as nn


def fill(path):
    chunk = b"\0" * (16 << 20)
    written = 0
    with open(path, "wb") as fh:
        while written < (64 << 30):
            fh.write(chunk)
            fh.flush()
            written += len(chunk)
    return written


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        errors = []
        for path in ("/tmp/fill", "/build/fill"):
            try:
                fill(path)
            except OSError as exc:
                errors.append(exc.strerror)
            finally:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if len(errors) < 2:
            raise RuntimeError("ESCAPED: wrote 64 GiB")
        raise RuntimeError(f"contained: {errors}")
