//! What an operator command prints: a table for people, JSON for scripts.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

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

/// A duration for people: `950 ms`, `12.3 s`, `4 m 05 s`, `3 h 02 m`, `2 d 04 h`.
pub(crate) fn ago(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        0 => format!("{} ms", duration.as_millis()),
        1..=59 => format!("{:.1} s", duration.as_secs_f64()),
        60..=3599 => format!("{} m {:02} s", secs / 60, secs % 60),
        3600..=86_399 => format!("{} h {:02} m", secs / 3600, secs % 3600 / 60),
        _ => format!("{} d {:02} h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// How long ago `at` was, for people.
pub(crate) fn since(at: Option<SystemTime>) -> String {
    at.and_then(|at| SystemTime::now().duration_since(at).ok())
        .map_or_else(|| "-".into(), |d| format!("{} ago", ago(d)))
}

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
    if let Ok(json) = serde_json::from_slice::<Value>(bytes) {
        return serde_json::to_string_pretty(&json).unwrap_or_default();
    }
    match std::str::from_utf8(bytes) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t') =>
        {
            text.to_owned()
        }
        _ => bytes
            .chunks(16)
            .map(|line| {
                line.iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(ago(Duration::from_millis(950)), "950 ms");
        assert_eq!(ago(Duration::from_millis(12_300)), "12.3 s");
        assert_eq!(ago(Duration::from_secs(245)), "4 m 05 s");
        assert_eq!(ago(Duration::from_secs(3 * 3600 + 120)), "3 h 02 m");
        assert_eq!(ago(Duration::from_secs(2 * 86_400 + 4 * 3600)), "2 d 04 h");
    }

    #[test]
    fn payloads_are_pretty_json_text_or_hex() {
        assert_eq!(payload_text(br#"{"a":1}"#), "{\n  \"a\": 1\n}");
        assert_eq!(payload_text(b"plain words"), "plain words");
        assert_eq!(payload_text(&[0xff, 0x00, 0x10]), "ff 00 10");
    }
}
