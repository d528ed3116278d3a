//! The settings page: every key with its default and source, typed
//! per-field, previewed, saved.

use maud::{Markup, html};

use super::*;

/// Milliseconds in the largest unit that divides them: `1800000` → `30m`.
pub(crate) fn human_ms(ms: u64) -> String {
    for (unit, n) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= n && ms.is_multiple_of(n) {
            return format!("{}{unit}", ms / n);
        }
    }
    format!("{ms}ms")
}

pub(crate) use xo_runtime::clock::parse_ms;

/// A key's value when the settings do not set it: xo.toml's, or for a
/// role xo.toml does not name (one seen in the fleet), the default role's.
pub(crate) fn default_of<'a>(v: &'a SettingsView, key: &str) -> Option<&'a Value> {
    v.defaults.get(key).or_else(|| {
        let rest = key.strip_prefix("roles.")?;
        let (_, field) = rest.split_once(".doctrine.")?;
        v.defaults.get(&format!("roles.default.doctrine.{field}"))
    })
}

/// A settings key's editor, with where its value comes from.
pub(crate) fn setting_row(
    f: &Frame<'_>,
    v: &SettingsView,
    key: &str,
    kind: &str,
    help: &str,
    choices: &[String],
    edits: &FormChange,
) -> Markup {
    let set = v.settings.values.get(key);
    // A refused field shows what was typed, and why it was refused.
    let error = edits.errors.get(key);
    let typed = error.and(edits.typed.get(key));
    let value = set
        .or_else(|| default_of(v, key))
        .cloned()
        .unwrap_or(Value::Null);
    let source = if edits.set.contains_key(key) || error.is_some() {
        html! { span.src.edited { "edited, not saved" } }
    } else if set.is_some() {
        html! { span.src.set { "settings v" (v.settings.version) } }
    } else if v.defaults.contains_key(key) {
        html! { span.src { "xo.toml" } }
    } else if default_of(v, key).is_some() {
        html! { span.src { "the default role's" } }
    } else {
        html! { span.src { "not set" } }
    };
    let name = format!("set:{key}");
    // The control is labelled by its key (a list's boxes by their names).
    let control = format!("input-{}", field_id(key));
    let ro = f.read_only;
    let as_text = |value: &Value| match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let editor = match kind {
        "bool" => html! {
            input type="hidden" name=(name) value="false";
            input type="checkbox" name=(name) value="true" checked[value.as_bool().unwrap_or(false)] disabled[ro] id=(control);
        },
        "template" => html! {
            textarea name=(name) rows="4" data-key=(key) disabled[ro] id=(control) {
                (typed.map_or(value.as_str().unwrap_or(""), String::as_str))
            }
        },
        "choice" => html! {
            select name=(name) disabled[ro] id=(control) {
                @for ch in choices { option selected[value.as_str() == Some(ch)] { (ch) } }
            }
        },
        "list" => {
            let on: Vec<&str> = value
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            html! {
                input type="hidden" name={ "list:" (key) } value="";
                @for ch in choices {
                    label.check {
                        input type="checkbox" name={ "list:" (key) } value=(ch) checked[on.contains(&ch.as_str())] disabled[ro];
                        " " (ch)
                    }
                }
            }
        }
        // Durations read and typed in human units (`30m`, `2h`, `1500ms`).
        _ if key.ends_with("_ms") => html! {
            input name=(name)
                value=(typed.cloned().unwrap_or_else(|| value.as_u64().map(human_ms).unwrap_or_default()))
                data-kind="duration" placeholder="e.g. 30m, 2h, 90s" disabled[ro] id=(control);
        },
        _ => html! {
            input name=(name) value=(typed.cloned().unwrap_or_else(|| as_text(&value))) data-kind=(kind) disabled[ro] id=(control);
        },
    };
    let unsetting = edits.unset.iter().any(|u| u == key);
    html! {
        div class={ "setting" @if error.is_some() { " invalid" } } data-setting=(key) id={ "field-" (field_id(key)) } {
            div.key {
                @if kind == "list" { code { (key) } } @else { label for=(control) { code { (key) } } }
                " " (source) small { (help) }
            }
            div.editor {
                (editor)
                @if (set.is_some() || unsetting) && !ro {
                    label.check { input type="checkbox" name="unset" value=(key) checked[unsetting]; " back to xo.toml" }
                }
                @if let Some(e) = error { p.field-error role="alert" { (e) } }
            }
        }
    }
}

