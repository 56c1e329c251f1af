//! One line of text for an error and its causes, as the command prints it.
//!
//! anyhow's `{:#}` joins every cause with ": ". The stack's error types
//! name their cause in their own message too (so that `to_string()` alone
//! says what went wrong, which the tests and the logs rely on), and `{:#}`
//! then says it twice: "bind the worker socket: Address already in use (os
//! error 98): Address already in use (os error 98)". [`error_text`] joins the
//! causes the same way but leaves out a cause whose text is already in the
//! line.

/// The error's message, then each cause the message does not already hold,
/// joined with ": ".
pub fn error_text(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    /// The agent's own error for a socket it could not bind: its message
    /// names its cause.
    fn bind_error() -> inagg_host_agent::Error {
        inagg_host_agent::Error::Io {
            what: "bind the worker socket",
            source: in_use(),
        }
    }

    fn in_use() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use")
    }

    #[test]
    fn a_cause_the_message_already_names_is_said_once() {
        let err = anyhow::Error::from(bind_error());
        assert_eq!(
            format!("{err:#}"),
            "bind the worker socket: address in use: address in use"
        );
        assert_eq!(error_text(&err), "bind the worker socket: address in use");
    }

    #[test]
    fn causes_the_message_does_not_name_are_joined_in_order() {
        let err = Err::<(), _>(in_use())
            .context("open the switch's port")
            .context("start worker 2")
            .unwrap_err();
        assert_eq!(
            error_text(&err),
            "start worker 2: open the switch's port: address in use"
        );
        assert_eq!(error_text(&err), format!("{err:#}"));
    }

    #[test]
    fn a_context_over_a_self_naming_error_keeps_both_once() {
        let err = Err::<(), _>(bind_error())
            .context("start worker 0")
            .unwrap_err();
        assert_eq!(
            error_text(&err),
            "start worker 0: bind the worker socket: address in use"
        );
    }
}
