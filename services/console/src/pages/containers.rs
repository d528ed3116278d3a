//! The containers page: the fleet manager's units, scale and restart.

use super::*;

pub(crate) async fn containers(State(c): State<Shared>, Query(q): Q) -> Response {
    let f = frame(&c, "Containers", "/containers", &q);
    let st = match c.call(&FleetLs {}).await {
        Ok(s) => s,
        Err(mut e) => {
            // The likely cause first: the fleet manager runs only on Docker.
            if e.code == xo_proto::control::ErrorCode::Unavailable
                && c.cfg.fleet.backend != xo_runtime::config::FleetBackend::Docker
            {
                e.message = format!(
                    "The fleet manager is not running: it manages runner containers only with `fleet.backend = \"docker\"`, and this fabric's is `{}`. Set it in xo.toml ([fleet] backend = \"docker\", with fleet.image and fleet.runners) or XO__FLEET__BACKEND=docker, and restart `xo up`. Without it, start runners yourself: `xo serve runner --role coder`. ({})",
                    wire(&c.cfg.fleet.backend),
                    e.message
                );
            }
            return down(&f, &e);
        }
    };
    let mut body = format!(
        "<p>Backend <b>{}</b></p><h2>Roles</h2><div class=\"scroll\"><table><thead><tr><th>Role</th><th>Desired</th><th>Running</th><th></th></tr></thead><tbody>",
        esc(&st.backend)
    );
    for (role, n) in &st.desired {
        let running = st
            .units
            .iter()
            .filter(|u| &u.role == role && u.running)
            .count();
        let failed = if st.failed.contains(role) {
            " <span class=\"badge red\">failed</span>"
        } else {
            ""
        };
        body.push_str(&format!(
            "<tr><td>{r}{failed}</td><td class=\"num\">{n}</td><td class=\"num\">{running}</td><td>{act}</td></tr>",
            r = esc(role),
            act = action(
                &f,
                &format!("/ui/fleet/{role}/scale"),
                &format!("<input name=\"replicas\" type=\"number\" min=\"0\" max=\"100\" value=\"{n}\">"),
                "Scale",
                ""
            ),
        ));
    }
    body.push_str("</tbody></table></div><h2>Containers</h2><div class=\"scroll\"><table><thead><tr><th>Unit</th><th>Role</th><th>Running</th><th>Container</th><th></th></tr></thead><tbody>");
    for u in &st.units {
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            esc(&u.unit),
            esc(&u.role),
            if u.running { "yes" } else { "no" },
            esc(&u.container),
            action(
                &f,
                &format!("/ui/fleet/units/{}/restart", u.unit),
                "",
                "Restart",
                ""
            )
        ));
    }
    body.push_str("</tbody></table></div>");
    ok_page(&f, &body)
}

pub(crate) async fn ui_scale(
    State(c): State<Shared>,
    Path(role): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let replicas = field(&form, "replicas").and_then(|v| v.parse::<u32>().ok());
    let Some(replicas) = replicas else {
        return back("/containers", Err("replicas: a whole number".into()));
    };
    let r = c
        .call(&FleetScale {
            role: role.clone(),
            replicas,
        })
        .await
        .map(|_| format!("{role} scaled to {replicas}"))
        .map_err(|e| e.message);
    back("/containers", r)
}

pub(crate) async fn ui_restart(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    _: UiForm,
) -> Response {
    let r = c
        .call(&FleetRestart { unit: unit.clone() })
        .await
        .map(|_| format!("{unit} restarted"))
        .map_err(|e| e.message);
    back("/containers", r)
}
