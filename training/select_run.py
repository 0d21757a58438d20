"""Pick the best of several training runs by dev score (mean of intent accuracy and slot F1;
test figures are never looked at) and copy it to OUT/best; write OUT/summary.json for all runs.

  python3 training/select_run.py RUNS_DIR OUT
"""
import json
import os
import shutil
import sys


def main():
    runs_dir, out = sys.argv[1], sys.argv[2]
    rows = []
    for name in sorted(os.listdir(runs_dir)):
        p = os.path.join(runs_dir, name, "metrics.json")
        if not os.path.exists(p):
            continue
        with open(p) as f:
            m = json.load(f)
        with open(os.path.join(runs_dir, name, "config.json")) as f:
            c = json.load(f)
        dev = m["dev"]
        rows.append({"run": name, "score": (dev["intent_accuracy"] + dev["slot_f1"]) / 2,
                     "dev_intent": dev["intent_accuracy"], "dev_slot_f1": dev["slot_f1"],
                     "test_intent": m["test"]["intent_accuracy"],
                     "test_slot_f1": m["test"]["slot_f1"], "best_epoch": c["best_epoch"],
                     "epochs_run": c.get("epochs_run"), "seconds": m["train_seconds"],
                     # hand-written challenge set: reported, never used to select
                     "challenge_intent": (m.get("challenge") or {}).get("intent_accuracy"),
                     "challenge_slot_f1": (m.get("challenge") or {}).get("slot_f1"),
                     "command": c.get("command")})
    if not rows:
        sys.exit(f"no finished runs under {runs_dir}")
    rows.sort(key=lambda r: -r["score"])
    os.makedirs(out, exist_ok=True)
    best = os.path.join(out, "best")
    shutil.copytree(os.path.join(runs_dir, rows[0]["run"]), best, dirs_exist_ok=True)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    for r in rows:
        print(f"{r['run']:>10} dev {r['dev_intent']:.4f}/{r['dev_slot_f1']:.4f} "
              f"test {r['test_intent']:.4f}/{r['test_slot_f1']:.4f} epoch {r['best_epoch']}/"
              f"{r['epochs_run']} {r['seconds']:.0f}s")
    print("best:", rows[0]["run"])


if __name__ == "__main__":
    main()
