//! Secret hygiene checks shared by the tests: the forms in which a fixture's secret
//! material could leak (slices of `client_secret`, the private key as base64, hex and
//! byte lists), plus whatever a test adds (access tokens, assertions).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// The secret material of a fixture, in the forms it could leak in.
pub struct Secrets {
    needles: Vec<(String, String)>,
}

impl Secrets {
    /// The needles of fixture `name`.
    pub fn of(name: &str) -> Secrets {
        let secret = super::fixtures::secret(name);
        let bundle = super::fixtures::bundle(name);
        let mut needles = vec![
            ("client_secret prefix".into(), secret[..48].to_owned()),
            (
                "client_secret middle".into(),
                secret[secret.len() / 2..secret.len() / 2 + 48].to_owned(),
            ),
            (
                "client_secret suffix".into(),
                secret[secret.len() - 48..].to_owned(),
            ),
        ];
        if let Ok(blocks) = pem::parse_many(&bundle) {
            for block in blocks.iter().filter(|b| b.tag().contains("PRIVATE KEY")) {
                let der = block.contents();
                let b64 = STANDARD.encode(der);
                needles.push(("key base64".into(), b64[100..160].to_owned()));
                // A whole line of the key's PEM text (PEM wraps base64 at 64 columns).
                needles.push(("key PEM line".into(), b64[64..128].to_owned()));
                let hex: String = der[64..96].iter().map(|b| format!("{b:02x}")).collect();
                needles.push(("key hex".into(), hex));
                needles.push(("key bytes as debug".into(), format!("{:?}", &der[64..72])));
            }
        }
        Secrets { needles }
    }

    /// Add a value that must not appear (an access token, an assertion).
    pub fn add(&mut self, what: &str, value: &str) {
        self.needles.push((what.to_owned(), value.to_owned()));
    }

    /// Add another fixture's needles.
    pub fn extend(&mut self, other: Secrets) {
        self.needles.extend(other.needles);
    }

    /// Fail, naming the leak, if `text` contains any of the needles.
    #[track_caller]
    pub fn assert_absent(&self, context: &str, text: &str) {
        for (what, needle) in &self.needles {
            assert!(
                !text.contains(needle.as_str()),
                "{context}: output contains the {what}:\n{text}"
            );
        }
    }
}
