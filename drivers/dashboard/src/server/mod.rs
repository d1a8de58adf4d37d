//! The HTTP side: the routes; [`guard`] (token, security headers, CSRF); [`read`], the pages,
//! read through the page cache and rendered; [`act`], the actions. Every GET answers either a
//! whole page or, asked by the page's own script (`X-Leasehold-Live`), just its live part.

mod act;
mod guard;
mod read;

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;

use crate::pages::Page as Layout;
use crate::source::Source;
use crate::state::Shared;

pub(super) type AppState<S> = State<Arc<Shared<S>>>;

const APP_JS: &str = include_str!("../../assets/app.js");
const APP_CSS: &str = include_str!("../../assets/app.css");
pub(super) const TOKEN_COOKIE: &str = "leasehold_token";
const LIVE_HEADER: &str = "x-leasehold-live";

/// Every route, behind the token guard, with the security headers on every answer.
pub(crate) fn router<S: Source>(shared: Arc<Shared<S>>) -> Router {
    Router::new()
        .route("/", get(read::overview_page::<S>))
        .route("/sharded/{queue}", get(read::sharded_page::<S>))
        .route("/streams/{stream}", get(read::stream_page::<S>))
        .route("/streams/{stream}/dead", get(read::dead_page::<S>))
        .route(
            "/streams/{stream}/dead/requeue",
            post(act::dead_action::<S>),
        )
        .route("/streams/{stream}/dead/purge", post(act::dead_action::<S>))
        .route(
            "/streams/{stream}/dead/{id}",
            get(read::dead_letter_page::<S>),
        )
        .route("/queues/{queue}", get(read::queue_page::<S>))
        .route(
            "/queues/{queue}/commands/{id}",
            get(read::command_page::<S>),
        )
        .route(
            "/queues/{queue}/commands/{id}/cancel",
            post(act::command_action::<S>),
        )
        .route(
            "/queues/{queue}/commands/{id}/retry",
            post(act::command_action::<S>),
        )
        .route(
            "/assets/app.js",
            get(|| async { asset("text/javascript", APP_JS) }),
        )
        .route(
            "/assets/app.css",
            get(|| async { asset("text/css", APP_CSS) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            guard::guard::<S>,
        ))
        .with_state(shared)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "max-age=300"),
        ],
        body,
    )
        .into_response()
}

/// Query parameters of the pages.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Params {
    pub(super) notice: Option<u64>,
    pub(super) after: Option<String>,
    pub(super) group: Option<String>,
    pub(super) status: Option<String>,
}

/// A whole page, or its live part when the page's script asks.
pub(super) fn respond(
    shared: &Shared<impl Source>,
    headers: &HeaderMap,
    params: &Params,
    title: &str,
    crumbs: &[(&str, String)],
    live: bool,
    body: Result<Arc<str>, Failure>,
) -> Response {
    let (status, body) = match body {
        Ok(body) => (StatusCode::OK, body),
        Err(failure) => (failure.status, failure.html().into_string().into()),
    };
    if headers.contains_key(LIVE_HEADER) {
        return (
            status,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            body.to_string(),
        )
            .into_response();
    }
    let page = Layout {
        title,
        crumbs,
        notice: params.notice.and_then(|n| shared.notices.get(n)),
        refresh: live.then_some(shared.options.refresh),
        read_only: shared.options.read_only,
    };
    (status, page.render(&body)).into_response()
}

/// Why a page could not be shown.
pub(super) struct Failure {
    pub(super) status: StatusCode,
    pub(super) message: String,
}

impl Failure {
    pub(super) fn not_found(what: String) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: what,
        }
    }

    pub(super) fn read(error: impl ToString) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY,
            message: error.to_string(),
        }
    }

    fn html(&self) -> Markup {
        maud::html! { p.notice.failed role="alert" { (self.message) } }
    }
}

/// The key a rendered page is kept under: its URL, the notice left out.
pub(super) fn cache_key(path: &str, params: &Params) -> String {
    format!(
        "{path}?after={:?}&group={:?}&status={:?}",
        params.after, params.group, params.status
    )
}

/// Fails unless `name` is one of the streams shown.
pub(super) fn known_stream(shared: &Shared<impl Source>, name: &str) -> Result<(), Failure> {
    match shared.snapshot().stream(name) {
        Some(_) => Ok(()),
        None => Err(Failure::not_found(format!(
            "no stream named {name:?} is shown here"
        ))),
    }
}

pub(super) fn known_queue(shared: &Shared<impl Source>, name: &str) -> Result<(), Failure> {
    match shared.snapshot().queue(name) {
        Some(_) => Ok(()),
        None => Err(Failure::not_found(format!(
            "no command queue named {name:?} is shown here"
        ))),
    }
}

/// The CSRF secret for the action forms, or `None` when read-only.
pub(super) fn actions<S: Source>(shared: &Shared<S>) -> Option<&str> {
    (!shared.options.read_only).then_some(shared.csrf.as_str())
}
