//! The floor: the least a client can do for one run, written straight on reqwest. It sends
//! pre-built request bodies, finds the tool-call id and argument text in the raw bytes, calls
//! the tool, sends the result back and reads the answer, without parsing any JSON.
//!
//! It relies on the compact JSON the testkit's server writes (no spaces after `:`), which a
//! real client cannot: it is a lower bound to compare against, not a client.

use std::process::ExitCode;

use agentloop_peers::workload::{self, MODEL, PROMPT, TOOL_DESCRIPTION, TOOL_NAME};
use agentloop_peers::{Options, Outcome, drive};
use bytes::Bytes;
use memchr::memmem;
use serde_json::json;

/// The parts of both requests that do not depend on the model's answer.
struct Bodies {
    /// The whole first request.
    first: Bytes,
    /// The second request up to the assistant's message.
    second_head: String,
    /// The second request after the tool's message.
    second_tail: String,
    /// Whether to ask for an event stream.
    stream: bool,
}

impl Bodies {
    fn new(stream: bool) -> Self {
        let tools = json!([{
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": TOOL_DESCRIPTION,
                "parameters": workload::tool_schema(),
            }
        }]);
        let user = json!({"role": "user", "content": PROMPT});
        let mut first = json!({"model": MODEL, "messages": [user], "tools": tools});
        if stream {
            first["stream"] = json!(true);
            first["stream_options"] = json!({"include_usage": true});
        }
        let first = Bytes::from(first.to_string());
        // The second request: the same head, with the assistant's call and the tool's result
        // spliced into `messages`; `tools` and the stream flags go after them.
        let mut tail = json!({"tools": tools});
        if stream {
            tail["stream"] = json!(true);
            tail["stream_options"] = json!({"include_usage": true});
        }
        let tail = tail.to_string();
        Self {
            first,
            second_head: format!(r#"{{"model":"{MODEL}","messages":[{user},"#),
            // `tail` is an object: drop its `{` to continue the request's own object.
            second_tail: format!("],{}", &tail[1..]),
            stream,
        }
    }

    /// The second request, with the model's call and the tool's result.
    fn second(&self, id: &str, arguments: &str, result: &str) -> String {
        let (head, tail) = (&self.second_head, &self.second_tail);
        format!(
            r#"{head}{{"role":"assistant","content":null,"tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"{TOOL_NAME}","arguments":"{arguments}"}}}}]}},{{"role":"tool","tool_call_id":"{id}","content":{result}}}{tail}"#
        )
    }
}

/// The raw (still escaped) text of each JSON string that follows `key` in `body`.
fn strings_after<'a>(body: &'a [u8], key: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    memmem::find_iter(body, key).filter_map(move |at| {
        let start = at + key.len();
        let mut i = start;
        while i < body.len() {
            match body[i] {
                b'\\' => i += 2,
                b'"' => return Some(&body[start..i]),
                _ => i += 1,
            }
        }
        None
    })
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    body: impl Into<reqwest::Body>,
) -> Result<Bytes, String> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("authorization", "Bearer floor")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    if !response.status().is_success() {
        return Err(format!("status {}", response.status()));
    }
    response
        .bytes()
        .await
        .map_err(|e| format!("reading the body failed: {e}"))
}

async fn one_run(client: reqwest::Client, url: &str, bodies: &Bodies) -> Outcome {
    let first = post(&client, url, bodies.first.clone()).await?;
    let calls = memmem::find(&first, br#""tool_calls":["#).ok_or("no tool call in the answer")?;
    let id = strings_after(&first[calls..], br#""id":""#)
        .next()
        .ok_or("no tool-call id")?;
    let id = std::str::from_utf8(id).map_err(|e| e.to_string())?;
    let mut arguments = Vec::with_capacity(32);
    for fragment in strings_after(&first, br#""arguments":""#) {
        arguments.extend_from_slice(fragment);
    }
    if arguments != br#"{\"city\":\"Paris\"}"# {
        return Err(format!(
            "unexpected arguments {}",
            String::from_utf8_lossy(&arguments)
        ));
    }
    let weather = workload::get_weather(workload::CITY);
    let result = serde_json::to_string(&weather).map_err(|e| e.to_string())?;
    let result = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    let arguments = std::str::from_utf8(&arguments).map_err(|e| e.to_string())?;
    let second = post(&client, url, bodies.second(id, arguments, &result)).await?;
    let mut text = Vec::with_capacity(workload::FINAL_TEXT.len());
    for piece in strings_after(&second, br#""content":""#) {
        text.extend_from_slice(piece);
    }
    if bodies.stream && !second.ends_with(b"data: [DONE]\n\n") {
        return Err("the stream did not end with [DONE]".into());
    }
    workload::check_answer(&String::from_utf8_lossy(&text))
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("floor: {e}");
            return ExitCode::from(2);
        }
    };
    let client = reqwest::Client::new();
    let url: &'static str = format!("{}/chat/completions", options.base_url).leak();
    let bodies: &'static Bodies = Box::leak(Box::new(Bodies::new(options.stream)));
    drive("floor", &options, move || {
        one_run(client.clone(), url, bodies)
    })
    .await
}
