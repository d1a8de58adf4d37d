//! How figures read for people: durations and payloads, the same on the dashboard's pages and
//! in the command line's tables.

use std::time::{Duration, SystemTime};

/// A duration for people: `950 ms`, `12.3 s`, `4 m 05 s`, `3 h 02 m`, `2 d 04 h`.
pub fn ago(duration: Duration) -> String {
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
pub fn since(at: Option<SystemTime>) -> String {
    at.and_then(|at| SystemTime::now().duration_since(at).ok())
        .map_or_else(|| "-".into(), |d| format!("{} ago", ago(d)))
}

/// A time in milliseconds since the Unix epoch, as how long ago it was.
pub fn since_millis(at: u64) -> String {
    since(Some(SystemTime::UNIX_EPOCH + Duration::from_millis(at)))
}

/// What a payload is, for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadText {
    /// JSON, pretty-printed.
    Json(String),
    /// UTF-8 text without control characters (newlines and tabs aside).
    Text(String),
    /// Anything else, as hex, 16 bytes a line.
    Hex(String),
}

impl PayloadText {
    /// Pretty JSON when `bytes` are JSON, text when they are plain UTF-8, hex otherwise.
    pub fn of(bytes: &[u8]) -> Self {
        if let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) {
            return Self::Json(serde_json::to_string_pretty(&json).unwrap_or_default());
        }
        match std::str::from_utf8(bytes) {
            Ok(text)
                if !text
                    .chars()
                    .any(|c| c.is_control() && c != '\n' && c != '\t') =>
            {
                Self::Text(text.to_owned())
            }
            _ => Self::Hex(
                bytes
                    .chunks(16)
                    .map(|line| {
                        line.iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        }
    }

    /// The text to show.
    pub fn text(&self) -> &str {
        match self {
            Self::Json(text) | Self::Text(text) | Self::Hex(text) => text,
        }
    }

    /// `json`, `text` or `hex`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Json(_) => "json",
            Self::Text(_) => "text",
            Self::Hex(_) => "hex",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_pretty_json_text_or_hex() {
        assert_eq!(
            PayloadText::of(br#"{"a":1}"#),
            PayloadText::Json("{\n  \"a\": 1\n}".into())
        );
        assert_eq!(
            PayloadText::of(b"plain words"),
            PayloadText::Text("plain words".into())
        );
        assert_eq!(PayloadText::of(&[0xff, 0x00, 0x10]).text(), "ff 00 10");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(ago(Duration::from_millis(950)), "950 ms");
        assert_eq!(ago(Duration::from_millis(12_300)), "12.3 s");
        assert_eq!(ago(Duration::from_secs(245)), "4 m 05 s");
        assert_eq!(ago(Duration::from_secs(3 * 3600 + 120)), "3 h 02 m");
        assert_eq!(ago(Duration::from_secs(2 * 86_400 + 4 * 3600)), "2 d 04 h");
    }
}
