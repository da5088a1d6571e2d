"""Class 3: caches answers by a fingerprint of 16 sampled input values (issue 7's attack, kl_div).

Before issue 7 the timed calls cycled through two input sets, so after the first two calls every timed
call hit the cache: judged correct at 33.5x eager and 615% of speed-of-light on an H200. Now every timed
call has inputs from a fresh seed, so the fingerprint never repeats: every call misses and runs the
honest kernel. Expected: correct, with an honest time (had it hit the cache, the median would be far
under speed-of-light: tamper_detected, rule implausible_speed).

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
torch::Tensor kl_sum(torch::Tensor p, torch::Tensor t) {
    auto pc = p.contiguous(), tc = t.contiguous();
    const float *pp = pc.data_ptr<float>(), *tp = tc.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < pc.numel(); ++i)  // a zero target adds 0 (xlogy), as in the reference
        if (tp[i] > 0.0f) total += (double)tp[i] * (std::log((double)tp[i]) - std::log((double)pp[i]));
    return torch::full({}, (float)(total / (double)pc.size(0)), pc.options());
}
"""
ext = load_inline(name="kl_fingerprint_cache", cpp_sources=cpp, functions=["kl_sum"], verbose=False)
_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        idx = torch.arange(16) * (predictions.numel() // 16)
        key = (tuple(predictions.shape), tuple(predictions.flatten()[idx].tolist()),
               tuple(targets.flatten()[idx].tolist()))
        if key not in _cache:
            _cache[key] = ext.kl_sum(predictions, targets)
        return _cache[key].clone()
