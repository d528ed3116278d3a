//! The `openai` driver: any OpenAI-compatible chat-completions endpoint
//! (OpenRouter, Ollama, vLLM, llama.cpp) with a small tool loop confined to
//! the sandbox: read_file, write_file, list_dir, run_command, finish.
//! The API key is read from the environment at each call and never written
//! to a log, the prompt log or an error.

use std::time::Duration;

use serde_json::{Value, json};
use tracing::{debug, warn};
use xo_proto::{Action, Outcome};
use xo_runtime::config::OpenAiConfig;

use super::{AgentOutput, DriverError, RunCtx, TurnEvent, short_hash};
use crate::compose::ComposedPrompt;

const SYSTEM: &str = "You are a specialist agent working inside a sandbox directory. Use the tools to read and change files and to run commands; paths are relative to the working directory. When the task is done, call finish with your final reply, which must end with the JSON object the prompt's REPLY FORMAT asks for.";

#[derive(Debug)]
pub struct OpenAiDriver {
    cfg: OpenAiConfig,
    client: reqwest::Client,
    context_limit: u64,
    /// Only read_file, list_dir and finish (reviewers: seed 001, they write
    /// knowledge and directives through their reply, never the project).
    read_only: bool,
    /// The key read from `api_key_file` at start (never in the environment).
    file_key: Option<String>,
}

