//! Subject builders. No service spells a subject string itself.

/// Builds every subject under one prefix (default `xo`), so several
/// organisations can share one NATS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subjects {
    prefix: String,
}

impl Default for Subjects {
    fn default() -> Self {
        Self::new(DEFAULT_PREFIX)
    }
}

/// The default subject prefix.
pub const DEFAULT_PREFIX: &str = "xo";

/// Why a subject prefix (`org.prefix`) is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPrefix {
    #[error("prefix is empty")]
    Empty,
    #[error(
        "prefix {0:?} is not a subject prefix (tokens separated by '.', no spaces or wildcards)"
    )]
    NotSubject(String),
}

impl From<InvalidPrefix> for String {
    fn from(e: InvalidPrefix) -> Self {
        e.to_string()
    }
}

impl Subjects {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// Checks the prefix is one or more dot-separated subject tokens.
    pub fn validate_prefix(prefix: &str) -> Result<(), InvalidPrefix> {
        if prefix.is_empty() {
            return Err(InvalidPrefix::Empty);
        }
        for token in prefix.split('.') {
            if token.is_empty()
                || token
                    .chars()
                    .any(|c| c.is_whitespace() || c == '*' || c == '>')
            {
                return Err(InvalidPrefix::NotSubject(prefix.to_string()));
            }
        }
        Ok(())
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `xo.salute.<unit>`
    pub fn salute(&self, unit: &str) -> String {
        format!("{}.salute.{unit}", self.prefix)
    }
    /// `xo.salute.>`: every report, as published (`xo.salute.<unit>`) or
    /// as a NATS server with XO's partition mapping delivers it
    /// (`xo.salute.<unit>.<partition>`, see [`Subjects::partition_mappings`]).
    pub fn salute_all(&self) -> String {
        format!("{}.salute.>", self.prefix)
    }
    /// `xo.salute.*.<partition>`: the reports of one partition.
    pub fn salute_partition(&self, partition: u32) -> String {
        format!("{}.salute.*.{partition}", self.prefix)
    }
    /// `xo.salute.*.*`: every partitioned report, as the server maps them
    /// (what the reports stream of sharded supervision keeps).
    pub fn salute_partitioned(&self) -> String {
        format!("{}.salute.*.*", self.prefix)
    }
    /// The stream that keeps the partitioned reports for sharded
    /// supervision: `XO_REPORTS` (the prefix upper-cased, '.' as '_').
    pub fn reports_stream(&self) -> String {
        format!("{}_REPORTS", self.prefix.replace('.', "_")).to_uppercase()
    }
    /// `xo.steer.<unit>`
    pub fn steer(&self, unit: &str) -> String {
        format!("{}.steer.{unit}", self.prefix)
    }
    /// `xo.steer.*`
    pub fn steer_all(&self) -> String {
        format!("{}.steer.*", self.prefix)
    }
    /// `xo.interrupt.<unit>`: the queue asks the unit's task to yield to a
    /// critical one.
    pub fn interrupt(&self, unit: &str) -> String {
        format!("{}.interrupt.{unit}", self.prefix)
    }
    /// `xo.heartbeat.<unit>`
    pub fn heartbeat(&self, unit: &str) -> String {
        format!("{}.heartbeat.{unit}", self.prefix)
    }
    /// `xo.heartbeat.>` (partitioned or not, as [`Subjects::salute_all`]).
    pub fn heartbeat_all(&self) -> String {
        format!("{}.heartbeat.>", self.prefix)
    }
    /// `xo.heartbeat.*.<partition>`: the heartbeats of one partition.
    pub fn heartbeat_partition(&self, partition: u32) -> String {
        format!("{}.heartbeat.*.{partition}", self.prefix)
    }
    /// `xo.partition.<probe>`: published by a sharded supervisor at start to
    /// check that the server partitions XO's subjects as it does.
    pub fn partition_probe(&self, probe: &str) -> String {
        format!("{}.partition.{probe}", self.prefix)
    }
    /// `xo.partition.<probe>.*`: where the probe arrives, mapped.
    pub fn partition_probe_reply(&self, probe: &str) -> String {
        format!("{}.partition.{probe}.*", self.prefix)
    }
    /// The NATS subject mappings that spread reports and heartbeats over
    /// `partitions` partitions by their unit token (`{{partition(N,1)}}`,
    /// NATS's deterministic partitioning), and the probe a supervisor checks
    /// them with: `(source, destination)` pairs for a server's `mappings`.
    pub fn partition_mappings(&self, partitions: u32) -> Vec<(String, String)> {
        ["salute", "heartbeat", "partition"]
            .iter()
            .map(|kind| {
                (
                    format!("{}.{kind}.*", self.prefix),
                    format!(
                        "{}.{kind}.{{{{wildcard(1)}}}}.{{{{partition({partitions},1)}}}}",
                        self.prefix
                    ),
                )
            })
            .collect()
    }
    /// `xo.event.task.<task>`
    pub fn task_event(&self, task: &str) -> String {
        format!("{}.event.task.{task}", self.prefix)
    }
    /// `xo.event.task.*`
    pub fn task_event_all(&self) -> String {
        format!("{}.event.task.*", self.prefix)
    }
    /// `xo.knowledge.changed.<category>`
    pub fn knowledge_changed(&self, category: &str) -> String {
        format!("{}.knowledge.changed.{category}", self.prefix)
    }
    /// `xo.directive.<source>`
    pub fn directive(&self, source: &str) -> String {
        format!("{}.directive.{source}", self.prefix)
    }
    /// `xo.event.review.<reviewer>`
    pub fn review_event(&self, reviewer: &str) -> String {
        format!("{}.event.review.{reviewer}", self.prefix)
    }
    /// `xo.event.runner.<unit>`: the pipeline's events (retries, validation failures).
    pub fn runner_event(&self, unit: &str) -> String {
        format!("{}.event.runner.{unit}", self.prefix)
    }
    /// `xo.event.runner.*`
    pub fn runner_event_all(&self) -> String {
        format!("{}.event.runner.*", self.prefix)
    }
    /// `xo.event.fleet.<role>`
    pub fn fleet_event(&self, role: &str) -> String {
        format!("{}.event.fleet.{role}", self.prefix)
    }
    /// `xo.event.alert.<kind>`: what needs a human.
    pub fn alert(&self, kind: crate::alert::AlertKind) -> String {
        format!("{}.event.alert.{}", self.prefix, kind.as_str())
    }
    /// `xo.event.alert.*`
    pub fn alert_all(&self) -> String {
        format!("{}.event.alert.*", self.prefix)
    }
    /// `xo.event.queue.stuck`: pending work no runner can claim (and when it can again).
    pub fn queue_stuck(&self) -> String {
        format!("{}.event.queue.stuck", self.prefix)
    }
    /// `xo.event.settings`: every change of the operator settings.
    pub fn settings_event(&self) -> String {
        format!("{}.event.settings", self.prefix)
    }
    /// `xo.event.partitions`: a sharded supervisor joined, or handed
    /// partitions back: the others look at the leases now, not at their
    /// next poll (the hand-over's gap shrinks from a poll to a round trip).
    pub fn partitions_event(&self) -> String {
        format!("{}.event.partitions", self.prefix)
    }
    /// `xo.event.>`: every event (tasks, runners, reviews, fleet, settings).
    pub fn event_all(&self) -> String {
        format!("{}.event.>", self.prefix)
    }
    /// `xo.audit.<project>`
    pub fn audit(&self, project: &str) -> String {
        format!("{}.audit.{project}", self.prefix)
    }
    /// `xo.log.<log>`: the subject of a store log's JetStream stream (the
    /// audit's copy: `xo.log.audit`).
    pub fn store_log(&self, log: &str) -> String {
        format!("{}.log.{log}", self.prefix)
    }
    /// `xo.dlq.<subject>`: where undecodable messages go.
    pub fn dlq(&self, subject: &str) -> String {
        format!("{}.dlq.{subject}", self.prefix)
    }
    /// `xo.dlq.>`
    pub fn dlq_all(&self) -> String {
        format!("{}.dlq.>", self.prefix)
    }
    /// `xo.ctl.<service>` (the group of a control API).
    pub fn ctl_group(&self, service: &str) -> String {
        format!("{}.ctl.{service}", self.prefix)
    }
    /// `xo.ctl.<service>.at.<instance>`: the control API of one instance
    /// of a service that runs as several (sharded supervisors).
    pub fn ctl_instance_group(&self, service: &str, instance: &str) -> String {
        format!("{}.ctl.{service}.at.{instance}", self.prefix)
    }
    /// `xo.ctl.<service>.<verb>`
    pub fn ctl(&self, service: &str, verb: &str) -> String {
        format!("{}.ctl.{service}.{verb}", self.prefix)
    }
    /// `xo.>`: everything of this organisation.
    pub fn all(&self) -> String {
        format!("{}.>", self.prefix)
    }
    /// What a subject of this organisation carries (`None`: not under the prefix).
    pub fn kind(&self, subject: &str) -> Option<SubjectKind> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix('.')?;
        let mut t = rest.split('.');
        Some(match (t.next()?, t.next()) {
            ("salute", _) => SubjectKind::Salute,
            ("steer", _) => SubjectKind::Steer,
            ("heartbeat", _) => SubjectKind::Heartbeat,
            ("event", Some("task")) => SubjectKind::TaskEvent,
            ("event", Some("runner")) => SubjectKind::RunnerEvent,
            ("event", Some("review")) => SubjectKind::ReviewEvent,
            ("event", Some("fleet")) => SubjectKind::FleetEvent,
            ("event", Some("settings")) => SubjectKind::SettingsEvent,
            ("directive", _) => SubjectKind::Directive,
            ("knowledge", Some("changed")) => SubjectKind::KnowledgeChanged,
            ("audit", _) => SubjectKind::Audit,
            ("dlq", _) => SubjectKind::DeadLetter,
            ("ctl", _) => SubjectKind::Control,
            _ => SubjectKind::Other,
        })
    }

