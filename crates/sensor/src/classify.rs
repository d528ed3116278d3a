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
//! | `format_error` | a reply the harness refused to run (mini-swe-agent's "provide EXACTLY ONE action") |
//!
//! Provider classes start with `provider_`: the radio treats them as an
//! outage, not as the agent's behaviour (no loop, oscillation or cascade
//! steering for them).

use std::borrow::Cow;

/// The prefix of every provider error class.
pub const PROVIDER: &str = "provider_";

/// The class of a reply the agent's harness refused to run.
pub const FORMAT_ERROR: &str = "format_error";

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
) -> Option<Cow<'static, str>> {
    let failed = !ok || exit_code.is_some_and(|c| c != 0);
    if !failed {
        return None;
    }
    // Only failed results get here: every clue found in one pass.
    let found = clues(text);
    macro_rules! has {
        ($clue:literal) => {
            found & (1 << const { clue($clue) }) != 0
        };
    }
    if has!("rate limit")
        || has!("rate_limit")
        || has!("too many requests")
        || has!(" 429")
        || text.starts_with("429")
    {
        return Some(Cow::Borrowed("provider_rate_limit"));
    }
    if has!("overloaded") || has!(" 529") {
        return Some(Cow::Borrowed("provider_overloaded"));
    }
    if has!("api error")
        || has!("internal server error")
        || has!("bad gateway")
        || has!("service unavailable")
        || has!("gateway timeout")
    {
        return Some(Cow::Borrowed("provider_error"));
    }
    if has!("timed out") || has!("timeout") || exit_code == Some(124) {
        return Some(Cow::Borrowed("timeout"));
    }
    if has!("error[e") || has!("could not compile") || has!("syntaxerror") {
        return Some(Cow::Borrowed("compile_error"));
    }
    if has!("test result: failed")
        || has!("assertionerror")
        || text.contains("FAILED")
        || has!(" failed,")
        || has!(" failed in ")
    {
        return Some(Cow::Borrowed("test_failure"));
    }
    if let Some(exc) = traceback_exception(text) {
        return Some(Cow::Owned(format!("exception:{exc}")));
    }
    if command.is_some_and(is_test_command) {
        return Some(Cow::Borrowed("test_failure"));
    }
    if has!("command not found") || exit_code == Some(127) {
        return Some(Cow::Borrowed("command_not_found"));
    }
    if let Some(c) = exit_code.filter(|c| *c != 0) {
        return Some(Cow::Owned(format!("exit_{c}")));
    }
    Some(Cow::Borrowed("tool_error"))
}

/// What [`error_class`] looks for in a failed result's text, in any case
/// (lower-case here).
const CLUES: [&str; 21] = [
    "rate limit",
    "rate_limit",
    "too many requests",
    " 429",
    "overloaded",
    " 529",
    "api error",
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
    "timed out",
    "timeout",
    "error[e",
    "could not compile",
    "syntaxerror",
    "test result: failed",
    "assertionerror",
    " failed,",
    " failed in ",
    "command not found",
];

/// The index of `c` in [`CLUES`] (at compile time: a clue not listed
/// does not build).
const fn clue(c: &str) -> usize {
    let mut k = 0;
    while k < CLUES.len() {
        let (a, b) = (CLUES[k].as_bytes(), c.as_bytes());
        if a.len() == b.len() {
            let mut i = 0;
            while i < a.len() && a[i] == b[i] {
                i += 1;
            }
            if i == a.len() {
                return k;
            }
        }
        k += 1;
    }
    panic!("not one of CLUES")
}

/// For each byte, the clues that start with it (in either case).
static CLUE_STARTS: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut k = 0;
    while k < CLUES.len() {
        let b = CLUES[k].as_bytes()[0];
        t[b as usize] |= 1 << k;
        t[b.to_ascii_uppercase() as usize] |= 1 << k;
        k += 1;
    }
    t
};

/// The clues `text` contains, in any case, as bits of their index: one
/// pass over the text, where a search a clue read it twenty times (and a
/// lower-case copy first).
fn clues(text: &str) -> u32 {
    let b = text.as_bytes();
    let mut found = 0u32;
    for i in 0..b.len() {
        let mut m = CLUE_STARTS[usize::from(b[i])] & !found;
        while m != 0 {
            let k = m.trailing_zeros() as usize;
            m &= m - 1;
            let n = CLUES[k].as_bytes();
            if b.len() - i >= n.len() && b[i..i + n.len()].eq_ignore_ascii_case(n) {
                found |= 1 << k;
            }
        }
    }
    found
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
    contains_any(command, &TEST_RUNNERS)
}

