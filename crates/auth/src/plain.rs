//! SASL/PLAIN (RFC 4616): the client sends `authzid NUL user NUL password` in one message.
//! Only over TLS is this safe; Kafka allows it on SASL_PLAINTEXT too, and so does Weir.

use crate::AuthError;

/// A PLAIN message: who logs in, and with what password.
#[derive(Debug, PartialEq, Eq)]
pub struct Plain {
    pub user: String,
    pub password: String,
}

/// Parses a PLAIN message. The authorization id, if given, must be the user name (as Kafka's
/// `PlainSaslServer` requires).
pub fn parse(message: &[u8]) -> Result<Plain, AuthError> {
    let message = std::str::from_utf8(message)
        .map_err(|_| AuthError::Malformed("the PLAIN message is not UTF-8".into()))?;
    let mut parts = message.split('\0');
    let (Some(authzid), Some(user), Some(password), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed(
            "the PLAIN message is not authzid NUL user NUL password".into(),
        ));
    };
    if user.is_empty() {
        return Err(AuthError::Failed(
            "Authentication failed: username not specified".into(),
        ));
    }
    if password.is_empty() {
        return Err(AuthError::Failed(
            "Authentication failed: password not specified".into(),
        ));
    }
    if !authzid.is_empty() && authzid != user {
        return Err(AuthError::Failed(
            "Authentication failed: Client requested an authorization id that is different from username".into(),
        ));
    }
    Ok(Plain {
        user: user.to_string(),
        password: password.to_string(),
    })
}

/// Kafka's words for a wrong user name or password.
pub fn invalid() -> AuthError {
    AuthError::Failed("Authentication failed: Invalid username or password".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_or_fail_as_kafka_does() {
        assert_eq!(
            parse(b"\0alice\0pw").expect("plain"),
            Plain {
                user: "alice".into(),
                password: "pw".into()
            }
        );
        assert!(parse(b"alice\0alice\0pw").is_ok());
        for bad in [
            &b""[..],
            b"alice\0pw",
            b"\0alice\0pw\0x",
            b"bob\0alice\0pw",
            b"\0\0pw",
            b"\0alice\0",
            b"\0al\xffice\0pw",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