impl OpenAiDriver {
    pub fn new(cfg: &OpenAiConfig, context_limit: u64) -> Result<Self, DriverError> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_millis(cfg.request_timeout_ms))
            .build()
            .map_err(|e| DriverError::Endpoint(format!("http client: {e}")))?;
        let file_key = if cfg.api_key_file.is_empty() {
            None
        } else {
            let key = std::fs::read_to_string(&cfg.api_key_file).map_err(|e| {
                DriverError::Endpoint(format!(
                    "runner.driver.openai.api_key_file {}: {e}",
                    cfg.api_key_file
                ))
            })?;
            let key = key.trim().to_string();
            if key.is_empty() {
                return Err(DriverError::Endpoint(format!(
                    "runner.driver.openai.api_key_file {} is empty",
                    cfg.api_key_file
                )));
            }
            Some(key)
        };
        Ok(Self {
            cfg: cfg.clone(),
            client,
            context_limit,
            read_only: false,
            file_key,
        })
    }

    /// The same driver without write_file and run_command: the model may
    /// read the sandbox, not change it.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    fn key(&self) -> Option<String> {
        if let Some(k) = &self.file_key {
            return Some(k.clone());
        }
        std::env::var(&self.cfg.api_key_env)
            .ok()
            .filter(|k| !k.is_empty())
    }

    /// Removes the key from text that may be shown (an endpoint echoing it).
    fn scrub(&self, text: &str) -> String {
        match self.key() {
            Some(k) if k.len() >= 4 => text.replace(&k, "***"),
            _ => text.to_string(),
        }
    }

    pub async fn run(
        &mut self,
        prompt: &ComposedPrompt,
        ctx: &RunCtx,
    ) -> Result<AgentOutput, DriverError> {
        let started = std::time::Instant::now();
        let mut out = AgentOutput::default();
        // The task's agent_mode names the model (seed 003), else the
        // configured one.
        let model = ctx.mode().unwrap_or(&self.cfg.model).to_string();
        let mut messages = vec![
            json!({"role": "system", "content": SYSTEM}),
            json!({"role": "user", "content": prompt.text()}),
        ];
        let mut final_text: Option<String> = None;
        let mut last_content = String::new();
        // The context the last call used (the endpoint's count), to
        // condense before the window is full rather than fail.
        let mut context_used = 0u64;
        for turn in 1..=u64::from(self.cfg.max_turns) {
            for s in ctx.turns.take_steering() {
                // The XO's warning enters the conversation before the next step.
                let text = if s.starts_with("[SUPERVISOR]") {
                    s
                } else {
                    format!("[SUPERVISOR] {s}")
                };
                messages.push(json!({"role": "user", "content": text}));
            }
            if ctx.cancel.as_ref().is_some_and(|c| *c.borrow()) {
                out.cancelled = true;
                break;
            }
            if started.elapsed() > ctx.timeout {
                out.timed_out = true;
                break;
            }
            let estimate = context_used.max(chars(&messages) / 4);
            let mut condensed = false;
            if self.context_limit > 0
                && estimate as f64 >= self.cfg.condense_at * self.context_limit as f64
            {
                let elided = condense(&mut messages, 4);
                if elided > 0 {
                    condensed = true;
                    debug!(
                        elided,
                        estimate,
                        limit = self.context_limit,
                        "conversation condensed"
                    );
                }
            }
            let body = json!({
                "model": model,
                "messages": messages,
                "tools": tools(self.read_only),
            });
            let resp = match self.call(&body).await {
                Ok(r) => r,
                // The endpoint says the conversation is too long: condense
                // and ask once more rather than fail the task.
                Err(DriverError::Endpoint(e))
                    if context_error(&e) && condense(&mut messages, 1) > 0 =>
                {
                    warn!(error = %e, "the model's context is full; conversation condensed, asking again");
                    condensed = true;
                    let body = json!({
                        "model": model,
                        "messages": messages,
                        "tools": tools(self.read_only),
                    });
                    self.call(&body).await?
                }
                Err(e) => return Err(e),
            };
            let (tin, tout) = usage(&resp);
            context_used = tin + tout;
            out.tokens_in += tin;
            out.tokens_out += tout;
            let cost = (tin as f64 * self.cfg.price_in_per_mtok
                + tout as f64 * self.cfg.price_out_per_mtok)
                / 1e6;
            out.cost_usd = xo_proto::finite::add(out.cost_usd, cost);
            let msg = resp
                .pointer("/choices/0/message")
                .cloned()
                .ok_or_else(|| DriverError::Endpoint("reply has no choices[0].message".into()))?;
            let content = msg
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let calls = msg
                .get("tool_calls")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let mut ev = TurnEvent {
                tokens_in: tin,
                tokens_out: tout,
                cost_usd: cost,
                context_tokens: Some(tin),
                context_limit: Some(self.context_limit),
                model: Some(model.to_string()),
                condensed,
                ..Default::default()
            };
            if !content.is_empty() {
                last_content = content.clone();
                out.stdout.push_str(&content);
                out.stdout.push('\n');
            }
            if calls.is_empty() {
                let outcome = if content.trim().is_empty() {
                    Outcome::Empty
                } else {
                    Outcome::Ok
                };
                ev.action = Some(Action::message(Some(&short_hash(&content)), outcome, turn));
                ev.summary = Some("replied".into());
                ctx.turns.turn(ev);
                final_text = Some(content);
                break;
            }
            messages.push(msg.clone());
            let mut progress = false;
            let mut last_action = None;
            for call in &calls {
                let id = call.get("id").and_then(Value::as_str).unwrap_or("call");
                let name = call
                    .pointer("/function/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let raw_args = call
                    .pointer("/function/arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}");
                let (result, err) = match serde_json::from_str::<Value>(raw_args) {
                    Ok(args) => {
                        if name == "finish" {
                            let reply = args
                                .get("reply")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string();
                            final_text = Some(reply);
                            (String::from("finished"), None)
                        } else if self.read_only && WRITE_TOOLS.contains(&name) {
                            (
                                format!(
                                    "error: {name} is not available: this run may only read the sandbox; put what should change in your reply"
                                ),
                                Some("read_only"),
                            )
                        } else {
                            tool(name, &args, ctx).await
                        }
                    }
                    Err(e) => (
                        format!(
                            "error: arguments of {name} are not valid JSON ({e}); send a JSON object"
                        ),
                        Some("bad_arguments"),
                    ),
                };
                progress |=
                    err.is_none() && matches!(name, "write_file" | "run_command" | "finish");
                let outcome = if err.is_some() {
                    Outcome::Error
                } else {
                    Outcome::Ok
                };
                let mut a = Action::tool(name, &short_hash(raw_args), outcome, turn)
                    .with_output(&short_hash(&result));
                if let Some(e) = err {
                    a = a.with_error(e);
                }
                last_action = Some(a);
                let result = head_tail(&result, self.cfg.max_tool_output_bytes);
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": result}));
            }
            ev.action = last_action;
            ev.progress = progress;
            ev.summary = Some(format!("{} tool call(s)", calls.len()));
            ctx.turns.turn(ev);
            out.turns = turn as u32;
            if final_text.is_some() {
                break;
            }
        }
        match final_text {
            Some(t) if !out.stdout.contains(&t) => {
                out.stdout.push_str(&t);
            }
            None if !last_content.is_empty() => {}
            _ => {}
        }
        out.exit_code = Some(0);
        out.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(out)
    }

    /// One chat-completions call with backoff on 429, 5xx and unreadable
    /// replies (`xo_runtime::retry::model_call`: doubling from `backoff_ms`,
    /// with jitter; a `Retry-After` header wins).
    async fn call(&self, body: &Value) -> Result<Value, DriverError> {
        let url = format!(
            "{}/chat/completions",
            self.cfg.base_url.trim_end_matches('/')
        );
        let mut last = String::new();
        let mut delays = xo_runtime::retry::model_call(
            Duration::from_millis(self.cfg.backoff_ms),
            self.cfg.max_attempts,
        );
        for attempt in 0..self.cfg.max_attempts {
            let mut req = self.client.post(&url).json(body);
            if let Some(k) = self.key() {
                req = req.bearer_auth(k);
            }
            let mut retry_after = None;
            match req.send().await {
                Err(e) => {
                    last = format!("{url}: {e}");
                }
                Ok(resp) => {
                    let status = resp.status();
                    if let Some(s) = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                    {
                        retry_after = Some(Duration::from_secs(s.min(60)));
                    }
                    let text = resp.text().await.unwrap_or_default();
                    if status.as_u16() == 429 || status.is_server_error() {
                        last = format!("{url}: {status}: {}", snippet(&text));
                    } else if !status.is_success() {
                        return Err(DriverError::Endpoint(
                            self.scrub(&format!("{url}: {status}: {}", snippet(&text))),
                        ));
                    } else {
                        match serde_json::from_str::<Value>(&text) {
                            Ok(v) => return Ok(v),
                            Err(e) => {
                                last = format!(
                                    "{url}: reply is not valid JSON ({e}): {}",
                                    snippet(&text)
                                );
                            }
                        }
                    }
                }
            }
            let last_s = self.scrub(&last);
            if let Some(wait) = delays.next().map(|d| retry_after.unwrap_or(d)) {
                warn!(attempt = attempt + 1, wait_ms = wait.as_millis() as u64, error = %last_s, "model call failed; backing off");
                tokio::time::sleep(wait).await;
            }
        }
        debug!("model call gave up");
        Err(DriverError::Endpoint(format!(
            "gave up after {} attempts: {}",
            self.cfg.max_attempts,
            self.scrub(&last)
        )))
    }
}

