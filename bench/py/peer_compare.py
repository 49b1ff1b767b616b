"""Pairs hyper's and PyTorch's sides of the peer benchmark into bench_report rows.

bench/torch_peer_bench (hyper) and bench/py/torch_peer.py (PyTorch 2.x) run the same cases and
write the same JSON ({"side", "suite", "ranks", "mib", "cases": [{"id", "s", "times", "bytes",
"bytes_lower_bound", "peak_rss_mib"?}]}). scripts/bench.sh runs the two sides alternately,
several rounds each; this script takes, per case, the median over every timed call of every
round of each side, and writes one result file in bench_report's format (bench/bench_util.h):
ours = hyper, baseline = PyTorch, ratio = hyper / PyTorch.

  python bench/py/peer_compare.py --out FILE --hyper A.json [B.json ...] --torch C.json [...]

Targets: uneven redistributions <= 0.7, even ones <= 1.05, checkpoint save and load <= 0.8 with
peak RSS no higher (within 1 MiB of measurement noise); the functional collectives (the floor)
and the overlap suite are reported only (its concurrent row also carries, per side, the
wall time overlap saved, concurrent / sequential, and the most it could save), as is the tp
suite (its async rows carry, per side, async / sync: the wall time the asynchronous
collectives save on a training step).
"""
import argparse
import json
import os
import statistics
import sys

# id -> (what is timed, target ratio; 0 = report only)
CASES = {
    "s0_to_r.uneven": ("uneven Shard(0) [13, X] -> Replicate", 0.7),
    "s0_to_s1.uneven": ("uneven Shard(0) [13, X] -> Shard(1)", 0.7),
    "p_to_r.even": ("Partial(sum) [R, 1024] -> Replicate", 1.05),
    "s0_to_r.even": ("even Shard(0) [R, 1024] -> Replicate", 1.05),
    "floor.all_gather_into_tensor": ("all-gather of the even shard (comm::all_gather_v vs "
                                     "all_gather_into_tensor)", 0),
    "floor.all_to_all_single": ("all-to-all of the even shard (comm::all_to_all_v vs "
                                "all_to_all_single)", 0),
    "dcp.save": ("checkpoint save, 4 Shard(0) tensors (hyper::dcp vs torch.distributed."
                 "checkpoint)", 0.8),
    "dcp.load": ("checkpoint load, same layout", 0.8),
    "dcp.load_reshard": ("checkpoint load into another rank count (reshard)", 0.8),
    "overlap.gather": ("async-capable gather alone (redistribute Shard(0) -> Replicate)", 0),
    "overlap.product": ("this rank's rows x [1024, 256] alone", 0),
    "overlap.sequential": ("the gather, then the product", 0),
    "overlap.concurrent": ("the gather async (async_op), the product, the wait", 0),
    "tp.step.async": ("TP+SP training step of a transformer block, async_op on (hookable "
                      "modules vs parallelize_module)", 0),
    "tp.step.sync": ("the same step, async_op off", 0),
    "tp.step.plain_async": ("the step, plain torch::nn modules (DTensor tensors), gathers "
                            "overlapped vs parallelize_module async", 0),
    "tp.step.plain_sync": ("the step, plain torch::nn modules, gathers synchronous vs "
                           "parallelize_module with async_op forced off", 0),
}
BENCHMARK = {"redistribute": "torch_peer", "dcp": "torch_peer_dcp", "overlap": "torch_peer_overlap",
             "tp": "torch_peer_tp"}
RSS_NOISE_MIB = 1.0


def load(paths, side):
    runs = []
    for p in paths:
        with open(p) as f:
            j = json.load(f)
        if j.get("side") != side:
            sys.exit(f"peer_compare: {p} is the '{j.get('side')}' side, expected '{side}'")
        runs.append(j)
    return runs


def pooled(runs, case_id, key):
    vals = []
    for r in runs:
        for c in r["cases"]:
            if c["id"] == case_id and key in c:
                v = c[key]
                vals.extend(v if isinstance(v, list) else [v])
    return vals


def config(run):
    return (run["suite"], run["ranks"], run.get("mode"))


