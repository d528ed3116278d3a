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

/// `println!`, made safe for a terminal ([`safe`]).
#[macro_export]
macro_rules! outln {
    () => { println!() };
    ($($t:tt)*) => {{
        let s = format!($($t)*);
        println!("{}", $crate::term::safe(&s));
    }};
}

/// `print!`, made safe for a terminal ([`safe`]).
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => {{
        let s = format!($($t)*);
        print!("{}", $crate::term::safe(&s));
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
