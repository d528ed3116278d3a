//! NATS subject rules: validation and wildcard matching for the local transports.

use crate::{BusError, BusResult};

fn invalid(subject: &str, reason: &str) -> BusError {
    BusError::InvalidSubject {
        subject: subject.to_string(),
        reason: reason.to_string(),
    }
}

/// A subject to publish to: tokens, no wildcards, no whitespace.
pub fn validate_subject(subject: &str) -> BusResult<()> {
    validate(subject, false)
}

/// A pattern to subscribe to: `*` stands for one token, `>` (last) for the rest.
pub fn validate_pattern(pattern: &str) -> BusResult<()> {
    validate(pattern, true)
}

fn validate(s: &str, wildcards: bool) -> BusResult<()> {
    if s.is_empty() {
        return Err(invalid(s, "empty"));
    }
    let tokens: Vec<&str> = s.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return Err(invalid(s, "empty token"));
        }
        if t.chars().any(char::is_whitespace) {
            return Err(invalid(s, "whitespace"));
        }
        let wild = *t == "*" || *t == ">";
        if wild && !wildcards {
            return Err(invalid(s, "wildcards are not allowed here"));
        }
        if *t == ">" && i + 1 != tokens.len() {
            return Err(invalid(s, "'>' must be the last token"));
        }
        if !wild && (t.contains('*') || t.contains('>')) {
            return Err(invalid(s, "a wildcard must be a whole token"));
        }
    }
    Ok(())
}

/// A parsed subscription pattern.
#[derive(Debug, Clone)]
pub struct Pattern(Vec<String>);

impl Pattern {
    pub fn new(pattern: &str) -> Self {
        Self(pattern.split('.').map(str::to_string).collect())
    }

    /// A pattern without a wildcard token: it matches one subject, itself.
    pub fn is_literal(pattern: &str) -> bool {
        !pattern.split('.').any(|t| t == "*" || t == ">")
    }

    pub fn matches(&self, subject: &str) -> bool {
        let mut toks = subject.split('.');
        for (i, p) in self.0.iter().enumerate() {
            match p.as_str() {
                ">" => return toks.next().is_some() && i + 1 == self.0.len(),
                "*" => {
                    if toks.next().is_none() {
                        return false;
                    }
                }
                lit => {
                    if toks.next() != Some(lit) {
                        return false;
                    }
                }
            }
        }
        toks.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_nats() {
        let p = Pattern::new("xo.salute.*");
        assert!(p.matches("xo.salute.u1"));
        assert!(!p.matches("xo.salute"));
        assert!(!p.matches("xo.salute.u1.x"));
        let g = Pattern::new("xo.>");
        assert!(g.matches("xo.a") && g.matches("xo.a.b.c"));
        assert!(!g.matches("xo"));
        assert!(Pattern::new("a.b").matches("a.b") && !Pattern::new("a.b").matches("a.c"));
        // Literal: matched by looking it up (crate::local).
        assert!(Pattern::is_literal("xo.salute.u1") && Pattern::is_literal("_INBOX.local.7"));
        assert!(!Pattern::is_literal("xo.*") && !Pattern::is_literal("xo.>"));
        assert!(!Pattern::is_literal("*.a") && !Pattern::is_literal(">"));
    }

    #[test]
    fn validation_names_the_problem() {
        assert!(validate_subject("xo.salute.u1").is_ok());
        assert!(validate_subject("xo.*").is_err());
        assert!(validate_pattern("xo.>.x").is_err());
        assert!(validate_pattern("xo..x").is_err());
        assert!(validate_pattern("xo.a*").is_err());
        let e = validate_subject("xo. a").unwrap_err().to_string();
        assert!(e.contains("whitespace"), "{e}");
    }
}
