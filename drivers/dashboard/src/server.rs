//! The HTTP side: routes, the token and CSRF guards, and handlers that read (through the page
//! cache) and render. Every GET answers either a whole page or, asked by the page's own
//! script (`X-Leasehold-Live`), just its live part.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use leasehold_commands::{Page as CommandPage, QueueError, Status};
use leasehold_core::{Inspector, MessageId, Page, PendingQuery, Selection};
use maud::Markup;

use crate::pages::{self, dead, overview, queue, stream, Page as Layout};
use crate::source::Source;
use crate::state::{same_secret, Notice, Shared};

type AppState<S> = State<Arc<Shared<S>>>;

const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");
const TOKEN_COOKIE: &str = "leasehold_token";
const LIVE_HEADER: &str = "x-leasehold-live";

/// Every route, behind the token guard, with the security headers on every answer.
pub(crate) fn router<S: Source>(shared: Arc<Shared<S>>) -> Router {
    Router::new()
        .route("/", get(overview_page::<S>))
        .route("/streams/{stream}", get(stream_page::<S>))
        .route("/streams/{stream}/dead", get(dead_page::<S>))
        .route("/streams/{stream}/dead/requeue", post(dead_action::<S>))
        .route("/streams/{stream}/dead/purge", post(dead_action::<S>))
        .route("/streams/{stream}/dead/{id}", get(dead_letter_page::<S>))
        .route("/queues/{queue}", get(queue_page::<S>))
        .route("/queues/{queue}/commands/{id}", get(command_page::<S>))
        .route(
            "/queues/{queue}/commands/{id}/cancel",
            post(command_action::<S>),
        )
        .route(
            "/queues/{queue}/commands/{id}/retry",
            post(command_action::<S>),
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
            guard::<S>,
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

/// The token check (when there is a token) and the headers that keep the pages from being
/// framed, sniffed or fed scripts from elsewhere.
async fn guard<S: Source>(State(shared): AppState<S>, request: Request, next: Next) -> Response {
    let mut response = match &shared.options.token {
        Some(token) => match presented(&request, token) {
            Presented::Valid => next.run(request).await,
            Presented::InQuery(rest) => {
                let mut response = Redirect::to(&rest).into_response();
                let cookie = format!("{TOKEN_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
                if let Ok(cookie) = HeaderValue::from_str(&cookie) {
                    response.headers_mut().insert(header::SET_COOKIE, cookie);
                }
                response
            }
            Presented::Missing => (
                StatusCode::UNAUTHORIZED,
                "this dashboard needs its token: open it once as /?token=<token>, or send \
                 Authorization: Bearer <token>",
            )
                .into_response(),
        },
        None => next.run(request).await,
    };
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it a browser sends `Origin: null` on the dashboard's own
        // forms, and the origin check below needs the real one.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

enum Presented {
    Valid,
    /// The right token in the query: set the cookie, then go to this URL without it.
    InQuery(String),
    Missing,
}

fn presented(request: &Request, token: &str) -> Presented {
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().strip_prefix(TOKEN_COOKIE)?.strip_prefix('='))
        .next();
    if [bearer, cookie]
        .into_iter()
        .flatten()
        .any(|given| same_secret(given, token))
    {
        return Presented::Valid;
    }
    let query = request.uri().query().unwrap_or_default();
    let mut rest = Vec::new();
    let mut found = false;
    for (name, value) in form_urlencoded::parse(query.as_bytes()) {
        if name == "token" {
            found |= same_secret(&value, token);
        } else {
            rest.push((name.into_owned(), value.into_owned()));
        }
    }
    if !found {
        return Presented::Missing;
    }
    let mut url = request.uri().path().to_owned();
    if !rest.is_empty() {
        url.push('?');
        url.push_str(
            &form_urlencoded::Serializer::new(String::new())
                .extend_pairs(rest)
                .finish(),
        );
    }
    Presented::InQuery(url)
}

/// Query parameters of the pages.
#[derive(Debug, Default, serde::Deserialize)]
struct Params {
    notice: Option<u64>,
    after: Option<String>,
    group: Option<String>,
    status: Option<String>,
}

/// A whole page, or its live part when the page's script asks.
fn respond(
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
struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    fn not_found(what: String) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            message: what,
        }
    }

    fn read(error: impl ToString) -> Self {
        Self {
            status: StatusCode::BAD_GATEWAY,
            message: error.to_string(),
        }
    }

    fn html(&self) -> Markup {
        maud::html! { p.notice.failed role="alert" { (self.message) } }
    }
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Self::read(message)
    }
}

