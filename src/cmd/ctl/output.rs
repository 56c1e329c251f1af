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

/// Prints `value` as JSON or through `human`.
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
        human(out)?;
    }
    Ok(())
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
