//! The pages, as functions from what was read to HTML. Nothing here reads Redis or knows
//! about HTTP: the handlers read, these render, and maud escapes every string they are given.

pub(crate) mod chart;
pub(crate) mod dead;
pub(crate) mod overview;
pub(crate) mod queue;
pub(crate) mod stream;

use std::time::{Duration, SystemTime};

use maud::{html, Markup, PreEscaped, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::state::Notice;

/// What a path segment keeps as it is: letters, digits and `-._~`.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `name` as one URL path segment.
pub(crate) fn segment(name: &str) -> String {
    utf8_percent_encode(name, SEGMENT).to_string()
}

/// `value` as a query value.
pub(crate) fn query_value(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

pub(crate) fn stream_url(stream: &str) -> String {
    format!("/streams/{}", segment(stream))
}

pub(crate) fn dead_url(stream: &str) -> String {
    format!("/streams/{}/dead", segment(stream))
}

pub(crate) fn queue_url(queue: &str) -> String {
    format!("/queues/{}", segment(queue))
}

pub(crate) fn command_url(queue: &str, id: &str) -> String {
    format!("/queues/{}/commands/{}", segment(queue), segment(id))
}

/// A whole page: the header, the notice of the action that led here, and the body. A
/// `refresh` makes the body's live part update itself that often (see `assets/app.js`).
pub(crate) struct Page<'a> {
    pub title: &'a str,
    /// Where the page sits: (label, URL) from the overview down, the page itself left out.
    pub crumbs: &'a [(&'a str, String)],
    pub notice: Option<Notice>,
    pub refresh: Option<Duration>,
    pub read_only: bool,
}

impl Page<'_> {
    /// The page around `live`, the part that updates itself.
    pub fn render(&self, live: &str) -> Markup {
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (self.title) " · leasehold" }
                    link rel="stylesheet" href="/assets/app.css";
                    script src="/assets/app.js" defer {}
                }
                body {
                    header {
                        a.brand href="/" { "leasehold" }
                        nav {
                            a href="/" { "overview" }
                            @for (label, url) in self.crumbs {
                                " / " a href=(url) { (label) }
                            }
                        }
                        @if self.read_only {
                            span.badge data-read-only { "read-only" }
                        }
                    }
                    main {
                        h1 { (self.title) }
                        @if let Some(notice) = &self.notice {
                            p.notice.ok[notice.ok].failed[!notice.ok] role="status" { (notice.text) }
                        }
                        @let every = self.refresh.map(|d| d.as_millis().to_string());
                        div #live data-refresh-ms=[every] { (PreEscaped(live)) }
                    }
                }
            }
        }
    }
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

/// A time in milliseconds since the Unix epoch, as how long ago it was.
pub(crate) fn since_millis(at: u64) -> String {
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

/// A form's hidden CSRF field.
pub(crate) fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// A "next page" link to `base` with `after` and the other query parameters, if there is a
/// next page.
pub(crate) fn next_link(base: &str, params: &[(&str, &str)], after: Option<&str>) -> Markup {
    let Some(after) = after else {
        return html! {};
    };
    let mut url = format!("{base}?after={}", query_value(after));
    for (name, value) in params {
        url.push_str(&format!("&{name}={}", query_value(value)));
    }
    html! { p.more { a data-next href=(url) { "next page →" } } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_one_path_segment() {
        assert_eq!(segment("orders"), "orders");
        assert_eq!(segment("{app}:a/b c"), "%7Bapp%7D%3Aa%2Fb%20c");
        assert_eq!(stream_url("a/b"), "/streams/a%2Fb");
        assert_eq!(command_url("q", "x?y"), "/queues/q/commands/x%3Fy");
    }

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
    fn every_string_given_to_a_page_is_escaped() {
        let page = Page {
            title: "<script>alert(1)</script>",
            crumbs: &[("<b>", "/x".into())],
            notice: Some(Notice {
                ok: false,
                text: "<img src=x onerror=alert(2)>".into(),
            }),
            refresh: None,
            read_only: false,
        }
        .render("")
        .into_string();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(!page.contains("<img"), "{page}");
        assert!(!page.contains("<b>"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(ago(Duration::from_millis(950)), "950 ms");
        assert_eq!(ago(Duration::from_millis(12_300)), "12.3 s");
        assert_eq!(ago(Duration::from_secs(245)), "4 m 05 s");
    }
}
