#!/bin/bash
cd <a copy of the kit at a2bd2b5>
P=distributed_communication,naive_ddp,ddp_flat,ddp_overlap_individual,ddp_bucketed,optimizer_state_sharding,fsdp
for i in $(seq 38 50); do
  out=<out>/g$i
  start=$(date +%s.%N)
  CS336_RANK_EXIT_LOG=$out.exits.jsonl nice -n 19 .venv/bin/python -m autograder grade reference --same-user --problems $P --out $out > $out.log 2>&1
  rc=$?
  end=$(date +%s.%N)
  .venv/bin/python - "$out" "$rc" "$start" "$end" >> <out>/grades.jsonl <<'PY'
import json, os, sys
out, rc, start, end = sys.argv[1:]
r = json.load(open(out + "/results.json"))
failed = [t["name"] for t in r["tests"] if t.get("score", 0) < t.get("max_score", 0)]
exits = [json.loads(l) for l in open(out + ".exits.jsonl")] if os.path.exists(out + ".exits.jsonl") else []
aborts = sum(1 for e in exits for c in (e["exit_codes"] or []) if c is not None and c < 0)
print(json.dumps({"out": os.path.basename(out), "rc": int(rc), "score": r.get("score"), "failed": failed,
                  "rank_exit_aborts": aborts, "runs": len(exits), "abort_mentions": json.dumps(r).count("SIGABRT"),
                  "wall_s": round(float(end) - float(start), 1)}))
PY
done