/// The sample task of the preview.
pub(crate) fn sample_task() -> xo_proto::queue::Task {
    let mut t = xo_proto::queue::Task::new(
        "sample-1",
        "Add a health endpoint",
        "Add GET /health returning {\"ok\": true}.",
        "coder",
    );
    t.acceptance_criteria = vec!["GET /health answers 200".into()];
    t
}

/// The composed prompt of the sample task under `v` (and the edits in `form`).
pub(crate) fn preview(
    c: &Shared,
    values: &BTreeMap<String, Value>,
    project: &str,
) -> Result<String, String> {
    let settings = xo_proto::settings::Settings {
        version: 1,
        values: values.clone(),
        ..Default::default()
    };
    let cfg = xo_runtime::settings::apply(&c.cfg, &settings).map_err(|e| e.to_string())?;
    let mut task = sample_task();
    task.project = Some(project.to_string());
    let role = cfg
        .runner
        .role_templates
        .get(&task.role)
        .cloned()
        .unwrap_or_default();
    let project_t = settings
        .project_template(project, "input_template")
        .unwrap_or("")
        .to_string();
    let templates = xo_compose::Templates {
        global: &cfg.runner.global_template,
        project: &project_t,
        role: &role,
    };
    let ctx = xo_compose::Context::default();
    let p = xo_compose::compose(
        xo_compose::PromptKind::Prompt,
        &templates,
        &task,
        &ctx,
        None,
    );
    Ok(p.text().to_string())
}

pub(crate) fn settings_body(
    f: &Frame<'_>,
    v: &SettingsView,
    project: &str,
    roles: &[String],
    extra: Markup,
    edits: &FormChange,
) -> Markup {
    let key_of = |k: &str| v.keys.iter().find(|x| x.key == k);
    let row = |key: &str, pattern: &str| {
        key_of(pattern).map(|k| setting_row(f, v, key, &k.kind, &k.help, &k.choices, edits))
    };
    let per_role = html! {
        @for r in roles {
            // A role with a refused field opens, so its error is seen.
            @let open = edits.errors.keys().any(|k| k.starts_with(&format!("roles.{r}.")));
            details open[open] {
                summary { "Role " b { (r) } ": radio rules and thresholds" }
                @for k in v.keys.iter().filter(|k| k.key.starts_with("roles.<role>.")) {
                    (setting_row(f, v, &k.key.replace("<role>", r), &k.kind, &k.help, &k.choices, edits))
                }
            }
        }
    };
    // Every settable key has its field: those of a section in its
    // section, any other under "Other settings".
    let sections: [(&str, &[&str]); 6] = [
        (
            "Prompt templates",
            &[
                "runner.global_template",
                "projects.<project>.input_template",
                "runner.output_template",
                "projects.<project>.output_template",
                "runner.role_templates.<role>",
            ],
        ),
        (
            "The project's rules",
            &[
                "projects.<project>.timeout_profile",
                "projects.<project>.allow_raw_output",
                "projects.<project>.fail_on_violation",
            ],
        ),
        ("Supervision", &["supervisor.enabled"]),
        (
            "Validation and retries",
            &[
                "runner.fail_on_violation",
                "runner.helper_agent",
                "runner.max_retries",
            ],
        ),
        (
            "Timeouts and restarts",
            &[
                "runner.timeout_default_ms",
                "runner.timeouts.standard_ms",
                "runner.timeouts.long_ms",
                "runner.timeouts.extended_ms",
                "runner.restart_mode",
            ],
        ),
        (
            "Review supervisors",
            &[
                "review.enabled",
                "review.model.model",
                "review.model.base_url",
                "review.daily_budget_usd",
                "review.project_budget_usd",
            ],
        ),
    ];
    let shown: Vec<&str> = sections
        .iter()
        .flat_map(|(_, keys)| keys.iter().copied())
        .collect();
    let other: Vec<&str> = v
        .keys
        .iter()
        .map(|k| k.key.as_str())
        .filter(|k| !k.starts_with("roles.<role>.") && !shown.contains(k))
        .collect();
    let fields = html! {
        @for (legend, keys) in sections {
            fieldset {
                legend { (legend) }
                @for pattern in keys {
                    @if pattern.contains("<role>") {
                        @for r in roles { (row(&pattern.replace("<role>", r), pattern).unwrap_or_default()) }
                    } @else {
                        (row(&pattern.replace("<project>", project), pattern).unwrap_or_default())
                    }
                }
                @if legend == "Supervision" { (per_role) }
            }
        }
        @if !other.is_empty() {
            fieldset {
                legend { "Other settings" }
                @for pattern in &other { (row(&pattern.replace("<project>", project), pattern).unwrap_or_default()) }
            }
        }
    };
    html! {
        p.summary {
            "Settings version " b #settings-version { (v.settings.version) }
            @if !v.settings.updated_by.is_empty() {
                " (by " (v.settings.updated_by) ", " (age(f.now, v.settings.updated_at)) ")"
            }
            ". Values set here win over " code { "xo.toml" }
            " and apply from the next task and the next report, without a restart; every change is a "
            code { "SETTINGS_CHANGED" } " line in the audit."
        }
        (extra)
        // Read-only: the values, and no form to send.
        @if f.read_only {
            div.settings #settings-form { (fields) }
        } @else {
            form method="post" action="/ui/settings" id="settings-form" class="settings" {
                input type="hidden" name="csrf" value=(f.csrf);
                input type="hidden" name="base_version" value=(v.settings.version);
                input type="hidden" name="project" value=(project);
                (fields)
                div.actions.sticky {
                    button type="submit" name="do" value="preview" id="preview" { "Check and preview" }
                    " "
                    button type="submit" name="do" value="save" id="save" class="primary" { "Save" }
                }
            }
        }
        form method="get" class="filters" {
            label { "Project for its templates " input name="project" value=(project); }
            button type="submit" { "Switch" }
        }
    }
}

