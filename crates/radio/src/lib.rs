//! The XO radio check: a deterministic anomaly detector over SALUTE reports.
//!
//! Pure: no I/O, no clocks. Time comes from the reports (turns) or from the
//! caller (stale detection). The same [`Radio`] runs inside a unit each turn
//! (microcosm mode, see [`Microcosm`]) and inside the supervisor on every
//! report it receives (macrocosm mode). Seed 000: "The anomaly detection
//! logic is identical. Only the I/O layer changes."
//!
//! # Layout
//!
//! - [`profile`]: role profiles — doctrine thresholds and the PACE plan.
//! - [`rules`]: one function a rule, each returning a [`Finding`].
//! - [`Radio`]: per-unit state (cooldowns, seq de-duplication) around the rules.
//! - [`escalate`]: one stretch gets a kind's steering three times at most
//!   (the rule's, a second notice, a last one), then the unit needs you.
//! - [`baseline`]: OpenHands' stuck-detector rules, the baseline of `xo bench detection`.
//! - [`sample`]: synthetic reports for benchmarks (a mostly healthy fleet, or the worst case).

pub mod baseline;
pub mod escalate;
mod key;
pub mod profile;
pub mod rules;
pub mod sample;

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};
use xo_proto::steering::STEERING_TAG;
use xo_proto::{
    AnomalyKind, Assessor, Evidence, Health, NeedsYou, SaluteReport, Severity, Steering,
    SteeringSource,
};

pub use key::UnitKey;
pub use profile::{AGENT_ROLE, Doctrine, PaceLevel, PacePlan, RoleProfile, Roles};
pub use rules::Finding;

/// What one radio check concluded.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    /// Steering to send, in rule order.
    pub steering: Vec<Steering>,
    /// Anomalies present but held back by cooldown.
    pub suppressed: Vec<AnomalyKind>,
    /// The XO's health verdict for the unit.
    pub health: Health,
    /// True when the verdict differs from the unit's own.
    pub corrected: bool,
    /// True when the report was a duplicate or out of order and was ignored.
    pub duplicate: bool,
    /// The unit needs a person: a stretch's steering is spent
    /// ([`escalate`]). Stays until the unit makes progress.
    pub needs: Option<NeedsYou>,
    /// True when the report is the first of a new incarnation of the unit
    /// (a restarted process: its `seq` started over in another epoch).
    pub restarted: bool,
    /// Ignored for its epoch, not for a seq already seen: an incarnation
    /// the unit moved away from, or one further back than
    /// [`MAX_CLOCK_SKEW_MS`]. Reports refused so while the unit's
    /// heartbeats arrive mean the XO is not hearing a live unit.
    pub refused_epoch: bool,
}

/// How far behind its last epoch a restarted process's epoch may be and
/// still be taken as a restart with a clock behind (further back, it is an
/// earlier life's late report).
pub const MAX_CLOCK_SKEW_MS: u64 = 5 * 60 * 1000;

/// How far ahead of the XO's wall clock an epoch (the reporting process's
/// start) may be. Further ahead it is refused: one report with epoch
/// 2^64-1 would otherwise make every later report of the unit a
/// duplicate. A day, so that a supervisor whose own clock is behind (by
/// minutes, or hours after a bad NTP step) still hears every unit.
pub const MAX_EPOCH_AHEAD_MS: u64 = 24 * 3_600_000;

/// An epoch from a process that started, by the XO's wall clock `now`,
/// more than [`MAX_EPOCH_AHEAD_MS`] in the future.
pub fn epoch_ahead(epoch: u64, now: u64) -> bool {
    epoch > now.saturating_add(MAX_EPOCH_AHEAD_MS)
}

