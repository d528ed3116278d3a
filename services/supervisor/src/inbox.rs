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
//! before it. A new unit's first reports go to the group another way (the
//! pump decoded them, and hands them over once the root has started the
//! unit's watcher): a `Drain` already waiting ahead of them would hand the
//! unit's later reports over first. So the pump says each one it hands
//! over ([`Inbox::greeted`]), and the unit's report in the overflow waits
//! there until the group has had the last of them ([`Inbox::welcomed`]).

use std::ops::Range;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use xo_bus::{Headers, Message};
use xo_proto::codec::{CONTENT_TYPE, Format};
use xo_radio::{FnvMap, UnitKey};

/// Reports waiting for a group from which the next one sent is copied out
/// of its read buffer (one kept in the overflow always is). Below it the
/// group is keeping up (the pump hands a burst over in batches of up to
/// 128 a group), and at most this many reports a group hold a buffer of
/// the connection's; reports read together share one.
pub const COPY_BEHIND: u64 = 128;

/// A report read for a unit, with where its unit sits in its subject: the
/// pump parses the subject once, and the group and the watcher read the
/// unit from it without parsing it again or copying it.
///
/// A content type that says nothing the format does not is let go on the
/// pump's thread, where the client's header map was made and is still in
/// the core's cache: the watcher's core neither reads nor frees it (given
/// back to a dead letter, [`restore_content_type`]).
///
/// The message is private: the unit's place is valid for its subject as it
/// was routed, and only this module can change one without the other.
#[derive(Debug)]
pub struct Routed {
    msg: Message,
    unit: Range<usize>,
    /// The format its content type names, read by the pump while the
    /// headers are at hand (a watcher looking them up again reads them
    /// cold, on another core).
    format: Option<Format>,
}

impl Routed {
    /// `msg` for the unit at `unit` in its subject (from
    /// `Subjects::unit_span`); the message back, as it came, if nothing is
    /// there (boxed: a message is large, and this is the rare path).
    pub fn new(mut msg: Message, unit: Range<usize>) -> Result<Self, Box<Message>> {
        if msg.subject.get(unit.clone()).is_none_or(|u| u.is_empty()) {
            return Err(Box::new(msg));
        }
        let format = Format::named(msg.headers.get(CONTENT_TYPE));
        if only_the_content_type_of(&msg.headers, format) {
            msg.headers = Headers::default();
        }
        Ok(Self { msg, unit, format })
    }
    /// The unit the report was routed for.
    pub fn unit(&self) -> &str {
        &self.msg.subject[self.unit.clone()]
    }
    /// The report with its own copy of its bytes (`Message::detached`).
    fn detached(self) -> Self {
        Self {
            msg: self.msg.detached(),
            ..self
        }
    }
    /// The message as it came (its content type given back), for a path
    /// that routes it afresh.
    pub fn into_message(self) -> Message {
        let mut msg = self.msg;
        restore_content_type(&mut msg, self.format);
        msg
    }
    /// The message (without a content type the format says: see
    /// [`restore_content_type`]), where its unit sits in its subject, and
    /// its format.
    pub fn into_parts(self) -> (Message, Range<usize>, Option<Format>) {
        (self.msg, self.unit, self.format)
    }
}

/// Whether `headers` hold a content type and nothing else, in the words
/// `format` would give it back with.
fn only_the_content_type_of(headers: &Headers, format: Option<Format>) -> bool {
    let Some(ct) = format.map(Format::content_type) else {
        return false;
    };
    let mut all = headers.iter();
    matches!(all.next(), Some((k, v)) if k.eq_ignore_ascii_case(CONTENT_TYPE) && v == ct)
        && all.next().is_none()
}

/// Gives a routed report's message back the content type the pump let go
/// (a message with no content type and a format had it, in the format's
/// words): for what shows the message as it came, a dead letter.
pub fn restore_content_type(msg: &mut Message, format: Option<Format>) {
    if let Some(f) = format
        && msg.headers.get(CONTENT_TYPE).is_none()
    {
        msg.headers.insert(CONTENT_TYPE, f.content_type());
    }
}

