//! The pages, as functions from what was read to HTML. Nothing here reads Redis or knows
//! about HTTP: the handlers read, these render, and maud escapes every string they are given.

pub(crate) mod chart;
pub(crate) mod dead;
pub(crate) mod overview;
pub(crate) mod queue;
pub(crate) mod stream;

use std::time::Duration;

use maud::{html, Markup, PreEscaped, DOCTYPE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::state::Notice;
pub(crate) use crate::text::{ago, since, since_millis, PayloadText};

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

/// The page of a sharded queue (streams `{queue:i}`).
pub(crate) fn sharded_url(queue: &str) -> String {
    format!("/sharded/{}", segment(queue))
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
}
