#!/usr/bin/env python3
"""A Codex-shaped agent for tests: `exec --json PROMPT` speaks the
`codex exec --json` events and loops on a failing build until it is killed;
`exec resume THREAD PROMPT` resumes the thread: given steering, it finishes
with the reply format."""
import json
import sys
import time


def emit(obj):
    print(json.dumps(obj), flush=True)


args = sys.argv[1:]
if args[:2] == ["exec", "resume"]:
    thread, prompt = args[2], args[-1]
    emit({"type": "thread.started", "thread_id": thread})
    emit({"type": "turn.started"})
    if "[SUPERVISOR]" not in prompt:
        emit({"type": "turn.failed", "error": {"message": "resumed without steering"}})
        sys.exit(1)
    with open("resumed.txt", "w") as f:
        f.write(thread + "\n" + prompt + "\n")
    reply = json.dumps({"status": "ok", "message": "resumed with the supervisor's steering"})
    emit({"type": "item.completed", "item": {"id": "r1", "type": "agent_message", "text": reply}})
    emit({"type": "turn.completed", "usage": {"input_tokens": 500, "cached_input_tokens": 0, "output_tokens": 30}})
    sys.exit(0)

emit({"type": "thread.started", "thread_id": "fake-thread-7"})
emit({"type": "turn.started"})
for i in range(100000):
    emit({"type": "item.completed", "item": {"id": f"i{i}", "type": "command_execution", "command": "make build",
          "aggregated_output": "make: *** [build] Error 2\n", "exit_code": 2, "status": "failed"}})
    time.sleep(0.1)
