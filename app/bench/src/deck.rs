//! Reports encoded ahead, for a soak whose load must keep its rate.
//!
//! Building a realistic report and encoding it costs the publisher about as
//! much as decoding and checking it costs the supervisor; on a small
//! machine a publisher that does both for 100,000 units a second falls
//! behind and takes the cores the supervisor is measured on. The deck holds
//! a few thousand reports from [`sample::realistic`], encoded once with a
//! marker in each field that follows the unit or the turn (the unit's name,
//! its task, the sequence, the turn, the time, the token counts, the
//! history's length, each action's turn). A report for a unit at a turn is
//! one card's bytes with those fields written in, MessagePack as the
//! encoder writes it: for the unit and turn the card was drawn from, the
//! bytes are the encoder's own (the tests hold it to that). Which card a
//! report takes is drawn from the unit and the turn as `realistic` draws its
//! content, so the fleet's mix of anomalies is the same.

use anyhow::{Context, bail};
use bytes::Bytes;
use xo_bus::{Headers, typed};
use xo_proto::SaluteReport;
use xo_proto::codec::{self, Format};
use xo_radio::sample::{self, ACTIONS, TASKS, Turned};

/// Cards in a load's deck: enough that a unit's reports differ turn to
/// turn and the fleet's mix of anomalies holds (about 5% of the cards).
pub const CARDS: usize = 4096;

/// A field a card leaves open, filled per report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hole {
    Unit,
    Task,
    Seq,
    Turn,
    At,
    TokensIn,
    TokensOut,
    HistoryLen,
    Condensations,
    /// The turn of action `i` of the 20 in `activity.recent`.
    ActionTurn(u8),
}

/// One encoded report and where its open fields are: `(start, end, hole)`
/// in byte order, each span the marker's encoding.
struct Card {
    bytes: Vec<u8>,
    holes: Vec<(usize, usize, Hole)>,
}

/// The cards, the unit-dependent strings every report of a unit shares,
/// and the headers every report is sent with.
pub struct Deck {
    cards: Vec<Card>,
    /// Each task's id: unit `u` works on task `u % TASKS`.
    tasks: Vec<String>,
    /// Its content type, as the encoder sets it.
    headers: Headers,
}

/// An integer marker: large enough that MessagePack writes it at full width
/// (`0xcf` and eight bytes for a u64 field, `0xce` and four for a u32), so
/// its bytes are found whole and nowhere else.
fn mark64(k: u64) -> u64 {
    0xC0DE_5EED_0000_0000 | k
}

fn mark32(k: u32) -> u32 {
    0xC0DE_0000 | k
}

const UNIT_MARK: &str = "~deck-unit~";
const TASK_MARK: &str = "~deck-task~";