/// A report the pump offers a group: sent on, or kept in the overflow.
#[derive(Debug)]
pub enum Offer {
    /// Send it to the group now (counted as waiting).
    Send(Routed),
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
    /// The overflow, and the units whose first reports are on their way.
    overflow: Mutex<Overflow>,
    /// How many units those are (`Overflow::greeting`'s length, stored
    /// under the lock after each change of it): while none, a report is
    /// sent on without the lock.
    greeting: AtomicUsize,
}

#[derive(Debug, Default)]
struct Overflow {
    /// Each unit's latest report, and how many older ones it replaced
    /// (superseded, not lost: its sequence gap is not a loss). Keyed in
    /// place, as the groups' units (`UnitKey`).
    latest: FnvMap<UnitKey, (Routed, u64)>,
    /// Per new unit, its first reports handed to the group and not yet
    /// handled there: its report here is not drained before they are.
    greeting: FnvMap<UnitKey, u32>,
}

impl Overflow {
    /// Takes every unit's latest report but those of units still being
    /// greeted.
    fn take(&mut self) -> Vec<(UnitKey, Routed, u64)> {
        if self.greeting.is_empty() {
            return self.latest.drain().map(|(u, (m, n))| (u, m, n)).collect();
        }
        let greeting = &self.greeting;
        self.latest
            .extract_if(|u, _| !greeting.contains_key(u.as_str()))
            .map(|(u, (m, n))| (u, m, n))
            .collect()
    }
}

impl Inbox {
    /// What to do with a unit's report, given `high`.
    pub fn offer(&self, report: Routed, high: u64) -> Offer {
        let waiting = self.waiting.load(Ordering::Relaxed);
        if !self.overflowing.load(Ordering::Acquire) && waiting < high {
            // A unit whose report waits for its first ones keeps its
            // latest there: one sent on now would be handled before it.
            if self.greeting.load(Ordering::Relaxed) > 0 {
                let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((kept, superseded)) = o.latest.get_mut(report.unit()) {
                    *kept = report.detached();
                    *superseded += 1;
                    return Offer::Kept {
                        drain: false,
                        shed: true,
                    };
                }
            }
            self.waiting.fetch_add(1, Ordering::Relaxed);
            // Behind a backlog a report is held for as long as the watchers
            // are behind: with its own copy of its bytes, not the
            // connection's read buffer it was cut from, which the reports
            // read with it share (docs/performance.md §36: in a
            // 100,000-unit overload the soak's peak resident memory fell by
            // about half a gigabyte with the copy). A group keeping up
            // handles it at once: no copy (§37; made on the pump's thread
            // for every report, the copy cost the pump 6.7% of the
            // supervisor's CPU, §39).
            return Offer::Send(if waiting >= COPY_BEHIND {
                Routed {
                    msg: report.msg.detached(),
                    ..report
                }
            } else {
                report
            });
        }
        let unit = report.unit();
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        // A `Drain` is asked for once an overflow: not by whether the
        // overflow is empty (a new unit's report may wait in it past one).
        let drain = !self.overflowing.load(Ordering::Acquire);
        let shed = match o.latest.get_mut(unit) {
            Some((kept, superseded)) => {
                *kept = report.detached();
                *superseded += 1;
                true
            }
            None => {
                o.latest.insert(UnitKey::new(unit), (report.detached(), 0));
                false
            }
        };
        if drain {
            self.overflowing.store(true, Ordering::Release);
        }
        Offer::Kept { drain, shed }
    }

    /// The pump hands one of `unit`'s first reports (decoded there) to the
    /// group: until the group has handled it, the unit's report in the
    /// overflow, if one comes, stays there.
    pub fn greeted(&self, unit: &str) {
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        match o.greeting.get_mut(unit) {
            Some(n) => *n += 1,
            None => {
                o.greeting.insert(UnitKey::new(unit), 1);
                self.greeting.store(o.greeting.len(), Ordering::Relaxed);
            }
        }
    }

