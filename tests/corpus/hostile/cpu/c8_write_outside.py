"""Class 8: writes outside its build directory (the repo, /usr, /etc, the service's data dir).

expect: runtime_error
task: kl_div
diagnosis: contained: no write
"""
import torch.nn as nn

TARGETS = ["/usr/lib/pwned", "/etc/pwned", "/judge/sandbox/pwned.py", "/work/main/data/pwned", "/root/pwned"]


def probe():
    written = []
    for path in TARGETS:
        try:
            with open(path, "w") as fh:
                fh.write("x")
            written.append(path)
        except OSError:
            pass
    return written


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        written = probe()
        if written:
            raise RuntimeError(f"ESCAPED: wrote {written}")
        raise RuntimeError("contained: no write outside the build directory succeeded")
