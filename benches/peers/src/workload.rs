//! The workload: one run is a user prompt, a streamed `get_weather` call for Paris, the tool's
//! result sent back, and a final answer of about 150 words.

use std::sync::atomic::{AtomicU64, Ordering};

/// The model name every client sends (the pre-rendered server ignores it).
pub const MODEL: &str = "mock-model";

/// The user's prompt.
pub const PROMPT: &str = "What's the weather in Paris?";

/// The tool's name.
pub const TOOL_NAME: &str = "get_weather";

/// The tool's description.
pub const TOOL_DESCRIPTION: &str = "Current weather for a city";

/// The description of the tool's one parameter.
pub const CITY_DESCRIPTION: &str = "City name, e.g. Paris";

/// The city the model asks about and the tool must be called with.
pub const CITY: &str = "Paris";

/// The tool-call arguments the model streams: 16 characters, so 8 fragments of 2.
pub const ARGUMENTS: &str = r#"{"city":"Paris"}"#;

/// How many fragments the arguments are streamed in.
pub const ARGUMENT_FRAGMENTS: usize = 8;

/// The final answer: 155 words, 839 characters, so 60 deltas of at most 14 characters. Plain
/// ASCII without quotes or backslashes, so it reads the same escaped in JSON or not.
pub const FINAL_TEXT: &str = "Paris is mild today, with a high of eighteen degrees and a low of eleven. The morning starts under a thin layer of cloud that breaks up before noon, leaving a bright and breezy afternoon. A light wind comes from the west at about fifteen kilometres per hour, so the air feels a little cooler along the river. There is no rain in the forecast until late on Thursday, when a weak front may bring a few showers overnight. Humidity stays near sixty percent and visibility is excellent, which makes it a good day for a walk through the Luxembourg Gardens or along the quays of the Seine. If you plan to be out after sunset, take a light jacket: temperatures drop quickly once the sun goes down, and the terraces will feel chilly by nine. Tomorrow looks much the same, with a little more sunshine and a high of nineteen degrees by the afternoon.";

/// How many deltas the final answer is streamed in.
pub const TEXT_DELTAS: usize = 60;

/// The JSON schema of the tool's arguments, for clients that take a schema as JSON.
pub fn tool_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": CITY_DESCRIPTION}
        },
        "required": ["city"]
    })
}

/// What the tool returns.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Weather {
    /// The city asked about.
    pub city: String,
    /// Temperature in degrees Celsius.
    pub temperature_c: f32,
    /// A few words about the sky.
    pub conditions: &'static str,
}

static PARIS_CALLS: AtomicU64 = AtomicU64::new(0);
static OTHER_CALLS: AtomicU64 = AtomicU64::new(0);

/// The tool itself, shared by every client: counts its calls by city so the harness can check
/// that each run called it once, for Paris.
pub fn get_weather(city: &str) -> Weather {
    let counter = if city == CITY {
        &PARIS_CALLS
    } else {
        &OTHER_CALLS
    };
    counter.fetch_add(1, Ordering::Relaxed);
    Weather {
        city: city.to_owned(),
        temperature_c: 18.0,
        conditions: "partly cloudy",
    }
}

/// Tool calls so far: `(for Paris, for any other city)`.
pub fn tool_calls() -> (u64, u64) {
    (
        PARIS_CALLS.load(Ordering::Relaxed),
        OTHER_CALLS.load(Ordering::Relaxed),
    )
}

/// Check a run's final answer.
pub fn check_answer(text: &str) -> Result<(), String> {
    if text == FINAL_TEXT {
        Ok(())
    } else {
        Err(format!(
            "the final answer differs from the scripted one: got {} characters, expected {}: {:?}",
            text.len(),
            FINAL_TEXT.len(),
            text.chars().take(80).collect::<String>()
        ))
    }
}