/// Per-unit radio state. Serialisable so a supervisor can persist and resume it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UnitState {
    /// Highest seq seen (in `epoch`).
    pub last_seq: Option<u64>,
    /// The unit's incarnation the seq counts in.
    #[serde(default)]
    pub epoch: u64,
    /// The incarnation before it (its late reports are not a restart).
    #[serde(default)]
    pub prev_epoch: u64,
    /// The turn of the last report (progress between reports shows as
    /// fewer turns since progress than turns since that report).
    #[serde(default)]
    pub last_turn: u64,
    /// Last turn and severity a steering of each kind was sent.
    pub cooldowns: BTreeMap<AnomalyKind, (u64, Severity)>,
    /// Condensation count when progress was last seen.
    pub condensations_at_progress: u32,
    /// The highest severity of context steering given on the fill since
    /// it last was below the warning line: a fill steering is given once a
    /// level (warning, then urgent), not again every cooldown while the
    /// fill creeps on; it is given again after the context was compacted.
    #[serde(default)]
    pub context_told: Option<Severity>,
    /// The turn the current stretch began (the last progress seen).
    #[serde(default)]
    pub stretch_from: u64,
    /// Per kind, the stretch its steering is in and how much it had.
    #[serde(default)]
    pub stretches: BTreeMap<AnomalyKind, escalate::Stretch>,
    /// Set when a stretch's steering is spent; cleared on progress (boxed:
    /// a unit's state is kept for every unit, this is rare).
    #[serde(default)]
    pub needs: Option<Box<NeedsYou>>,
}

/// FNV-1a: unit ids are short, trusted-format keys; SipHash's DoS
/// resistance costs more than the rest of a radio check.
#[derive(Debug, Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// A map keyed by unit ids.
pub type FnvMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<Fnv>>;

/// The detector for many units.
#[derive(Debug, Clone, Default)]
pub struct Radio {
    roles: Roles,
    units: FnvMap<String, UnitState>,
}

impl Radio {
    pub fn new(roles: Roles) -> Self {
        Self {
            roles,
            units: FnvMap::default(),
        }
    }

    pub fn roles(&self) -> &Roles {
        &self.roles
    }

    /// A unit's state, to persist it.
    pub fn unit_state(&self, unit: &str) -> Option<&UnitState> {
        self.units.get(unit)
    }

    /// Restores a unit's state after a restart.
    pub fn restore(&mut self, unit: &str, state: UnitState) {
        self.units.insert(unit.to_string(), state);
    }

    /// Runs every rule on a report and applies cooldowns.
    pub fn check(&mut self, report: &SaluteReport) -> Assessment {
        let profile = self.roles.get(&report.unit.role);
        let state = match self.units.get_mut(&report.unit.unit) {
            Some(s) => s,
            None => self.units.entry(report.unit.unit.clone()).or_default(),
        };
        check_unit(state, profile, report)
    }

    /// The steering for a unit that went silent for `silent_ms`.
    pub fn stale(unit: &str, silent_ms: u64, stale_after_ms: u64, turn: u64, at: u64) -> Steering {
        let secs = silent_ms / 1000;
        Steering {
            v: xo_proto::PROTOCOL_VERSION,
            unit: unit.to_string(),
            id: format!("{unit}-{turn}-stale-{at}"),
            kind: AnomalyKind::Stale,
            severity: Severity::Urgent,
            message: format!(
                "{STEERING_TAG} Stale: no report or heartbeat from you for {secs} s. Report your status now; if you are stuck, stop and say where."
            ),
            turn,
            at,
            evidence: Evidence {
                turns: vec![turn],
                tools: vec![],
                rule: format!("silent_ms >= {stale_after_ms}"),
                observed: silent_ms.to_string(),
            },
            source: SteeringSource::Xo,
        }
    }
}

