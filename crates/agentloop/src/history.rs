//! The history invariant: every tool use has exactly one result, in the next message, and every
//! result answers a tool use. Providers reject anything else with a 400, so the run loop, the
//! conversation and the server check it before sending or persisting.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::message::{ContentBlock, Message, Role};

/// Check that `messages` is valid to send again.
///
/// Rules: the tool uses of an assistant message are answered, each exactly once, by tool
/// results in the user message right after it; no tool result answers anything else; tool-use
/// ids are unique. A trailing assistant message whose tool uses have no results yet is
/// invalid (a half-finished turn).
pub fn validate(messages: &[Message]) -> Result<()> {
    let invalid = |message: String| Err(Error::InvalidHistory { message });
    let mut seen_ids = HashSet::new();
    let mut pending: Vec<&str> = Vec::new();
    let mut pending_from = 0;
    for (i, message) in messages.iter().enumerate() {
        let results: Vec<&str> = message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolResult(r) => Some(r.tool_use_id.as_str()),
                _ => None,
            })
            .collect();
        if !pending.is_empty() {
            if message.role != Role::User {
                return invalid(format!(
                    "message {pending_from} has tool uses {pending:?} but message {i} is not a user message with their results"
                ));
            }
            for id in &pending {
                match results.iter().filter(|r| *r == id).count() {
                    1 => {}
                    0 => {
                        return invalid(format!(
                            "tool use `{id}` in message {pending_from} has no result in message {i}"
                        ));
                    }
                    n => {
                        return invalid(format!(
                            "tool use `{id}` in message {pending_from} has {n} results in message {i}"
                        ));
                    }
                }
            }
            if let Some(extra) = results.iter().find(|r| !pending.contains(r)) {
                return invalid(format!(
                    "tool result `{extra}` in message {i} answers no tool use of message {pending_from}"
                ));
            }
            pending.clear();
        } else if let Some(extra) = results.first() {
            return invalid(format!(
                "tool result `{extra}` in message {i} does not follow an assistant tool use"
            ));
        }
        if message.role == Role::Assistant {
            for block in &message.content {
                if let ContentBlock::ToolUse { id, .. } = block {
                    if !seen_ids.insert(id.as_str()) {
                        return invalid(format!("tool use id `{id}` appears twice"));
                    }
                    pending.push(id);
                }
            }
            pending_from = i;
        }
    }
    if !pending.is_empty() {
        return invalid(format!(
            "the last message ({pending_from}) has tool uses without results: {pending:?}"
        ));
    }
    Ok(())
}

/// Whether `messages` is valid to send again (see [`validate`]).
pub fn is_valid(messages: &[Message]) -> bool {
    validate(messages).is_ok()
}
