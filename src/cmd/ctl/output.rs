//! How `inagg ctl` prints: human tables by default, JSON with `--json`;
//! and its command-line mistakes.

use std::io::Write;

use inagg_switch_control::target::{ControlError, Result};
use serde::Serialize;

/// A command-line mistake.
pub fn usage(message: &str) -> ControlError {
    ControlError::Config {
        path: "command line".into(),
        message: message.into(),
    }
}

/// Prints an `apply` plan: JSON `{"applied": .., key: items}`, or one
/// line per item and whether it was carried out.
pub fn emit_plan<T: Serialize + std::fmt::Display>(
    out: &mut dyn Write,
    json: bool,
    dry_run: bool,
    key: &str,
    items: &[T],
) -> Result<()> {
    let value = serde_json::json!({ "applied": !dry_run, key: items });
    emit(out, json, &value, |o| {
        for item in items {
            writeln!(o, "{item}")?;
        }
        if items.is_empty() {
            writeln!(
                o,
                "nothing to do: the switch already holds what the file says"
            )?;
        }
        let done = if dry_run {
            "dry run: nothing changed"
        } else {
            "applied"
        };
        writeln!(o, "{done}")
    })
}

/// Prints `value` as JSON or through `human`. The human form goes through
/// [`Escaped`]: a table holds what tenants named and what switches said,
/// and none of it may drive the operator's terminal.
pub fn emit<T: Serialize>(
    out: &mut dyn Write,
    json: bool,
    value: &T,
    human: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    if json {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| ControlError::Protocol(e.to_string()))?;
        writeln!(out, "{text}")?;
    } else {
        human(&mut Escaped(out))?;
    }
    Ok(())
}

/// A writer that shows control characters (ESC, BEL, DEL, NUL: everything
/// but the newline) and the invisible formatting ones (bidirectional
/// overrides such as U+202E, zero-width spaces, the byte-order mark) as
/// `\u{..}` escapes, and bytes that are not UTF-8 as `\x..`.
pub struct Escaped<'a>(pub &'a mut dyn Write);

impl Write for Escaped<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // `write!` hands over whole `str` pieces; anything else is shown
        // byte by byte.
        match std::str::from_utf8(buf) {
            Ok(text) => self.0.write_all(escape(text).as_bytes())?,
            Err(_) => {
                for &b in buf {
                    match b {
                        b'\n' | 0x20..=0x7e => self.0.write_all(&[b])?,
                        _ => write!(self.0, "\\x{b:02x}")?,
                    }
                }
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// `text` with every character a terminal would act on or hide escaped
/// ([`Escaped`]).
pub fn escape(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(hidden) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if hidden(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// Control characters but the newline, and the formatting ones a
/// terminal draws as nothing or uses to reorder text.
fn hidden(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{ad}')
}

/// Writes a table: its header line, then one line per item, or `empty`
/// when there is none.
pub fn table<T>(
    o: &mut dyn Write,
    header: &str,
    items: &[T],
    empty: &str,
    row: impl Fn(&T) -> String,
) -> std::io::Result<()> {
    writeln!(o, "{header}")?;
    for item in items {
        writeln!(o, "{}", row(item))?;
    }
    if items.is_empty() {
        writeln!(o, "{empty}")?;
    }
    Ok(())
}

/// Endpoints as one comma-separated field.
pub fn endpoints(members: &[std::net::SocketAddr]) -> String {
    let members: Vec<String> = members.iter().map(ToString::to_string).collect();
    members.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hostile name would do to a terminal is shown, not done; the
    /// rest of the text (newlines, accents) is left as it was.
    #[test]
    fn tables_escape_what_would_drive_a_terminal() {
        let mut out = Vec::new();
        let name = "a\u{1b}[2J\u{1b}[31m\u{7}\u{7f}\u{0}b\u{202e}c\u{200b}d é";
        writeln!(Escaped(&mut out), "{name:<8}|").unwrap();
        let shown = String::from_utf8(out).unwrap();
        assert_eq!(
            shown,
            "a\\u{1b}[2J\\u{1b}[31m\\u{7}\\u{7f}\\u{0}b\\u{202e}c\\u{200b}d é|\n"
        );
        let mut out = Vec::new();
        Escaped(&mut out).write_all(b"ok\xff\x1b\n").unwrap();
        assert_eq!(out, b"ok\\xff\\x1b\n");
    }
}
