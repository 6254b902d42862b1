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

    /// No needles yet (add them with [`Secrets::add`]).
    pub fn none() -> Secrets {
        Secrets {
            needles: Vec::new(),
        }
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

/// Every run of [`RUN`] bytes of some secret material: a text that contains any of them
/// leaks part of a secret, whatever the alignment or the mutation around it.
pub struct Runs {
    runs: std::collections::HashMap<Vec<u8>, String>,
}

/// The length of run that counts as a leak.
pub const RUN: usize = 40;

impl Runs {
    /// No material yet.
    pub fn new() -> Runs {
        Runs {
            runs: std::collections::HashMap::new(),
        }
    }

    /// The material of fixture `name`: its `client_secret`, and for each private key in
    /// its PEM bundle the key's base64, its DER in hex (both cases) and as a byte list.
    pub fn of(name: &str) -> Runs {
        let mut runs = Runs::new();
        runs.add("client_secret", super::fixtures::secret(name).as_bytes());
        let bundle = super::fixtures::bundle(name);
        for block in pem::parse_many(&bundle).expect("fixture PEM") {
            if block.tag().contains("PRIVATE KEY") {
                runs.add_key_der(block.contents());
            }
        }
        runs
    }

    /// A private key's DER in every text form it could leak in.
    pub fn add_key_der(&mut self, der: &[u8]) {
        self.add("key base64", STANDARD.encode(der).as_bytes());
        let hex: String = der.iter().map(|b| format!("{b:02x}")).collect();
        self.add("key DER hex", hex.as_bytes());
        self.add("key DER HEX", hex.to_uppercase().as_bytes());
        self.add("key DER as a byte list", format!("{der:?}").as_bytes());
        self.add("key DER", der);
    }

    /// Add every run of `material`.
    pub fn add(&mut self, what: &str, material: &[u8]) {
        for run in material.windows(RUN) {
            self.runs.insert(run.to_vec(), what.to_owned());
        }
    }

    /// Fail, naming the leak, if `text` contains a run of any material.
    #[track_caller]
    pub fn assert_absent(&self, context: &str, text: &str) {
        for (at, run) in text.as_bytes().windows(RUN).enumerate() {
            if let Some(what) = self.runs.get(run) {
                panic!(
                    "{context}: output holds {RUN} characters of the {what} at byte {at}:\n{text}"
                );
            }
        }
    }
}
