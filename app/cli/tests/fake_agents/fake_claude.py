#!/usr/bin/env python3
"""A Claude-Code-shaped agent for tests: speaks `--output-format stream-json`
and runs the hooks of the project's `.claude/settings.local.json` as Claude
Code does: `PostToolUse` after a tool call that succeeded, only
`PostToolUseFailure` after one that failed, `Stop` before it ends; each with
the JSON payload Claude Code gives that event. It shows the model what
Claude Code shows it: `hookSpecificOutput.additionalContext` of a
PostToolUse/PostToolUseFailure answer; a Stop answer's `decision: block`
`reason` makes it go on.

It loops on a failing `make build` until a hook hands it steering; then it
changes course: writes fixed.txt and ends with the reply format."""
import json
import os
import subprocess
import sys
import time

SESSION = "fake-claude-session"


def emit(obj):
    print(json.dumps(obj), flush=True)


def hooks(event):
    try:
        with open(".claude/settings.local.json") as f:
            settings = json.load(f)
    except FileNotFoundError:
        return []
    return [
        h["command"]
        for m in settings.get("hooks", {}).get(event, [])
        for h in m.get("hooks", [])
    ]


def run_hooks(event, payload):
    """What the model is shown from the event's hooks, or None."""
    payload = dict(payload, session_id=SESSION, hook_event_name=event, cwd=os.getcwd(),
                   transcript_path="/nonexistent/transcript.jsonl")
    env = dict(os.environ, CLAUDE_PROJECT_DIR=os.getcwd())
    shown = []
    for cmd in hooks(event):
        p = subprocess.run(cmd, shell=True, input=json.dumps(payload), capture_output=True, text=True, env=env)
        out = p.stdout.strip()
        if p.returncode != 0 or not out:
            continue
        answer = json.loads(out)
        if event == "Stop":
            if answer.get("decision") == "block":
                shown.append(answer["reason"])
        else:
            ctx = (answer.get("hookSpecificOutput") or {}).get("additionalContext")
            if ctx:
                shown.append(ctx)
    return "\n".join(shown) or None


def post_tool_use(tool, tool_input, response, tool_use_id, is_error):
    if is_error:
        return run_hooks("PostToolUseFailure", {"tool_name": tool, "tool_input": tool_input,
                                                "tool_use_id": tool_use_id, "error": response["output"],
                                                "is_interrupt": False})
    return run_hooks("PostToolUse", {"tool_name": tool, "tool_input": tool_input,
                                     "tool_response": response, "tool_use_id": tool_use_id})


def tool(i, name, tool_input, result, is_error):
    tid = f"toolu_{i}"
    # As Claude Code writes a message: a content block a line, each with the
    # message's usage so far; most calls come after a line of text.
    for block in ({"type": "text", "text": f"Now step {i}."},
                  {"type": "tool_use", "id": tid, "name": name, "input": tool_input}):
        emit({"type": "assistant", "session_id": SESSION, "parent_tool_use_id": None,
              "message": {"id": f"msg_{i}", "model": "claude-sonnet-4-5", "role": "assistant",
                          "stop_reason": None, "content": [block],
                          "usage": {"input_tokens": 1000 + i, "output_tokens": 20}}})
    emit({"type": "user", "session_id": SESSION, "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tid, "content": result, "is_error": is_error}]}})
    return post_tool_use(name, tool_input, {"output": result}, tid, is_error)


def mark(path, text):
    with open(path, "w") as f:
        f.write(text)


prompt = sys.argv[-1] if len(sys.argv) > 1 else ""
# "latency": steps that succeed, each a new command (nothing for a check
# to find), until steering comes; agent_turn counts the steps done and
# seen.txt names the step after which the model was shown the steering.
latency = "latency" in prompt
emit({"type": "system", "subtype": "init", "session_id": SESSION, "model": "claude-sonnet-4-5", "tools": ["Bash", "Write"]})
steering = None
for i in range(1, 200):
    if latency:
        steering = tool(i, "Bash", {"command": f"echo step {i}"}, f"step {i}", False)
    else:
        steering = tool(i, "Bash", {"command": "make build"}, "make: *** [build] Error 2", True)
    mark("agent_turn", str(i))
    if steering:
        mark("seen.txt", f"turn {i}\n{steering}\n")
        break
    time.sleep(0.2 if latency else 0.1)
if steering and "[SUPERVISOR]" in steering:
    with open("fixed.txt", "w") as f:
        f.write("changed course after: " + steering.splitlines()[0] + "\n")
    tool(999, "Write", {"file_path": "fixed.txt"}, "File created successfully", False)
    # Before ending, Claude Code runs the Stop hooks.
    run_hooks("Stop", {"stop_hook_active": False})
    reply = json.dumps({"status": "ok", "message": "changed course after the supervisor's steering"})
    emit({"type": "result", "subtype": "success", "is_error": False, "session_id": SESSION,
          "result": "Fixed.\n" + reply, "total_cost_usd": 0.02})
else:
    emit({"type": "result", "subtype": "error_max_turns", "is_error": True, "session_id": SESSION, "result": "gave up"})
    sys.exit(1)
