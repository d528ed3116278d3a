use super::*;

/// A small deterministic generator (no dependency for a test).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn flip(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// Short ASCII, long (past inline storage), or non-ASCII text.
    fn text(&mut self) -> String {
        match self.below(4) {
            0 => format!("{:x}", self.next()),
            1 => "x".repeat(20 + self.below(40) as usize),
            2 => "héllo wörld ✓ 日本".into(),
            _ => String::new(),
        }
    }
    fn opt(&mut self) -> Option<String> {
        self.flip().then(|| self.text())
    }
    fn number(&mut self) -> u64 {
        match self.below(5) {
            0 => self.below(128),
            1 => self.below(256),
            2 => self.below(65_536),
            3 => self.below(u64::from(u32::MAX)),
            _ => self.next(),
        }
    }
}

fn report(g: &mut Gen) -> SaluteReport {
    let mut r = SaluteReport::new(
        format!("u-{}", g.below(1000)),
        g.text(),
        g.number(),
        g.number(),
    );
    r.time.at = g.number();
    r.size = Size {
        context_tokens: g.number(),
        context_limit: g.number(),
        context_fill: if g.flip() {
            0.0
        } else {
            g.below(1000) as f64 / 1000.0
        },
        history_len: g.number() as u32,
        condensations: g.below(9) as u32,
        compacts_at: g.flip().then(|| g.below(1000) as f64 / 1000.0),
    };
    r.activity = Activity {
        task_id: g.opt(),
        step: g.opt(),
        summary: g.opt(),
        turns_since_progress: g.number() as u32,
        recent: (0..g.below(25))
            .map(|_| Action {
                kind: if g.flip() {
                    ActionKind::Tool
                } else {
                    ActionKind::Message
                },
                tool: g.opt().map(Into::into),
                args_hash: g.opt().map(Into::into),
                outcome: [Outcome::Ok, Outcome::Error, Outcome::Empty][g.below(3) as usize],
                error_type: g.opt().map(Into::into),
                output_hash: g.opt().map(Into::into),
                turn: g.number(),
                cmd: g.opt().map(Into::into),
                line: g.opt().map(Into::into),
            })
            .collect(),
    };
    r.location = Location {
        host: g.opt(),
        container: g.opt(),
        workdir: g.opt(),
    };
    r.unit.pace = [
        Pace::Primary,
        Pace::Alternate,
        Pace::Contingent,
        Pace::Emergency,
    ][g.below(4) as usize];
    r.equipment = Equipment {
        model: g.opt(),
        tokens_in: g.number(),
        tokens_out: g.number(),
        cost_usd: g.below(10_000) as f64 / 7.0,
        tool_failures: (0..g.below(4))
            .map(|_| (g.text(), g.number() as u32))
            .collect(),
    };
    r.status = Status {
        health: [Health::Green, Health::Amber, Health::Red][g.below(3) as usize],
        assessed_by: if g.flip() {
            Assessor::Xo
        } else {
            Assessor::SelfAssessed
        },
        note: g.opt(),
        ended: g.flip(),
        self_steered: Vec::new(),
        needs: None,
        waiting_until: None,
        unreadable: 0,
    };
    r
}

fn serde(bytes: &[u8]) -> Result<SaluteReport, rmp_serde::decode::Error> {
    rmp_serde::from_slice(bytes)
}

#[test]
fn reads_what_serde_writes_and_reads() {
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2_000 {
        let r = report(&mut g);
        let bytes = rmp_serde::to_vec_named(&r).unwrap();
        assert_eq!(read(&bytes).as_ref(), Some(&r));
        assert_eq!(serde(&bytes).unwrap(), r);
    }
}

/// Corrupted payloads: whenever the reader accepts one, serde accepts it
/// too and decodes the same report; some corruptions must still be read
/// (a changed digit), so the comparison is not vacuous.
#[test]
fn never_accepts_what_serde_rejects() {
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    let (mut read_some, mut rejected) = (0, 0);
    for _ in 0..20_000 {
        let r = report(&mut g);
        let mut bytes = rmp_serde::to_vec_named(&r).unwrap();
        match g.below(3) {
            0 => {
                let i = g.below(bytes.len() as u64) as usize;
                bytes[i] = g.next() as u8;
            }
            1 => bytes.truncate(g.below(bytes.len() as u64) as usize),
            _ => {
                let i = g.below(bytes.len() as u64) as usize;
                bytes.insert(i, g.next() as u8);
            }
        }
        match read(&bytes) {
            Some(fast) => {
                let slow = serde(&bytes).expect("serde rejects what the reader accepted");
                // Compared through their encoding: a corrupted float may be NaN.
                assert_eq!(
                    rmp_serde::to_vec_named(&fast).unwrap(),
                    rmp_serde::to_vec_named(&slow).unwrap()
                );
                read_some += 1;
            }
            None => rejected += 1,
        }
    }
    assert!(
        read_some > 1_000,
        "only {read_some} corrupted payloads were read"
    );
    assert!(
        rejected > 1_000,
        "only {rejected} corrupted payloads were refused"
    );
}