    /// The unit a `xo.<kind>.<unit>` subject names, if it has that shape
    /// (or `xo.<kind>.<unit>.<partition>`, as a partitioning server
    /// delivers it).
    pub fn unit_of<'a>(&self, subject: &'a str) -> Option<&'a str> {
        self.unit_span(subject).map(|at| &subject[at])
    }

    /// Where in `subject` the unit [`Self::unit_of`] names sits: kept
    /// beside a message, the unit is read again without parsing the
    /// subject again.
    pub fn unit_span(&self, subject: &str) -> Option<std::ops::Range<usize>> {
        let rest = subject.strip_prefix(&self.prefix)?.strip_prefix('.')?;
        let (_, rest) = rest.split_once('.')?;
        let unit = match rest.split_once('.') {
            None => rest,
            Some((unit, partition)) => {
                if partition.is_empty() || !partition.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                unit
            }
        };
        // The unit begins `rest`, which ends the subject.
        let start = subject.len() - rest.len();
        (!unit.is_empty()).then_some(start..start + unit.len())
    }
}

/// The partition NATS's `{{partition(n,1)}}` puts a unit's subjects in:
/// FNV-1a (32 bits) of the unit token, modulo `n`. A sharded supervisor
/// checks at start that the server agrees (see
/// [`Subjects::partition_probe`]) and uses it to pick the units of a
/// partition it takes over.
pub fn partition_of(unit: &str, partitions: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in unit.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % partitions.max(1)
}

