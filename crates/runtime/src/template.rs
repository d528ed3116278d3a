//! Placeholders filled in one pass (`aho-corasick`): each `{name}` in the
//! template is replaced by its value once, and a value is never read for
//! placeholders again. Chained `replace` calls re-read what the previous
//! ones put in, so text an agent wrote that held `{output}` was expanded
//! again (and grew with each repeat).

use aho_corasick::{AhoCorasick, MatchKind};

/// `template` with each of `values`' placeholders (the whole `{name}`)
/// replaced by its value; anything else, other braces included, is kept.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let keys: Vec<&str> = values.iter().map(|(k, _)| *k).collect();
    // Leftmost-longest: of `{prompt}` and `{prompt_file}`, the longer wins.
    match AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(&keys)
    {
        Ok(ac) => {
            let with: Vec<&str> = values.iter().map(|(_, v)| *v).collect();
            ac.replace_all(template, &with)
        }
        // Only a pattern set too large for memory fails; keep the template.
        Err(_) => template.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::fill;

    #[test]
    fn a_value_holding_a_placeholder_is_not_expanded_again() {
        let t = "{status}: {output}";
        let out = fill(
            t,
            &[
                ("{status}", "ok"),
                ("{output}", "agent wrote {output} and {status}"),
            ],
        );
        assert_eq!(out, "ok: agent wrote {output} and {status}");
    }

    #[test]
    fn the_longer_placeholder_wins_and_other_braces_stay() {
        let out = fill(
            "--file {prompt_file} --text {prompt} {other} {",
            &[("{prompt}", "P"), ("{prompt_file}", "/tmp/f")],
        );
        assert_eq!(out, "--file /tmp/f --text P {other} {");
    }

    #[test]
    fn repeated_filling_does_not_grow() {
        let mut text = String::from("{output}");
        for _ in 0..20 {
            text = fill("[{output}]", &[("{output}", &text)]);
        }
        assert_eq!(text.len(), "{output}".len() + 40);
    }
}
