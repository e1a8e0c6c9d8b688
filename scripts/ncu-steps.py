# Summarises an ncu --csv log of BenchmarkWindows (BENCH_ROWS=1,8): each
# kernel's time in the last one-row step and the last eight-row step.
import collections, csv, sys

kernels = collections.OrderedDict()
for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"')):
    k = kernels.setdefault(int(r["ID"]), {"name": r["Kernel Name"], "grid": r["Grid Size"]})
    k[r["Metric Name"]] = float(r["Metric Value"].replace(",", "") or 0)
steps = []
for k in kernels.values():
    if k["name"].startswith("embed_") or not steps:
        steps.append([])
    steps[-1].append(k)
def rows(step):
    mv = [k["name"] for k in step if k["name"].startswith("mv_")]
    return int(mv[-1].rsplit("_", 1)[1]) if mv else 0
for want in (1, 8):
    found = [s for s in steps[1:] if rows(s) == want]
    if not found:
        print("no %d-row step in the profile" % want)
        continue
    s = max(found, key=len)  # a whole step (a profile cut short ends in part of one)
    total = sum(k["gpu__time_duration.sum"] for k in s)
    print("== a %d-row step, each kernel timed alone (cold caches): %d kernels, %.1f µs" % (want, len(s), total / 1000))
    print("%9s %5s %9s %9s  %s" % ("µs", "×", "µs each", "GB/s", "kernel (grid)"))
    by = collections.OrderedDict()
    for k in s:
        e = by.setdefault((k["name"], k["grid"]), [0, 0.0, 0.0])
        e[0] += 1
        e[1] += k["gpu__time_duration.sum"]
        e[2] += k.get("dram__bytes_read.sum", 0)
    for (name, grid), (n, ns, b) in sorted(by.items(), key=lambda t: -t[1][1]):
        print("%9.1f %5d %9.2f %9.0f  %s %s" % (ns / 1000, n, ns / n / 1000, b / ns if ns else 0, name, grid))
