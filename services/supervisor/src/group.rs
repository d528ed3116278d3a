//! A group of watchers: one actor holds the watchers of many units (a
//! unit's group is fixed by its id), so a unit costs its state, not an
//! actor's mailboxes and task. A unit's messages are handled in the order
//! they reach the group; a watcher that panics is dropped alone, its unit's
//! messages held meanwhile, and started again by the root from its saved
//! state (one-for-one, with the unit's restart intensity), the other units
//! of the group going on. A group that dies is restarted by the root with
//! every unit it held.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{error, warn};
use xo_radio::{FnvMap, UnitKey};

use crate::inbox::{Inbox, Routed};
pub use crate::msg::GroupMsg;
use crate::msg::RootMsg;
use crate::watcher::{WatcherArgs, WatcherMsg, WatcherState};

/// Watcher groups a supervisor runs: enough to keep every core busy, few
/// enough that their fixed cost (~6 KiB each) is nothing beside the units.
pub const GROUPS: usize = 32;

/// The group of a unit.
pub fn group_of(unit: &str) -> usize {
    use std::hash::Hasher;
    let mut h = xo_radio::Fnv::default();
    h.write(unit.as_bytes());
    (h.finish() % GROUPS as u64) as usize
}

pub struct Group;

pub struct GroupArgs {
    pub root: ActorRef<RootMsg>,
    /// What waits for this group (kept across its restarts).
    pub inbox: Arc<Inbox>,
}

enum Slot {
    Live(Box<WatcherState>),
    /// Its watcher panicked: messages wait for the root to start it again.
    Held(VecDeque<WatcherMsg>),
}

pub struct GroupState {
    root: ActorRef<RootMsg>,
    inbox: Arc<Inbox>,
    /// Keyed in place (`UnitKey`): at 100,000 units a `String` key's bytes
    /// were one cache miss more for every report.
    units: FnvMap<UnitKey, Slot>,
}

impl GroupState {
    /// Hands `msg` to the unit's watcher; a watcher that panics is dropped
    /// and the root told (the unit's later messages are held until then).
    async fn deliver(&mut self, unit: &str, msg: WatcherMsg) {
        match self.units.get_mut(unit) {
            Some(Slot::Live(w)) => {
                if let Err(panic) = AssertUnwindSafe(w.handle(msg)).catch_unwind().await {
                    self.failed(unit.to_owned(), &panic);
                }
            }
            Some(Slot::Held(q)) => q.push_back(msg),
            // Not (or no longer) here: the root knows where it is.
            None => {
                let _ = self.root.cast(RootMsg::Route(unit.to_owned(), msg));
            }
        }
    }

    /// [`Self::deliver`] for a report the pump routed here, its unit read
    /// from where the pump found it in the subject (no copy of it).
    async fn deliver_report(&mut self, report: Routed) {
        let (msg, at, format) = report.into_parts();
        match self.units.get_mut(&msg.subject[at.clone()]) {
            Some(Slot::Live(w)) => {
                let handled = AssertUnwindSafe(w.handle(WatcherMsg::Received(msg, format)));
                if let Err(panic) = handled.catch_unwind().await {
                    let unit = w.unit().to_owned();
                    self.failed(unit, &panic);
                }
            }
            Some(Slot::Held(q)) => q.push_back(WatcherMsg::Received(msg, format)),
            None => {
                let unit = msg.subject[at].to_owned();
                let _ = self
                    .root
                    .cast(RootMsg::Route(unit, WatcherMsg::Received(msg, format)));
            }
        }
    }

    /// A unit's watcher panicked: dropped, its messages held from now on,
    /// and the root told to start it again.
    fn failed(&mut self, unit: String, panic: &Box<dyn std::any::Any + Send>) {
        let why = panic_text(panic);
        error!(unit = %unit, panic = %why, "watcher panicked; it is started again from its saved state");
        self.units
            .insert(UnitKey::new(&unit), Slot::Held(VecDeque::new()));
        let _ = self.root.cast(RootMsg::Failed(unit, why));
    }

    async fn start(&mut self, args: WatcherArgs) {
        let unit = args.unit.clone();
        let held = match self.units.remove(unit.as_str()) {
            Some(Slot::Held(q)) => q,
            Some(live @ Slot::Live(_)) => {
                // Already watched: the one running stays.
                self.units.insert(unit.into(), live);
                return;
            }
            None => VecDeque::new(),
        };
        let w = WatcherState::start(args).await;
        self.units
            .insert(UnitKey::new(&unit), Slot::Live(Box::new(w)));
        for msg in held {
            self.deliver(&unit, msg).await;
        }
    }
}

fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

impl Actor for Group {
    type Msg = GroupMsg;
    type State = GroupState;
    type Arguments = GroupArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<GroupMsg>,
        args: GroupArgs,
    ) -> Result<GroupState, ActorProcessingErr> {
        // Started again: an overflow left from before needs its drain.
        if args.inbox.restarted() {
            let _ = myself.cast(GroupMsg::Drain);
        }
        Ok(GroupState {
            root: args.root,
            inbox: args.inbox,
            units: FnvMap::default(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<GroupMsg>,
        state: &mut GroupState,
    ) -> Result<(), ActorProcessingErr> {
        for slot in state.units.values_mut() {
            if let Slot::Live(w) = slot {
                w.stop();
            }
        }
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<GroupMsg>,
        msg: GroupMsg,
        state: &mut GroupState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            GroupMsg::Unit(unit, msg) => {
                let first = matches!(msg, WatcherMsg::Report(..));
                if matches!(msg, WatcherMsg::Received(..)) {
                    state.inbox.handled();
                }
                state.deliver(&unit, msg).await;
                // A new unit's first report, handed over by the pump: its
                // report kept in the overflow meanwhile comes after it.
                if first && let Some((report, superseded)) = state.inbox.welcomed(&unit) {
                    let (msg, _, format) = report.into_parts();
                    let latest = WatcherMsg::Latest(msg, format, superseded);
                    state.deliver(&unit, latest).await;
                }
            }
            GroupMsg::Reports(reports) => {
                for report in reports {
                    state.inbox.handled();
                    state.deliver_report(report).await;
                }
            }
            GroupMsg::Drain => {
                for (unit, report, superseded) in state.inbox.drain() {
                    let (msg, _, format) = report.into_parts();
                    let latest = WatcherMsg::Latest(msg, format, superseded);
                    state.deliver(unit.as_str(), latest).await;
                }
            }
            GroupMsg::Start(args) => state.start(*args).await,
            GroupMsg::Tick(units, now, heard_from, port) => {
                for unit in units {
                    if matches!(state.units.get(unit.as_str()), Some(Slot::Live(_))) {
                        state
                            .deliver(&unit, WatcherMsg::Tick(now, heard_from))
                            .await;
                    }
                }
                if let Some(p) = port {
                    let _ = p.send(());
                }
            }
            GroupMsg::Summaries(units, port) => {
                let out = units
                    .iter()
                    .filter_map(|u| match state.units.get(u.as_str()) {
                        Some(Slot::Live(w)) => Some(w.summary()),
                        _ => None,
                    })
                    .collect();
                let _ = port.send(out);
            }
            GroupMsg::Stop(units, port) => {
                for unit in units {
                    match state.units.remove(unit.as_str()) {
                        Some(Slot::Live(mut w)) => w.stop(),
                        Some(Slot::Held(q)) if !q.is_empty() => {
                            warn!(unit = %unit, messages = q.len(), "unit stopped while its watcher was being started again: its held messages are dropped");
                        }
                        _ => {}
                    }
                }
                let _ = port.send(());
            }
        }
        Ok(())
    }
}
