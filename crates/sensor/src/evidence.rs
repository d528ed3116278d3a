//! Evidence a steering can quote (issue 37, item 1): the command that
//! decided a shell step's outcome, the line of its output that says what
//! happened, and what a non-zero status means for the tools whose status
//! reports findings rather than failure.
//!
//! A shell line's status is its last command's: `cd x && pylint a.py` is
//! pylint's, `cat <<EOF > t.py … EOF` then `python3 t.py` is python's, and
//! never `cd`'s or `cat`'s, which is what the first word used to name.

/// The command whose status decides a shell line's outcome: heredoc
/// bodies dropped, the line split at `&&`, `||`, `;` and line breaks
/// outside quotes, the last part kept (`cd`, `export`, `source`, `set` and
/// `true` are passed over from the end when something else ran before
/// them). A `bash -lc '…'` wrapper is opened first.
pub fn deciding_command(command: &str) -> std::borrow::Cow<'_, str> {
    let mut line = command.trim();
    for prefix in [
        "bash -lc ",
        "bash -c ",
        "sh -c ",
        "/bin/bash -lc ",
        "/bin/zsh -lc ",
        "zsh -lc ",
    ] {
        if let Some(r) = line.strip_prefix(prefix) {
            line = r.trim().trim_matches(|c| c == '\'' || c == '"').trim();
        }
    }
    // One command alone (no separator, no heredoc): itself, as the split
    // below would give it, without its copies.
    if !line.contains(['\n', ';', '&', '|', '<']) {
        return std::borrow::Cow::Borrowed(line);
    }
    let parts = split_top_level(&without_heredocs(line));
    let setup = |p: &str| {
        let w = p.split_whitespace().next().unwrap_or("");
        matches!(
            w,
            "cd" | "export" | "source" | "." | "set" | "true" | "pushd" | "popd"
        )
    };
    parts
        .iter()
        .rev()
        .find(|p| !setup(p))
        .or_else(|| parts.last())
        .cloned()
        .unwrap_or_default()
        .into()
}

/// The command of a pipeline whose exit status is the pipeline's: its last
/// stage (`pip list | grep x` exits as `grep x`; without `pipefail`, the
/// earlier stages' statuses are lost). A `|` inside quotes, `$(…)` or a
/// `||` is no stage break.
pub fn status_command(command: &str) -> &str {
    // No pipe at all: the command itself, as the walk below would find.
    if !command.contains('|') {
        return command.trim();
    }
    let (mut quote, mut depth) = (None::<u8>, 0u32);
    let b = command.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), b'\\') => i += 1,
            (Some(_), _) => {}
            (None, b'\'' | b'"' | b'`') => quote = Some(c),
            (None, b'(') => depth += 1,
            (None, b')') => depth = depth.saturating_sub(1),
            (None, b'|') if depth == 0 => {
                match b.get(i + 1) {
                    Some(b'|') => i += 1,
                    // `|&`: stdout and stderr piped.
                    Some(b'&') => {
                        i += 1;
                        start = i + 1;
                    }
                    _ => start = i + 1,
                }
            }
            _ => {}
        }
        i += 1;
    }
    command[start..].trim()
}

/// The program of a command: [`xo_proto::salute::command_program`] (the
/// radio reads a report's `cmd` with the same function).
pub use xo_proto::salute::command_program as program;

/// The line drops heredoc bodies: from a line with `<<WORD` (or `<<'WORD'`,
/// `<<-WORD`, `<<"WORD"`) to the line that is `WORD`; and SWE-agent's edit
/// blocks, from `edit N:M` to `end_of_edit`.
fn without_heredocs(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut until: Option<String> = None;
    for l in line.lines() {
        if let Some(end) = &until {
            if l.trim() == end {
                until = None;
            }
            continue;
        }
        out.push_str(l);
        out.push('\n');
        // SWE-agent's `edit N:M` takes lines up to `end_of_edit`.
        if l.trim_start().starts_with("edit ")
            && l.split_whitespace().nth(1).is_some_and(|r| r.contains(':'))
        {
            until = Some("end_of_edit".into());
            continue;
        }
        if let Some(at) = l.find("<<") {
            let rest = l[at + 2..].trim_start_matches('-').trim_start();
            let word: String = rest
                .trim_start_matches(['\'', '"'])
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                until = Some(word);
            }
        }
    }
    out
}

