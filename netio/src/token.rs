//! The shared secret of a control endpoint (the emulator's, the
//! controller's API): compared in constant time, never printed.
//!
//! A token only says that a client knows the secret. It travels in clear
//! over TCP, so on a network others can read it protects nothing without
//! TLS in front (docs/SECURITY.md).

use std::fmt;

/// A control endpoint's token (at least one character).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// The token `secret`, refused when empty (any client would present it).
    pub fn new(secret: impl Into<String>) -> Result<Token, &'static str> {
        let secret = secret.into();
        if secret.is_empty() {
            return Err("the token is empty: give a token of at least one character, or none");
        }
        Ok(Token(secret))
    }

    /// Whether `given` is this token. The time taken depends on the length
    /// of `given` only, not on where it first differs from the secret, so
    /// a client cannot find the secret a byte at a time by timing refusals.
    pub fn matches(&self, given: &str) -> bool {
        same_bytes(self.0.as_bytes(), given.as_bytes())
    }

    /// The secret, to present to an endpoint.
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Equality of `secret` and `given` in time that depends on `given`'s
/// length only.
fn same_bytes(secret: &[u8], given: &[u8]) -> bool {
    let mut diff = secret.len() ^ given.len();
    for (i, &b) in given.iter().enumerate() {
        let s = secret.get(i).copied().unwrap_or(!b);
        diff |= usize::from(std::hint::black_box(s ^ b));
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_secret_matches() {
        let t = Token::new("s3cret").unwrap();
        assert!(t.matches("s3cret"));
        for other in [
            "", "s3cre", "s3cret!", "S3cret", "x3cret", "s3creT", "s3cret\0",
        ] {
            assert!(!t.matches(other), "{other:?}");
        }
        // A prefix of 256 characters' difference in length still differs.
        let long = Token::new("a".repeat(300)).unwrap();
        assert!(!long.matches(&"a".repeat(44)));
        assert!(long.matches(&"a".repeat(300)));
    }

    #[test]
    fn an_empty_token_is_refused_and_none_is_printed() {
        assert!(Token::new("").is_err());
        let t = Token::new("hidden").unwrap();
        assert_eq!(format!("{t:?}"), "Token(..)");
    }
}
