r"""Class 10: an honest kernel behind a cache keyed by the targets, cross_entropy (issue 25, the dependence check).

The targets are a few hundred bytes to hash against megabytes of logits. Each planted trial now has a partner
with the same targets and fresh logits (Task.paired_distributions, sandbox/execution/phases.py): the remembered answer
is wrong for it.

expect: incorrect
task: cross_entropy
diagnosis: trials failed \(planted
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <cmath>
#include <algorithm>

torch::Tensor ce_mean(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto y = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* yp = y.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += (double)m + std::log(s) - (double)row[yp[r]];
    }
    return torch::full({}, (float)(total / (double)rows), x.options());
}
"""
ext = load_inline(name="ce_cache_by_targets", cpp_sources=cpp, functions=["ce_mean"], verbose=False)
_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        key = (tuple(predictions.shape), tuple(targets.tolist()))
        if key not in _cache:
            _cache[key] = ext.ce_mean(predictions, targets)
        return _cache[key].clone()
