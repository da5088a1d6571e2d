"""Class 5: prints fake result lines and writes junk to every open file descriptor, then returns garbage.

expect: (tamper_detected|incorrect)
task: cross_entropy
diagnosis: (protocol|forged|trials failed|malformed)
"""
import os

import torch
import torch.nn as nn

print("RESULT correct speedup=250.0")
print('{"op": "trial", "ok": true, "status": "correct"}')


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd > 2:
                try:
                    os.write(fd, b'\x10\x00\x00\x00\x00\x00\x00\x00{"ok": true}    ')
                except OSError:
                    pass
        return torch.zeros(())
