"""kl_div in C++ whose build flags are computed at run time (a time stamp), and which falls back to PyTorch
when its extension cannot be loaded: the execution child asks for a build the build stage never made.

It must be a compile_error that says so, from the load step and without compiling (issue 24): the fallback
must not turn the refused build into a different verdict.
"""
import time

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i) {
        if (tp[i] > 0.0f) total += (double)tp[i] * (double)(std::log(tp[i]) - std::log(pp[i]));
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""

try:
    kl_ext = load_inline(name="kl_div_stamped", cpp_sources=cpp_source, functions=["kl_div_forward"],
                         extra_cflags=["-O2", f"-DBUILT_AT={time.time_ns()}"], verbose=False)
except Exception:  # noqa: BLE001 - the model's "robust" fallback
    kl_ext = None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        if kl_ext is None:
            return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
        return kl_ext.kl_div_forward(predictions, targets)
