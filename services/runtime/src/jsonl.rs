//! JSON-lines files: one value a line, appended whole (the fleet's audit,
//! the reviewers' run log, the volume's steering files).

use std::path::Path;

use tokio::io::AsyncWriteExt;

/// Appends `value` as one JSON line, creating the folder and the file as
/// needed. One write a line, so concurrent writers append whole lines.
pub async fn append<T: serde::Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        tokio::fs::create_dir_all(d).await?;
    }
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .await?;
    f.write_all(&line).await?;
    f.flush().await
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn appends_whole_lines_in_a_new_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a/b/log.jsonl");
        super::append(&p, &serde_json::json!({"n": 1}))
            .await
            .unwrap();
        super::append(&p, &serde_json::json!({"n": 2}))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n"
        );
    }
}