/// The key a rendered page is kept under: its URL, the notice left out.
fn cache_key(path: &str, params: &Params) -> String {
    format!(
        "{path}?after={:?}&group={:?}&status={:?}",
        params.after, params.group, params.status
    )
}

async fn overview_page<S: Source>(
    State(shared): AppState<S>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let body = overview::overview(&shared.snapshot()).into_string();
    respond(
        &shared,
        &headers,
        &params,
        "Overview",
        &[],
        true,
        Ok(body.into()),
    )
}

async fn stream_page<S: Source>(
    State(shared): AppState<S>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let snapshot = shared.snapshot();
    let body = match snapshot.stream(&name) {
        None => Err(Failure::not_found(format!(
            "no stream named {name:?} is shown here"
        ))),
        Some(state) => match &state.overview {
            Err(error) => Err(Failure::read(error)),
            Ok(overview) => {
                let group = params
                    .group
                    .clone()
                    .or_else(|| overview.groups.first().map(|g| g.name.clone()));
                let key = cache_key(&format!("/streams/{name}"), &params);
                let read = async {
                    let query = PendingQuery {
                        page: Page {
                            after: params.after.as_deref().map(MessageId::from),
                            limit: shared.options.page_size,
                        },
                        consumer: None,
                        min_idle: None,
                    };
                    let listing = match &group {
                        Some(group) => shared
                            .source
                            .inspector()
                            .pending(&name, Some(group), &query)
                            .await
                            .map_err(|e| e.to_string())?,
                        None => leasehold_core::Listing {
                            entries: Vec::new(),
                            next: None,
                        },
                    };
                    let group = group.as_deref().unwrap_or_default();
                    Ok(
                        stream::stream(overview, group, &listing, shared.options.claim_timeout)
                            .into_string(),
                    )
                };
                shared.pages.get_or(&key, read).await.map_err(Failure::read)
            }
        },
    };
    respond(&shared, &headers, &params, &name, &[], true, body)
}

/// Fails unless `name` is one of the streams shown.
fn known_stream(shared: &Shared<impl Source>, name: &str) -> Result<(), Failure> {
    match shared.snapshot().stream(name) {
        Some(_) => Ok(()),
        None => Err(Failure::not_found(format!(
            "no stream named {name:?} is shown here"
        ))),
    }
}

fn known_queue(shared: &Shared<impl Source>, name: &str) -> Result<(), Failure> {
    match shared.snapshot().queue(name) {
        Some(_) => Ok(()),
        None => Err(Failure::not_found(format!(
            "no command queue named {name:?} is shown here"
        ))),
    }
}

/// The CSRF secret for the action forms, or `None` when read-only.
fn actions<S: Source>(shared: &Shared<S>) -> Option<&str> {
    (!shared.options.read_only).then_some(shared.csrf.as_str())
}

async fn dead_page<S: Source>(
    State(shared): AppState<S>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let body = match known_stream(&shared, &name) {
        Err(failure) => Err(failure),
        Ok(()) => {
            let key = cache_key(&format!("/streams/{name}/dead"), &params);
            let read = async {
                let page = Page {
                    after: params.after.as_deref().map(MessageId::from),
                    limit: shared.options.page_size,
                };
                let listing = shared
                    .source
                    .inspector()
                    .dead_letters(&name, &page, false)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(dead::dead_letters(&name, &listing, actions(&shared)).into_string())
            };
            shared.pages.get_or(&key, read).await.map_err(Failure::read)
        }
    };
    let crumbs = [(name.as_str(), pages::stream_url(&name))];
    respond(
        &shared,
        &headers,
        &params,
        "Dead letters",
        &crumbs,
        true,
        body,
    )
}

