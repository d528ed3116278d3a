//! XO's hook in the agents' own settings: Claude Code's
//! `.claude/settings.local.json`, Codex's `.codex/hooks.json` and
//! `config.toml` (its `codex_hooks` feature, edited with `toml_edit`), and
//! the Codex home's hooks; each kept whole beside what else is there, and
//! replaced whole (`xo_runtime::files`).

use std::path::{Path, PathBuf};

use super::DriverError;

/// The hook command: this very binary's `hook <agent>`.
fn hook_command(agent: &str) -> String {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("xo"));
    format!("{} hook {agent}", shell_quote(&exe.display().to_string()))
}

fn shell_quote(s: &str) -> String {
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The Claude Code hook events `xo hook claude` is installed for.
pub const CLAUDE_HOOK_EVENTS: [&str; 6] = [
    "PostToolUse",
    "PostToolUseFailure",
    "Stop",
    "Notification",
    "PermissionRequest",
    "PreToolUse",
];

/// The Codex hook events `xo hook codex` is installed for (Codex runs
/// `PostToolUse` after every call, failed or not).
pub const CODEX_HOOK_EVENTS: [&str; 4] = ["PostToolUse", "Stop", "PermissionRequest", "PreToolUse"];

/// Adds XO's hook ([`CLAUDE_HOOK_EVENTS`]) to `<cwd>/.claude/settings.local.json`,
/// keeping whatever else is there; a file that is not JSON is an error
/// (never overwritten).
pub async fn install_claude_hook(cwd: &Path) -> Result<PathBuf, DriverError> {
    let path = cwd.join(".claude").join("settings.local.json");
    add_hooks(
        &path,
        &hook_command("claude"),
        &CLAUDE_HOOK_EVENTS,
        Some("*"),
    )
    .await?;
    Ok(path)
}

/// Adds XO's hook ([`CODEX_HOOK_EVENTS`]) to `<cwd>/.codex/hooks.json`, and
/// `codex_hooks = true` under `[features]` in `<cwd>/.codex/config.toml`
/// (Codex before 0.124 runs hooks only with it), keeping whatever else is
/// in both. Codex runs a project's hooks once the project is trusted and
/// the hook reviewed (`/hooks` in the CLI).
pub async fn install_codex_hook(cwd: &Path) -> Result<Vec<PathBuf>, DriverError> {
    let hooks = cwd.join(".codex").join("hooks.json");
    add_hooks(&hooks, &hook_command("codex"), &CODEX_HOOK_EVENTS, None).await?;
    let config = cwd.join(".codex").join("config.toml");
    let err =
        |what: &str, e: String| DriverError::Spawn(format!("{what} {}: {e}", config.display()));
    let text = match tokio::fs::read_to_string(&config).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(err("reading", e.to_string())),
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| {
        err("the Codex config is not TOML; fix or remove", e.to_string())
    })?;
    let on = |doc: &toml_edit::DocumentMut| {
        doc.get("features")
            .and_then(|f| f.as_table_like())
            .and_then(|f| f.get("codex_hooks"))
            .is_some()
    };
    if !on(&doc) {
        // Edited in place (comments, order and the table's own form kept:
        // `[features]`, `features = { … }` or `features.x = …`).
        match doc.get_mut("features") {
            None => {
                let mut t = toml_edit::Table::new();
                t.insert("codex_hooks", toml_edit::value(true));
                doc.insert("features", toml_edit::Item::Table(t));
            }
            Some(f) => match f.as_inline_table_mut() {
                // `features = { … }`: one more pair, spaced as usual.
                Some(t) => {
                    t.insert("codex_hooks", toml_edit::Value::from(true));
                    t.fmt();
                }
                None => match f.as_table_like_mut() {
                    Some(t) => {
                        t.insert("codex_hooks", toml_edit::value(true));
                    }
                    None => {
                        return Err(err(
                            "`features` is not a table; add `codex_hooks = true` under [features] by hand in",
                            String::new(),
                        ));
                    }
                },
            },
        }
        let written = doc.to_string();
        // What is written must say it: read back as Codex reads it.
        let back: toml::Table = written.parse().map_err(|e: toml::de::Error| {
            err(
                "cannot add codex_hooks = true under [features] (write it by hand) in",
                e.to_string(),
            )
        })?;
        let set = back
            .get("features")
            .and_then(|f| f.get("codex_hooks"))
            .and_then(|v| v.as_bool())
            == Some(true);
        if !set {
            return Err(err(
                "cannot add codex_hooks = true under [features] (write it by hand) in",
                String::new(),
            ));
        }
        xo_runtime::files::replace(
            &config,
            written.trim_start(),
            xo_runtime::files::Mode::Shared,
        )
        .await
        .map_err(|e| err("writing", e.to_string()))?;
    }
    Ok(vec![hooks, config])
}