/// Splits at `&&`, `||`, `;` and line breaks outside quotes and `$(…)`.
fn split_top_level(line: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let (mut quote, mut depth) = (None::<char>, 0u32);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                cur.push(c);
            }
            (Some(_), '\\') => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            (Some(_), _) => cur.push(c),
            (None, '\'' | '"' | '`') => {
                quote = Some(c);
                cur.push(c);
            }
            (None, '(') => {
                depth += 1;
                cur.push(c);
            }
            (None, ')') => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            (None, '&' | '|') if depth == 0 && chars.peek() == Some(&c) => {
                chars.next();
                parts.push(std::mem::take(&mut cur));
            }
            (None, ';' | '\n') if depth == 0 => parts.push(std::mem::take(&mut cur)),
            (None, _) => cur.push(c),
        }
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The line of an output that says what happened: for a failure, the
/// last line with words in it (a traceback's exception, a compiler's
/// error, a test summary), passing over rulers, blank lines and a shell's
/// prompt echo; otherwise the first such line.
pub fn telling_line(output: &str, failed: bool) -> Option<&str> {
    let words = |l: &&str| has_words(l);
    if failed {
        // The first error line of the output's end beats the summary
        // after it ("error[E0425]: …" then "could not compile … due to 1
        // previous error"): the last 12 lines with words, read from the
        // end, searched in their order.
        let mut last = [""; 12];
        let mut n = 0;
        for l in output.lines().rev().map(str::trim).filter(words).take(12) {
            last[n] = l;
            n += 1;
        }
        let end = &mut last[..n];
        end.reverse();
        end.iter()
            .find(|l| {
                starts_with_ci(l, "error")
                    || crate::classify::contains_any(l, &["error:", "exception"])
            })
            .or(end.last())
            .copied()
    } else {
        // A finding (`file:line: code: text`) over a banner.
        let mut first = None;
        for l in output.lines().map(str::trim).filter(words).take(12) {
            if l.contains(": ") {
                return Some(l);
            }
            first.get_or_insert(l);
        }
        first
    }
}

/// A line with words in it: three letters or digits at least (a ruler,
/// `====` or `-- --`, has none).
fn has_words(l: &str) -> bool {
    // A ruler's `=` and `-` are no letters: three letters or digits are
    // the whole test, and the third ends it.
    l.chars().filter(|c| c.is_alphanumeric()).nth(2).is_some()
}

/// `text` starts with `lower` (lower-case ASCII), in any case.
fn starts_with_ci(text: &str, lower: &str) -> bool {
    text.len() >= lower.len()
        && text.as_bytes()[..lower.len()].eq_ignore_ascii_case(lower.as_bytes())
}

/// What a non-zero status means for a program whose status reports
/// findings: `None` when it is a failure (or unknown: then it is said as
/// "exited N", not "failed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meaning {
    /// `grep` found nothing: an answer, not a failure.
    NoMatch,
    /// `diff`/`cmp`: the inputs differ.
    Differ,
    /// A linter or formatter check reported findings in the code it read.
    Findings,
}

