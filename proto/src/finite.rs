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

/// For checks after a decode that bypasses serde (the fast report reader).
pub fn check_amount(field: &'static str, v: f64) -> Result<f64, crate::Invalid> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(crate::Invalid::Amount { field, value: v })
    }
}