/// Case-insensitive substring search without copying the haystack: the
/// rest of a needle is compared only where its first byte is.
pub(crate) fn contains_any(text: &str, needles: &[&str]) -> bool {
    let b = text.as_bytes();
    needles.iter().any(|t| {
        let Some((first, rest)) = t.as_bytes().split_first() else {
            return true;
        };
        b.len() > rest.len()
            && b[..b.len() - rest.len()].iter().enumerate().any(|(i, c)| {
                c.eq_ignore_ascii_case(first)
                    && b[i + 1..i + 1 + rest.len()].eq_ignore_ascii_case(rest)
            })
    })
}

/// What a step did, for progress: a reviewer's view of "moved the task".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// Changed the work: a file written or edited.
    Write,
    /// Checked the work: a test, build, lint or type check of a common
    /// toolchain, or a delegated task (subagent) that came back.
    Check,
    /// Recorded the work: a commit or a push.
    Commit,
    /// Looked at the work: reading, listing or searching files. Progress
    /// the first time a run looks at that thing, not when it looks again.
    Explore,
    /// Anything else (a script run, a plan update, a question).
    Other,
}

/// Tools that change the work.
const WRITES: [&str; 10] = [
    "write",
    "edit",
    "multiedit",
    "notebookedit",
    "apply_patch",
    "file_change",
    "create",
    "str_replace",
    "insert",
    "write_file",
];

/// Tools that look at the work.
const READS: [&str; 27] = [
    "read",
    "view",
    "grep",
    "glob",
    "ls",
    "list",
    "search",
    "find",
    "open",
    "find_file",
    "search_dir",
    "search_file",
    "goto",
    "scroll_down",
    "scroll_up",
    "browse",
    "web_fetch",
    "webfetch",
    "websearch",
    "web_search",
    "notebookread",
    "read_file",
    "list_files",
    "list_dir",
    "codebase_search",
    "file_search",
    "grep_search",
];

/// Editors whose `command` argument says what they did.
const EDITORS: [&str; 3] = [
    "str_replace_editor",
    "file_editor",
    "str_replace_based_edit_tool",
];

/// Delegated work: a subagent whose result came back.
const DELEGATES: [&str; 2] = ["task", "agent"];

/// Shell commands that build, lint or type-check (tests are in [`is_test_command`]).
const CHECKS: [&str; 30] = [
    "cargo build",
    "cargo check",
    "cargo clippy",
    "cargo fmt --check",
    "cargo run",
    "go build",
    "go vet",
    "npm run",
    "pnpm run",
    "yarn run",
    "pnpm build",
    "yarn build",
    "npm ci",
    "tsc",
    "eslint",
    "ruff",
    "flake8",
    "mypy",
    "pylint",
    "black --check",
    "mix compile",
    "mix format",
    "make",
    "gradle",
    "gradlew",
    "mvn",
    "dotnet build",
    "cmake",
    "ninja",
    "pre-commit",
];

/// Commands that run tests: the first words of a command line (progress),
/// or anywhere in it (the class of a failure).
const TEST_RUNNERS: [&str; 19] = [
    "pytest",
    "cargo test",
    "cargo nextest",
    "npm test",
    "npm run test",
    "go test",
    "unittest",
    "jest",
    "vitest",
    "make test",
    "tox",
    "mix test",
    "dotnet test",
    "gradle test",
    "gradlew test",
    "mvn test",
    "yarn test",
    "pnpm test",
    "bun test",
];

/// First words of shell commands that only read.
const SHELL_READS: [&str; 26] = [
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "nl",
    "sed",
    "awk",
    "grep",
    "rg",
    "ag",
    "find",
    "fd",
    "ls",
    "tree",
    "wc",
    "file",
    "stat",
    "diff",
    "open",
    "search_dir",
    "find_file",
    "curl",
    "wget",
    "strings",
    "xxd",
];

/// First words of shell commands that write files.
const SHELL_WRITES: [&str; 6] = ["apply_patch", "patch", "touch", "mkdir", "tee", "cp"];

/// The lengths of a list's names, a bit each (bit 63 for any longer).
const fn lengths(list: &[&str]) -> u64 {
    let mut bits = 0u64;
    let mut i = 0;
    while i < list.len() {
        let n = list[i].len();
        bits |= 1 << if n < 63 { n } else { 63 };
        i += 1;
    }
    bits
}