async fn dead_letter_page<S: Source>(
    State(shared): AppState<S>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let body = match known_stream(&shared, &name) {
        Err(failure) => Err(failure),
        Ok(()) => match shared
            .source
            .inspector()
            .dead_letter(&name, &MessageId::from(id.as_str()))
            .await
        {
            Ok(Some(entry)) => Ok(dead::dead_letter(&name, &entry, actions(&shared))
                .into_string()
                .into()),
            Ok(None) => Err(Failure::not_found(format!(
                "{id} is no dead letter of {name:?} (any more)"
            ))),
            Err(error) => Err(Failure::read(error)),
        },
    };
    let crumbs = [
        (name.as_str(), pages::stream_url(&name)),
        ("dead letters", pages::dead_url(&name)),
    ];
    respond(&shared, &headers, &params, &id, &crumbs, false, body)
}

async fn queue_page<S: Source>(
    State(shared): AppState<S>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let body = match (
        known_queue(&shared, &name),
        parse_status(params.status.as_deref()),
    ) {
        (Err(failure), _) | (_, Err(failure)) => Err(failure),
        (Ok(()), Ok(status)) => {
            let key = cache_key(&format!("/queues/{name}"), &params);
            let read = async {
                let queue = shared.queues.get(&shared.source, &name).await?;
                let mut page = CommandPage::first(shared.options.page_size);
                if let Some(after) = &params.after {
                    page = page.starting_after(after.parse().map_err(|e| format!("{e}"))?);
                }
                let listing = queue
                    .commands(status, page)
                    .await
                    .map_err(|e| e.to_string())?;
                let snapshot = shared.snapshot();
                let counts = snapshot.queue(&name).and_then(|q| q.counts.as_ref().ok());
                Ok(queue::queue(&name, counts, status, &listing).into_string())
            };
            shared.pages.get_or(&key, read).await.map_err(Failure::read)
        }
    };
    respond(&shared, &headers, &params, &name, &[], true, body)
}

/// The status a queue page lists: RUNNING unless asked.
fn parse_status(status: Option<&str>) -> Result<Status, Failure> {
    match status {
        None => Ok(Status::Running),
        Some(text) => text.parse().map_err(|_| Failure {
            status: StatusCode::BAD_REQUEST,
            message: format!("{text:?} is no status"),
        }),
    }
}

async fn command_page<S: Source>(
    State(shared): AppState<S>,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let body = match known_queue(&shared, &name) {
        Err(failure) => Err(failure),
        Ok(()) => {
            let key = cache_key(&format!("/queues/{name}/commands/{id}"), &params);
            let read = async {
                let queue = shared.queues.get(&shared.source, &name).await?;
                match queue.command(&id).await.map_err(|e| e.to_string())? {
                    Some(state) => {
                        Ok(queue::command(&name, &state, actions(&shared)).into_string())
                    }
                    None => Err(format!("no command {id:?} in queue {name:?}")),
                }
            };
            shared.pages.get_or(&key, read).await.map_err(Failure::read)
        }
    };
    let crumbs = [(name.as_str(), pages::queue_url(&name))];
    respond(&shared, &headers, &params, &id, &crumbs, true, body)
}

/// A POSTed form, its repeated keys kept.
struct Form(HashMap<String, Vec<String>>);

impl Form {
    fn parse(body: &[u8]) -> Self {
        let mut fields: HashMap<String, Vec<String>> = HashMap::new();
        for (name, value) in form_urlencoded::parse(body) {
            fields
                .entry(name.into_owned())
                .or_default()
                .push(value.into_owned());
        }
        Self(fields)
    }

    fn one(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.first()).map(String::as_str)
    }

    fn all(&self, name: &str) -> &[String] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }
}

/// Refuses an action unless the dashboard may act and the request comes from its own page:
/// the form carries the CSRF secret, and the browser says it was sent from this origin.
fn may_act(
    shared: &Shared<impl Source>,
    headers: &HeaderMap,
    form: &Form,
) -> Result<(), (StatusCode, &'static str)> {
    if shared.options.read_only {
        return Err((StatusCode::FORBIDDEN, "this dashboard is read-only"));
    }
    let header = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let cross_site = matches!(header("sec-fetch-site"), Some("cross-site" | "same-site"));
    let foreign_origin = match (header("origin"), header("host")) {
        (Some(origin), Some(host)) => origin.split_once("://").map(|(_, rest)| rest) != Some(host),
        _ => false,
    };
    let secret = form
        .one("csrf")
        .is_some_and(|given| same_secret(given, &shared.csrf));
    if cross_site || foreign_origin || !secret {
        return Err((
            StatusCode::FORBIDDEN,
            "refused: this action did not come from the dashboard's own page (reload it and try again)",
        ));
    }
    Ok(())
}

