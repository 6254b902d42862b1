//! Text that came from outside (a service's error code or message, a name a vault lists,
//! a value read from a file) made safe to put in an error, a log line or a terminal.
//!
//! One function, [`bounded`], does it for every client: the text is cut to a bounded
//! number of characters and every character that is not visible printable ASCII is
//! escaped as `\n`, `\r`, `\t` or `\u{…}`: control characters (newlines, `ESC`, `DEL`,
//! C1 controls), which forge lines and drive terminals, and every non-ASCII character,
//! among them the invisible ones (bidirectional overrides, zero-width and format
//! characters, variation selectors, combining marks, fillers) that make a log line look
//! like another. One rule for every text, because the texts are ASCII when they are what
//! they claim to be (codes, resources, URLs, ids, Azure's messages): an ordinary message
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
    raw.map(|s| service_text(&s))
}

/// A short prefix of input that was refused, for an error message that says what was
/// wrong without repeating the input.
pub fn quoted_input(raw: &str) -> String {
    bounded(raw, MAX_QUOTED_INPUT_CHARS)
}

/// Pure: `raw` cut to at most `max_chars` characters (a cut says how many bytes were
/// left out) with every character but visible printable ASCII and the space escaped as
/// `\n`, `\r`, `\t` or `\u{…}`.
pub fn bounded(raw: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(raw.len().min(max_chars + 32));
    for (taken, (at, c)) in raw.char_indices().enumerate() {
        if taken == max_chars {
            let _ = write!(out, "… ({} more bytes)", raw.len() - at);
            return out;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            // Every other character but visible printable ASCII and the space: controls,
            // separators, format characters, and all of non-ASCII, whose invisible and
            // look-alike characters (variation selectors, combining marks, fillers, blank
            // patterns, private use, noncharacters) no short rule tells apart from visible
            // text. The texts this escapes (a service's codes and messages, resources,
            // URLs, ids and names) are ASCII when they are what they claim to be.
            c if c != ' ' && !c.is_ascii_graphic() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Redact the values that a parser echoes back: double-quoted ones (serde_json quotes the
/// offending string in `invalid type: string "..."` messages) always, and backtick-quoted
/// ones unless they look like a schema key (up to 32 characters of `a-z`, `0-9`, `_`, `#`)
/// or a token of the grammar (one or two punctuation characters), so "missing field
/// `access_token`" and "expected `,` or `}`" stay whole and nothing long is ever echoed.
pub(crate) fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(['"', '`']) {
        let quote = &rest[at..at + 1];
        out.push_str(&rest[..=at]);
        let inner = &rest[at + 1..];
        let Some(close) = inner.find(quote) else {
            // An unterminated quote: drop what follows it.
            out.push('…');
            return out;
        };
        let value = &inner[..close];
        let keep = quote == "`"
            && ((value.len() <= 32
                && !value.is_empty()
                && value.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'#'
                }))
                || (value.len() <= 2 && value.bytes().all(|b| b.is_ascii_punctuation())));
        out.push_str(if keep { value } else { "…" });
        out.push_str(quote);
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_quoted_values() {
        assert_eq!(
            redact_quoted(r#"invalid type: string "c2VjcmV0", expected a sequence"#),
            r#"invalid type: string "…", expected a sequence"#
        );
        assert_eq!(
            redact_quoted("missing field `access_token`"),
            "missing field `access_token`"
        );
        // `\x7d` is a closing brace, spelled so that line counters see balanced braces.
        assert_eq!(
            redact_quoted("expected `,` or `\x7d`"),
            "expected `,` or `\x7d`"
        );
        assert_eq!(
            redact_quoted("unknown field `LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t`, expected `a`"),
            "unknown field `…`, expected `a`"
        );
        assert_eq!(redact_quoted(r#"string "abc"#), r#"string "…"#);
    }

    #[test]
    fn format_characters_are_escaped() {
        assert_eq!(
            bounded(
                "a\u{200b}b\u{2060}c\u{feff}d\u{ad}e\u{e0041}f\u{202e}g",
                512
            ),
            "a\\u{200b}b\\u{2060}c\\u{feff}d\\u{ad}e\\u{e0041}f\\u{202e}g"
        );
    }

    #[test]
    fn invisible_and_look_alike_characters_are_escaped() {
        // Variation selectors, a combining grapheme joiner and accent, Hangul fillers, the
        // blank Braille pattern, Khmer and Mongolian invisibles, private use, a
        // noncharacter, a no-break space, a Cyrillic look-alike of `a`.
        for (raw, escaped) in [
            ("\u{fe0f}", "\\u{fe0f}"),
            ("\u{e0100}", "\\u{e0100}"),
            ("\u{34f}", "\\u{34f}"),
            ("\u{301}", "\\u{301}"),
            ("\u{3164}", "\\u{3164}"),
            ("\u{ffa0}", "\\u{ffa0}"),
            ("\u{2800}", "\\u{2800}"),
            ("\u{17b4}", "\\u{17b4}"),
            ("\u{180b}", "\\u{180b}"),
            ("\u{e000}", "\\u{e000}"),
            ("\u{fffe}", "\\u{fffe}"),
            ("\u{a0}", "\\u{a0}"),
            ("\u{430}", "\\u{430}"),
        ] {
            let resource = format!("https://vault.azure.net{raw}/");
            assert_eq!(
                bounded(&resource, 512),
                format!("https://vault.azure.net{escaped}/"),
                "{raw:?}"
            );
        }
    }

    #[test]
    fn ordinary_text_passes_unchanged() {
        let message = "AADSTS700027: Client assertion failed; see https://aka.ms/x?a=1&b=[2] {ok}";
        assert_eq!(bounded(message, 512), message);
        assert_eq!(bounded("identit\u{e9}", 512), "identit\\u{e9}");
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
        assert_eq!(bounded("ééé", 2), "\\u{e9}\\u{e9}… (2 more bytes)");
    }

    #[test]
    fn optional_text_is_kept_when_already_safe() {
        assert_eq!(service_text_opt(Some("Ok".into())), Some("Ok".into()));
        assert_eq!(service_text_opt(Some("a\nb".into())), Some("a\\nb".into()));
        assert_eq!(service_text_opt(None), None);
    }
}
