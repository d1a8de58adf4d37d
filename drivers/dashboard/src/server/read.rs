//! The pages: each reads what it shows (through the page cache) and renders it.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use leasehold_commands::{Page as CommandPage, Status};
use leasehold_core::{Inspector, MessageId, Page, PendingQuery};

use super::{actions, cache_key, known_queue, known_stream, respond, AppState, Failure, Params};
use crate::pages::{self, dead, overview, queue, stream};
use crate::source::Source;

pub(super) async fn overview_page<S: Source>(
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

pub(super) async fn sharded_page<S: Source>(
    State(shared): AppState<S>,
    Path(name): Path<String>,
    headers: HeaderMap,
    Query(params): Query<Params>,
) -> Response {
    let body = overview::sharded_page(&shared.snapshot(), &name)
        .map(|page| page.into_string().into())
        .ok_or_else(|| {
            Failure::not_found(format!("no sharded queue named {name:?} is shown here"))
        });
    respond(&shared, &headers, &params, &name, &[], true, body)
}

pub(super) async fn stream_page<S: Source>(
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
                    let query = PendingQuery::new(
                        Page::first(shared.options.page_size)
                            .with_after(params.after.as_deref().map(MessageId::from)),
                    );
                    let listing = match &group {
                        Some(group) => shared
                            .source
                            .inspector()
                            .pending(&name, Some(group), &query)
                            .await
                            .map_err(|e| e.to_string())?,
                        None => leasehold_core::Listing::new(Vec::new(), None),
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
    // A shard's page sits under its queue's.
    let queue = overview::queue_of_shard(&name);
    let crumbs: Vec<(&str, String)> = queue
        .as_deref()
        .map(|queue| (queue, pages::sharded_url(queue)))
        .into_iter()
        .collect();
    respond(&shared, &headers, &params, &name, &crumbs, true, body)
}

pub(super) async fn dead_page<S: Source>(
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
                let page = Page::first(shared.options.page_size)
                    .with_after(params.after.as_deref().map(MessageId::from));
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

pub(super) async fn dead_letter_page<S: Source>(
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

pub(super) async fn queue_page<S: Source>(
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

pub(super) async fn command_page<S: Source>(
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
