//! Error classes that real runs need, from what a stream tells about a
//! result: its exit code, its error flag, its text.
//!
//! | class | from |
//! | --- | --- |
//! | `provider_rate_limit` | 429, "rate limit", "too many requests" |
//! | `provider_overloaded` | 529, "overloaded" |
//! | `provider_error` | 5xx from the model API, "API Error", "internal server error", "bad gateway", "service unavailable" |
//! | `timeout` | "timed out", "timeout", exit 124 |
//! | `test_failure` | "test result: FAILED", "FAILED", "AssertionError", "N failed", a test command exiting non-zero |
//! | `compile_error` | `error[E`, "error: could not compile", "SyntaxError" |
//! | `exception:<Type>` | a Python traceback's last line (`ModuleNotFoundError`…) |
//! | `command_not_found` | "command not found", exit 127 |
//! | `exit_<n>` | any other non-zero exit code |
//! | `tool_error` | an error flag with none of the above |
//!
//! Provider classes start with `provider_`: the radio treats them as an
//! outage, not as the agent's behaviour (no loop, oscillation or cascade
//! steering for them).

/// The prefix of every provider error class.
pub const PROVIDER: &str = "provider_";

/// Whether a class is a provider outage rather than the agent's doing.
pub fn is_provider(class: &str) -> bool {
    class.starts_with(PROVIDER)
}

/// The class of a result, or `None` when it succeeded. `ok` is the
/// stream's own verdict (no error flag); `command` the command run, if any.
pub fn error_class(
    ok: bool,
    exit_code: Option<i64>,
    text: &str,
    command: Option<&str>,
) -> Option<String> {
    let failed = !ok || exit_code.is_some_and(|c| c != 0);
    if !failed {
        return None;
    }
    // Only failed results get here: one lower-case copy, then fast searches.
    let lower = text.to_ascii_lowercase();
    let has = |s: &str| lower.contains(s);
    if has("rate limit")
        || has("rate_limit")
        || has("too many requests")
        || has(" 429")
        || text.starts_with("429")
    {
        return Some("provider_rate_limit".into());
    }
    if has("overloaded") || has(" 529") {
        return Some("provider_overloaded".into());
    }
    if has("api error")
        || has("internal server error")
        || has("bad gateway")
        || has("service unavailable")
        || has("gateway timeout")
    {
        return Some("provider_error".into());
    }
    if has("timed out") || has("timeout") || exit_code == Some(124) {
        return Some("timeout".into());
    }
    if has("error[e") || has("could not compile") || has("syntaxerror") {
        return Some("compile_error".into());
    }
    if has("test result: failed")
        || has("assertionerror")
        || text.contains("FAILED")
        || has(" failed,")
        || has(" failed in ")
    {
        return Some("test_failure".into());
    }
    if let Some(exc) = traceback_exception(text) {
        return Some(format!("exception:{exc}"));
    }
    if command.is_some_and(is_test_command) {
        return Some("test_failure".into());
    }
    if has("command not found") || exit_code == Some(127) {
        return Some("command_not_found".into());
    }
    if let Some(c) = exit_code.filter(|c| *c != 0) {
        return Some(format!("exit_{c}"));
    }
    Some("tool_error".into())
}

/// The exception type a Python traceback ends with.
fn traceback_exception(text: &str) -> Option<String> {
    let at = text.rfind("Traceback (most recent call last)")?;
    text[at..]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("File ") && !l.starts_with('^'))
        .and_then(|l| l.split(':').next())
        .map(|t| t.rsplit('.').next().unwrap_or(t).trim().to_string())
        .filter(|t| !t.is_empty() && !t.contains(' '))
}

/// A command that runs tests.
pub fn is_test_command(command: &str) -> bool {
    const TESTS: [&str; 9] = [
        "pytest",
        "cargo test",
        "npm test",
        "go test",
        "unittest",
        "jest",
        "make test",
        "tox",
        "nextest",
    ];
    // Commands are short and mostly lower case: look without copying.
    let b = command.as_bytes();
    TESTS.iter().any(|t| {
        let n = t.as_bytes();
        b.len() >= n.len() && b.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
    })
}

