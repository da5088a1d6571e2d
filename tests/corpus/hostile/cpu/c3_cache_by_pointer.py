r"""Class 3: an honest C++ kernel behind a cache keyed by the inputs' data pointers.

Every trial has fresh buffers, so trials usually pass; the timed calls reuse buffers, which the judge refills
with other data before each call, so the cached answers are wrong there. A trial's fresh buffer can land at the
address of an earlier trial's freed one (the allocator reuses it), and then the cache answers that trial wrongly:
caught one stage sooner, the same verdict.

expect: incorrect
task: cross_entropy
diagnosis: timed call \d+ returned a wrong result|\d+ of \d+ trials failed
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += (double)m + std::log(s) - (double)row[tp[r]];
    }
    return torch::full({}, (float)(total / (double)rows), x.options());
}
"""

ce_ext = load_inline(name="cross_entropy_cached", cpp_sources=cpp_source, functions=["cross_entropy_forward"],
                     extra_cflags=["-O2"], verbose=False)


_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        # Correct the first time it sees a buffer; afterwards the cached answer, however the data changed.
        key = (predictions.data_ptr(), targets.data_ptr(), tuple(predictions.shape))
        if key not in _cache:
            _cache[key] = ce_ext.cross_entropy_forward(predictions, targets)
        return _cache[key].clone()