def compare_config(ours, theirs):
    """Rows of one configuration: `ours` and `theirs` are rounds of the same cases."""
    first, peer = ours[0], theirs[0]
    rows = []
    for c in first["cases"]:
        cid = c["id"]
        if cid not in CASES:
            sys.exit(f"peer_compare: unknown case '{cid}'")
        what, target = CASES[cid]
        t_ours, t_base = pooled(ours, cid, "times"), pooled(theirs, cid, "times")
        if not t_base:
            sys.exit(f"peer_compare: PyTorch's side has no case '{cid}'")
        ours_s, base_s = statistics.median(t_ours), statistics.median(t_base)
        ratio = ours_s / base_s if base_s > 0 else 0.0
        base_case = next(x for x in peer["cases"] if x["id"] == cid)
        row = {
            "id": "torch_peer." + cid, "name": "hyper: " + what,
            "baseline": f"PyTorch {peer.get('torch', '?')}", "ours_s": ours_s,
            "baseline_s": base_s, "ratio": ratio, "target": target,
            "bytes_ours": c.get("bytes", 0), "bytes_baseline": base_case.get("bytes", 0),
            "bytes_lower_bound": c.get("bytes_lower_bound", 0), "ranks": first["ranks"],
            "extra": {"calls_ours": len(t_ours), "calls_pytorch": len(t_base)},
        }
        meets = target <= 0 or ratio <= target
        if "peak_rss_mib" in c:
            rss_ours = max(pooled(ours, cid, "peak_rss_mib"))
            rss_base = max(pooled(theirs, cid, "peak_rss_mib"))
            row["extra"].update({"peak_rss_mib_ours": rss_ours, "peak_rss_mib_pytorch": rss_base,
                                 "rss_base_mib_ours": max(pooled(ours, cid, "rss_base_mib")),
                                 "rss_base_mib_pytorch": max(pooled(theirs, cid, "rss_base_mib"))})
            if target > 0:
                meets = meets and rss_ours <= rss_base + RSS_NOISE_MIB
        row["meets_target"] = meets
        rows.append(row)
    if first["suite"] == "overlap":
        # Within each side: the wall time overlap saves (concurrent / sequential) beside the
        # most it could (max(gather, product) / (gather + product)); 1.0 = nothing hidden;
        # and the least time the machine's cores allow (cpu_floor_ms).
        row = next(r for r in rows if r["id"] == "torch_peer.overlap.concurrent")
        for side, runs in (("hyper", ours), ("pytorch", theirs)):
            t = {k: statistics.median(pooled(runs, "overlap." + k, "times"))
                 for k in ("gather", "product", "sequential", "concurrent")}
            row["extra"][f"saved_{side}"] = t["concurrent"] / t["sequential"]
            row["extra"][f"ideal_{side}"] = (max(t["gather"], t["product"])
                                             / (t["gather"] + t["product"]))
            # Cores the gather alone keeps busy (CPU seconds of every rank / wall seconds):
            # what is left of the machine for compute to overlap with.
            cpu = {k: statistics.median(pooled(runs, "overlap." + k, "cpu_s"))
                   for k in ("gather", "product", "sequential", "concurrent")}
            row["extra"][f"gather_cores_{side}"] = cpu["gather"] / t["gather"]
            # The floor the machine's cores set: the two together cannot finish before their
            # CPU seconds (every rank's) spread over every core (loopback traffic is CPU work),
            # however well they overlap; concurrent / floor is how far the overlap is from it.
            floor = max(t["gather"], t["product"], (cpu["gather"] + cpu["product"]) / os.cpu_count())
            row["extra"][f"cpu_floor_ms_{side}"] = floor * 1e3
            row["extra"][f"over_floor_{side}"] = t["concurrent"] / floor
            # Overlap's own CPU cost: the concurrent call's CPU against the sequential one's
            # (contention for caches and cores makes the same work cost more CPU); and the
            # concurrent call's CPU over the cores, the least wall time that CPU allows.
            row["extra"][f"cpu_concurrent_over_sequential_{side}"] = cpu["concurrent"] / cpu["sequential"]
            row["extra"][f"concurrent_cpu_floor_ms_{side}"] = cpu["concurrent"] / os.cpu_count() * 1e3
            # Where that CPU goes: the calling thread's (issue, product, wait) in each call.
            for k in ("product", "sequential", "concurrent"):
                caller = pooled(runs, "overlap." + k, "caller_cpu_s")
                if caller:
                    row["extra"][f"caller_cpu_ms_{k}_{side}"] = statistics.median(caller) * 1e3
    if first["suite"] == "tp":
        # Within each side: the wall time async saves, async / sync (hyper's target:
        # <= 0.9 on 2 ranks), for the hookable path and the plain-module path.
        for kind in ("", "plain_"):
            row = next(r for r in rows if r["id"] == f"torch_peer.tp.step.{kind}async")
            for side, runs in (("hyper", ours), ("pytorch", theirs)):
                t = {k: statistics.median(pooled(runs, f"tp.step.{kind}{k}", "times"))
                     for k in ("async", "sync")}
                row["extra"][f"async_over_sync_{side}"] = t["async"] / t["sync"]
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--hyper", nargs="+", required=True)
    ap.add_argument("--torch", nargs="+", required=True)
    a = ap.parse_args()
    ours, theirs = load(a.hyper, "hyper"), load(a.torch, "pytorch")
    first, peer = ours[0], theirs[0]
    # A result file may hold several configurations (a checkpoint save/load run and the
    # reshard load of what it saved); the first one is the run's, the others' rows carry
    # their own rank count.
    configs = []
    for r in ours:
        if config(r) not in configs:
            configs.append(config(r))
    rows = []
    for cf in configs:
        g_ours = [r for r in ours if config(r) == cf]
        g_theirs = [r for r in theirs if config(r) == cf]
        if not g_theirs:
            sys.exit(f"peer_compare: PyTorch's side has no run of {cf}")
        rows.extend(compare_config(g_ours, g_theirs))
    suite = first["suite"]
    out = {
        "benchmark": BENCHMARK[suite],
        "setup": (f"hyper vs PyTorch {peer.get('torch', '?')}, {first['ranks']} ranks, "
                  + (f"{first['mib']:g} MiB" + (" per rank" if suite == "dcp" else "")
                     if suite != "tp" else "block hidden 512, ffn 2048, 8 heads, batch 2 x seq 256")
                  + (" (the reshard row: that checkpoint loaded on "
                     + ", ".join(str(c[1]) for c in configs[1:]) + " ranks)"
                     if len(configs) > 1 else "")
                  + f", {len(a.hyper) // len(configs)} rounds per side run alternately, one "
                  "intra-op thread per rank"),
        "ranks": first["ranks"], "mib": first["mib"], "reps": first.get("reps", 0),
        "libtorch": first.get("libtorch", ""), "loadavg_start": first.get("loadavg_start", ""),
        "time_utc": first.get("time_utc", ""), "rows": rows,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for r in rows:
        print(f"{r['id']:40s} hyper {r['ours_s'] * 1e3:9.2f} ms  PyTorch {r['baseline_s'] * 1e3:9.2f} ms"
              f"  ratio {r['ratio']:.2f}  target {r['target'] or 'report'}"
              f"  {'' if r['meets_target'] else 'MISS'}")
        x = r["extra"]
        if "async_over_sync_hyper" in x:
            print(f"{'':40s} async / sync: hyper {x['async_over_sync_hyper']:.3f}, PyTorch "
                  f"{x['async_over_sync_pytorch']:.3f}")
        if "saved_hyper" in x:
            print(f"{'':40s} concurrent / sequential: hyper {x['saved_hyper']:.3f} (ideal "
                  f"{x['ideal_hyper']:.3f}), PyTorch {x['saved_pytorch']:.3f} (ideal "
                  f"{x['ideal_pytorch']:.3f}); cores busy during the gather alone: hyper "
                  f"{x['gather_cores_hyper']:.2f}, PyTorch {x['gather_cores_pytorch']:.2f} "
                  f"(of {os.cpu_count()})")
            print(f"{'':40s} CPU floor (gather + product CPU over the cores): hyper "
                  f"{x['cpu_floor_ms_hyper']:.2f} ms (concurrent {x['over_floor_hyper']:.2f}x it), "
                  f"PyTorch {x['cpu_floor_ms_pytorch']:.2f} ms ({x['over_floor_pytorch']:.2f}x)")
            print(f"{'':40s} CPU of the concurrent call / the sequential call's: hyper "
                  f"{x['cpu_concurrent_over_sequential_hyper']:.2f} (its CPU over the cores: "
                  f"{x['concurrent_cpu_floor_ms_hyper']:.2f} ms), PyTorch "
                  f"{x['cpu_concurrent_over_sequential_pytorch']:.2f} "
                  f"({x['concurrent_cpu_floor_ms_pytorch']:.2f} ms)")
            if "caller_cpu_ms_concurrent_hyper" in x and "caller_cpu_ms_concurrent_pytorch" in x:
                print(f"{'':40s} calling threads' CPU, product / sequential / concurrent: hyper "
                      + " / ".join(f"{x[f'caller_cpu_ms_{k}_hyper']:.2f}"
                                   for k in ("product", "sequential", "concurrent"))
                      + " ms, PyTorch "
                      + " / ".join(f"{x[f'caller_cpu_ms_{k}_pytorch']:.2f}"
                                   for k in ("product", "sequential", "concurrent")) + " ms")


if __name__ == "__main__":
    main()
