#!/usr/bin/env python3
"""A Codex-shaped agent for tests: `exec [--dangerously-bypass-hook-trust]
--json PROMPT` speaks the `codex exec --json` events; `exec resume THREAD
PROMPT` resumes the thread.

Hooks as Codex runs them (developers.openai.com/codex/hooks): discovered in
`$CODEX_HOME/hooks.json` (default `~/.codex`), and in the project's
`.codex/hooks.json` only when `$CODEX_HOME/config.toml` trusts the project
(`[projects."<dir>"] trust_level = "trusted"`); a hook nobody trusted in
the /hooks screen is skipped without a word unless the run has
`--dangerously-bypass-hook-trust`. `PostToolUse` runs after every command
with the payload of `post-tool-use.command.input` (cwd, hook_event_name,
model, permission_mode, session_id, tool_input, tool_name, tool_response,
tool_use_id, transcript_path, turn_id); the model is shown
`hookSpecificOutput.additionalContext`.

Default: loops on a failing build until it is killed; resumed with
steering, it finishes. With "latency" in the prompt: steps that succeed
until a hook shows steering; `agent_turn` counts the steps, `seen.txt`
names the step after which the model was shown it."""
import json
import os
import subprocess
import sys
import time
import tomllib

THREAD = "fake-thread-7"


def emit(obj):
    print(json.dumps(obj), flush=True)


def mark(path, text):
    with open(path, "w") as f:
        f.write(text)


def codex_home():
    return os.environ.get("CODEX_HOME") or os.path.join(os.environ.get("HOME", "/nonexistent"), ".codex")


def trusted_project(home, cwd):
    try:
        with open(os.path.join(home, "config.toml"), "rb") as f:
            cfg = tomllib.load(f)
    except (FileNotFoundError, tomllib.TOMLDecodeError):
        return False
    return cfg.get("projects", {}).get(cwd, {}).get("trust_level") == "trusted"


def hook_commands(event, bypass_trust):
    if not bypass_trust:
        # Nothing here was ever reviewed in /hooks: every hook is skipped.
        return []
    home, cwd = codex_home(), os.getcwd()
    files = [os.path.join(home, "hooks.json")]
    if trusted_project(home, cwd):
        files.append(os.path.join(cwd, ".codex", "hooks.json"))
    cmds = []
    for path in files:
        try:
            with open(path) as f:
                hooks = json.load(f).get("hooks", {})
        except FileNotFoundError:
            continue
        for group in hooks.get(event, []):
            cmds += [h["command"] for h in group.get("hooks", []) if h.get("type") == "command"]
    return cmds


def post_tool_use(bypass_trust, i, command, output, exit_code):
    payload = {
        "cwd": os.getcwd(), "hook_event_name": "PostToolUse", "model": "gpt-5-codex",
        "permission_mode": "bypassPermissions", "session_id": THREAD,
        "tool_input": {"command": command}, "tool_name": "Bash",
        # Codex's payload carries no exit code (openai/codex#34289).
        "tool_response": output,
        "tool_use_id": f"call_{i}", "transcript_path": None, "turn_id": "turn-1",
    }
    shown = []
    for cmd in hook_commands("PostToolUse", bypass_trust):
        p = subprocess.run(cmd, shell=True, input=json.dumps(payload), capture_output=True, text=True)
        out = p.stdout.strip()
        if p.returncode != 0 or not out:
            continue
        ctx = (json.loads(out).get("hookSpecificOutput") or {}).get("additionalContext")
        if ctx:
            shown.append(ctx)
    return "\n".join(shown) or None


def command(i, cmd, output, exit_code):
    item = {"id": f"i{i}", "type": "command_execution", "command": cmd, "aggregated_output": output,
            "exit_code": exit_code, "status": "completed" if exit_code == 0 else "failed"}
    emit({"type": "item.started", "item": dict(item, status="in_progress", aggregated_output="", exit_code=None)})
    emit({"type": "item.completed", "item": item})


def finish(message):
    reply = json.dumps({"status": "ok", "message": message})
    emit({"type": "item.completed", "item": {"id": "r1", "type": "agent_message", "text": reply}})
    emit({"type": "turn.completed", "usage": {"input_tokens": 500, "cached_input_tokens": 0, "output_tokens": 30}})
    sys.exit(0)


args = sys.argv[1:]
bypass = "--dangerously-bypass-hook-trust" in args
if args[:2] == ["exec", "resume"]:
    thread, prompt = args[2], args[-1]
    emit({"type": "thread.started", "thread_id": thread})
    emit({"type": "turn.started"})
    if "[SUPERVISOR]" not in prompt:
        emit({"type": "turn.failed", "error": {"message": "resumed without steering"}})
        sys.exit(1)
    mark("resumed.txt", thread + "\n" + prompt + "\n")
    finish("resumed with the supervisor's steering")

prompt = args[-1] if args else ""
emit({"type": "thread.started", "thread_id": THREAD})
emit({"type": "turn.started"})
if "latency" in prompt:
    for i in range(1, 200):
        command(i, f"echo step {i}", f"step {i}\n", 0)
        shown = post_tool_use(bypass, i, f"echo step {i}", f"step {i}\n", 0)
        mark("agent_turn", str(i))
        if shown:
            mark("seen.txt", f"turn {i}\n{shown}\n")
            finish("changed course after the supervisor's steering")
        time.sleep(0.2)
    emit({"type": "turn.failed", "error": {"message": "no steering came"}})
    sys.exit(1)
for i in range(100000):
    command(i, "make build", "make: *** [build] Error 2\n", 2)
    post_tool_use(bypass, i, "make build", "make: *** [build] Error 2\n", 2)
    time.sleep(0.1)