/// The documented meaning of `code` for `program` (the man pages and the
/// linters' docs: grep 1 "no lines were selected", diff 1 "inputs differ",
/// pylint's bit-encoded status where 1, 2 and 32 are fatal, error and
/// usage, and 4, 8, 16 warning, refactor and convention messages; flake8,
/// ruff, pycodestyle, pyflakes, eslint, shellcheck, black --check and
/// isort --check-only exit 1 for findings).
pub fn meaning(program: &str, code: i64) -> Option<Meaning> {
    match (program, code) {
        ("grep" | "egrep" | "fgrep" | "rg" | "ag" | "git-grep", 1) => Some(Meaning::NoMatch),
        ("diff" | "cmp", 1) => Some(Meaning::Differ),
        ("pylint", c) if c > 0 && c & (1 | 2 | 32) == 0 => Some(Meaning::Findings),
        (
            "flake8" | "ruff" | "pycodestyle" | "pyflakes" | "eslint" | "shellcheck" | "black"
            | "isort" | "pydocstyle",
            1,
        ) => Some(Meaning::Findings),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_that_decided_is_named_not_the_first_word() {
        assert_eq!(
            deciding_command("cd repo && pylint --disable=C a.py"),
            "pylint --disable=C a.py"
        );
        assert_eq!(
            deciding_command("cat <<'EOF' > t.py\nimport x\nprint(x.y())\nEOF\npython3 t.py"),
            "python3 t.py"
        );
        assert_eq!(
            deciding_command("cat <<EOF > t.py && python3 t.py\nimport x\nEOF"),
            "python3 t.py"
        );
        assert_eq!(
            deciding_command("bash -lc 'cd /w && cargo test -q'"),
            "cargo test -q"
        );
        assert_eq!(deciding_command("make build; echo done"), "echo done");
        assert_eq!(
            deciding_command("python3 -c \"a=1; b=2\" && cd x"),
            "python3 -c \"a=1; b=2\""
        );
        assert_eq!(deciding_command("cd x"), "cd x");
        assert_eq!(
            deciding_command("edit 3:4\n    return a / b\nend_of_edit"),
            "edit 3:4",
            "SWE-agent's edit block"
        );
        assert_eq!(
            deciding_command("pytest tests/ | tail -5"),
            "pytest tests/ | tail -5"
        );
        assert_eq!(program("FOO=1 timeout 60 /usr/bin/pytest -x"), "pytest");
        // The status of a pipeline is its last stage's (real command lines
        // of the committed Codex rollouts and OpenHands outputs).
        assert_eq!(
            status_command(r#"ps -ef | rg -i "Google Chrome|chrome.*remote|codemie|codemie-ui""#),
            r#"rg -i "Google Chrome|chrome.*remote|codemie|codemie-ui""#
        );
        assert_eq!(status_command("pip list | grep x"), "grep x");
        assert_eq!(status_command("pytest tests/ | tail -5"), "tail -5");
        assert_eq!(
            status_command("make build || echo failed"),
            "make build || echo failed"
        );
        assert_eq!(
            status_command("echo \"a|b\" $(ls | wc -l)"),
            "echo \"a|b\" $(ls | wc -l)"
        );
        assert_eq!(status_command("cargo test |& tee log"), "tee log");
        assert_eq!(program("sudo env A=b grep -r x ."), "grep");
    }

    #[test]
    fn the_telling_line_is_the_error_not_the_ruler() {
        let tb = "Traceback (most recent call last):\n  File \"t.py\", line 1\nModuleNotFoundError: No module named 'x'\n\n";
        assert_eq!(
            telling_line(tb, true),
            Some("ModuleNotFoundError: No module named 'x'")
        );
        let rustc = "error[E0425]: cannot find value `y`\n --> src/main.rs:2:5\n\nerror: could not compile `a` (bin \"a\") due to 1 previous error";
        assert_eq!(
            telling_line(rustc, true),
            Some("error[E0425]: cannot find value `y`")
        );
        assert_eq!(
            telling_line("==========\n3 failed, 2 passed in 0.1s\n=====", true),
            Some("3 failed, 2 passed in 0.1s")
        );
        assert_eq!(telling_line("\n  \n", true), None);
        let lint = "************* Module a\nsrc/a.py:3:0: C0116: Missing docstring\n";
        assert_eq!(
            telling_line(lint, false),
            Some("src/a.py:3:0: C0116: Missing docstring")
        );
    }

    #[test]
    fn statuses_that_report_findings_are_read_by_their_meaning() {
        assert_eq!(meaning("grep", 1), Some(Meaning::NoMatch));
        assert_eq!(meaning("grep", 2), None, "grep 2 is an error");
        assert_eq!(meaning("pylint", 16), Some(Meaning::Findings));
        assert_eq!(meaning("pylint", 4 | 16), Some(Meaning::Findings));
        assert_eq!(
            meaning("pylint", 2 | 16),
            None,
            "error messages are a failure"
        );
        assert_eq!(meaning("pylint", 32), None, "usage error");
        assert_eq!(meaning("diff", 1), Some(Meaning::Differ));
        assert_eq!(meaning("pytest", 1), None);
        assert_eq!(meaning("ruff", 1), Some(Meaning::Findings));
    }
}

#[cfg(test)]
mod same_as_before {
    use super::*;

    /// The telling line as first written (every line collected, each of
    /// the last twelve lower-cased): the faster one must pick the same.
    /// (Which lines have words is shared: only the choice among them changed.)
    fn reference(output: &str, failed: bool) -> Option<&str> {
        let all: Vec<&str> = output
            .lines()
            .map(str::trim)
            .filter(|l| has_words(l))
            .collect();
        if failed {
            all[all.len().saturating_sub(12)..]
                .iter()
                .find(|l| {
                    let lower = l.to_ascii_lowercase();
                    lower.starts_with("error")
                        || lower.contains("error:")
                        || lower.contains("exception")
                })
                .or(all.last())
                .copied()
        } else {
            all.iter()
                .take(12)
                .find(|l| l.contains(": "))
                .or(all.first())
                .copied()
        }
    }

    #[test]
    fn the_telling_line_is_the_one_the_first_version_picked() {
        const PIECES: [&str; 12] = [
            "ERROR: x",
            "Error[E0425]: y",
            "  ok done  ",
            "=====",
            "--",
            "a: b",
            "Exception z",
            "1 failed",
            "",
            "Traceback",
            "warn: w",
            "ÉRROR é",
        ];
        // A fixed pseudo-random walk over outputs of 0 to 40 lines.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..4000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 41) as usize;
            let lines: Vec<&str> = (0..n)
                .map(|i| PIECES[((x >> (i % 50)) as usize + i * 7) % PIECES.len()])
                .collect();
            let out = lines.join(if x & 1 == 0 { "\n" } else { "\r\n" });
            for failed in [true, false] {
                assert_eq!(
                    telling_line(&out, failed),
                    reference(&out, failed),
                    "{out:?} failed={failed}"
                );
            }
        }
    }

    #[test]
    fn one_command_alone_is_itself() {
        for c in [
            "cargo test -q",
            "  pytest -x  ",
            "echo 'a b'",
            "",
            "bash -lc 'make'",
        ] {
            let parts = split_top_level(&without_heredocs(c.trim()));
            let want = parts.last().cloned().unwrap_or_default();
            let got = deciding_command(c);
            if !c.starts_with("bash") {
                assert_eq!(got, want, "{c:?}");
            } else {
                assert_eq!(got, "make");
            }
        }
    }
}