/// The roles the settings page offers: xo.toml's, those in the settings,
/// and those of the units the supervisor knows (a role seen in the fleet
/// can be tuned before anyone writes it down).
pub(crate) async fn roles_of(c: &Shared, v: &SettingsView) -> Vec<String> {
    let mut roles: Vec<String> = c.cfg.roles.keys().cloned().collect();
    if let Ok(units) = c.units().await {
        for u in units {
            if !roles.contains(&u.role) && xo_proto::validate_token("role", &u.role).is_ok() {
                roles.push(u.role);
            }
        }
    }
    for k in v.settings.values.keys().chain(v.defaults.keys()) {
        let parts: Vec<&str> = k.split('.').collect();
        if let ["roles", r, ..] | ["runner", "role_templates", r] = parts.as_slice()
            && !roles.iter().any(|x| x == r)
        {
            roles.push(r.to_string());
        }
    }
    roles.sort();
    roles
}

pub(crate) fn default_project(c: &Shared) -> String {
    c.cfg.runner.default_project.clone()
}

/// The project the settings page edits first: the goal's, else the
/// runners' default.
pub(crate) async fn goal_project(c: &Shared) -> String {
    c.call(&GetStatus {})
        .await
        .ok()
        .and_then(|s| s.goal.project_id)
        .unwrap_or_else(|| default_project(c))
}

pub(crate) async fn settings(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Settings", "/settings", &q);
    let v = match c.call(&GetSettings {}).await {
        Ok(v) => v,
        Err(e) => return down(&f, &e),
    };
    let project = match q
        .get("project")
        .filter(|p| xo_proto::validate_token("project", p).is_ok())
    {
        Some(p) => p.clone(),
        None => goal_project(&c).await,
    };
    let roles = roles_of(&c, &v).await;
    ok_page(
        &f,
        settings_body(&f, &v, &project, &roles, html! {}, &FormChange::default()),
    )
}

/// What the operator sent: the change it makes, and, field by field,
/// what was typed and what is wrong with it. A refused form is shown
/// again with every edit in place and every error beside its field.
#[derive(Debug, Default, Clone)]
pub(crate) struct FormChange {
    pub set: BTreeMap<String, Value>,
    pub unset: Vec<String>,
    /// Each `set:` field's text as typed (kept on the page when refused).
    pub typed: BTreeMap<String, String>,
    /// Key → what is wrong (a key that is not a setting, a value of the
    /// wrong type, out of range, a template that does not check out).
    pub errors: BTreeMap<String, String>,
    /// A refusal that names no field (the service's, a stale version).
    pub general: Option<String>,
}

impl FormChange {
    pub(crate) fn refused(&self) -> bool {
        !self.errors.is_empty() || self.general.is_some()
    }

    /// Files a service's refusal under the field it names (its message
    /// starts with the key), else as a general one.
    pub(crate) fn refuse(&mut self, message: String) {
        let key = self
            .set
            .keys()
            .chain(&self.unset)
            .filter(|k| message.contains(k.as_str()))
            .max_by_key(|k| k.len())
            .cloned();
        match key {
            Some(k) => {
                let why = reason_only(&k, &message);
                self.errors.insert(k, why);
            }
            None => self.general = Some(message),
        }
    }
}

