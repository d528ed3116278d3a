//! Project configuration (SUP-4): `<project>/.xo/project.toml`, read when a
//! task starts, so an edit applies from the next task. Missing → empty
//! templates; invalid → an error naming the file, line and key.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use xo_proto::queue::TimeoutProfile;

use crate::sandbox::Sandbox;

pub const PROJECT_FILE: &str = ".xo/project.toml";

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProjectConfig {
    /// Second in every prompt of this project.
    pub input_template: String,
    /// Read the input template from this file (relative to the project).
    pub input_template_file: String,
    /// Applied to every validated reply; overrides the global one.
    pub output_template: String,
    pub output_template_file: String,
    /// Role templates for this project; override the global ones.
    pub role_templates: BTreeMap<String, String>,
    /// Headings every reply's message must contain; a reply without them is
    /// a major violation (SUP-7).
    pub required_sections: Vec<String>,
    pub supervisor_rules: SupervisorRules,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorRules {
    /// Overrides the task's timeout profile.
    pub timeout_profile: Option<TimeoutProfile>,
    /// Overrides the runner's `max_retries`.
    pub max_retries: Option<u32>,
    /// Seed 004 SUP-4: the results of this project keep the agent's raw
    /// output as their formatted output, with no output template applied
    /// (`template_applied: false`).
    pub allow_raw_output: bool,
    /// Overrides `runner.fail_on_violation` (SUP-5): a major violation
    /// fails the task (`true`) or blocks it for the operator (`false`).
    pub fail_on_violation: Option<bool>,
    /// Overrides `runner.helper_agent` (seed 003's helper agent).
    pub helper_agent: Option<bool>,
    /// With `false` a reply without the JSON status object is taken as `ok`
    /// with the output's last line as its message.
    pub require_format_validation: bool,
    /// How a reply's status word is read: `strict` (seed 003: no "helpful"
    /// corrections; only `ok`, `blocked`, `error`, `escalate` as written,
    /// anything else is a format error the agent is asked to fix) or
    /// `corrected` (seed 004 SUP-7: case, spaces and the synonyms `done`,
    /// `success`, `completed`, `complete` → ok, `failed`, `failure` → error
    /// are fixed in place and logged as minor violations).
    pub reply_words: ReplyWords,
}

/// See [`SupervisorRules::reply_words`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplyWords {
    #[default]
    Strict,
    Corrected,
}

impl Default for SupervisorRules {
    fn default() -> Self {
        Self {
            timeout_profile: None,
            max_retries: None,
            allow_raw_output: false,
            fail_on_violation: None,
            helper_agent: None,
            require_format_validation: true,
            reply_words: ReplyWords::Strict,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("project config {path}: {reason}")]
pub struct ProjectError {
    pub path: String,
    pub reason: String,
}

impl ProjectConfig {
    /// Reads `<project_dir>/.xo/project.toml` and any template files it names.
    pub fn load(sandbox: &Sandbox, project_dir: &Path) -> Result<Self, ProjectError> {
        let path = project_dir.join(PROJECT_FILE);
        let shown = path.display().to_string();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(ProjectError {
                    path: shown,
                    reason: e.to_string(),
                });
            }
        };
        let mut cfg: ProjectConfig = toml::from_str(&text).map_err(|e| ProjectError {
            path: shown.clone(),
            reason: e.to_string().trim_end().replace('\n', " "),
        })?;
        for (key, file, target) in [
            (
                "input_template_file",
                cfg.input_template_file.clone(),
                &mut cfg.input_template,
            ),
            (
                "output_template_file",
                cfg.output_template_file.clone(),
                &mut cfg.output_template,
            ),
        ] {
            if file.is_empty() {
                continue;
            }
            let p = sandbox
                .resolve(project_dir, &file)
                .map_err(|e| ProjectError {
                    path: shown.clone(),
                    reason: format!("{key}: {e}"),
                })?;
            *target = std::fs::read_to_string(&p).map_err(|e| ProjectError {
                path: shown.clone(),
                reason: format!("{key} {}: {e}", p.display()),
            })?;
        }
        if cfg.supervisor_rules.max_retries == Some(0) {
            return Err(ProjectError {
                path: shown,
                reason: "supervisor_rules.max_retries must be at least 1".into(),
            });
        }
        Ok(cfg)
    }

    /// The operator's settings for `project` (the console's Settings page)
    /// laid over this file: templates, timeout profile, raw output and
    /// violations.
    pub fn with_settings(mut self, settings: &xo_proto::settings::Settings, project: &str) -> Self {
        if let Some(t) = settings.project_template(project, "input_template") {
            self.input_template = t.to_string();
        }
        if let Some(t) = settings.project_template(project, "output_template") {
            self.output_template = t.to_string();
        }
        if let Some(p) = settings.project_timeout_profile(project) {
            self.supervisor_rules.timeout_profile = Some(p);
        }
        if let Some(b) = settings.project_flag(project, "allow_raw_output") {
            self.supervisor_rules.allow_raw_output = b;
        }
        if let Some(b) = settings.project_flag(project, "fail_on_violation") {
            self.supervisor_rules.fail_on_violation = Some(b);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Sandbox, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let sb = Sandbox::open(tmp.path()).unwrap();
        let p = sb.project_dir("p").unwrap();
        std::fs::create_dir_all(p.join(".xo")).unwrap();
        (tmp, sb, p)
    }

    #[test]
    fn missing_is_empty_and_files_are_read() {
        let (_t, sb, p) = setup();
        std::fs::remove_dir(p.join(".xo")).unwrap();
        assert_eq!(
            ProjectConfig::load(&sb, &p).unwrap(),
            ProjectConfig::default()
        );
        std::fs::create_dir_all(p.join(".xo")).unwrap();
        std::fs::write(p.join("tmpl.md"), "PROJECT RULES").unwrap();
        std::fs::write(
            p.join(PROJECT_FILE),
            "input_template_file = \"tmpl.md\"\n[supervisor_rules]\ntimeout_profile = \"long\"\n",
        )
        .unwrap();
        let c = ProjectConfig::load(&sb, &p).unwrap();
        assert_eq!(c.input_template, "PROJECT RULES");
        assert_eq!(
            c.supervisor_rules.timeout_profile,
            Some(TimeoutProfile::Long)
        );
        assert!(c.supervisor_rules.require_format_validation);
    }

    #[test]
    fn errors_name_file_key_and_line() {
        let (_t, sb, p) = setup();
        std::fs::write(p.join(PROJECT_FILE), "input_templat = \"x\"\n").unwrap();
        let e = ProjectConfig::load(&sb, &p).unwrap_err().to_string();
        assert!(
            e.contains("project.toml") && e.contains("input_templat"),
            "{e}"
        );
        std::fs::write(p.join(PROJECT_FILE), "a = \n").unwrap();
        let e = ProjectConfig::load(&sb, &p).unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
        std::fs::write(p.join(PROJECT_FILE), "input_template_file = \"gone.md\"\n").unwrap();
        let e = ProjectConfig::load(&sb, &p).unwrap_err().to_string();
        assert!(
            e.contains("input_template_file") && e.contains("gone.md"),
            "{e}"
        );
        std::fs::write(
            p.join(PROJECT_FILE),
            "output_template_file = \"../../etc/passwd\"\n",
        )
        .unwrap();
        let e = ProjectConfig::load(&sb, &p).unwrap_err().to_string();
        assert!(e.contains("escapes the sandbox"), "{e}");
    }
}
