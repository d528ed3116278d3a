//! A local OpenAI-compatible chat-completions server for tests: it answers
//! `POST /v1/chat/completions` with scripted replies, in order, and records
//! every request (headers and JSON body). Plain HTTP/1.1 on a thread, one
//! connection per request.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// One scripted reply.
#[derive(Debug, Clone)]
pub enum StubReply {
    /// 200 with this JSON body.
    Json(Value),
    /// This status and body, with an optional `Retry-After` (seconds).
    Status(u16, String, Option<u64>),
    /// 200 with a body that is not JSON.
    Malformed(String),
    /// This status, echoing the request's `Authorization` header in the body
    /// (a careless proxy), to prove the key is scrubbed from errors.
    EchoAuth(u16),
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct StubRequest {
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl StubRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
pub struct OpenAiStub {
    port: u16,
    requests: Arc<Mutex<Vec<StubRequest>>>,
}

impl OpenAiStub {
    pub fn start(replies: Vec<StubReply>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the stub");
        let port = listener.local_addr().expect("stub address").port();
        let requests: Arc<Mutex<Vec<StubRequest>>> = Default::default();
        let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
        let reqs = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(s) = stream else { continue };
                let _ = serve(s, &reqs, &queue);
            }
        });
        Self { port, requests }
    }

    /// `http://127.0.0.1:<port>/v1`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn requests(&self) -> Vec<StubRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn serve(
    mut s: TcpStream,
    reqs: &Mutex<Vec<StubRequest>>,
    queue: &Mutex<VecDeque<StubReply>>,
) -> std::io::Result<()> {
    let mut r = BufReader::new(s.try_clone()?);
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        r.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    let req = StubRequest {
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let auth = req.header("authorization").unwrap_or("").to_string();
    reqs.lock().unwrap_or_else(|p| p.into_inner()).push(req);
    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
    let (status, body, extra) = match next {
        Some(StubReply::Json(v)) => (200, v.to_string(), String::new()),
        Some(StubReply::Status(c, b, ra)) => (
            c,
            b,
            ra.map(|s| format!("Retry-After: {s}\r\n"))
                .unwrap_or_default(),
        ),
        Some(StubReply::Malformed(b)) => (200, b, String::new()),
        Some(StubReply::EchoAuth(c)) => (c, format!("bad gateway; you sent {auth}"), String::new()),
        None => (500, "stub: no more scripted replies".into(), String::new()),
    };
    write!(
        s,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}

/// A chat reply with one tool call.
pub fn tool_call(id: &str, name: &str, arguments: &str) -> StubReply {
    StubReply::Json(json!({
        "choices": [{"message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": id, "type": "function",
                "function": {"name": name, "arguments": arguments}}]}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10}
    }))
}

/// A chat reply with text only.
pub fn text(content: &str) -> StubReply {
    StubReply::Json(json!({
        "choices": [{"message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 20}
    }))
}

/// A Manager's model for tests: reads the task list in the prompt of a
/// chat-completions request, keeps every pending task it lists and names the
/// first as next (null when none is pending: the goal is met). Returns the
/// chat-completions reply.
pub fn manager_keeping_pending(request: &Value) -> Value {
    manager_dropping(request, &[])
}

/// The pending task ids the task list in a Manager's prompt shows.
pub fn manager_prompt_pending(request: &Value) -> Vec<String> {
    let prompt = request["messages"][1]["content"].as_str().unwrap_or("");
    prompt
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split(" | ").collect();
            (cols.get(1) == Some(&"pending")).then(|| cols[0].to_string())
        })
        .collect()
}

/// As [`manager_keeping_pending`], but the pending tasks in `drop` are left
/// out of the reply (the Manager cancels them).
pub fn manager_dropping(request: &Value, drop: &[&str]) -> Value {
    let pending: Vec<String> = manager_prompt_pending(request)
        .into_iter()
        .filter(|id| !drop.contains(&id.as_str()))
        .collect();
    let reply = json!({
        "status": "ok",
        "message": format!("{} pending tasks kept", pending.len()),
        "next_task": pending.first(),
        "keep": pending,
    });
    json!({
        "choices": [{"message": {"role": "assistant", "content": format!("Reconciled.\n{reply}")}}],
        "usage": {"prompt_tokens": 500, "completion_tokens": 40},
    })
}
