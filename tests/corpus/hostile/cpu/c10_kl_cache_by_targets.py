r"""Class 10: an honest kernel behind a cache keyed by the targets (issue 25, the dependence check).

Reading the targets (or a hash of them) and returning an answer remembered for them saves the predictions'
half of the work whenever targets repeat. No two trials or timed calls used to share an input, so the cache
never hit and the kernel was judged correct; now each planted trial has a partner with the same targets and
fresh predictions (Task.paired_distributions, sandbox/execution/phases.py), and the cached answer is wrong for it.

expect: incorrect
task: kl_div
diagnosis: trials failed \(planted
"""
import hashlib

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
torch::Tensor kl_sum(torch::Tensor p, torch::Tensor t) {
    auto pc = p.contiguous(), tc = t.contiguous();
    const float *pp = pc.data_ptr<float>(), *tp = tc.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < pc.numel(); ++i)
        if (tp[i] > 0.0f) total += (double)tp[i] * (std::log((double)tp[i]) - std::log((double)pp[i]));
    return torch::full({}, (float)(total / (double)pc.size(0)), pc.options());
}
"""
ext = load_inline(name="kl_cache_by_targets", cpp_sources=cpp, functions=["kl_sum"], verbose=False)
_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        key = hashlib.sha256(targets.contiguous().numpy().tobytes()).hexdigest()
        if key not in _cache:
            _cache[key] = ext.kl_sum(predictions, targets)
        return _cache[key].clone()
