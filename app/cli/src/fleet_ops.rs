//! `xo fleet ls|scale|restart`: the fleet manager's runner containers.

use std::process::ExitCode;

use xo_runtime::XoConfig;

use crate::cli::FleetCmd;
use crate::connect;

pub async fn run(cfg: &XoConfig, cmd: FleetCmd) -> anyhow::Result<ExitCode> {
    let client = connect::client(cfg)
        .await?
        .with_timeout(std::time::Duration::from_secs(60));
    let (st, json) = match cmd {
        FleetCmd::Ls { json } => (client.call(&xo_proto::fleet::FleetLs {}).await, json),
        FleetCmd::Scale { role, replicas } => (
            client
                .call(&xo_proto::fleet::FleetScale { role, replicas })
                .await,
            false,
        ),
        FleetCmd::Restart { unit } => (
            client.call(&xo_proto::fleet::FleetRestart { unit }).await,
            false,
        ),
    };
    let st = st.map_err(|e| match e {
        xo_bus::typed::CallError::Bus(xo_bus::BusError::NoResponders { .. }) => anyhow::anyhow!(
            "no fleet manager is running: set fleet.backend = \"docker\" for the supervisor"
        ),
        other => other.into(),
    })?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        outln!(
            "desired: {}",
            st.desired
                .iter()
                .map(|(r, n)| format!("{r}={n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !st.failed.is_empty() {
            outln!(
                "FAILED roles (past their restart intensity): {}",
                st.failed.join(", ")
            );
        }
        for u in &st.units {
            outln!(
                "{:<20} {:<12} {:<8} {}",
                u.unit,
                u.role,
                if u.running { "running" } else { "exited" },
                u.container
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
