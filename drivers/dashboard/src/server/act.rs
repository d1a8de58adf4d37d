//! The actions: requeue and purge dead letters, cancel and retry commands. Each answers with a
//! redirect to the page it acted on, carrying a notice of what it did.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use leasehold_core::{Inspector, MessageId, Selection};

use super::guard::may_act;
use super::{known_queue, known_stream, AppState, Failure};
use crate::pages;
use crate::source::Source;
use crate::state::{Notice, Shared};

/// A POSTed form, its repeated keys kept.
pub(super) struct Form(HashMap<String, Vec<String>>);

impl Form {
    pub(super) fn parse(body: &[u8]) -> Self {
        let mut fields: HashMap<String, Vec<String>> = HashMap::new();
        for (name, value) in form_urlencoded::parse(body) {
            fields
                .entry(name.into_owned())
                .or_default()
                .push(value.into_owned());
        }
        Self(fields)
    }

    pub(super) fn one(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.first()).map(String::as_str)
    }

    fn all(&self, name: &str) -> &[String] {
        self.0.get(name).map_or(&[], Vec::as_slice)
    }
}

/// The action's form, if the dashboard may act (see [`may_act`]) on what it names (`known`).
fn admit(
    shared: &Shared<impl Source>,
    headers: &HeaderMap,
    body: &[u8],
    known: Result<(), Failure>,
) -> Result<Form, (StatusCode, String)> {
    let form = Form::parse(body);
    may_act(shared, headers, &form).map_err(|(status, why)| (status, why.to_owned()))?;
    known.map_err(|failure| (failure.status, failure.message))?;
    Ok(form)
}

/// Keeps `notice` and sends the browser to `url` to show it.
async fn done(shared: &Shared<impl Source>, url: &str, notice: Notice) -> Response {
    shared.pages.clear().await;
    let number = shared.notices.add(notice);
    let separator = if url.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{url}{separator}notice={number}")).into_response()
}

pub(super) async fn dead_action<S: Source>(
    State(shared): AppState<S>,
    Path(name): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let form = match admit(&shared, &headers, &body, known_stream(&shared, &name)) {
        Ok(form) => form,
        Err(refused) => return refused.into_response(),
    };
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

pub(super) async fn command_action<S: Source>(
    State(shared): AppState<S>,
    Path((name, id)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = admit(&shared, &headers, &body, known_queue(&shared, &name)) {
        return refused.into_response();
    }
    let retry = uri.path().ends_with("/retry");
    let result = match shared.queues.get(&shared.source, &name).await {
        Err(error) => Err(error),
        Ok(queue) if retry => queue.retry(&id).await.map_err(|e| e.to_string()),
        Ok(queue) => queue.cancel_command(&id).await.map_err(|e| e.to_string()),
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