/// The last part of a `server.tool` or `mcp__server__tool` name.
fn base_name(tool: &str) -> &str {
    let t = tool.rsplit('.').next().unwrap_or(tool);
    match t.as_bytes().windows(2).rposition(|w| w == b"__") {
        Some(at) => &t[at + 2..],
        None => t,
    }
}

/// The first command of a shell line, after `cd DIR &&` and env settings.
fn first_command(command: &str) -> &str {
    let mut rest = command.trim();
    for prefix in ["bash -lc ", "sh -c ", "/bin/bash -lc ", "/bin/zsh -lc "] {
        if let Some(r) = rest.strip_prefix(prefix) {
            rest = r.trim_matches(|c| c == '\'' || c == '"' || c == ' ');
        }
    }
    while let Some(at) = rest.as_bytes().windows(2).position(|w| w == b"&&") {
        let head = rest[..at].trim();
        if head.starts_with("cd ") || head.starts_with("export ") || head.starts_with("source ") {
            rest = rest[at + 2..].trim();
        } else {
            break;
        }
    }
    rest
}

/// What a step did: from the tool's name, else from its command line. An
/// editor's `command` argument (`view`, `create`…) is passed as `command`.
pub fn step_kind(tool: &str, command: Option<&str>) -> StepKind {
    let base = base_name(tool);
    // A name of a length none of a list's has is not compared to each.
    let is = |list: &[&str], lengths: u64| {
        lengths >> base.len().min(63) & 1 == 1 && list.iter().any(|w| base.eq_ignore_ascii_case(w))
    };
    if is(&EDITORS, const { lengths(&EDITORS) }) {
        return match command.map(str::trim) {
            Some("view") => StepKind::Explore,
            Some(_) => StepKind::Write,
            None => StepKind::Other,
        };
    }
    if is(&WRITES, const { lengths(&WRITES) }) {
        return StepKind::Write;
    }
    if is(&READS, const { lengths(&READS) }) {
        return StepKind::Explore;
    }
    if is(&DELEGATES, const { lengths(&DELEGATES) }) {
        return StepKind::Check;
    }
    let Some(cmd) = command else {
        return StepKind::Other;
    };
    let first = first_command(cmd);
    // Each starts with `git `: one search first.
    if contains_any(first, &["git "])
        && contains_any(first, &["git commit", "git push", "git am ", "git merge"])
    {
        return StepKind::Commit;
    }
    // A runner in front (`uv run pytest`, `npx tsc`) says nothing itself.
    let mut run = first;
    for prefix in [
        "npx ",
        "uv run ",
        "poetry run ",
        "python -m ",
        "python3 -m ",
        "bundle exec ",
        "time ",
        "./",
    ] {
        if let Some(r) = run.strip_prefix(prefix) {
            run = r.trim_start();
        }
    }
    let starts = |list: &[&str]| {
        list.iter().any(|c| {
            run.len() >= c.len()
                && run.as_bytes()[..c.len()].eq_ignore_ascii_case(c.as_bytes())
                && run[c.len()..]
                    .chars()
                    .next()
                    .is_none_or(|ch| !ch.is_alphanumeric())
        })
    };
    if starts(&TEST_RUNNERS) || starts(&CHECKS) {
        return StepKind::Check;
    }
    let word = first.split_whitespace().next().unwrap_or("");
    let word = word.rsplit('/').next().unwrap_or(word);
    if SHELL_WRITES.contains(&word)
        || (word == "sed" && first.contains(" -i"))
        || first.contains("git apply")
        || first.starts_with("cat >")
        || first.starts_with("cat <<")
    {
        return StepKind::Write;
    }
    if SHELL_READS.contains(&word)
        || first.starts_with("git log")
        || first.starts_with("git show")
        || first.starts_with("git diff")
        || first.starts_with("git grep")
    {
        return StepKind::Explore;
    }
    StepKind::Other
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
        use StepKind::*;
        assert_eq!(step_kind("Edit", None), Write);
        assert_eq!(step_kind("apply_patch", None), Write);
        assert_eq!(step_kind("Bash", Some("cargo test -q")), Check);
        assert_eq!(step_kind("Bash", Some("mix test")), Check);
        assert_eq!(step_kind("shell", Some("cd app && pnpm run lint")), Check);
        assert_eq!(
            step_kind("Bash", Some("git commit -m 'x' && git push")),
            Commit
        );
        assert_eq!(step_kind("Bash", Some("ls -la")), Explore);
        assert_eq!(
            step_kind("Bash", Some("curl http://localhost:8000/")),
            Explore
        );
        assert_eq!(
            step_kind("exec_command", Some("sed -n '1,80p' src/a.rs")),
            Explore
        );
        assert_eq!(step_kind("exec_command", Some("sed -i 's/a/b/' x")), Write);
        assert_eq!(step_kind("Read", None), Explore);
        assert_eq!(step_kind("mcp__fs__read_file", None), Explore);
        assert_eq!(step_kind("str_replace_editor", Some("view")), Explore);
        assert_eq!(step_kind("str_replace_editor", Some("create")), Write);
        assert_eq!(step_kind("Task", None), Check);
        assert_eq!(step_kind("TodoWrite", None), Other);
        assert_eq!(step_kind("Bash", Some("python repro.py")), Other);
        assert_eq!(context_window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(context_window("claude-sonnet-4-5[1m]"), Some(1_000_000));
        assert_eq!(context_window("gpt-5-codex"), Some(272_000));
        assert_eq!(context_window("mystery-7b"), None);
    }
}

