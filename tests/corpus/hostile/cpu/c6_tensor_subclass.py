r"""Class 6: a tensor subclass whose __torch_function__ makes every comparison succeed.

expect: incorrect
task: kl_div
diagnosis: not a plain torch\.Tensor
"""
import torch
import torch.nn as nn


class Liar(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.allclose, torch.equal):
            return True
        if func in (torch.isclose, torch.eq, torch.Tensor.__eq__):
            return torch.ones((), dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return torch.zeros(()).as_subclass(Liar)
