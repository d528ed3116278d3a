//! The messages of the supervisor's root and of its watcher groups, in one
//! place: each actor names the other's, so neither module imports the other.

use ractor::{ActorRef, RpcReplyPort};
use xo_bus::api::ActorPorts;
use xo_proto::control::{SupervisorApi, UnitSummary};

use crate::inbox::Routed;
use crate::persist::UnitRecord;
use crate::watcher::{WatcherArgs, WatcherMsg};

pub enum RootMsg {
    /// A message for a unit's watcher, spawning it if needed.
    Route(String, WatcherMsg),
    /// Liveness check at `now` (ms); the port, if any, is answered when done.
    Tick(u64, Option<RpcReplyPort<()>>),
    /// The control API (`xo.ctl.supervisor.*`).
    Api(SupervisorApi<ActorPorts>),
    /// The group actor holding a unit's watcher (tests and diagnostics).
    Watcher(String, RpcReplyPort<Option<ActorRef<GroupMsg>>>),
    /// The groups of these units' watchers, in order, each started if
    /// needed: the report pump asks once per unit (and after a restart),
    /// for the new units of a burst together, then sends to them directly.
    Spawn(Vec<String>, RpcReplyPort<Vec<ActorRef<GroupMsg>>>),
    /// A unit's watcher panicked (its group holds its messages meanwhile).
    Failed(String, String),
    /// Sharded: watchers for the units of a partition just taken, from
    /// their stored state (a unit already watched is left as it is);
    /// answers how many were started.
    Adopt(Vec<UnitRecord>, RpcReplyPort<usize>),
    /// Sharded: stops the watchers of a partition handed back (their state
    /// goes to the persister) and answers their units.
    Release(u32, RpcReplyPort<Vec<String>>),
}

impl From<SupervisorApi<ActorPorts>> for RootMsg {
    fn from(a: SupervisorApi<ActorPorts>) -> Self {
        RootMsg::Api(a)
    }
}

pub enum GroupMsg {
    /// A message for one unit's watcher.
    Unit(String, WatcherMsg),
    /// Starts a unit's watcher (from the root, before any message of the
    /// unit it routes here); a unit held after a panic gets its held
    /// messages, in order.
    Start(Box<WatcherArgs>),
    /// The liveness check at `now` for these units, with the time silence
    /// counts from (`None` while the bus is not heard: the root's look,
    /// [`xo_bus::Hearing::look`]); the port, if any, is answered when done.
    Tick(Vec<String>, u64, Option<u64>, Option<RpcReplyPort<()>>),
    /// The summaries of these units (those it has).
    Summaries(Vec<String>, RpcReplyPort<Vec<UnitSummary>>),
    /// Stops these units' watchers (evicted, or their partition handed
    /// back): their state goes to the persister; answered when done.
    Stop(Vec<String>, RpcReplyPort<()>),
    /// Its inbox overflowed: take each unit's latest report from it.
    Drain,
    /// Reports the pump read for units of this group, in the order they
    /// came (each counted waiting in the group's inbox).
    Reports(Vec<Routed>),
}