/// Tools that change the work: a successful one is progress.
pub fn is_progress(tool: &str, command: Option<&str>) -> bool {
    const WRITES: [&str; 10] = [
        "write",
        "edit",
        "multiedit",
        "notebookedit",
        "str_replace_editor",
        "apply_patch",
        "file_change",
        "create",
        "str_replace",
        "file_editor",
    ];
    // `server.tool` names count by their last part.
    let last = tool.rsplit('.').next().unwrap_or(tool);
    WRITES.iter().any(|w| last.eq_ignore_ascii_case(w)) || command.is_some_and(is_test_command)
}

/// The context window of a model, where the stream does not tell it.
pub fn context_window(model: &str) -> Option<u64> {
    let m = model.to_ascii_lowercase();
    if m.contains("[1m]") {
        Some(1_000_000)
    } else if m.contains("claude")
        || m.contains("sonnet")
        || m.contains("opus")
        || m.contains("haiku")
    {
        Some(200_000)
    } else if m.contains("gpt-5") || m.contains("codex") {
        Some(272_000)
    } else if m.contains("gpt-4.1") {
        Some(1_047_576)
    } else if m.contains("gpt-4o") || m.contains("o3") || m.contains("o4") {
        Some(128_000)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        let c = |ok, code, text: &str, cmd| error_class(ok, code, text, cmd);
        assert_eq!(c(true, Some(0), "fine", None), None);
        assert_eq!(c(true, None, "", None), None);
        assert_eq!(
            c(false, None, "API Error: 429 rate limit reached", None).as_deref(),
            Some("provider_rate_limit")
        );
        assert_eq!(
            c(false, None, "Overloaded", None).as_deref(),
            Some("provider_overloaded")
        );
        assert_eq!(
            c(false, None, "API Error: 500 Internal Server Error", None).as_deref(),
            Some("provider_error")
        );
        assert_eq!(c(true, Some(124), "", None).as_deref(), Some("timeout"));
        assert_eq!(
            c(false, None, "Command timed out after 2m", None).as_deref(),
            Some("timeout")
        );
        assert_eq!(
            c(
                true,
                Some(101),
                "test result: FAILED. 3 passed; 1 failed",
                None
            )
            .as_deref(),
            Some("test_failure")
        );
        assert_eq!(
            c(true, Some(1), "", Some("pytest -q")).as_deref(),
            Some("test_failure")
        );
        assert_eq!(
            c(true, Some(101), "error[E0425]: cannot find value", None).as_deref(),
            Some("compile_error")
        );
        let tb = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    import foo\nModuleNotFoundError: No module named 'foo'\n";
        assert_eq!(
            c(true, Some(1), tb, None).as_deref(),
            Some("exception:ModuleNotFoundError")
        );
        assert_eq!(
            c(true, Some(127), "bash: rg: command not found", None).as_deref(),
            Some("command_not_found")
        );
        assert_eq!(
            c(true, Some(2), "make: *** [all] Error 2", None).as_deref(),
            Some("exit_2")
        );
        assert_eq!(
            c(false, None, "File does not exist.", None).as_deref(),
            Some("tool_error")
        );
        assert!(is_provider("provider_overloaded") && !is_provider("timeout"));
    }

    #[test]
    fn progress_and_windows() {
        assert!(is_progress("Edit", None) && is_progress("apply_patch", None));
        assert!(is_progress("Bash", Some("cargo test -q")));
        assert!(!is_progress("Bash", Some("ls")) && !is_progress("Read", None));
        assert_eq!(context_window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(context_window("claude-sonnet-4-5[1m]"), Some(1_000_000));
        assert_eq!(context_window("gpt-5-codex"), Some(272_000));
        assert_eq!(context_window("mystery-7b"), None);
    }
}
