//! What stands between the report pump and a watcher group: a count of
//! the reports sent to the group and not yet handled, and past
//! `supervisor.inbox_high` of them an overflow that keeps one report per
//! unit, its latest. Under overload the supervisor sheds deliberately: a
//! unit's newer report replaces its older one still waiting (counted as
//! shed, never as lost), so memory stays bounded by the units, not by how
//! far behind the watchers are, and every unit is judged on its latest
//! report. The group takes the overflow whole when its `Drain` comes.
//!
//! Order is kept per unit: while an overflow is waiting every report of
//! the group goes into it, so no report sent after it can be handled
//! before it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use xo_bus::Message;
use xo_radio::FnvMap;

/// Reports waiting for a group from which the next one sent is copied out
/// of its read buffer (one kept in the overflow always is). Below it the
/// group is keeping up (the pump hands a burst over in batches of up to
/// 128 a group), and at most this many reports a group hold a buffer of
/// the connection's; reports read together share one.
pub const COPY_BEHIND: u64 = 128;

/// A report the pump offers a group: sent on, or kept in the overflow.
#[derive(Debug)]
pub enum Offer {
    /// Send it to the group now (counted as waiting).
    Send(Message),
    /// Kept in the overflow: `drain` says the group must be told (the
    /// overflow was empty); `shed` that it replaced an older report.
    Kept { drain: bool, shed: bool },
}

/// One group's inbox.
#[derive(Debug, Default)]
pub struct Inbox {
    /// Reports sent to the group and not yet handled.
    waiting: AtomicU64,
    /// An overflow is waiting for its `Drain`.
    overflowing: AtomicBool,
    /// The overflow: each unit's latest report, and how many older ones it
    /// replaced (superseded, not lost: its sequence gap is not a loss).
    overflow: Mutex<FnvMap<String, (Message, u64)>>,
}

impl Inbox {
    /// What to do with `msg`, `unit`'s report, given `high`.
    pub fn offer(&self, unit: &str, msg: Message, high: u64) -> Offer {
        let waiting = self.waiting.load(Ordering::Relaxed);
        if !self.overflowing.load(Ordering::Acquire) && waiting < high {
            self.waiting.fetch_add(1, Ordering::Relaxed);
            // Behind a backlog a report is held for as long as the watchers
            // are behind: with its own copy of its bytes, not the
            // connection's read buffer it was cut from, which the reports
            // read with it share (docs/performance.md §36: in a
            // 100,000-unit overload the soak's peak resident memory fell by
            // about half a gigabyte with the copy). A group keeping up
            // handles it at once: no copy (§37).
            let msg = if waiting >= COPY_BEHIND {
                msg.detached()
            } else {
                msg
            };
            return Offer::Send(msg);
        }
        let msg = msg.detached();
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        let drain = o.is_empty();
        let shed = match o.get_mut(unit) {
            Some((kept, superseded)) => {
                *kept = msg;
                *superseded += 1;
                true
            }
            None => {
                o.insert(unit.to_string(), (msg, 0));
                false
            }
        };
        if drain {
            self.overflowing.store(true, Ordering::Release);
        }
        Offer::Kept { drain, shed }
    }

