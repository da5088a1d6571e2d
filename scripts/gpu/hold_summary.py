"""Where candidates' device holds went, from gpu_acceptance runs (repeats.json, verdicts.json): ranked medians, holds, the
device gate's waits, the timing stage and the spare's pre-calibration per repeat, and each first judging's unattributed span.

    python3 scripts/gpu/hold_summary.py OUT_A [OUT_B ...]
"""
import json, sys, statistics
for d in sys.argv[1:]:
    r = json.load(open(f"{d}/repeats.json")); v = json.load(open(f"{d}/verdicts.json"))
    for f, m in r.items():
        gw = [s.get("device_gate_wait", 0) for s in m["stages"]]
        print(d.split("/")[-1], f, "median", [round(x, 4) for x in m["median_ms"]], "held", [round(x, 2) for x in m["held_s"]],
              "gate", [round(x, 2) for x in gw], "timing", [round(s.get("timing", 0), 2) for s in m["stages"]],
              "precal", [round(s.get("pre_calibration", 0), 2) for s in m["stages"]])
    for k, x in v.items():
        t = x["details"].get("timing", {})
        print("  first", k.split("/")[-1], x["status"], "unattr", [round(a, 4) for a in t.get("unattributed_ms", [])][:8], "batches", t.get("timed_batches"))
