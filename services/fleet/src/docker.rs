//! Runner containers on the Docker engine (bollard): observe the ones
//! labelled with this organisation, apply the planner's actions.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, ContainerSummaryStateEnum, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    RestartContainerOptions, StartContainerOptions,
};
use tracing::info;

use crate::plan::{Action, Observed};

pub use xo_proto::names::{LABEL_MANAGED, LABEL_ORG, LABEL_ROLE, LABEL_UNIT};

/// The fleet crate's one error, each cause kept as its type: a caller can
/// tell the engine's refusal from a dead bus.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A call to the Docker engine failed: what XO asked, and the engine's
    /// own error.
    #[error("docker: {what}: {source}")]
    Docker {
        what: String,
        #[source]
        source: bollard::errors::Error,
    },
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: the fleet actor's tree did not start or gave up.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
}

xo_bus::bus_error_from!(FleetError);
xo_runtime::runtime_error_from!(FleetError);

fn err(what: impl Into<String>, source: bollard::errors::Error) -> FleetError {
    FleetError::Docker {
        what: what.into(),
        source,
    }
}

/// How runner containers are made.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    /// The organisation (subject prefix): containers are labelled and named with it.
    pub org: String,
    pub image: String,
    /// Arguments; `{role}` and `{unit}` are replaced.
    pub command: Vec<String>,
    /// `KEY=value` pairs; `XO_UNIT` is added.
    pub env: Vec<String>,
    /// `host:container` binds or `volume:path` mounts.
    pub binds: Vec<String>,
    /// A network to attach to (compose's, for example).
    pub network: Option<String>,
}

impl ContainerSpec {
    pub fn name(&self, unit: &str) -> String {
        format!("xo-{}-{unit}", self.org)
    }
}

#[derive(Debug, Clone)]
pub struct DockerFleet {
    docker: Docker,
    spec: ContainerSpec,
}

impl DockerFleet {
    /// Connects to the local engine and agrees on an API version.
    pub async fn connect(spec: ContainerSpec) -> Result<Self, FleetError> {
        let docker = Docker::connect_with_local_defaults()
            .map_err(|e| err("connecting to the engine", e))?
            .negotiate_version()
            .await
            .map_err(|e| err("negotiating the API version (is the engine running?)", e))?;
        Ok(Self { docker, spec })
    }

    pub fn spec(&self) -> &ContainerSpec {
        &self.spec
    }

    /// The organisation's runner containers, running or not.
    pub async fn observe(&self) -> Result<Vec<Observed>, FleetError> {
        let filters: HashMap<&str, Vec<String>> = HashMap::from([(
            "label",
            vec![
                format!("{LABEL_ORG}={}", self.spec.org),
                format!("{LABEL_MANAGED}=fleet"),
            ],
        )]);
        let list = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::new()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| err("listing containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let labels = c.labels.unwrap_or_default();
                Some(Observed {
                    id: c.id?,
                    unit: labels.get(LABEL_UNIT)?.clone(),
                    role: labels.get(LABEL_ROLE)?.clone(),
                    running: matches!(
                        c.state,
                        Some(
                            ContainerSummaryStateEnum::RUNNING
                                | ContainerSummaryStateEnum::RESTARTING
                        )
                    ),
                })
            })
            .collect())
    }

    pub async fn apply(&self, a: &Action) -> Result<(), FleetError> {
        match a {
            Action::Create { unit, role } => self.create(unit, role).await,
            Action::Restart { unit, id, reason } => {
                info!(unit = %unit, reason = %reason, "restarting runner container");
                self.docker
                    .restart_container(id, None::<RestartContainerOptions>)
                    .await
                    .map_err(|e| err(format!("restarting {unit}"), e))
            }
            Action::Remove { unit, id, reason } => {
                info!(unit = %unit, reason = %reason, "removing runner container");
                self.remove(id).await.map_err(|e| match e {
                    FleetError::Docker { source, .. } => err(format!("removing {unit}"), source),
                    other => other,
                })
            }
            Action::RoleFailed { .. } => Ok(()),
        }
    }

    pub async fn remove(&self, id: &str) -> Result<(), FleetError> {
        self.docker
            .remove_container(
                id,
                Some(
                    RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .v(true)
                        .build(),
                ),
            )
            .await
            .map_err(|e| err(format!("removing {id}"), e))
    }

    async fn create(&self, unit: &str, role: &str) -> Result<(), FleetError> {
        let s = &self.spec;
        let name = s.name(unit);
        let cmd: Vec<String> = s
            .command
            .iter()
            .map(|a| xo_runtime::template::fill(a, &[("{role}", role), ("{unit}", unit)]))
            .collect();
        let mut env = s.env.clone();
        env.push(format!("XO_UNIT={unit}"));
        let labels = HashMap::from([
            (LABEL_ORG.to_string(), s.org.clone()),
            (LABEL_UNIT.to_string(), unit.to_string()),
            (LABEL_ROLE.to_string(), role.to_string()),
            (LABEL_MANAGED.to_string(), "fleet".to_string()),
        ]);
        let body = ContainerCreateBody {
            image: Some(s.image.clone()),
            cmd: Some(cmd),
            env: Some(env),
            labels: Some(labels),
            hostname: Some(unit.to_string()),
            host_config: Some(HostConfig {
                binds: (!s.binds.is_empty()).then(|| s.binds.clone()),
                network_mode: s.network.clone(),
                ..Default::default()
            }),
            ..Default::default()
        };
        info!(unit = %unit, role = %role, image = %s.image, "creating runner container");
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::new().name(&name).build()),
                body,
            )
            .await
            .map_err(|e| err(format!("creating {name}"), e))?;
        self.docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
            .map_err(|e| err(format!("starting {name}"), e))
    }
}
