//! Relevance of a knowledge document to a task: the words and paths they
//! share. Deterministic and cheap: lower-cased word tokens (3+ characters,
//! common words dropped) and path prefixes. A document's tags weigh most,
//! its title and name next, its rules least; `role:R` and `type:T` tags
//! match the task's role and type.

use std::collections::BTreeSet;

use xo_proto::knowledge::{About, KnowledgeDoc};

const STOP: [&str; 32] = [
    "the", "and", "for", "with", "that", "this", "from", "into", "are", "was", "not", "but", "all",
    "any", "you", "your", "its", "has", "have", "when", "then", "must", "should", "use", "each",
    "one", "out", "off", "than", "them", "they", "what",
];

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.len() >= 3)
        .map(str::to_lowercase)
        .filter(|w| !STOP.contains(&w.as_str()))
}

/// What a task is about, as sets to match against.
#[derive(Debug, Default)]
pub struct Terms {
    words: BTreeSet<String>,
    paths: Vec<String>,
    role: String,
    task_type: String,
}

impl Terms {
    pub fn of(a: &About) -> Self {
        let mut words: BTreeSet<String> = words(&a.text).collect();
        let mut paths = Vec::new();
        for p in &a.paths {
            let p = p.trim_matches('/').to_lowercase();
            words.extend(self::words(&p));
            paths.push(p);
        }
        Self {
            words,
            paths,
            role: a.role.to_lowercase(),
            task_type: a.task_type.to_lowercase(),
        }
    }

    /// 0: unrelated. Tags 3 a match, title and name 2, rules 1.
    pub fn score(&self, d: &KnowledgeDoc) -> u32 {
        if self.words.is_empty() && self.paths.is_empty() && self.role.is_empty() {
            return 0;
        }
        let mut score = 0;
        for t in &d.tags {
            let t = t.trim().to_lowercase();
            if let Some(r) = t.strip_prefix("role:") {
                score += 3 * u32::from(r == self.role);
            } else if let Some(ty) = t.strip_prefix("type:") {
                score += 3 * u32::from(ty == self.task_type);
            } else if t.contains('/') {
                let tp = t.trim_matches('/');
                score += 3 * u32::from(
                    self.paths
                        .iter()
                        .any(|p| p.starts_with(tp) || tp.starts_with(p.as_str())),
                );
            } else {
                score += 3 * words(&t).filter(|w| self.words.contains(w)).count() as u32;
            }
        }
        let title: BTreeSet<String> = words(&d.title).chain(words(&d.name)).collect();
        score += 2 * title.iter().filter(|w| self.words.contains(*w)).count() as u32;
        let rules: BTreeSet<String> = d.rules.iter().flat_map(|r| words(r)).collect();
        score += rules.iter().filter(|w| self.words.contains(*w)).count() as u32;
        score
    }
}
