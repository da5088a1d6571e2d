r"""Hostile: at import, writes a frame that is not the judge's on every pipe it inherited, then ends the process.

In the build stage the import runs in the build child, whose one message to the parent is written on such a pipe:
the parent reads this frame instead. It is the candidate's doing, so it is the candidate's verdict (compile_error,
rule "protocol"), stored like any build outcome; it used to be a system_error "the build failed for reasons of the
judge's", retried, as if the host had failed.

expect: compile_error
task: kl_div
diagnosis: result channel carried a message that is not the judge's
"""
import os
import stat
import struct

for entry in os.listdir("/proc/self/fd"):
    fd = int(entry)
    if fd > 2:
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, struct.pack("<Q", 9) + b"not json!")
        except OSError:
            pass
os._exit(0)


import torch.nn as nn  # noqa: E402 - never reached: the module ends the process above


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