    /// The group handled one of `unit`'s first reports: after the last of
    /// them, the unit's report kept in the overflow meanwhile, if any (it
    /// came after them), with how many older ones it replaced.
    pub fn welcomed(&self, unit: &str) -> Option<(Routed, u64)> {
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        match o.greeting.get_mut(unit) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return None;
            }
            Some(_) => {
                o.greeting.remove(unit);
                self.greeting.store(o.greeting.len(), Ordering::Relaxed);
            }
            None => return None,
        }
        o.latest.remove(unit)
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
    /// (A unit still being greeted keeps its report here: see
    /// [`Self::welcomed`].)
    pub fn drain(&self) -> Vec<(UnitKey, Routed, u64)> {
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        self.overflowing.store(false, Ordering::Release);
        o.take()
    }

    /// The group started again: what was waiting in its old mailbox is
    /// gone, the first reports being greeted with it; an overflow still
    /// here needs a `Drain` (its own was lost), and every report of the
    /// group goes into it until then.
    pub fn restarted(&self) -> bool {
        self.waiting.store(0, Ordering::Relaxed);
        let mut o = self.overflow.lock().unwrap_or_else(|e| e.into_inner());
        o.greeting.clear();
        self.greeting.store(o.greeting.len(), Ordering::Relaxed);
        let kept = !o.latest.is_empty();
        if kept {
            self.overflowing.store(true, Ordering::Release);
        }
        kept
    }

    /// Reports waiting, in the mailbox and the overflow.
    #[cfg(test)]
    fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
            + self
                .overflow
                .lock()
                .map(|o| o.latest.len() as u64)
                .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `unit`'s report `seq`, as the pump routes it.
    fn report(unit: &str, seq: u64) -> Routed {
        let msg = Message {
            subject: format!("xo.salute.{unit}"),
            reply: None,
            headers: Default::default(),
            payload: bytes::Bytes::from(seq.to_string()),
        };
        let at = xo_proto::Subjects::new("xo").unit_span(&msg.subject);
        Routed::new(msg, at.expect("a unit's subject")).expect("a unit")
    }

    #[test]
    fn a_routed_report_reads_its_unit_from_its_subject() {
        let r = report("unit-7", 1);
        assert_eq!(r.unit(), "unit-7");
        assert_eq!(r.unit, 10..16);
        // A place with no unit in it is refused, not read past its end.
        let m = r.msg;
        let back = Routed::new(m.clone(), 10..40).expect_err("past the subject's end");
        assert_eq!(back.subject, m.subject, "the message is handed back");
        assert!(Routed::new(m.clone(), 10..10).is_err());
        // The format its content type names is read with it; none, or one
        // XO does not read, leaves it to the payload.
        assert_eq!(r_format(&m, None), None);
        assert_eq!(
            r_format(&m, Some(" Application/MsgPack ")),
            Some(Format::Msgpack)
        );
        assert_eq!(r_format(&m, Some("application/json")), Some(Format::Json));
        assert_eq!(r_format(&m, Some("text/plain")), None);
    }

    fn r_format(m: &Message, content_type: Option<&str>) -> Option<Format> {
        let mut m = m.clone();
        if let Some(ct) = content_type {
            m.headers.insert(xo_proto::codec::CONTENT_TYPE, ct);
        }
        Routed::new(m, 10..16).expect("a unit").into_parts().2
    }

    #[test]
    fn past_the_mark_a_units_latest_report_replaces_its_older_one() {
        let inbox = Inbox::default();
        // Under the mark: sent on.
        assert!(matches!(inbox.offer(report("a", 1), 2), Offer::Send(_)));
        assert!(matches!(inbox.offer(report("a", 2), 2), Offer::Send(_)));
        // At the mark: kept; the first keeps tell the group once.
        assert!(matches!(
            inbox.offer(report("a", 3), 2),
            Offer::Kept {
                drain: true,
                shed: false
            }
        ));
        assert!(matches!(
            inbox.offer(report("b", 1), 2),
            Offer::Kept {
                drain: false,
                shed: false
            }
        ));
        assert!(matches!(
            inbox.offer(report("a", 4), 2),
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
            inbox.offer(report("a", 5), 2),
            Offer::Kept { shed: true, .. }
        ));
        let mut d = inbox.drain();
        d.sort_by(|x, y| x.0.as_str().cmp(y.0.as_str()));
        let got: Vec<(String, String, u64)> = d
            .into_iter()
            .map(|(u, r, n)| {
                let payload = String::from_utf8_lossy(&r.msg.payload).into();
                (u.to_string(), payload, n)
            })
            .collect();
        assert_eq!(
            got,
            [("a".into(), "5".into(), 2), ("b".into(), "1".into(), 0)]
        );
        // Drained: sent on again.
        assert!(matches!(inbox.offer(report("a", 6), 2), Offer::Send(_)));
        assert_eq!(inbox.waiting(), 1);
    }

    /// A report read from NATS is a slice of the connection's read buffer;
    /// one held behind a backlog, in a mailbox or the overflow, must not
    /// keep that buffer. One sent to a group that keeps up is not copied.
    #[test]
    fn a_held_report_does_not_keep_the_buffer_it_was_read_into() {
        let inbox = Inbox::default();
        let read = bytes::Bytes::from(vec![7u8; 64 * 1024]);
        let of = |unit: &str, at: usize| {
            let mut r = report(unit, 0);
            r.msg.payload = read.slice(at..at + 100);
            r
        };
        let high = COPY_BEHIND + 1;
        // A group keeping up: sent as read, the buffer shared.
        let Offer::Send(first) = inbox.offer(of("a", 0), high) else {
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
        let Offer::Send(sent) = inbox.offer(of("a", 100), high) else {
            panic!("under the mark a report is sent on");
        };
        assert!(matches!(
            inbox.offer(of("a", 200), high),
            Offer::Kept { .. }
        ));
        assert!(
            read.is_unique(),
            "neither the report sent behind a backlog nor the kept one holds the read buffer"
        );
        assert_eq!(sent.msg.payload, read.slice(100..200), "the same bytes");
        let kept = inbox.drain();
        assert_eq!(kept[0].1.msg.payload, read.slice(200..300));
    }

    /// A content type the format says is let go on the pump's thread, and
    /// given back for a message shown as it came; any other header keeps
    /// the headers whole.
    #[test]
    fn a_content_type_the_format_says_is_let_go_and_given_back() {
        let with = |pairs: &[(&str, &str)]| {
            let mut m = report("a", 1).msg;
            for (k, v) in pairs {
                m.headers.insert(*k, *v);
            }
            Routed::new(m, 10..11).expect("a unit")
        };
        let r = with(&[(CONTENT_TYPE, "application/msgpack")]);
        assert!(r.msg.headers.is_empty(), "let go");
        assert_eq!(r.format, Some(Format::Msgpack));
        let back = r.into_message();
        assert_eq!(back.headers.get(CONTENT_TYPE), Some("application/msgpack"));
        // Words the format would not give back, or another header: kept.
        let r = with(&[(CONTENT_TYPE, " Application/MsgPack ")]);
        assert_eq!(
            r.msg.headers.get(CONTENT_TYPE),
            Some(" Application/MsgPack ")
        );
        assert_eq!(
            r.into_message().headers.iter().count(),
            1,
            "not added twice"
        );
        let trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let r = with(&[(CONTENT_TYPE, "application/json"), ("traceparent", trace)]);
        assert_eq!(r.msg.headers.get("traceparent"), Some(trace));
        assert_eq!(r.msg.headers.get(CONTENT_TYPE), Some("application/json"));
        // No content type: nothing to let go or give back.
        let r = with(&[]);
        assert_eq!(r.format, None);
        assert!(r.into_message().headers.is_empty());
    }

    /// A new unit's first report goes to its group beside the inbox (the
    /// pump decoded it), after a `Drain` already waiting in the group's
    /// mailbox: the unit's next report, kept in that overflow meanwhile,
    /// must not be drained ahead of it (seen in a 100,000-unit soak as
    /// reports counted duplicates: docs/performance.md §42). It comes out
    /// when the group has had the unit's first reports, after the last.
    #[test]
    fn a_new_units_report_kept_while_its_first_is_greeted_waits_for_it() {
        let inbox = Inbox::default();
        // An overflow, its Drain on the way to the group.
        assert!(matches!(
            inbox.offer(report("old", 1), 0),
            Offer::Kept { drain: true, .. }
        ));
        // The pump hands "new"'s first two reports over (two welcomes),
        // then routes its third, which the overflow keeps.
        inbox.greeted("new");
        inbox.greeted("new");
        assert!(matches!(
            inbox.offer(report("new", 3), 0),
            Offer::Kept {
                drain: false,
                shed: false
            }
        ));
        // The Drain ahead of them: the old unit's report only.
        let d = inbox.drain();
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].0.as_str(), "old");
        // Kept past the drain, a later report replaces it (shed), and a
        // new overflow asks for its own Drain though one is kept.
        assert!(matches!(
            inbox.offer(report("new", 4), 0),
            Offer::Kept {
                drain: true,
                shed: true
            }
        ));
        assert!(inbox.drain().is_empty(), "still greeted");
        // The overflow is over, the group keeps up: another unit's report
        // is sent on, but this unit's replaces the one kept (sent on, it
        // would be handled before it), and asks for no Drain.
        assert!(matches!(
            inbox.offer(report("other", 1), 100),
            Offer::Send(_)
        ));
        assert!(matches!(
            inbox.offer(report("new", 5), 100),
            Offer::Kept {
                drain: false,
                shed: true
            }
        ));
        // The group has the first report: the second is still to come.
        assert!(inbox.welcomed("new").is_none());
        let (r, superseded) = inbox.welcomed("new").expect("after the last first report");
        assert_eq!(&r.msg.payload[..], b"5");
        assert_eq!(superseded, 2);
        assert!(inbox.welcomed("new").is_none(), "once");
        // Welcomed: sent on as any unit's.
        assert!(matches!(inbox.offer(report("new", 6), 100), Offer::Send(_)));
        // Greeted no more: drained as any unit.
        assert!(matches!(
            inbox.offer(report("new", 7), 0),
            Offer::Kept { drain: true, .. }
        ));
        assert_eq!(inbox.drain().len(), 1);
    }

    /// A group that started again lost the first reports on their way
    /// with its mailbox: what waited for them is drained, and reports wait
    /// in the overflow for that Drain.
    #[test]
    fn a_restarted_group_drains_what_waited_for_first_reports_it_lost() {
        let inbox = Inbox::default();
        inbox.greeted("new");
        assert!(matches!(
            inbox.offer(report("new", 2), 0),
            Offer::Kept { .. }
        ));
        assert!(inbox.drain().is_empty());
        assert!(inbox.restarted(), "the kept report needs a drain");
        assert!(
            matches!(inbox.offer(report("other", 1), 5), Offer::Kept { .. }),
            "kept behind the overflow until its Drain"
        );
        assert_eq!(inbox.drain().len(), 2);
        assert!(inbox.welcomed("new").is_none());
    }

    #[test]
    fn a_restarted_group_starts_from_nothing_waiting_and_drains_what_is_kept() {
        let inbox = Inbox::default();
        assert!(matches!(inbox.offer(report("a", 1), 1), Offer::Send(_)));
        assert!(matches!(inbox.offer(report("a", 2), 1), Offer::Kept { .. }));
        assert!(inbox.restarted(), "the overflow needs a drain");
        assert_eq!(inbox.drain().len(), 1);
        assert!(!inbox.restarted());
        assert!(matches!(inbox.offer(report("a", 3), 1), Offer::Send(_)));
    }
}
