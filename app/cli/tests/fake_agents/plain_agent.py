#!/usr/bin/env python3
"""A plain command agent (no stream format): reads its prompt on stdin,
works in steps, and between steps reads the steering the runner appends to
`$XO_STEERING_FILE`, clearing what it took. `agent_turn` counts its steps;
`seen.txt` names the step after which it read the steering."""
import json
import os
import sys
import time

sys.stdin.read()
path = os.environ["XO_STEERING_FILE"]
for i in range(1, 200):
    with open("agent_turn", "w") as f:
        f.write(str(i))
    time.sleep(0.2)
    try:
        with open(path) as f:
            steering = f.read()
    except FileNotFoundError:
        steering = ""
    if "[SUPERVISOR]" in steering:
        os.remove(path)
        with open("seen.txt", "w") as f:
            f.write(f"turn {i}\n{steering}")
        print(json.dumps({"status": "ok", "message": "changed course after the supervisor's steering"}))
        sys.exit(0)
print(json.dumps({"status": "error", "message": "no steering came"}))
sys.exit(1)