/// What a subject carries, by its shape (see [`Subjects::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubjectKind {
    Salute,
    Steer,
    Heartbeat,
    TaskEvent,
    RunnerEvent,
    ReviewEvent,
    FleetEvent,
    SettingsEvent,
    Directive,
    KnowledgeChanged,
    Audit,
    DeadLetter,
    Control,
    Other,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_spread_units_and_mappings_name_them() {
        // FNV-1a's published test vectors.
        assert_eq!(partition_of("", u32::MAX), 0x811c_9dc5);
        assert_eq!(partition_of("a", u32::MAX), 0xe40c_292c);
        assert_eq!(partition_of("foobar", u32::MAX), 0xbf9c_f968);
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            counts[partition_of(&format!("unit-{i}"), 8) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
        let s = Subjects::new("acme");
        let m = s.partition_mappings(16);
        assert_eq!(
            m[0],
            (
                "acme.salute.*".to_string(),
                "acme.salute.{{wildcard(1)}}.{{partition(16,1)}}".to_string()
            )
        );
        assert_eq!(m[1].0, "acme.heartbeat.*");
        assert_eq!(s.salute_partition(3), "acme.salute.*.3");
    }

    #[test]
    fn builds_subjects_under_the_prefix() {
        let s = Subjects::new("acme.xo");
        assert_eq!(s.salute("u1"), "acme.xo.salute.u1");
        assert_eq!(s.steer("u1"), "acme.xo.steer.u1");
        assert_eq!(s.dlq("acme.xo.salute.u1"), "acme.xo.dlq.acme.xo.salute.u1");
        assert_eq!(s.ctl("supervisor", "units"), "acme.xo.ctl.supervisor.units");
        assert_eq!(s.unit_of("acme.xo.salute.u1"), Some("u1"));
        assert_eq!(s.unit_of("other.salute.u1"), None);
        // As a partitioning server delivers it; anything else after the
        // unit is not a unit's subject.
        assert_eq!(s.unit_of("acme.xo.salute.u1.7"), Some("u1"));
        assert_eq!(s.unit_span("acme.xo.salute.u1.7"), Some(15..17));
        assert_eq!(s.reports_stream(), "ACME_XO_REPORTS");
        assert_eq!(s.salute_partitioned(), "acme.xo.salute.*.*");
        assert_eq!(s.unit_of("acme.xo.salute.u1.x"), None);
        assert_eq!(s.unit_of("acme.xo.salute.u1."), None);
        assert_eq!(s.unit_of("acme.xo.salute.u1.2.3"), None);
        assert_eq!(s.kind(&s.steer("u1")), Some(SubjectKind::Steer));
        assert_eq!(s.kind(&s.task_event("T-1")), Some(SubjectKind::TaskEvent));
        assert_eq!(
            s.kind(&s.runner_event("u1")),
            Some(SubjectKind::RunnerEvent)
        );
        assert_eq!(
            s.kind(&s.dlq(&s.salute("u1"))),
            Some(SubjectKind::DeadLetter)
        );
        assert_eq!(s.kind(&s.ctl("queue", "claim")), Some(SubjectKind::Control));
        assert_eq!(s.kind("acme.xo.weird"), Some(SubjectKind::Other));
        assert_eq!(s.kind("xo.steer.u1"), None);
    }

    #[test]
    fn rejects_bad_prefixes() {
        assert!(Subjects::validate_prefix("xo").is_ok());
        assert!(Subjects::validate_prefix("a.b").is_ok());
        for bad in ["", "a..b", "a b", "x.*", ">"] {
            assert!(Subjects::validate_prefix(bad).is_err(), "{bad:?}");
        }
    }
}
