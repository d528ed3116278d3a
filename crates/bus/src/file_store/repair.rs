//! `xo store repair`'s side of the file store: a whole file scanned past
//! damage, what each damaged span held (for a person), and the file
//! rewritten with its good records after a backup.

use super::*;

/// What a store file holds: its good records and the damaged byte ranges
/// between them (for `xo store repair`).
#[derive(Debug, Default)]
pub struct Scan {
    /// (offset, body) of every record that reads.
    pub records: Vec<(u64, Vec<u8>)>,
    /// (offset, length, reason) of every damaged span skipped.
    pub damaged: Vec<(u64, u64, String)>,
    /// A torn last record: (offset, length) cut off.
    pub torn: Option<(u64, u64)>,
}

/// Reads a whole store file, skipping damage: after a bad record it goes on
/// at the next offset where a valid record starts.
pub fn scan_file(path: &Path) -> StoreResult<Scan> {
    let mut data = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut data).map_err(|e| io_err(path, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Scan::default()),
        Err(e) => return Err(io_err(path, e)),
    }
    let mut scan = Scan::default();
    let mut pos = 0usize;
    while pos < data.len() {
        match frame_at(&data, pos) {
            Ok(end) => {
                scan.records.push((pos as u64, data[pos + 8..end].to_vec()));
                pos = end;
            }
            Err(FrameFault::Torn) => {
                scan.torn = Some((pos as u64, (data.len() - pos) as u64));
                break;
            }
            Err(FrameFault::Bad(reason)) => {
                let next = valid_frame_after(&data, pos + 1).unwrap_or(data.len());
                scan.damaged.push((pos as u64, (next - pos) as u64, reason));
                pos = next;
            }
        }
    }
    Ok(scan)
}

/// `xo store repair`: what it did to one file.
#[derive(Debug)]
pub struct Repair {
    pub backup: PathBuf,
    pub kept: usize,
    /// (offset, length, reason) of every span dropped.
    pub dropped: Vec<(u64, u64, String)>,
    /// What the dropped spans held, a line a record as far as they read: in
    /// a bucket, the key and revision and whether a later revision of that
    /// key was kept (then nothing is lost); in a log, the record's place
    /// and its start.
    pub lost: Vec<String>,
    pub torn: Option<(u64, u64)>,
}

/// What the damaged span at `offset` (of `len` bytes) held, for a person:
/// one line a record whose length still reads, or a line for bytes that do not.
fn describe_span(path: &Path, data: &[u8], offset: u64, len: u64, scan: &Scan) -> Vec<String> {
    let (mut pos, end) = (offset as usize, ((offset + len) as usize).min(data.len()));
    let mut out = Vec::new();
    while pos + 8 <= end {
        let n =
            u32::from_le_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]) as usize;
        if pos + 8 + n > end {
            // Its length is what is damaged: the rest of the span is
            // taken as its body, if that reads.
            let body = &data[pos + 8..end];
            let kv = path.extension().is_some_and(|e| e == "kv");
            if !kv || rmp_serde::from_slice::<KvRecord>(body).is_ok() {
                out.push(describe_record(path, body, pos as u64, scan));
                pos = end;
            }
            break;
        }
        out.push(describe_record(
            path,
            &data[pos + 8..pos + 8 + n],
            pos as u64,
            scan,
        ));
        pos += 8 + n;
    }
    if pos < end {
        out.push(format!(
            "at {pos}: {} bytes whose records cannot be told apart (the backup has them)",
            end - pos
        ));
    }
    out
}

/// One damaged record's body at `offset`.
fn describe_record(path: &Path, body: &[u8], offset: u64, scan: &Scan) -> String {
    if path.extension().is_some_and(|e| e == "kv") {
        let Ok(rec) = rmp_serde::from_slice::<KvRecord>(body) else {
            return format!("at {offset}: no key can be read from it");
        };
        let later = scan
            .records
            .iter()
            .filter(|(at, _)| *at > offset)
            .filter_map(|(_, b)| rmp_serde::from_slice::<KvRecord>(b).ok())
            .filter(|r| r.key == rec.key)
            .map(|r| r.rev)
            .max();
        let what = if rec.value.is_some() {
            "value"
        } else {
            "delete"
        };
        match later {
            Some(rev) => format!(
                "at {offset}: key {} rev {} ({what}); a later revision ({rev}) is kept, nothing is lost",
                rec.key, rec.rev
            ),
            None => format!(
                "at {offset}: key {} rev {} ({what}); LOST: no later revision of it is kept (the backup has the bytes)",
                rec.key, rec.rev
            ),
        }
    } else {
        let index = scan.records.iter().filter(|(at, _)| *at < offset).count();
        let start: String = String::from_utf8_lossy(&body[..body.len().min(80)])
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        format!(
            "at {offset}: the log's record {} (after {index} kept); it starts {start:?}",
            index + 1
        )
    }
}

/// Rewrites a store file with only its good records, after copying it to
/// `<file>.bak-<ms>`. A file with nothing damaged is left alone (`None`).
pub fn repair_file(path: &Path) -> StoreResult<Option<Repair>> {
    let scan = scan_file(path)?;
    if scan.damaged.is_empty() && scan.torn.is_none() {
        return Ok(None);
    }
    let backup = path.with_extension(format!(
        "{}.bak-{}",
        path.extension().and_then(|e| e.to_str()).unwrap_or("store"),
        xo_proto::now_ms()
    ));
    let data = std::fs::read(path).map_err(|e| io_err(path, e))?;
    let lost = scan
        .damaged
        .iter()
        .flat_map(|(offset, len, _)| describe_span(path, &data, *offset, *len, &scan))
        .collect();
    std::fs::copy(path, &backup).map_err(|e| io_err(&backup, e))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&backup, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| io_err(&backup, e))?;
    }
    let mut out = Vec::new();
    for (_, body) in &scan.records {
        out.extend_from_slice(&frame(body));
    }
    replace(path, &out, Mode::Private).map_err(|e| io_err(path, e))?;
    Ok(Some(Repair {
        backup,
        kept: scan.records.len(),
        dropped: scan.damaged,
        lost,
        torn: scan.torn,
    }))
}