/// What is wrong with `key`, without naming it: every error is shown
/// beside its field and listed after its key, so the key is said once.
pub(crate) fn reason_only(key: &str, message: &str) -> String {
    let m = message.trim();
    for prefix in [
        format!("config key {key}: "),
        format!("{key}: "),
        format!("{key:?}: "),
    ] {
        if let Some(rest) = m.strip_prefix(&prefix) {
            return rest.to_string();
        }
    }
    m.to_string()
}

/// Reads the settings form: `set:<key>` fields (typed by the key's kind),
/// `list:<key>` checkboxes, `unset` keys. Only values that differ from
/// what is in force are in the change; every field that cannot be read is
/// named in `errors` (all of them, not the first).
pub(crate) fn read_form(v: &SettingsView, form: &[(String, String)]) -> FormChange {
    let kind_of = |key: &str| -> Option<String> {
        v.keys.iter().find_map(|k| {
            let pat: Vec<&str> = k.key.split('.').collect();
            let parts: Vec<&str> = key.split('.').collect();
            (pat.len() == parts.len()
                && pat
                    .iter()
                    .zip(&parts)
                    .all(|(p, x)| p.starts_with('<') || p == x))
            .then(|| k.kind.clone())
        })
    };
    let mut out = FormChange {
        unset: form
            .iter()
            .filter(|(k, _)| k == "unset")
            .map(|(_, v)| v.clone())
            .collect(),
        ..Default::default()
    };
    // The last value of a field wins (a checked box after its hidden "false").
    let mut lists: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, val) in form {
        if let Some(key) = k.strip_prefix("set:") {
            out.typed.insert(key.to_string(), val.clone());
        } else if let Some(key) = k.strip_prefix("list:") {
            let l = lists.entry(key.to_string()).or_default();
            if !val.is_empty() {
                l.push(val.clone());
            }
        }
    }
    for (key, raw) in &out.typed {
        if out.unset.contains(key) {
            continue;
        }
        let Some(kind) = kind_of(key) else {
            out.errors.insert(key.clone(), "not a setting".to_string());
            continue;
        };
        // An emptied number is no value: back to xo.toml if it was set,
        // else nothing to change (never "\"\" is not a whole number").
        if matches!(kind.as_str(), "integer" | "number") && raw.trim().is_empty() {
            if v.settings.values.contains_key(key) {
                out.unset.push(key.clone());
            }
            continue;
        }
        let value = match kind.as_str() {
            "integer" if key.ends_with("_ms") => parse_ms(raw).map(Value::from).ok_or_else(|| {
                format!("{raw:?} is not a duration (e.g. 30m, 2h, 90s, 1500ms, or milliseconds)")
            }),
            "bool" => Ok(Value::Bool(raw == "true")),
            "integer" => raw
                .trim()
                .parse::<u64>()
                .map(Value::from)
                .map_err(|_| format!("{raw:?} is not a whole number")),
            "number" => raw
                .trim()
                .parse::<f64>()
                .map(Value::from)
                .map_err(|_| format!("{raw:?} is not a number")),
            _ => Ok(Value::String(raw.replace("\r\n", "\n"))),
        };
        match value {
            Ok(value) => {
                out.set.insert(key.clone(), value);
            }
            Err(e) => {
                out.errors.insert(key.clone(), e);
            }
        }
    }
    for (key, items) in lists {
        if !out.unset.contains(&key) {
            out.set.insert(key, Value::from(items));
        }
    }
    // Only what changes: a value equal to the one in force is not a change.
    out.set.retain(|k, val| {
        let current = v.settings.values.get(k).or_else(|| default_of(v, k));
        match current {
            Some(cur) => cur != val,
            None => {
                !(val.is_null()
                    || val.as_str() == Some("")
                    || val.as_array().is_some_and(|a| a.is_empty()))
            }
        }
    });
    out
}

/// Checks the change against the settings in force as `xo.toml` would
/// (ranges, URLs, templates). When it is refused, each value is checked on
/// its own so that every field that is wrong is named, not only the first
/// the check meets; a refusal no single field explains stays general.
pub(crate) fn check_change(base: &xo_runtime::XoConfig, v: &SettingsView, change: &mut FormChange) {
    let Err(whole) = xo_runtime::settings::change(base, &v.settings, &change.set, &change.unset)
    else {
        return;
    };
    let mut named = false;
    for (key, value) in &change.set {
        let one = BTreeMap::from([(key.clone(), value.clone())]);
        if let Err(e) = xo_runtime::settings::change(base, &v.settings, &one, &[]) {
            change
                .errors
                .insert(key.clone(), reason_only(key, &e.to_string()));
            named = true;
        }
    }
    if !named {
        change.refuse(whole.to_string());
    }
    change.set.retain(|k, _| !change.errors.contains_key(k));
}

