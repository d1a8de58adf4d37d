//! Who may look and who may act: the token, the security headers, the CSRF and origin checks.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::act::Form;
use super::{AppState, TOKEN_COOKIE};
use crate::source::Source;
use crate::state::{same_secret, Shared};

/// The token check (when there is a token) and the headers that keep the pages from being
/// framed, sniffed or fed scripts from elsewhere.
pub(super) async fn guard<S: Source>(
    State(shared): AppState<S>,
    request: Request,
    next: Next,
) -> Response {
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

/// Refuses an action unless the dashboard may act and the request comes from its own page:
/// the form carries the CSRF secret, and the browser says it was sent from this origin.
pub(super) fn may_act(
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