/// Keeps `notice` and sends the browser to `url` to show it.
async fn done(shared: &Shared<impl Source>, url: &str, notice: Notice) -> Response {
    shared.pages.clear().await;
    let number = shared.notices.add(notice);
    let separator = if url.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{url}{separator}notice={number}")).into_response()
}

async fn dead_action<S: Source>(
    State(shared): AppState<S>,
    Path(name): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    if let Err(refused) = may_act(&shared, &headers, &form) {
        return refused.into_response();
    }
    if let Err(failure) = known_stream(&shared, &name) {
        return (failure.status, failure.message).into_response();
    }
    let purge = uri.path().ends_with("/purge");
    let which = if let Some(one) = form.one("one") {
        Selection::Ids(vec![MessageId::from(one)])
    } else if form.one("all") == Some("1") {
        Selection::All
    } else if !form.all("id").is_empty() {
        Selection::Ids(
            form.all("id")
                .iter()
                .map(|id| MessageId::from(id.as_str()))
                .collect(),
        )
    } else {
        let notice = Notice {
            ok: false,
            text: "nothing selected: tick the dead letters first".into(),
        };
        return done(&shared, &pages::dead_url(&name), notice).await;
    };
    let inspector = shared.source.inspector();
    let notice = if purge {
        match inspector.purge_dead(&name, &which).await {
            Ok(done) => outcome("deleted", done.deleted.len(), &done.gone),
            Err(error) => Notice {
                ok: false,
                text: format!("purge refused: {error}"),
            },
        }
    } else {
        match inspector.requeue(&name, &which).await {
            Ok(done) => outcome("requeued", done.moved.len(), &done.gone),
            Err(error) => Notice {
                ok: false,
                text: format!("requeue refused: {error}"),
            },
        }
    };
    tracing::info!(stream = %name, action = if purge { "purge" } else { "requeue" }, ok = notice.ok, "dashboard action");
    done(&shared, &pages::dead_url(&name), notice).await
}

fn outcome(what: &str, count: usize, gone: &[MessageId]) -> Notice {
    let mut text = format!("{what} {count} dead letter(s)");
    if !gone.is_empty() {
        let ids: Vec<&str> = gone.iter().map(MessageId::as_str).collect();
        text.push_str(&format!(
            "; {} were no dead letters any more: {}",
            gone.len(),
            ids.join(", ")
        ));
    }
    Notice {
        ok: gone.is_empty(),
        text,
    }
}

async fn command_action<S: Source>(
    State(shared): AppState<S>,
    Path((name, id)): Path<(String, String)>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = Form::parse(&body);
    if let Err(refused) = may_act(&shared, &headers, &form) {
        return refused.into_response();
    }
    if let Err(failure) = known_queue(&shared, &name) {
        return (failure.status, failure.message).into_response();
    }
    let retry = uri.path().ends_with("/retry");
    let result = match shared.queues.get(&shared.source, &name).await {
        Err(error) => Err(error),
        Ok(queue) if retry => queue.retry(&id).await.map_err(describe),
        Ok(queue) => queue.cancel_command(&id).await.map_err(describe),
    };
    let what = if retry { "retried" } else { "cancelled" };
    let notice = match result {
        Ok(state) => Notice {
            ok: true,
            text: format!("{what} {}: now {}", state.id, state.status),
        },
        Err(error) => Notice {
            ok: false,
            text: format!("refused: {error}"),
        },
    };
    tracing::info!(queue = %name, command = %id, action = what, ok = notice.ok, "dashboard action");
    done(&shared, &pages::command_url(&name, &id), notice).await
}

fn describe(error: QueueError) -> String {
    error.to_string()
}