#[cfg(test)]
mod same_as_before {
    use super::*;

    /// Numbers below `n`, the same every run (xorshift from `seed`).
    fn picks(mut state: u64) -> impl FnMut(usize) -> usize {
        move |n| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n as u64) as usize
        }
    }

    /// The error class as first written (a lower-case copy, a search a
    /// clue): the one-pass version must give the same class.
    fn reference(
        ok: bool,
        exit_code: Option<i64>,
        text: &str,
        command: Option<&str>,
    ) -> Option<String> {
        let failed = !ok || exit_code.is_some_and(|c| c != 0);
        if !failed {
            return None;
        }
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

    #[test]
    fn the_one_pass_class_is_the_first_one() {
        // Texts made of clues (cut, in mixed case, overlapping, at either
        // end) and the words around them in real outputs.
        let mut parts: Vec<String> = CLUES.iter().map(|c| c.to_string()).collect();
        parts.extend(CLUES.iter().map(|c| c.to_ascii_uppercase()));
        parts.extend(CLUES.iter().map(|c| c[..c.len() / 2].to_string()));
        parts.extend(
            [
                "429",
                "FAILED",
                "failed",
                "Traceback (most recent call last)\n  File \"x.py\"\nValueError: bad",
                "\n",
                " ",
                "é",
                "Error: ",
                "ok",
                "exit",
                "rate",
                "time",
                "out",
                "gate",
                "way",
                "test ",
            ]
            .map(String::from),
        );
        let mut next = picks(0x2545_f491_4f6c_dd1d);
        for _ in 0..20_000 {
            let text: String = (0..next(6))
                .map(|_| parts[next(parts.len())].as_str())
                .collect();
            let exit = [None, Some(0), Some(1), Some(124), Some(127), Some(2)][next(6)];
            let ok = next(2) == 0;
            let command = [None, Some("pytest -q"), Some("ls")][next(3)];
            assert_eq!(
                error_class(ok, exit, &text, command).as_deref(),
                reference(ok, exit, &text, command).as_deref(),
                "{text:?} {exit:?} {ok} {command:?}"
            );
        }
    }

    /// The search of commands for test runners (and of a command's head
    /// for `git `) is the plain search of a lower-case copy, needle by
    /// needle: on texts made of the needles whole, cut and upper-cased.
    #[test]
    fn the_case_blind_search_is_a_lower_case_search() {
        let mut parts: Vec<String> = TEST_RUNNERS.iter().map(|n| n.to_string()).collect();
        parts.extend(TEST_RUNNERS.iter().map(|n| n.to_ascii_uppercase()));
        parts.extend(TEST_RUNNERS.iter().map(|n| n[1..].to_string()));
        parts.extend(["git ", "GIT", " ", "-q", "é", "t"].map(String::from));
        let mut next = picks(0x9e37_79b9_7f4a_7c15);
        for _ in 0..20_000 {
            let text: String = (0..next(4))
                .map(|_| parts[next(parts.len())].as_str())
                .collect();
            let lower = text.to_ascii_lowercase();
            for needle in TEST_RUNNERS.iter().chain(&["git "]) {
                assert_eq!(
                    contains_any(&text, &[needle]),
                    lower.contains(&needle.to_ascii_lowercase()),
                    "{text:?} {needle:?}"
                );
            }
        }
    }
}