/// Shapes serde accepts that the reader leaves to serde.
#[test]
fn leaves_other_shapes_to_serde() {
    let r = report(&mut Gen(7));
    // A struct as an array of its fields in order.
    let mut v = fields(&r);
    let t = &r.time;
    v.iter_mut().find(|(k, _)| k == b"time").unwrap().1 =
        rmp_serde::to_vec(&(t.at, t.turn, t.seq)).unwrap();
    let bytes = encode_map(&v);
    assert_eq!(read(&bytes), None);
    assert_eq!(serde(&bytes).unwrap(), r);
    // An unknown field (a newer minor version).
    let mut v = fields(&r);
    v.push((b"extra".to_vec(), vec![0xc3]));
    let bytes = encode_map(&v);
    assert_eq!(read(&bytes), None);
    assert_eq!(serde(&bytes).unwrap(), r);
}

/// Shapes both refuse: the reader answers `None`, serde names the error.
#[test]
fn refuses_what_serde_refuses() {
    let r = report(&mut Gen(11));
    let fields = fields(&r);
    // Duplicate field.
    let mut dup = fields.clone();
    dup.push(dup[0].clone());
    // Missing required field (`time`).
    let missing: Vec<_> = fields
        .iter()
        .filter(|(k, _)| k != b"time")
        .cloned()
        .collect();
    // Negative version.
    let mut negative = fields.clone();
    negative.iter_mut().find(|(k, _)| k == b"v").unwrap().1 = vec![0xff];
    for (what, bytes) in [
        ("duplicate", encode_map(&dup)),
        ("missing", encode_map(&missing)),
        ("negative", encode_map(&negative)),
    ] {
        assert_eq!(read(&bytes), None, "{what}");
        assert!(serde(&bytes).is_err(), "{what}");
    }
    let mut trailing = rmp_serde::to_vec_named(&r).unwrap();
    trailing.push(0xc0);
    assert_eq!(read(&trailing), None);
}

/// Every integer width a writer may pick: the reader reads the value
/// serde reads, and refuses a negative number for an unsigned field.
#[test]
fn integers_of_every_width() {
    let r = report(&mut Gen(13));
    let with_turn = |encoded: Vec<u8>| {
        let mut v = fields(&r);
        let mut time = vec![0x83, 0xa2, b'a', b't', 0x00, 0xa3, b's', b'e', b'q', 0x01];
        time.extend_from_slice(&[0xa4, b't', b'u', b'r', b'n']);
        time.extend_from_slice(&encoded);
        v.iter_mut().find(|(k, _)| k == b"time").unwrap().1 = time;
        encode_map(&v)
    };
    let five = [
        vec![0x05],
        vec![0xcc, 5],
        vec![0xcd, 0, 5],
        vec![0xce, 0, 0, 0, 5],
        vec![0xcf, 0, 0, 0, 0, 0, 0, 0, 5],
        vec![0xd0, 5],
        vec![0xd1, 0, 5],
        vec![0xd2, 0, 0, 0, 5],
        vec![0xd3, 0, 0, 0, 0, 0, 0, 0, 5],
    ];
    for enc in five {
        let bytes = with_turn(enc.clone());
        assert_eq!(read(&bytes).map(|r| r.time.turn), Some(5), "{enc:x?}");
        assert_eq!(serde(&bytes).unwrap().time.turn, 5, "{enc:x?}");
    }
    let negative = [
        vec![0xff],
        vec![0xd0, 0xfb],
        vec![0xd1, 0xff, 0xfb],
        vec![0xd2, 0xff, 0xff, 0xff, 0xfb],
        vec![0xd3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfb],
        vec![0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0],
    ];
    for enc in negative {
        let bytes = with_turn(enc.clone());
        assert_eq!(read(&bytes), None, "{enc:x?}");
        assert!(serde(&bytes).is_err(), "{enc:x?}");
    }
    // A float field takes floats of both widths and integers.
    for (enc, want) in [
        (vec![0xca, 0x40, 0xa0, 0, 0], 5.0),
        (vec![0xcb, 0x40, 0x14, 0, 0, 0, 0, 0, 0], 5.0),
        (vec![0x05], 5.0),
        (vec![0xd0, 5], 5.0),
    ] {
        let mut v = fields(&r);
        let mut eq = vec![0x81, 0xa8];
        eq.extend_from_slice(b"cost_usd");
        eq.extend_from_slice(&enc);
        v.iter_mut().find(|(k, _)| k == b"equipment").unwrap().1 = eq;
        let bytes = encode_map(&v);
        assert_eq!(read(&bytes).map(|r| r.equipment.cost_usd), Some(want));
        assert_eq!(serde(&bytes).unwrap().equipment.cost_usd, want);
    }
}

/// The report's top-level fields as (key, encoded value) pairs.
fn fields(r: &SaluteReport) -> Vec<(Vec<u8>, Vec<u8>)> {
    let json = serde_json::to_value(r).unwrap();
    json.as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), rmp_serde::to_vec_named(v).unwrap()))
        .collect()
}

fn encode_map(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![0xde, 0, fields.len() as u8];
    for (k, v) in fields {
        out.push(0xa0 | k.len() as u8);
        out.extend_from_slice(k);
        out.extend_from_slice(v);
    }
    out
}