    /// A report sent with [`Offer::Send`] was handled (or never arrived).
    pub fn handled(&self) {
        let _ = self
            .waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// The overflow, taken whole: (unit, its latest report, how many older
    /// ones that one replaced).
    pub fn drain(&self) -> Vec<(String, Message, u64)> {
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        self.overflowing.store(false, Ordering::Release);
        o.drain().map(|(u, (m, n))| (u, m, n)).collect()
    }

    /// The group started again: what was waiting in its old mailbox is
    /// gone; an overflow still here needs a `Drain` (its own was lost).
    pub fn restarted(&self) -> bool {
        self.waiting.store(0, Ordering::Relaxed);
        !self
            .overflow
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Reports waiting, in the mailbox and the overflow.
    #[cfg(test)]
    fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
            + self.overflow.lock().map(|o| o.len() as u64).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(seq: u64) -> Message {
        Message {
            subject: "xo.salute.u".into(),
            reply: None,
            headers: Default::default(),
            payload: bytes::Bytes::from(seq.to_string()),
        }
    }

    #[test]
    fn past_the_mark_a_units_latest_report_replaces_its_older_one() {
        let inbox = Inbox::default();
        // Under the mark: sent on.
        assert!(matches!(inbox.offer("a", report(1), 2), Offer::Send(_)));
        assert!(matches!(inbox.offer("a", report(2), 2), Offer::Send(_)));
        // At the mark: kept; the first keeps tell the group once.
        assert!(matches!(
            inbox.offer("a", report(3), 2),
            Offer::Kept {
                drain: true,
                shed: false
            }
        ));
        assert!(matches!(
            inbox.offer("b", report(1), 2),
            Offer::Kept {
                drain: false,
                shed: false
            }
        ));
        assert!(matches!(
            inbox.offer("a", report(4), 2),
            Offer::Kept {
                drain: false,
                shed: true
            }
        ));
        // The group catches up: still kept while the overflow waits (a
        // report sent now would overtake it).
        inbox.handled();
        inbox.handled();
        assert!(matches!(
            inbox.offer("a", report(5), 2),
            Offer::Kept { shed: true, .. }
        ));
        let mut d = inbox.drain();
        d.sort_by(|x, y| x.0.cmp(&y.0));
        let got: Vec<(String, String, u64)> = d
            .into_iter()
            .map(|(u, m, n)| (u, String::from_utf8_lossy(&m.payload).into(), n))
            .collect();
        assert_eq!(
            got,
            [("a".into(), "5".into(), 2), ("b".into(), "1".into(), 0)]
        );
        // Drained: sent on again.
        assert!(matches!(inbox.offer("a", report(6), 2), Offer::Send(_)));
        assert_eq!(inbox.waiting(), 1);
    }

    /// A report read from NATS is a slice of the connection's read buffer;
    /// one held behind a backlog, in a mailbox or the overflow, must not
    /// keep that buffer. One sent to a group that keeps up is not copied.
    #[test]
    fn a_held_report_does_not_keep_the_buffer_it_was_read_into() {
        let inbox = Inbox::default();
        let read = bytes::Bytes::from(vec![7u8; 64 * 1024]);
        let of = |at: usize| Message {
            payload: read.slice(at..at + 100),
            ..report(0)
        };
        let high = COPY_BEHIND + 1;
        // A group keeping up: sent as read, the buffer shared.
        let Offer::Send(first) = inbox.offer("a", of(0), high) else {
            panic!("under the mark a report is sent on");
        };
        assert!(!read.is_unique(), "not copied while the group keeps up");
        drop(first);
        inbox.handled();
        // A backlog of COPY_BEHIND: the next one sent is a copy, and the
        // one kept past the mark too.
        for _ in 0..COPY_BEHIND {
            inbox.waiting.fetch_add(1, Ordering::Relaxed);
        }
        let Offer::Send(sent) = inbox.offer("a", of(100), high) else {
            panic!("under the mark a report is sent on");
        };
        assert!(matches!(
            inbox.offer("a", of(200), high),
            Offer::Kept { .. }
        ));
        assert!(
            read.is_unique(),
            "neither the report sent behind a backlog nor the kept one holds the read buffer"
        );
        assert_eq!(sent.payload, read.slice(100..200), "the same bytes");
        let kept = inbox.drain();
        assert_eq!(kept[0].1.payload, read.slice(200..300));
    }

    #[test]
    fn a_restarted_group_starts_from_nothing_waiting_and_drains_what_is_kept() {
        let inbox = Inbox::default();
        assert!(matches!(inbox.offer("a", report(1), 1), Offer::Send(_)));
        assert!(matches!(inbox.offer("a", report(2), 1), Offer::Kept { .. }));
        assert!(inbox.restarted(), "the overflow needs a drain");
        assert_eq!(inbox.drain().len(), 1);
        assert!(!inbox.restarted());
        assert!(matches!(inbox.offer("a", report(3), 1), Offer::Send(_)));
    }
}
