//! A string that never prints and is wiped from memory when dropped.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use zeroize::Zeroizing;

/// A secret string: `client_secret` and friends.
///
/// `Debug` and `Display` print `** redacted **`; the bytes are zeroized on drop. Read the
/// value with [`expose_secret`](SecretString::expose_secret), and only where it is needed.
///
/// ```
/// use msi_dataplane::SecretString;
/// let s = SecretString::from("hunter2");
/// assert_eq!(format!("{s:?} {s}"), "** redacted ** ** redacted **");
/// assert_eq!(s.expose_secret(), "hunter2");
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretString(Zeroizing<String>);

impl SecretString {
    /// The secret value.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        SecretString(Zeroizing::new(value))
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        SecretString(Zeroizing::new(value.to_owned()))
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("** redacted **")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("** redacted **")
    }
}

impl Serialize for SecretString {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SecretString {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(SecretString::from)
    }
}
