//! What an operator command prints: a table for people, JSON for scripts.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use leasehold::dashboard::text::PayloadText;

use comfy_table::presets::ASCII_MARKDOWN;
use comfy_table::{ContentArrangement, Table};
use serde_json::Value;

/// The outcome of an operator command: the text to show, the same as JSON, and whether it
/// found a failure (exit code 1).
#[derive(Debug, Clone)]
pub struct Report {
    /// For people.
    pub text: String,
    /// For scripts.
    pub json: Value,
    /// The command ran but something it was asked to do could not be done.
    pub failed: bool,
}

impl Report {
    pub(crate) fn ok(text: String, json: Value) -> Self {
        Self {
            text,
            json,
            failed: false,
        }
    }

    /// What to print, in the format asked for.
    pub fn render(&self, json: bool) -> String {
        if json {
            format!("{:#}", self.json)
        } else {
            self.text.trim_end().to_owned()
        }
    }
}

/// A table with `header` and `rows`.
pub(crate) fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(ASCII_MARKDOWN)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.iter().copied());
    for row in rows {
        table.add_row(row);
    }
    table.to_string()
}

/// `name: value` lines, aligned.
pub(crate) fn fields(rows: &[(&str, String)]) -> String {
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (name, value) in rows {
        let _ = writeln!(out, "{name:<width$}  {value}");
    }
    out
}

pub(crate) use leasehold::dashboard::text::{ago, since};

/// Milliseconds, for JSON.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds since the Unix epoch, for JSON.
pub(crate) fn epoch_millis(at: Option<SystemTime>) -> Option<u64> {
    at.and_then(|at| at.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(millis)
}

/// A payload for people: pretty JSON when it is JSON, text when it is UTF-8, hex otherwise.
pub(crate) fn payload_text(bytes: &[u8]) -> String {
    PayloadText::of(bytes).text().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_pretty_json_text_or_hex() {
        assert_eq!(payload_text(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(payload_text(b"plain words"), "plain words");
        assert_eq!(payload_text(&[0xff, 0x00, 0x10]), "ff 00 10");
    }
}