impl Deck {
    /// A deck of `cards` reports drawn from `realistic` (unit `j`, turn
    /// `1 + j / 97`).
    pub fn new(cards: usize) -> anyhow::Result<Self> {
        let cards = (0..cards.max(1) as u64)
            .map(|j| Card::new(sample::realistic(j, 1 + j / TASKS)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let tasks = (0..TASKS).map(sample::task_id).collect();
        let (headers, _) = typed::encode(&sample::realistic(0, 1), Format::Msgpack)?;
        Ok(Self {
            cards,
            tasks,
            headers,
        })
    }

    /// The headers to send each report with.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The report of unit `unit` (its name `name`) at `turn` (its sequence
    /// too), encoded.
    pub fn report(&self, unit: u64, name: &str, turn: u64) -> anyhow::Result<Bytes> {
        let pick = sample::draw(unit, turn) as usize % self.cards.len();
        self.cards[pick].fill((name, &self.tasks[(unit % TASKS) as usize]), turn)
    }
}

impl Card {
    /// `r` encoded with a marker in each field that follows its unit or
    /// turn, and where each marker is.
    fn new(mut r: SaluteReport) -> anyhow::Result<Self> {
        let mut marks: Vec<(Vec<u8>, Hole)> = Vec::new();
        let mut int = |v: u64, hole| -> anyhow::Result<()> {
            let mut b = Vec::new();
            rmp::encode::write_uint(&mut b, v)?;
            marks.push((b, hole));
            Ok(())
        };
        r.time.seq = mark64(0);
        int(r.time.seq, Hole::Seq)?;
        r.time.turn = mark64(1);
        int(r.time.turn, Hole::Turn)?;
        r.time.at = mark64(2);
        int(r.time.at, Hole::At)?;
        r.equipment.tokens_in = mark64(3);
        int(r.equipment.tokens_in, Hole::TokensIn)?;
        r.equipment.tokens_out = mark64(4);
        int(r.equipment.tokens_out, Hole::TokensOut)?;
        r.size.history_len = mark32(5);
        int(r.size.history_len.into(), Hole::HistoryLen)?;
        r.size.condensations = mark32(6);
        int(r.size.condensations.into(), Hole::Condensations)?;
        // Action `i`'s turn follows its place in the window
        // (`sample::action_turn`), as `realistic` makes it.
        if r.activity.recent.len() as u64 > ACTIONS {
            bail!(
                "a deck card holds {} actions; realistic reports hold {ACTIONS}",
                r.activity.recent.len()
            );
        }
        for (i, a) in r.activity.recent.iter_mut().enumerate() {
            a.turn = mark64(16 + i as u64);
            int(a.turn, Hole::ActionTurn(i as u8))?;
        }
        let mut text = |s: &str, hole| -> anyhow::Result<()> {
            let mut b = Vec::new();
            rmp::encode::write_str(&mut b, s)?;
            marks.push((b, hole));
            Ok(())
        };
        r.unit.unit = UNIT_MARK.into();
        text(UNIT_MARK, Hole::Unit)?;
        if r.activity.task_id.is_some() {
            r.activity.task_id = Some(TASK_MARK.into());
            text(TASK_MARK, Hole::Task)?;
        }
        let bytes = codec::encode(&r, Format::Msgpack).context("encoding a deck card")?;
        let mut holes = Vec::with_capacity(marks.len());
        for (mark, hole) in marks {
            let mut at = bytes
                .windows(mark.len())
                .enumerate()
                .filter(|(_, w)| *w == mark);
            match (at.next(), at.next()) {
                (Some((start, _)), None) => holes.push((start, start + mark.len(), hole)),
                (None, _) => bail!("a deck card has no marker for {hole:?}"),
                (Some(_), Some(_)) => bail!("a deck card has its marker for {hole:?} twice"),
            }
        }
        holes.sort_unstable_by_key(|h| h.0);
        Ok(Self { bytes, holes })
    }

    /// The card's report for the unit named `name` working on `task`, at
    /// `turn`: the figures `sample::realistic` derives from the unit and
    /// the turn, written in by the writers `rmp_serde` encodes with.
    fn fill(&self, (name, task): (&str, &str), turn: u64) -> anyhow::Result<Bytes> {
        use rmp::encode::{write_str, write_uint};
        let turned = Turned::of(turn);
        let mut out = Vec::with_capacity(self.bytes.len() + 32);
        let mut from = 0;
        for &(start, end, hole) in &self.holes {
            out.extend_from_slice(&self.bytes[from..start]);
            from = end;
            match hole {
                Hole::Unit => write_str(&mut out, name)?,
                Hole::Task => write_str(&mut out, task)?,
                Hole::Seq | Hole::Turn => write_uint(&mut out, turn).map(drop)?,
                Hole::At => write_uint(&mut out, turned.at).map(drop)?,
                Hole::TokensIn => write_uint(&mut out, turned.tokens_in).map(drop)?,
                Hole::TokensOut => write_uint(&mut out, turned.tokens_out).map(drop)?,
                Hole::HistoryLen => write_uint(&mut out, turned.history_len.into()).map(drop)?,
                Hole::Condensations => {
                    write_uint(&mut out, turned.condensations.into()).map(drop)?
                }
                Hole::ActionTurn(i) => {
                    write_uint(&mut out, sample::action_turn(turn, i.into())).map(drop)?
                }
            }
        }
        out.extend_from_slice(&self.bytes[from..]);
        Ok(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoder's bytes for unit `u` at `turn`, as the soak sent them
    /// before the deck.
    fn encoded(u: u64, turn: u64) -> Vec<u8> {
        let mut r = sample::realistic(u, turn);
        r.time.seq = turn;
        codec::encode(&r, Format::Msgpack).unwrap()
    }

    #[test]
    fn a_card_filled_for_the_report_it_was_drawn_from_is_the_encoders_bytes() {
        // Turns below 20 (actions at turn 0), around the token and history
        // counts' width changes, and far out; units with one to six digits.
        for (u, turn) in [
            (0, 1),
            (7, 3),
            (96, 19),
            (97, 20),
            (1_234, 59),
            (99_999, 60),
            (54_321, 127),
            (5, 128),
            (77, 65_536),
            (3, 5_000_000),
        ] {
            let card = Card::new(sample::realistic(u, turn)).unwrap();
            let (name, task) = (sample::unit_name(u), sample::task_id(u));
            assert_eq!(
                card.fill((&name, &task), turn).unwrap().as_ref(),
                encoded(u, turn).as_slice(),
                "unit {u} turn {turn}"
            );
        }
    }

    #[test]
    fn a_report_from_the_deck_decodes_to_its_unit_and_turn_with_a_cards_content() {
        let deck = Deck::new(64).unwrap();
        let mut contents = std::collections::HashSet::new();
        for (u, turn) in [(0, 1), (42, 2), (99_999, 61), (1_000, 3_600)] {
            let name = sample::unit_name(u);
            let body = deck.report(u, &name, turn).unwrap();
            // Decoded as the supervisor decodes it (which validates it too).
            let r: SaluteReport = codec::decode(&body, Some(codec::MSGPACK), 1 << 20).unwrap();
            let want = sample::realistic(u, turn);
            assert_eq!(r.unit.unit, name);
            assert_eq!(
                (r.time.seq, r.time.turn, r.time.at),
                (turn, turn, want.time.at)
            );
            assert_eq!(r.activity.task_id, want.activity.task_id);
            assert_eq!(r.size.history_len, want.size.history_len);
            assert_eq!(r.size.condensations, want.size.condensations);
            assert_eq!(r.equipment.tokens_in, want.equipment.tokens_in);
            assert_eq!(r.equipment.tokens_out, want.equipment.tokens_out);
            let turns =
                |r: &SaluteReport| r.activity.recent.iter().map(|a| a.turn).collect::<Vec<_>>();
            assert_eq!(turns(&r), turns(&want));
            contents.insert(format!(
                "{:?}",
                r.activity
                    .recent
                    .iter()
                    .map(|a| &a.args_hash)
                    .collect::<Vec<_>>()
            ));
        }
        // The content comes from the cards, drawn per unit and turn.
        assert!(contents.len() > 1, "every report took the same card");
    }

    #[test]
    fn a_card_leaves_open_only_what_it_holds_and_refuses_a_marker_found_twice() {
        // A report with no actions has no action turns to leave open: the
        // card is made, with the other holes.
        let mut r = sample::realistic(1, 1);
        r.activity.recent.clear();
        let card = Card::new(r).unwrap();
        assert!(
            card.holes
                .iter()
                .all(|h| !matches!(h.2, Hole::ActionTurn(_)))
        );
        assert_eq!(card.holes.iter().filter(|h| h.2 == Hole::Unit).count(), 1);
        // More actions than realistic's window of twenty: refused.
        let mut r = sample::realistic(1, 1);
        r.activity.recent.push(r.activity.recent[0].clone());
        let err = Card::new(r).err().unwrap().to_string();
        assert!(err.contains("21 actions"), "{err}");
        // A marker written twice cannot be placed.
        let mut r = sample::realistic(1, 1);
        r.unit.role = UNIT_MARK.into();
        let err = Card::new(r).err().unwrap().to_string();
        assert!(err.contains("Unit") && err.contains("twice"), "{err}");
    }
}
