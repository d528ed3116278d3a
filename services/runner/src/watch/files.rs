//! The recordings a watch follows: which files and folders are sessions,
//! their names, and their new lines or events since the last poll.

use super::*;

/// A recording's own name, the unit's when its stream names no session: a
/// file's stem; an OpenHands `events/` folder's conversation folder; any
/// other folder's name.
pub fn recording_name(path: &Path) -> String {
    let name = if path.is_dir() {
        let dir = if path.ends_with("events") {
            path.parent().unwrap_or(path)
        } else {
            path
        };
        dir.file_name()
    } else {
        path.file_stem()
    };
    name.and_then(|n| n.to_str()).unwrap_or("run").to_string()
}

/// An OpenHands event file's place in its run, from its name: `<n>.json`
/// (V0: `sessions/<id>/events/`) or `event-<n>-<uuid>.json` (V1 SDK:
/// `conversations/<id>/events/`); `None` for any other file a conversation
/// keeps beside its events (`metadata.json`, `init.json`,
/// `base_state.json`, V0's `event_cache/<n>-<m>.json` pages, which repeat
/// the events 25 a file).
pub fn event_number(file_name: &str) -> Option<u64> {
    let stem = file_name.strip_suffix(".json")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if digits(stem) {
        return stem.parse().ok();
    }
    let (n, id) = stem.strip_prefix("event-")?.split_once('-')?;
    (digits(n) && !id.is_empty())
        .then(|| n.parse().ok())
        .flatten()
}

/// An OpenHands event file: its number, name and path.
pub type EventFile = (u64, String, PathBuf);

/// The event files of an OpenHands events folder, in event order:
/// (number, file name, path). Files that are no event are left out.
pub fn event_files(dir: &Path) -> std::io::Result<Vec<EventFile>> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let Some(name) = p.file_name().and_then(|s| s.to_str()) else {
            continue;
        };
        if let Some(n) = event_number(name) {
            files.push((n, name.to_string(), p.clone()));
        }
    }
    files.sort();
    Ok(files)
}

/// A conversation's events folder: `dir` itself when it holds event
/// files, else its `events/` when that does (an OpenHands session or
/// conversation folder).
pub fn conversation_events(dir: &Path) -> Option<(PathBuf, Vec<EventFile>)> {
    let holding = |d: PathBuf| {
        event_files(&d)
            .ok()
            .filter(|f| !f.is_empty())
            .map(|f| (d, f))
    };
    holding(dir.to_path_buf()).or_else(|| holding(dir.join("events")))
}

/// The session files (`*.jsonl`) under the directories; for OpenHands also
/// event directories (`events/` folders of `<n>.json` files), marked `true`.
pub(super) fn scan(format: Format, dirs: &[String]) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = dirs.iter().map(PathBuf::from).collect();
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut has_events = false;
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                out.push((p, false));
            } else if format == Format::OpenHands
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(event_number)
                    .is_some()
            {
                has_events = true;
            }
        }
        if has_events {
            out.push((d, true));
        }
    }
    out.sort();
    out
}

/// The complete lines appended since the last read. A file shorter than
/// what was read was truncated or replaced: read again from its start.
pub(super) fn read_lines(path: &Path, s: &mut Session, format: Format) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len < s.offset {
        info!(unit = s.unit().unwrap_or(&s.name), path = %path.display(), "session file truncated or rotated: reading it again");
        s.offset = 0;
        s.partial.clear();
        s.sensor = Sensor::new(format);
    }
    if len == s.offset || f.seek(SeekFrom::Start(s.offset)).is_err() {
        return Vec::new();
    }
    let mut buf = Vec::new();
    if f.take(len - s.offset).read_to_end(&mut buf).is_err() {
        return Vec::new();
    }
    s.offset += buf.len() as u64;
    s.partial.extend_from_slice(&buf);
    let mut lines = Vec::new();
    while let Some(i) = s.partial.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = s.partial.drain(..=i).collect();
        lines.push(String::from_utf8_lossy(&line[..line.len() - 1]).into_owned());
    }
    lines
}

/// OpenHands event files not read yet, in event order, one line each.
pub(super) fn read_events(dir: &Path, s: &mut Session) -> Vec<String> {
    let Ok(files) = event_files(dir) else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    for (_, name, p) in files {
        if s.seen.contains(&name) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        // An event file still being written is read on a later poll.
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            break;
        };
        s.seen.insert(name);
        lines.push(v.to_string());
    }
    lines
}
