//! What the CLI prints is safe for a terminal. Reports, task texts,
//! steering and errors come from agents and the wire: an escape sequence in
//! a unit's name or a report could move the cursor, rewrite the screen,
//! set the window title or hide text (bidi overrides). Every human-readable
//! line goes through [`safe`] ([`outln!`](crate::outln), [`out!`](crate::out),
//! [`errln!`](crate::errln)): control characters other than newline and tab,
//! and bidi controls, are shown as `\u{…}`. JSON output escapes them
//! already.

use std::borrow::Cow;
use std::fmt::Write;

fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `s` with control characters (but newline and tab) and bidi controls
/// written as `\u{…}`.
pub fn safe(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if unsafe_char(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Writes `s` to stdout. A reader that went away (`xo tasks | head -3`)
/// ends the command quietly, as a Unix tool does, instead of a panic;
/// another failure to write says so and exits 1.
pub fn print_out(s: &str) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_all(s.as_bytes()) {
        closed_stdout(&e);
    }
}

/// Ends the command for an error writing to stdout (see [`print_out`]).
pub fn closed_stdout(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: cannot write to stdout: {e}");
    std::process::exit(1);
}

/// Whether `e` is stdout's reader gone (a closed pipe), anywhere in its chain.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
    })
}

/// `println!`, made safe for a terminal ([`safe`]), quiet on a closed pipe.
#[macro_export]
macro_rules! outln {
    () => { $crate::term::print_out("\n") };
    ($($t:tt)*) => {{
        let mut s = $crate::term::safe(&format!($($t)*)).into_owned();
        s.push('\n');
        $crate::term::print_out(&s);
    }};
}

/// `print!`, made safe for a terminal ([`safe`]), quiet on a closed pipe.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        let s = format!($($t)*);
        $crate::term::print_out(&$crate::term::safe(&s));
    }};
}

/// `eprintln!`, made safe for a terminal ([`safe`]).
#[macro_export]
macro_rules! errln {
    () => { eprintln!() };
    ($($t:tt)*) => {{
        let s = format!($($t)*);
        eprintln!("{}", $crate::term::safe(&s));
    }};
}

#[cfg(test)]
mod tests {
    use super::safe;

    #[test]
    fn escapes_are_shown_not_obeyed() {
        assert_eq!(safe("coder-1\tok\n"), "coder-1\tok\n");
        assert!(matches!(safe("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(safe("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(safe("bell\u{7}"), "bell\\u{7}");
        assert_eq!(safe("c1\u{9b}31m"), "c1\\u{9b}31m");
        assert_eq!(safe("r\rx"), "r\\u{d}x");
        assert_eq!(safe("evil\u{202e}txt"), "evil\\u{202e}txt");
        assert_eq!(safe("naïve ✓"), "naïve ✓");
    }
}
