//! Realistic synthetic reports for benchmarks: a full 20-action window with a
//! mix of tools, outcomes and messages. About 5% of reports carry an anomaly
//! (stall 2%, context over 80% 2%, PACE contingent 1%, the odd cascade), as a
//! mostly healthy fleet does; [`anomalous`] gives the worst case.

use xo_proto::{Action, Outcome, Pace, SaluteReport};

const TOOLS: [&str; 6] = [
    "read_file",
    "write_file",
    "shell",
    "list_dir",
    "search",
    "run_tests",
];

/// The time of turn 0: turn `t` is reported at `EPOCH_MS + t * 1000`.
const EPOCH_MS: u64 = 1_767_225_600_000;

/// A 64-bit mixer (MurmurHash3's finalizer).
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

/// Actions in a report's window (`activity.recent`).
pub const ACTIONS: u64 = 20;

/// Tasks the units work on: unit `u` on task `u % TASKS`.
pub const TASKS: u64 = 97;

/// The name of unit `unit` (an index).
pub fn unit_name(unit: u64) -> String {
    format!("unit-{unit}")
}

/// The task unit `unit` works on.
pub fn task_id(unit: u64) -> String {
    format!("T-{}", unit % TASKS)
}

/// What the content of `unit`'s report at `turn` is drawn from.
pub fn draw(unit: u64, turn: u64) -> u64 {
    mix(unit.wrapping_mul(1_000_003) ^ turn)
}

/// The figures of a report that follow its turn alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Turned {
    pub at: u64,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub history_len: u32,
    pub condensations: u32,
}

impl Turned {
    pub fn of(turn: u64) -> Self {
        Self {
            at: EPOCH_MS + turn * 1000,
            tokens_in: 1000 * turn,
            tokens_out: 200 * turn,
            history_len: 40 + (turn % 60) as u32,
            condensations: (turn / 50) as u32,
        }
    }
}

/// The turn of action `i` (`0..ACTIONS`) in the window of a report at `turn`.
pub fn action_turn(turn: u64, i: u64) -> u64 {
    turn.saturating_sub(ACTIONS - i)
}

/// The report of `unit` (an index) at `turn`, deterministic.
pub fn realistic(unit: u64, turn: u64) -> SaluteReport {
    let mut r = SaluteReport::new(unit_name(unit), "coder", turn, turn);
    let turned = Turned::of(turn);
    r.time.at = turned.at;
    let h = draw(unit, turn);
    r.size.context_limit = 128_000;
    r.size.context_tokens = if h % 50 == 1 {
        110_000
    } else {
        20_000 + (h % 70_000)
    };
    r.size.history_len = turned.history_len;
    r.size.condensations = turned.condensations;
    r.activity.task_id = Some(task_id(unit));
    r.activity.step = Some("implement".into());
    r.activity.turns_since_progress = if h % 50 == 2 { 8 } else { (h % 5) as u32 };
    r.unit.pace = if h.is_multiple_of(101) {
        Pace::Contingent
    } else {
        Pace::Primary
    };
    r.equipment.model = Some("local/test".into());
    r.equipment.tokens_in = turned.tokens_in;
    r.equipment.tokens_out = turned.tokens_out;
    r.activity.recent = (0..ACTIONS)
        .map(|i| {
            let t = action_turn(turn, i);
            let k = mix(h ^ i);
            if k.is_multiple_of(5) {
                Action::message(Some(&format!("{:x}", k % 1000)), Outcome::Ok, t)
            } else {
                let tool = TOOLS[(k % TOOLS.len() as u64) as usize];
                let a = Action::tool(tool, &format!("{:x}", k % 64), Outcome::Ok, t);
                if k.is_multiple_of(11) {
                    a.with_error("exit_1")
                } else {
                    a.with_output(&format!("{:x}", k % 4096))
                }
            }
        })
        .collect();
    r
}

/// A report that trips stall, context and PACE at once: the slowest path.
pub fn anomalous(unit: u64, turn: u64) -> SaluteReport {
    let mut r = realistic(unit, turn);
    r.activity.turns_since_progress = 9;
    r.size.context_fill = 0.95;
    r.unit.pace = Pace::Emergency;
    r
}
