//! Floats from the wire are checked where they are read. MessagePack can
//! carry `inf` and `NaN` (JSON cannot): one such cost, budget or
//! confidence would poison every sum, comparison and page it reaches, and
//! the state it is persisted in. Used as `deserialize_with` on every float
//! field of a message (a report's `context_fill` is checked by its
//! `validate`), so no path and no encoding takes one in; the error names
//! the field.

use serde::de::{Deserialize, Deserializer, Error};

/// A money amount or a count: finite and not negative.
fn amount<E: Error>(name: &'static str, v: f64) -> Result<f64, E> {
    check_amount(name, v).map_err(E::custom)
}

macro_rules! amounts {
    ($($field:ident),*) => {$(
        #[doc = concat!("`", stringify!($field), "`: finite and not negative.")]
        pub fn $field<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
            amount(stringify!($field), f64::deserialize(d)?)
        }
    )*};
}

amounts!(cost_usd, max_cost_usd, budget_usd, spent_usd);

/// `confidence`, when given: a fraction, 0 to 1.
pub fn confidence<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    Option::<f64>::deserialize(d)?
        .map(|v| fraction("confidence", v))
        .transpose()
}

fn fraction<E: Error>(name: &str, v: f64) -> Result<f64, E> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(E::custom(format!("{name} must be within 0..1, got {v}")))
    }
}

/// The ceiling of every amount XO takes or keeps (dollars, tokens): a
/// trillion, beyond any real run, far below where two sums overflow to
/// `inf`. An amount above it is refused by name; a sum is held at it
/// ([`add`]), so nothing non-finite is ever kept or serialised.
pub const MAX_AMOUNT: f64 = 1e12;

/// `a + b`, held at [`MAX_AMOUNT`] (and never `inf` or `NaN`: a sum that
/// would be is the ceiling).
pub fn add(a: f64, b: f64) -> f64 {
    let s = a + b;
    if s.is_nan() {
        a.clamp(0.0, MAX_AMOUNT)
    } else {
        s.clamp(0.0, MAX_AMOUNT)
    }
}

/// `a + b` for counts (tokens, turns, milliseconds), held at `u64::MAX`.
pub fn add_count(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// For checks after a decode that bypasses serde (the fast report reader).
pub fn check_amount(field: &'static str, v: f64) -> Result<f64, crate::Invalid> {
    if v.is_finite() && (0.0..=MAX_AMOUNT).contains(&v) {
        Ok(v)
    } else {
        Err(crate::Invalid::Amount { field, value: v })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40, item 4: two heartbeats with a cost of 1.7e308 once summed
    /// to `inf`, and no status decoded again.
    #[test]
    fn sums_stay_finite_and_amounts_above_the_ceiling_are_refused() {
        assert_eq!(add(1.7e308, 1.7e308), MAX_AMOUNT);
        assert_eq!(add(MAX_AMOUNT, 1.0), MAX_AMOUNT);
        assert_eq!(add(0.25, 0.5), 0.75);
        assert_eq!(add(2.0, f64::NAN), 2.0);
        assert_eq!(add(2.0, -5.0), 0.0);
        assert!(add(f64::INFINITY, 1.0).is_finite());
        assert!(check_amount("cost_usd", MAX_AMOUNT).is_ok());
        let e = check_amount("cost_usd", 1.7e308).unwrap_err().to_string();
        assert!(e.contains("cost_usd") && e.contains("1e12"), "{e}");
        let mut u = crate::queue::Usage {
            cost_usd: 9e11,
            tokens: u64::MAX - 1,
            ..Default::default()
        };
        u.add(&u.clone());
        assert_eq!((u.cost_usd, u.tokens), (MAX_AMOUNT, u64::MAX));
        let text = serde_json::to_string(&u).unwrap();
        let back: crate::queue::Usage = serde_json::from_str(&text).unwrap();
        assert_eq!(back, u, "a sum at the ceiling decodes again");
    }
}
