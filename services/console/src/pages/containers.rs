//! The containers page: the fleet manager's units, scale and restart.

use maud::html;

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
    let body = html! {
        p { "Backend " b { (st.backend) } }
        h2 { "Roles" }
        div.scroll { table {
            thead { tr { th { "Role" } th { "Desired" } th { "Running" } th {} } }
            tbody {
                @for (role, n) in &st.desired {
                    tr {
                        td {
                            (role)
                            @if st.failed.contains(role) { " " span.badge.red { "failed" } }
                        }
                        td.num { (n) }
                        td.num { (st.units.iter().filter(|u| &u.role == role && u.running).count()) }
                        td { (post_form(
                            &f,
                            &format!("/ui/fleet/{role}/scale"),
                            html! { input name="replicas" type="number" min="0" max="100" value=(n); },
                            "Scale",
                            "",
                        )) }
                    }
                }
            }
        } }
        h2 { "Containers" }
        div.scroll { table {
            thead { tr { th { "Unit" } th { "Role" } th { "Running" } th { "Container" } th {} } }
            tbody {
                @for u in &st.units {
                    tr {
                        td { (u.unit) }
                        td { (u.role) }
                        td { @if u.running { "yes" } @else { "no" } }
                        td { code { (u.container) } }
                        td { (post_form(&f, &format!("/ui/fleet/units/{}/restart", u.unit), html! {}, "Restart", "")) }
                    }
                }
            }
        } }
    };
    ok_page(&f, body)
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