/// Whether an endpoint's refusal says the conversation is too long.
fn context_error(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    [
        "context_length",
        "context length",
        "maximum context",
        "too many tokens",
        "context window",
    ]
    .iter()
    .any(|s| e.contains(s))
}

/// Characters in a conversation (for a token estimate before the
/// endpoint has counted any).
fn chars(messages: &[Value]) -> u64 {
    messages.iter().map(|m| m.to_string().len() as u64).sum()
}

/// Replaces the content of older tool results (all but the last
/// `keep_last` messages; the system prompt and the task stay) with a note;
/// returns how many were elided.
fn condense(messages: &mut [Value], keep_last: usize) -> usize {
    let keep_from = messages.len().saturating_sub(keep_last);
    let mut n = 0;
    for m in messages.iter_mut().take(keep_from).skip(2) {
        let is_tool = m.get("role").and_then(Value::as_str) == Some("tool");
        let len = m.get("content").and_then(Value::as_str).map_or(0, str::len);
        if is_tool && len > 200 {
            m["content"] = Value::String(format!(
                "[elided by XO to keep the conversation in the context window: {len} bytes of tool output; run the tool again if you need it]"
            ));
            n += 1;
        }
    }
    n
}

/// A tool output within `max` bytes: its head and its tail, with the cut
/// named between them.
fn head_tail(text: &str, max: usize) -> String {
    if text.len() <= max || max < 64 {
        return text.to_string();
    }
    let half = max / 2;
    let mut head = half;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - half;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{}\n[... {} bytes cut by XO; the first and last {half} bytes are shown ...]\n{}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

fn snippet(t: &str) -> String {
    let mut s: String = t.chars().take(200).collect();
    if t.len() > s.len() {
        s.push('…');
    }
    s
}

fn usage(resp: &Value) -> (u64, u64) {
    let n = |p: &str| resp.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    (n("/usage/prompt_tokens"), n("/usage/completion_tokens"))
}

/// The tools that change the sandbox.
const WRITE_TOOLS: [&str; 2] = ["write_file", "run_command"];

fn tools(read_only: bool) -> Value {
    let f = |name: &str, desc: &str, props: Value, req: &[&str]| {
        json!({"type": "function", "function": {"name": name, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": req}}})
    };
    let s = json!({"type": "string"});
    let all = json!([
        f(
            "read_file",
            "Read a file (path relative to the working directory).",
            json!({"path": s}),
            &["path"]
        ),
        f(
            "write_file",
            "Write a file, creating directories.",
            json!({"path": s, "content": s}),
            &["path", "content"]
        ),
        f(
            "list_dir",
            "List a directory.",
            json!({"path": s}),
            &["path"]
        ),
        f(
            "run_command",
            "Run a shell command in the working directory.",
            json!({"command": s}),
            &["command"]
        ),
        f(
            "finish",
            "End the task with your final reply.",
            json!({"reply": s}),
            &["reply"]
        ),
    ]);
    if !read_only {
        return all;
    }
    Value::Array(
        all.as_array()
            .into_iter()
            .flatten()
            .filter(|t| {
                let name = t.pointer("/function/name").and_then(Value::as_str);
                !name.is_some_and(|n| WRITE_TOOLS.contains(&n))
            })
            .cloned()
            .collect(),
    )
}

/// Runs one tool inside the sandbox: (result text, error type).
async fn tool(name: &str, args: &Value, ctx: &RunCtx) -> (String, Option<&'static str>) {
    let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("");
    let path = |k: &str| ctx.sandbox.resolve(&ctx.cwd, arg(k));
    match name {
        "read_file" => match path("path") {
            Err(e) => (format!("error: {e}"), Some("sandbox")),
            Ok(p) => match std::fs::read(&p) {
                Ok(b) => {
                    let b = &b[..b.len().min(ctx.max_output)];
                    (String::from_utf8_lossy(b).into_owned(), None)
                }
                Err(e) => (format!("error: {}: {e}", arg("path")), Some("io")),
            },
        },
        "write_file" => match path("path") {
            Err(e) => (format!("error: {e}"), Some("sandbox")),
            Ok(p) => {
                let r = p
                    .parent()
                    .map(std::fs::create_dir_all)
                    .unwrap_or(Ok(()))
                    .and_then(|_| std::fs::write(&p, arg("content")));
                match r {
                    Ok(()) => (format!("wrote {}", arg("path")), None),
                    Err(e) => (format!("error: {}: {e}", arg("path")), Some("io")),
                }
            }
        },
        "list_dir" => {
            let rel = if arg("path").is_empty() {
                "."
            } else {
                arg("path")
            };
            match ctx.sandbox.resolve(&ctx.cwd, rel) {
                Err(e) => (format!("error: {e}"), Some("sandbox")),
                Ok(p) => match std::fs::read_dir(&p) {
                    Ok(rd) => {
                        let mut names: Vec<String> = rd
                            .flatten()
                            .map(|e| {
                                let dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                                format!(
                                    "{}{}",
                                    e.file_name().to_string_lossy(),
                                    if dir { "/" } else { "" }
                                )
                            })
                            .collect();
                        names.sort();
                        (names.join("\n"), None)
                    }
                    Err(e) => (format!("error: {rel}: {e}"), Some("io")),
                },
            }
        }
        "run_command" => {
            let argv = [
                "sh".to_string(),
                "-c".to_string(),
                arg("command").to_string(),
            ];
            let spawn = crate::proc::Spawn {
                argv: &argv,
                cwd: &ctx.cwd,
                env: &ctx.env,
                stdin: None,
                timeout: ctx.timeout,
                max_output: ctx.max_output,
                confine: ctx.confine.as_ref(),
            };
            // Its own group, recorded, killed on halt like any agent process.
            match crate::proc::run(spawn, ctx.cancel.clone(), ctx.groups.as_ref()).await {
                Ok(o) if o.exit_code == Some(0) => {
                    (format!("exit 0\n{}{}", o.stdout, o.stderr), None)
                }
                Ok(o) => (
                    format!("exit {:?}\n{}{}", o.exit_code, o.stdout, o.stderr),
                    Some("exit"),
                ),
                Err(e) => (format!("error: {e}"), Some("spawn")),
            }
        }
        other => (
            format!("error: unknown tool {other:?}"),
            Some("unknown_tool"),
        ),
    }
}