/// The radio check for one unit; shared by [`Radio`] and [`Microcosm`].
pub fn check_unit(
    state: &mut UnitState,
    profile: &RoleProfile,
    report: &SaluteReport,
) -> Assessment {
    let (seq, epoch) = (report.time.seq, report.time.epoch);
    let seen = state.last_seq.is_some();
    // Another incarnation than the one counted: a later one, or one whose
    // clock is behind by at most the skew (not the one before: its late
    // reports are old news).
    let other = seen
        && epoch != state.epoch
        && epoch != state.prev_epoch
        && (epoch > state.epoch || state.epoch - epoch <= MAX_CLOCK_SKEW_MS);
    let refused_epoch = seen && epoch != state.epoch && !other;
    if refused_epoch || (epoch == state.epoch && state.last_seq.is_some_and(|last| seq <= last)) {
        return Assessment {
            steering: vec![],
            suppressed: vec![],
            health: report.status.health,
            corrected: false,
            duplicate: true,
            needs: state.needs.as_deref().cloned(),
            restarted: false,
            refused_epoch,
        };
    }
    if other || !seen {
        // A new incarnation: its turns, seq and condensations start over,
        // and so do the cooldowns (the restarted agent has had no steering).
        let prev_epoch = if other { state.epoch } else { 0 };
        *state = UnitState {
            epoch,
            prev_epoch,
            ..UnitState::default()
        };
    }
    let restarted = other;
    state.last_seq = Some(seq);
    // Progress since the last report: none since N turns, and fewer than
    // the turns between the reports (a report every few turns misses the
    // turn that made progress).
    let turn = report.time.turn;
    let since = u64::from(report.activity.turns_since_progress);
    if since == 0 || since < turn.saturating_sub(state.last_turn) {
        state.condensations_at_progress = report.size.condensations;
        // A new stretch: its steering starts over, and a unit that moved
        // no longer needs a person for the last one.
        state.stretch_from = turn.saturating_sub(since);
        state.needs = None;
    }
    state.last_turn = turn;
    // Steering the unit gave itself since its last report counts as
    // steered: its cooldown runs from the turn it was given at.
    for own in &report.status.self_steered {
        let newer = state
            .cooldowns
            .get(&own.kind)
            .is_none_or(|&(at, _)| own.turn >= at);
        if newer && own.turn <= turn {
            state.cooldowns.insert(own.kind, (own.turn, own.severity));
        }
        // It counts toward the stretch's escalation too: one stretch gets
        // three steerings of a kind, whoever gives them.
        if own.turn <= turn && escalate::escalates(own.kind) {
            let st = state.stretches.entry(own.kind).or_default();
            if escalate::count_own(st, state.stretch_from) && state.needs.is_none() {
                state.needs = Some(Box::new(NeedsYou {
                    reason: xo_proto::NeedsReason::Stuck,
                    turn: own.turn,
                    stretch_from: state.stretch_from,
                    since: report.time.at,
                    kind: Some(own.kind),
                    detail: format!(
                        "the unit's own check steered {} {} times in this stretch (turns since {}) and it did not move",
                        own.kind,
                        escalate::MAX_PER_STRETCH,
                        state.stretch_from
                    ),
                }));
            }
        }
    }

    // The unit's own account of waiting for a person (a permission prompt,
    // a question, its cap, an error) marks it; a report without one clears
    // what an earlier one set (escalation's `stuck` is cleared by
    // progress, above).
    match &report.status.needs {
        Some(n) => {
            let same = state
                .needs
                .as_deref()
                .is_some_and(|k| k.reason == n.reason && k.detail == n.detail);
            if !same {
                state.needs = Some(Box::new(NeedsYou {
                    reason: n.reason,
                    turn,
                    stretch_from: state.stretch_from,
                    since: report.time.at,
                    kind: None,
                    detail: n.detail.clone(),
                }));
            }
        }
        None => {
            if state
                .needs
                .as_deref()
                .is_some_and(|k| k.reason != xo_proto::NeedsReason::Stuck)
            {
                state.needs = None;
            }
        }
    }
    let waiting = report.status.needs.is_some();

    // Above the warning line a context finding is on the fill (below it, on
    // condensations): told once a level until the fill falls below again.
    let (warning_line, _) = rules::context_lines(report, &profile.doctrine);
    let above_line = report.size.fill() > warning_line;
    if !above_line {
        state.context_told = None;
    }
    let findings = rules::evaluate(report, profile, state.condensations_at_progress);
    let cooldown = u64::from(profile.doctrine.cooldown_turns);
    let mut steering = Vec::new();
    let mut suppressed = Vec::new();
    let mut health = Health::Green;
    for f in findings {
        let kind = f.kind;
        if profile.doctrine.disabled_rules.contains(&f.kind) {
            continue;
        }
        health = health.max(match f.severity {
            Severity::Info => Health::Green,
            Severity::Warning => Health::Amber,
            Severity::Urgent | Severity::Critical => Health::Red,
        });
        // Nothing reaches a session that has ended (or waits for its
        // user, or for a person's answer): the finding is in its health,
        // not in steering.
        if report.status.ended || waiting {
            continue;
        }
        // Records its sensor could not read: the picture of what it did is
        // known to be wrong, and nothing is steered on it (its context,
        // read from its usage, and its PACE still are).
        if report.status.unreadable > 0
            && !matches!(f.kind, AnomalyKind::Context | AnomalyKind::Pace)
        {
            suppressed.push(f.kind);
            continue;
        }
        let exempt = f.severity == Severity::Critical;
        let on_fill = f.kind == AnomalyKind::Context && above_line;
        let told = on_fill && state.context_told.is_some_and(|s| f.severity <= s);
        let held = state.cooldowns.get(&f.kind).is_some_and(|&(at, sev)| {
            turn.saturating_sub(at) < cooldown && turn >= at && f.severity <= sev
        });
        if (held || told) && !exempt {
            suppressed.push(f.kind);
            continue;
        }
        let f = if escalate::escalates(f.kind) && !exempt {
            let st = state.stretches.entry(f.kind).or_default();
            match escalate::step(st, state.stretch_from, f, turn, report.time.at) {
                escalate::Step::Steer(f) => f,
                escalate::Step::GiveUp(f, needs) => {
                    state.needs = Some(Box::new(needs));
                    f
                }
                escalate::Step::Spent => {
                    suppressed.push(kind);
                    continue;
                }
            }
        } else {
            f
        };
        if on_fill {
            state.context_told = Some(f.severity);
        }
        state.cooldowns.insert(f.kind, (turn, f.severity));
        steering.push(Steering {
            v: xo_proto::PROTOCOL_VERSION,
            unit: report.unit.unit.clone(),
            id: format!("{}-{turn}-{}", report.unit.unit, f.kind),
            kind: f.kind,
            severity: f.severity,
            message: f.message,
            turn,
            at: report.time.at,
            evidence: f.evidence,
            source: SteeringSource::Xo,
        });
    }
    let corrected = report.status.assessed_by != Assessor::Xo && report.status.health != health;
    Assessment {
        steering,
        suppressed,
        health,
        corrected,
        duplicate: false,
        needs: state.needs.as_deref().cloned(),
        restarted,
        refused_epoch: false,
    }
}

/// Microcosm mode: a unit supervising itself, calling [`Microcosm::turn`]
/// once a turn with its own report.
#[derive(Debug, Clone)]
pub struct Microcosm {
    profile: RoleProfile,
    state: UnitState,
}

impl Microcosm {
    pub fn new(profile: RoleProfile) -> Self {
        Self {
            profile,
            state: UnitState::default(),
        }
    }

    /// Checks this turn's report; returns the steering to inject into the
    /// unit's own history before its next step, and writes the corrected
    /// health into the report (self-SALUTE update).
    pub fn turn(&mut self, report: &mut SaluteReport) -> Vec<Steering> {
        let a = check_unit(&mut self.state, &self.profile, report);
        if a.corrected {
            report.status.health = a.health;
            report.status.assessed_by = Assessor::Xo;
        }
        a.steering
    }
}
