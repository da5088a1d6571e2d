"""Class 4: returns at once and finishes the work on a background thread.

expect: tamper_detected
task: kl_div
diagnosis: Python thread
"""
import threading

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        out = torch.zeros(())

        def work():
            out.copy_((targets * (targets.log() - predictions.log())).sum() / predictions.shape[0])
            threading.Event().wait(5)

        threading.Thread(target=work, daemon=True).start()
        return out
