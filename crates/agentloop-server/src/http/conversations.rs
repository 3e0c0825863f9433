//! Stored conversations: list, fetch, rename, delete.

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::ApiError;
use crate::state::AppState;
use crate::store::{ConversationSummary, StoredConversation};

#[derive(Serialize)]
pub(crate) struct ConversationList {
    conversations: Vec<ConversationSummary>,
}

#[derive(Serialize)]
pub(crate) struct ConversationDetail {
    #[serde(flatten)]
    conversation: StoredConversation,
    /// The answer running now, to reconnect to with `GET /v1/chat/{id}/events`.
    active_message_id: Option<String>,
}

pub(crate) async fn list(
    State(state): State<AppState>,
) -> Result<Json<ConversationList>, ApiError> {
    Ok(Json(ConversationList {
        conversations: state.conversations().await?,
    }))
}

pub(crate) async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ConversationDetail>, ApiError> {
    let conversation = state
        .conversation(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no conversation has the id `{id}`")))?;
    let active_message_id = crate::chat::active_in(&state, &id)
        .await?
        .map(|run| run.message_id.clone());
    Ok(Json(ConversationDetail {
        conversation,
        active_message_id,
    }))
}

/// The body of `PATCH /v1/conversations/{id}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConversationPatch {
    title: String,
}

/// Longest title a rename keeps, in characters.
const MAX_TITLE_CHARS: usize = 200;

pub(crate) async fn rename(
    State(state): State<AppState>,
    Path(id): Path<String>,
    patch: Result<Json<ConversationPatch>, JsonRejection>,
) -> Result<Json<ConversationSummary>, ApiError> {
    let Json(patch) = patch?;
    // One line, like the titles taken from prompts.
    let title = patch.title.split_whitespace().collect::<Vec<_>>().join(" ");
    if title.is_empty() {
        return Err(ApiError::bad_request(
            "a title needs at least one character that is not a space",
        ));
    }
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(ApiError::bad_request(format!(
            "a title is at most {MAX_TITLE_CHARS} characters"
        )));
    }
    state
        .inner
        .store
        .rename(id.clone(), title)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no conversation has the id `{id}`")))
}

pub(crate) async fn delete(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if let Some(run) = crate::chat::active_in(&state, &id).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the conversation is still answering (message `{}`); cancel it first",
                run.message_id
            ),
        ));
    }
    if state.inner.store.delete(id.clone()).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "no conversation has the id `{id}`"
        )))
    }
}
