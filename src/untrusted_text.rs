//! Text that came from outside (a service's error code or message, a name a vault lists,
//! a value read from a file) made safe to put in an error, a log line or a terminal.
//!
//! One function, [`bounded`], does it for every client: the text is cut to a bounded
//! number of characters and every character that could forge a line or drive a terminal
//! is escaped: control characters (newlines, `ESC`, `DEL`, C1 controls), the Unicode
//! line and paragraph separators, and the bidirectional overrides and isolates (which
//! reorder what a reader sees). Everything else passes unchanged, so an ordinary message
//! reads as the service wrote it.

use std::fmt::Write as _;

/// The most characters of a service's code, message or name kept in an error or a log
/// line (a longer text is cut and says how much was left out).
pub(crate) const MAX_SERVICE_TEXT_CHARS: usize = 512;

/// The most characters of a rejected input quoted in an error: enough to recognise the
/// value, never a whole secret pasted into the wrong field.
pub(crate) const MAX_QUOTED_INPUT_CHARS: usize = 40;

/// A service's code, message or name, ready for an error or a log line.
pub(crate) fn service_text(raw: &str) -> String {
    bounded(raw, MAX_SERVICE_TEXT_CHARS)
}

/// [`service_text`] for an optional value.
pub(crate) fn service_text_opt(raw: Option<String>) -> Option<String> {
    raw.map(|s| {
        if needs_work(&s, MAX_SERVICE_TEXT_CHARS) {
            service_text(&s)
        } else {
            s
        }
    })
}

/// A short prefix of input that was refused, for an error message that says what was
/// wrong without repeating the input.
pub fn quoted_input(raw: &str) -> String {
    bounded(raw, MAX_QUOTED_INPUT_CHARS)
}

/// Pure: `raw` cut to at most `max_chars` characters (a cut says how many bytes were
/// left out) with every control, separator and bidirectional-override character escaped
/// as `\n`, `\r`, `\t` or `\u{…}`.
pub fn bounded(raw: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(raw.len().min(max_chars + 32));
    for (taken, (at, c)) in raw.char_indices().enumerate() {
        if taken == max_chars {
            let _ = write!(out, "… ({} more bytes)", raw.len() - at);
            return out;
        }
        push_escaped(&mut out, c);
    }
    out
}

/// Whether `raw` would change under [`bounded`].
fn needs_work(raw: &str, max_chars: usize) -> bool {
    raw.len() > max_chars || raw.chars().any(is_unsafe)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if is_unsafe(c) => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
        c => out.push(c),
    }
}

/// Control characters (C0, DEL, C1), the line and paragraph separators, and every format
/// character (Unicode category Cf: the bidirectional marks, embeddings, overrides and
/// isolates, zero-width spaces and joiners, the soft hyphen, the byte order mark, tags and
/// the like), which change what a reader sees without being seen.
fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') || is_format(c)
}

/// Pure: whether `c` is in Unicode's general category Cf (format), as of Unicode 16.
pub(crate) fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_characters_are_escaped() {
        assert_eq!(
            bounded(
                "a\u{200b}b\u{2060}c\u{feff}d\u{ad}e\u{e0041}f\u{202e}g",
                512
            ),
            "a\\u{200b}b\\u{2060}c\\u{feff}d\\u{ad}e\\u{e0041}f\\u{202e}g"
        );
        // Letters, combining marks and emoji are not format characters.
        assert!(!is_format('é') && !is_format('\u{0301}') && !is_format('👍'));
    }

    #[test]
    fn ordinary_text_passes_unchanged() {
        assert_eq!(
            bounded("NotFound: no such identity é", 512),
            "NotFound: no such identity é"
        );
    }

    #[test]
    fn newlines_escape_and_bidi_controls_are_escaped() {
        assert_eq!(
            bounded("a\nb\r\tc\u{1b}[2J\u{7f}\u{9b}\u{202e}d\u{2028}", 512),
            "a\\nb\\r\\tc\\u{1b}[2J\\u{7f}\\u{9b}\\u{202e}d\\u{2028}"
        );
    }

    #[test]
    fn long_text_is_cut_and_says_how_much() {
        let raw = "x".repeat(200_000);
        let out = bounded(&raw, 512);
        assert!(out.starts_with(&"x".repeat(512)));
        assert!(out.ends_with("… (199488 more bytes)"), "{}", &out[500..]);
        assert!(out.len() < 600);
        // Exactly at the limit: nothing is cut.
        assert_eq!(bounded(&"y".repeat(512), 512), "y".repeat(512));
    }

    #[test]
    fn the_cut_counts_characters_not_bytes() {
        assert_eq!(bounded("ééé", 2), "éé… (2 more bytes)");
    }

    #[test]
    fn optional_text_is_kept_when_already_safe() {
        assert_eq!(service_text_opt(Some("Ok".into())), Some("Ok".into()));
        assert_eq!(service_text_opt(Some("a\nb".into())), Some("a\\nb".into()));
        assert_eq!(service_text_opt(None), None);
    }
}
