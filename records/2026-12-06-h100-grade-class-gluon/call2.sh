#!/usr/bin/env bash
# Call 2: issue 39's realistic class on one GPU, one grade at a time (rows land in summary.md as they come).
set -uo pipefail
export PYTHONUNBUFFERED=1
only=${ONLY:-}
timeout ${LIMIT:-560} python3 gpu_checks/mixed_class.py /tmp/class ${only:+--only $only} > /tmp/class.log 2>&1
echo "mixed_class exit $?" >> /tmp/class.log
cp /tmp/class/summary.md $OUT/summary.md 2>/dev/null
tail -30 /tmp/class.log > $OUT/console-tail.txt
for d in /tmp/class/*/; do n=$(basename $d); [ -f $d/timeline.jsonl ] && python3 - "$d" "$n" <<'PY' >> $OUT/where-time-went.txt
import json, sys, collections
d, n = sys.argv[1], sys.argv[2]
ev = [json.loads(l) for l in open(d + "timeline.jsonl")]
t0 = min(e["t"] for e in ev); t1 = max(e["t"] for e in ev)
starts = {}; per = []
for e in ev:
    if e["event"] == "start": starts[(e["chain"], e["nodeid"])] = e["t"]
    if e["event"] == "end" and (e["chain"], e["nodeid"]) in starts: per.append((e["t"] - starts[(e["chain"], e["nodeid"])], e.get("cpu"), e["nodeid"].split("/")[-1]))
per.sort(reverse=True)
print(f"{n}: span {t1 - t0:.1f} s, {len(per)} tests; slowest:")
for w, c, name in per[:5]: print(f"   {w:7.1f} s wall  {c} cpu  {name[:120]}")
PY
done
cat $OUT/summary.md