/// Adds XO's hook ([`CODEX_HOOK_EVENTS`]) to the hooks of the Codex home
/// the agent runs with (`CODEX_HOME` in its environment, else
/// `$HOME/.codex`): Codex loads a project's own `.codex/hooks.json` only in
/// a project someone trusted, and a task's folder is new. The hook hands
/// steering only to a session working in a folder with steering pending, so
/// the user's other Codex sessions never see it.
pub async fn install_codex_user_hook(env: &[(String, String)]) -> Result<PathBuf, DriverError> {
    let var = |k: &str| {
        env.iter()
            .find(|(n, v)| n == k && !v.is_empty())
            .map(|(_, v)| PathBuf::from(v))
    };
    let home = var("CODEX_HOME")
        .or_else(|| var("HOME").map(|h| h.join(".codex")))
        .ok_or_else(|| {
            DriverError::Spawn(
                "runner.driver.hook = \"codex\": the agent's environment has neither CODEX_HOME nor HOME, so there is no Codex home to add the hook to; keep HOME (or CODEX_HOME) in runner.env_allow".into(),
            )
        })?;
    let path = home.join("hooks.json");
    add_hooks(&path, &hook_command("codex"), &CODEX_HOOK_EVENTS, None).await?;
    Ok(path)
}

/// Adds `command` for `events` to the hooks file at `path` (Claude Code's
/// and Codex's share a shape), keeping whatever else is there.
async fn add_hooks(
    path: &Path,
    command: &str,
    events: &[&str],
    matcher: Option<&str>,
) -> Result<(), DriverError> {
    let err = |what: &str, e: String| DriverError::Spawn(format!("{what} {}: {e}", path.display()));
    let mut settings: serde_json::Value = match tokio::fs::read_to_string(path).await {
        Ok(t) => serde_json::from_str(&t).map_err(|e| {
            err(
                "the hook settings are not JSON; fix or remove",
                e.to_string(),
            )
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(e) => return Err(err("reading", e.to_string())),
    };
    let obj = settings
        .as_object_mut()
        .ok_or_else(|| err("the hook settings are not a JSON object:", String::new()))?;
    let hooks = obj
        .entry("hooks")
        .or_insert_with(|| serde_json::json!({}))
        .as_object_mut()
        .ok_or_else(|| err("\"hooks\" is not an object in", String::new()))?;
    for &event in events {
        let list = hooks
            .entry(event)
            .or_insert_with(|| serde_json::json!([]))
            .as_array_mut()
            .ok_or_else(|| {
                err(
                    &format!("\"hooks.{event}\" is not an array in"),
                    String::new(),
                )
            })?;
        let present = list.iter().any(|m| {
            m.get("hooks").and_then(|h| h.as_array()).is_some_and(|h| {
                h.iter()
                    .any(|x| x.get("command").and_then(|c| c.as_str()) == Some(command))
            })
        });
        if !present {
            let mut e = serde_json::json!({"hooks": [{"type": "command", "command": command}]});
            // Stop takes no matcher.
            if let (Some(m), false) = (matcher, event == "Stop") {
                e["matcher"] = serde_json::json!(m);
            }
            list.push(e);
        }
    }
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| err("creating the folder of", e.to_string()))?;
    }
    let text =
        serde_json::to_string_pretty(&settings).map_err(|e| err("encoding", e.to_string()))?;
    xo_runtime::files::replace(path, text, xo_runtime::files::Mode::Shared)
        .await
        .map_err(|e| err("writing", e.to_string()))
}