/// [`read_form`] as a change to send, or every error, one per field (the
/// tests' shorthand).
#[cfg(test)]
pub(crate) fn form_change(
    v: &SettingsView,
    form: &[(String, String)],
) -> Result<(BTreeMap<String, Value>, Vec<String>), String> {
    let c = read_form(v, form);
    if c.errors.is_empty() {
        Ok((c.set, c.unset))
    } else {
        Err(c
            .errors
            .iter()
            .map(|(k, e)| format!("{k}: {e}"))
            .collect::<Vec<_>>()
            .join("; "))
    }
}

pub(crate) async fn ui_settings(State(c): State<Shared>, UiForm(form): UiForm) -> Response {
    let get = |k: &str| field(&form, k);
    let project = get("project")
        .filter(|p| xo_proto::validate_token("project", p).is_ok())
        .unwrap_or_else(|| default_project(&c));
    let to = format!("/settings?project={}", enc(&project));
    let v = match c.call(&GetSettings {}).await {
        Ok(v) => v,
        Err(e) => return back(&to, Err(e.message)),
    };
    let mut change = read_form(&v, &form);
    check_change(&c.cfg, &v, &mut change);
    let preview_asked = get("do").as_deref() == Some("preview");
    if !preview_asked && !change.refused() {
        if change.set.is_empty() && change.unset.is_empty() {
            return back(&to, Ok("nothing changed".into()));
        }
        let base_version = get("base_version").and_then(|b| b.parse().ok());
        let n = change.set.len() + change.unset.len();
        match c
            .call(&PutSettings {
                set: change.set.clone(),
                unset: change.unset.clone(),
                base_version,
                by: crate::auth::who().by(None),
            })
            .await
        {
            Ok(v) => {
                return back(
                    &to,
                    Ok(format!(
                        "saved settings version {} ({n} changed)",
                        v.settings.version
                    )),
                );
            }
            // Refused by the service: the page again, the edits kept.
            Err(e) => change.refuse(e.message),
        }
    }
    // The page again, showing the edited values (so Save sends them), each
    // refused field with what it was typed as and why.
    let mut values = v.settings.values.clone();
    for k in &change.unset {
        values.remove(k);
    }
    values.extend(change.set.clone());
    let f = Frame {
        title: "Settings",
        active: "/settings",
        csrf: crate::auth::who().csrf,
        read_only: c.auth.read_only(),
        flash: None,
        now: c.clock.now_ms(),
    };
    let extra = if change.refused() {
        refusal(&change, preview_asked)
    } else {
        match preview(&c, &values, &project) {
            Ok(text) => html! {
                section.preview {
                    p.flash.ok #check {
                        "The templates check out (" (change.set.len() + change.unset.len()) " changed, not saved yet)."
                    }
                    h2 { "Composed prompt of a sample task" }
                    pre #preview-text { (text) }
                }
            },
            Err(e) => html! { p.flash.error #check { (e) } },
        }
    };
    let mut shown = v.clone();
    shown.settings.values = values;
    let roles = roles_of(&c, &shown).await;
    let status = if change.refused() {
        StatusCode::BAD_REQUEST
    } else {
        StatusCode::OK
    };
    (
        status,
        Html(page(
            &f,
            settings_body(&f, &shown, &project, &roles, extra, &change),
        )),
    )
        .into_response()
}

/// A refused change, at the top of the page: how many things to fix, and
/// each, its key a link to its field (the key said once: the reason
/// beside the field does not repeat it).
pub(crate) fn refusal(change: &FormChange, preview_asked: bool) -> Markup {
    let n = change.errors.len() + usize::from(change.general.is_some());
    html! {
        div.flash.error #check role="alert" {
            p {
                (n) " " (if n == 1 { "thing" } else { "things" }) " to fix; nothing was "
                (if preview_asked { "previewed" } else { "saved" }) ", every edit is still on the page."
            }
            ul #errors {
                @for (k, e) in &change.errors {
                    li { a href={ "#field-" (field_id(k)) } { code { (k) } } ": " (e) }
                }
                @if let Some(g) = &change.general { li { (g) } }
            }
        }
    }
}

/// The HTML id of a setting's field (`#field-runner-max_retries`).
pub(crate) fn field_id(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}
