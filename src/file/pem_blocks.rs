//! The crate's own PEM reader (RFC 7468 blocks, with the RFC 1421 headers of legacy
//! encrypted keys), so that no dependency ever sees, copies or echoes the bundle's text.
//!
//! Layout accepted, as Go's `encoding/pem` accepts it: text outside blocks is ignored; a
//! block is a `-----BEGIN <label>-----` line, optional `Name: value` header lines, a base64
//! body in lines of any length (blank lines, spaces, tabs and CR anywhere in it are
//! ignored) and an `-----END <label>-----` line with the same label. Unlike Go, a block
//! that is malformed is an error (Go skips it silently), so a damaged key is reported as
//! such and not as a missing one.
//!
//! Errors give line numbers and known labels only, never text from the input. Bodies are
//! decoded into [`Zeroizing`] buffers sized up front, so no copy of key material is left
//! in freed memory by this module.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

/// Labels that may be named in an error (all other labels are "a block").
const KNOWN_LABELS: [&str; 6] = [
    "CERTIFICATE",
    "PRIVATE KEY",
    "RSA PRIVATE KEY",
    "ENCRYPTED PRIVATE KEY",
    "EC PRIVATE KEY",
    "PUBLIC KEY",
];

/// One PEM block, its body not yet decoded.
pub(crate) struct Block<'a> {
    /// The label between `BEGIN ` and `-----`.
    pub label: &'a [u8],
    /// Whether a `Proc-Type` header says `ENCRYPTED` (legacy OpenSSL key encryption).
    pub encrypted: bool,
    /// 1-based line of the `BEGIN` line.
    pub line: usize,
    /// The body lines (base64 with whitespace), each with its 1-based line number.
    body: Vec<(usize, &'a [u8])>,
}

impl Block<'_> {
    /// The label, if it is one an error may name.
    pub fn known_label(&self) -> Option<&'static str> {
        KNOWN_LABELS
            .iter()
            .copied()
            .find(|l| l.as_bytes() == self.label)
    }

    /// Decode the body into a zeroized buffer. Errors name the line, never the text.
    pub fn decode(&self) -> Result<Zeroizing<Vec<u8>>, String> {
        let total: usize = self.body.iter().map(|(_, l)| l.len()).sum();
        let mut text = Zeroizing::new(Vec::with_capacity(total));
        // Where each body line starts in `text`, to turn a decoder offset into a line.
        let mut starts = Vec::with_capacity(self.body.len());
        for (line_no, line) in &self.body {
            starts.push((text.len(), *line_no));
            text.extend(line.iter().filter(|b| !is_space(**b)));
        }
        let mut out = Zeroizing::new(Vec::with_capacity(text.len().div_ceil(4) * 3 + 3));
        STANDARD.decode_vec(&*text, &mut out).map_err(|e| {
            use base64::DecodeError as D;
            let (reason, offset) = match e {
                D::InvalidByte(at, _) => ("a character that is not base64", at),
                D::InvalidLastSymbol(at, _) => ("a last symbol with trailing bits set", at),
                D::InvalidLength(_) => ("an invalid length", text.len()),
                D::InvalidPadding => ("invalid padding", text.len()),
            };
            let line = (starts.iter().rev().find(|(start, _)| *start <= offset))
                .map_or(self.line + 1, |(_, line)| *line);
            format!(
                "{}: the base64 body has {reason} (line {line})",
                self.describe()
            )
        })?;
        Ok(out)
    }

    /// "the `PRIVATE KEY` block on line 12" (or "the block on line 12").
    pub fn describe(&self) -> String {
        match self.known_label() {
            Some(label) => format!("the `{label}` block on line {}", self.line),
            None => format!("the block on line {}", self.line),
        }
    }
}

const BEGIN: &[u8] = b"-----BEGIN ";
const END: &[u8] = b"-----END ";
const DASHES: &[u8] = b"-----";

