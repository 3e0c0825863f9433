//! What a run starts from.

use crate::message::Message;

/// What a run starts from: a prompt, or a whole history ending with the new user message.
/// Converted from `&str`, `String`, a [`Message`] or a `Vec<Message>`, so
/// `agent.run("Hi")` and `agent.run(history)` both read naturally.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInput(Vec<Message>);

impl RunInput {
    /// The messages the run starts from.
    pub fn into_messages(self) -> Vec<Message> {
        self.0
    }
}

impl From<&str> for RunInput {
    fn from(prompt: &str) -> Self {
        Self(vec![Message::user(prompt)])
    }
}

impl From<String> for RunInput {
    fn from(prompt: String) -> Self {
        Self(vec![Message::user(prompt)])
    }
}

impl From<&String> for RunInput {
    fn from(prompt: &String) -> Self {
        Self(vec![Message::user(prompt.as_str())])
    }
}

impl From<Message> for RunInput {
    fn from(message: Message) -> Self {
        Self(vec![message])
    }
}

impl From<Vec<Message>> for RunInput {
    fn from(messages: Vec<Message>) -> Self {
        Self(messages)
    }
}
