#!/usr/bin/env python3
"""A Cursor-CLI-shaped agent for tests: `-p PROMPT --output-format
stream-json [--resume CHAT]` speaks `cursor-agent`'s stream-json (a
`system` `init` with its `session_id`, `tool_call` `started`/`completed`
pairs, `assistant` text, a closing `result`). It has no hook here: steering
reaches it only as the prompt of a resumed chat.

As `cursor-agent` writes a step (reifying/cursor-hack docs/stream-json-
events.md): thinking deltas, the model call's text (`assistant` with its
`model_call_id`), then its `tool_call`s with the same `model_call_id`; a
shell command's result is under `success` with its `exitCode`.

Steps that succeed until a prompt brings steering; the chat's steps are
counted across resumes in `agent_turn`, and `seen.txt` names the step after
which the model was shown the steering."""
import json
import os
import sys
import time

args = sys.argv[1:]
prompt = args[args.index("-p") + 1] if "-p" in args else ""
chat = args[args.index("--resume") + 1] if "--resume" in args else "fake-cursor-chat"


def emit(obj):
    obj["session_id"] = chat
    print(json.dumps(obj), flush=True)


def steps_done():
    try:
        with open("agent_turn") as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0


emit({"type": "system", "subtype": "init", "apiKeySource": "env", "cwd": ".", "model": "gpt-5", "permissionMode": "default"})
emit({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": prompt}]}})
if "[SUPERVISOR]" in prompt:
    with open("seen.txt", "w") as f:
        f.write(f"turn {steps_done()}\n{prompt}\n")
    reply = json.dumps({"status": "ok", "message": "changed course after the supervisor's steering"})
    emit({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": reply}]}})
    emit({"type": "result", "subtype": "success", "duration_ms": 10, "is_error": False, "result": reply})
    sys.exit(0)
for i in range(steps_done() + 1, 200):
    model_call = f"mc-{i}"
    now = int(time.time() * 1000)
    emit({"type": "thinking", "subtype": "delta", "text": "next", "timestamp_ms": now})
    emit({"type": "thinking", "subtype": "completed", "timestamp_ms": now})
    emit({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": f"Running step {i}."}]},
          "model_call_id": model_call, "timestamp_ms": now})
    call = {"shellToolCall": {"args": {"command": f"echo step {i}"}}}
    emit({"type": "tool_call", "subtype": "started", "call_id": f"c{i}", "tool_call": call,
          "model_call_id": model_call, "timestamp_ms": now})
    done = {"shellToolCall": {"args": {"command": f"echo step {i}"},
                              "result": {"success": {"exitCode": 0, "stdout": f"step {i}\n", "stderr": ""}}}}
    # Counted before the step is reported (and atomically): the runner may
    # stop the agent the moment it reads the step.
    with open("agent_turn.tmp", "w") as f:
        f.write(str(i))
    os.replace("agent_turn.tmp", "agent_turn")
    emit({"type": "tool_call", "subtype": "completed", "call_id": f"c{i}", "tool_call": done,
          "model_call_id": model_call, "timestamp_ms": int(time.time() * 1000)})
    time.sleep(0.2)
emit({"type": "result", "subtype": "error", "duration_ms": 10, "is_error": True, "result": "no steering came"})
sys.exit(1)