/// Split a bundle into its blocks. The reason in an error names lines, never text.
pub(crate) fn parse(input: &[u8]) -> Result<Vec<Block<'_>>, String> {
    let mut blocks = Vec::new();
    let mut lines = input
        .split(|b| *b == b'\n')
        .map(trim_end)
        .enumerate()
        .map(|(i, l)| (i + 1, l));
    while let Some((line_no, line)) = lines.next() {
        let Some(rest) = line.strip_prefix(BEGIN) else {
            if line.starts_with(END) {
                return Err(format!(
                    "line {line_no}: an `-----END` line outside any block"
                ));
            }
            continue;
        };
        let Some(label) = rest.strip_suffix(DASHES) else {
            return Err(format!(
                "line {line_no}: a `-----BEGIN` line that does not end in `-----`"
            ));
        };
        if label.is_empty()
            || label
                .iter()
                .any(|b| *b == b'-' || (!b.is_ascii_graphic() && *b != b' '))
        {
            return Err(format!(
                "line {line_no}: a `-----BEGIN` line with an invalid label"
            ));
        }
        let mut block = Block {
            label,
            encrypted: false,
            line: line_no,
            body: Vec::new(),
        };
        let mut in_headers = true;
        let mut ended = false;
        for (n, l) in lines.by_ref() {
            if let Some(end) = l.strip_prefix(END) {
                if end.strip_suffix(DASHES) != Some(label) {
                    return Err(format!(
                        "{}: the `-----END` line (line {n}) does not match its `-----BEGIN` line",
                        block.describe()
                    ));
                }
                ended = true;
                break;
            }
            if l.starts_with(BEGIN) {
                return Err(format!(
                    "{}: a `-----BEGIN` line (line {n}) before its `-----END` line",
                    block.describe()
                ));
            }
            // RFC 1421 headers: `Name: value` lines right after BEGIN (base64 has no ':').
            if in_headers && let Some(colon) = l.iter().position(|b| *b == b':') {
                let (name, value) = (trim(&l[..colon]), &l[colon + 1..]);
                if name.eq_ignore_ascii_case(b"Proc-Type")
                    && value
                        .windows(9)
                        .any(|w| w.eq_ignore_ascii_case(b"ENCRYPTED"))
                {
                    block.encrypted = true;
                }
                continue;
            }
            in_headers = false;
            block.body.push((n, l));
        }
        if !ended {
            return Err(format!("{} has no `-----END` line", block.describe()));
        }
        blocks.push(block);
    }
    Ok(blocks)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn trim_end(line: &[u8]) -> &[u8] {
    let end = line
        .iter()
        .rposition(|b| !is_space(*b))
        .map_or(0, |i| i + 1);
    &line[..end]
}

fn trim(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|b| !is_space(*b)).unwrap_or(s.len());
    trim_end(&s[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(text: &str) -> Vec<u8> {
        let blocks = parse(text.as_bytes()).unwrap();
        assert_eq!(blocks.len(), 1);
        blocks[0].decode().unwrap().to_vec()
    }

    #[test]
    fn go_layouts_are_accepted() {
        // One long line, CRLF, a blank line before END, indentation, text around.
        let plain = "-----BEGIN CERTIFICATE-----\naGVsbG8g\nd29ybGQ=\n-----END CERTIFICATE-----\n";
        assert_eq!(one(plain), b"hello world");
        let odd = "junk\r\n-----BEGIN CERTIFICATE-----  \r\naGVsbG8gd29y\r\n\r\n  bGQ=\r\n\r\n-----END CERTIFICATE-----\r\nmore";
        assert_eq!(one(odd), b"hello world");
        let headers = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\naGk=\n-----END RSA PRIVATE KEY-----";
        let blocks = parse(headers.as_bytes()).unwrap();
        assert!(blocks[0].encrypted);
        assert_eq!(blocks[0].decode().unwrap().as_slice(), b"hi");
        let empty = "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n";
        assert_eq!(one(empty), b"");
    }

    #[test]
    fn malformed_blocks_name_lines_not_text() {
        for (text, expect) in [
            (
                "-----BEGIN PRIVATE KEY----\nc2VjcmV0\n-----END PRIVATE KEY-----",
                "line 1",
            ),
            (
                "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n",
                "has no `-----END`",
            ),
            (
                "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END CERTIFICATE-----",
                "line 3",
            ),
            ("x\n-----END PRIVATE KEY-----", "line 2"),
            (
                "-----BEGIN PRIVATE KEY-----\nc2Vj\n-----BEGIN CERTIFICATE-----",
                "line 3",
            ),
        ] {
            let err = parse(text.as_bytes())
                .err()
                .unwrap_or_else(|| panic!("{text}"));
            assert!(err.contains(expect), "{err}");
            assert!(!err.contains("c2V"), "{err}");
        }
        let bad =
            parse(b"-----BEGIN PRIVATE KEY-----\nc2Vj\nc2$j\n-----END PRIVATE KEY-----").unwrap();
        let err = bad[0].decode().unwrap_err();
        assert!(
            err.contains("line 3") && err.contains("`PRIVATE KEY`"),
            "{err}"
        );
        assert!(!err.contains("c2"), "{err}");
    }
}
