//! What `#[tool]` generates: the name, the description and the exact input schema, and how
//! parameters and return values reach the function.

use agentloop::{Error, Tool, ToolContext, tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Current weather for a city.
///
/// Call it before answering anything about the weather.
#[tool]
async fn get_weather(
    /// City name, e.g. "Paris".
    city: String,
    /// Days ahead; today when left out.
    days: Option<u8>,
) -> Result<String, String> {
    match days {
        Some(days) => Ok(format!("18 °C in {city} in {days} days")),
        None => Ok(format!("18 °C in {city}")),
    }
}

fn definition(tool: &Tool) -> (&str, &str, &Value) {
    let definition = tool.definition();
    (
        &definition.name,
        &definition.description,
        &definition.input_schema,
    )
}

#[test]
fn the_doc_comments_are_the_description_and_the_properties_descriptions() {
    let tool = get_weather_tool();
    let (name, description, schema) = definition(&tool);
    assert_eq!(name, "get_weather");
    assert_eq!(
        description,
        "Current weather for a city.\n\nCall it before answering anything about the weather."
    );
    // An `Option` parameter is not required, and may be null.
    assert_eq!(
        schema,
        &json!({
            "type": "object",
            "properties": {
                "city": {"description": "City name, e.g. \"Paris\".", "type": "string"},
                "days": {
                    "description": "Days ahead; today when left out.",
                    "type": ["integer", "null"],
                    "format": "uint8",
                    "minimum": 0,
                    "maximum": 255
                }
            },
            "required": ["city"]
        })
    );
}

/// A place on Earth.
#[derive(Deserialize, JsonSchema)]
struct Place {
    /// City name.
    city: String,
    /// ISO 3166 country code, when the city name is ambiguous.
    country: Option<String>,
}

/// Temperature units.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Units {
    Celsius,
    Fahrenheit,
}

#[derive(Serialize)]
struct Forecast {
    places: Vec<String>,
    units: &'static str,
}

/// Forecast for several places.
#[tool]
async fn forecast(
    /// Where to forecast.
    places: Vec<Place>,
    units: Units,
) -> Result<Forecast, std::io::Error> {
    let units = match units {
        Units::Celsius => "celsius",
        Units::Fahrenheit => "fahrenheit",
    };
    let places = places
        .into_iter()
        .map(|place| match place.country {
            Some(country) => format!("{}, {country}", place.city),
            None => place.city,
        })
        .collect();
    Ok(Forecast { places, units })
}

#[test]
fn nested_types_are_inlined_with_their_doc_comments() {
    let tool = forecast_tool();
    let (name, description, schema) = definition(&tool);
    assert_eq!(name, "forecast");
    assert_eq!(description, "Forecast for several places.");
    assert_eq!(
        schema,
        &json!({
            "type": "object",
            "properties": {
                "places": {
                    "description": "Where to forecast.",
                    "type": "array",
                    "items": {
                        "description": "A place on Earth.",
                        "type": "object",
                        "properties": {
                            "city": {"description": "City name.", "type": "string"},
                            "country": {
                                "description": "ISO 3166 country code, when the city name is ambiguous.",
                                "type": ["string", "null"]
                            }
                        },
                        "required": ["city"]
                    }
                },
                "units": {
                    "description": "Temperature units.",
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"]
                }
            },
            "required": ["places", "units"]
        })
    );
}

#[tokio::test]
async fn nested_arguments_reach_the_function_and_its_value_is_json_text() {
    let output = forecast_tool()
        .execute(json!({"places": [{"city": "Paris"}, {"city": "Rome", "country": "IT"}], "units": "fahrenheit"}))
        .await
        .unwrap();
    assert_eq!(
        output.0.to_text(),
        r#"{"places":["Paris","Rome, IT"],"units":"fahrenheit"}"#
    );
}

#[tokio::test]
async fn ok_is_the_result_and_err_a_failure() {
    /// Divide two numbers.
    #[tool]
    async fn divide(a: f64, b: f64) -> Result<f64, String> {
        if b == 0.0 {
            return Err("cannot divide by zero".to_owned());
        }
        Ok(a / b)
    }

    let tool = divide_tool();
    let output = tool.execute(json!({"a": 1.0, "b": 4.0})).await.unwrap();
    assert_eq!(output.0.to_text(), "0.25");
    let error = tool.execute(json!({"a": 1.0, "b": 0.0})).await.unwrap_err();
    assert!(
        matches!(&error, Error::ToolExecution { tool, message } if tool == "divide" && message == "cannot divide by zero"),
        "{error:?}"
    );
    // Still an ordinary function.
    assert_eq!(divide(9.0, 3.0).await, Ok(3.0));
}

/// Who is calling.
#[tool]
async fn whoami(ctx: ToolContext, #[serde(rename = "greeting")] hello: Option<String>) -> String {
    format!("{} {}", hello.unwrap_or_default(), ctx.call_id)
}

#[tokio::test]
async fn a_first_tool_context_parameter_is_not_in_the_schema_and_plain_values_are_results() {
    let tool = whoami_tool();
    assert_eq!(
        definition(&tool).2,
        &json!({
            "type": "object",
            "properties": {"greeting": {"type": ["string", "null"]}}
        })
    );
    let output = tool.execute(json!({"greeting": "hi"})).await.unwrap();
    assert_eq!(output.0.to_text(), "hi direct_whoami");
}

/// Search the catalogue.
#[tool(name = "search")]
pub(crate) async fn search_catalogue(
    /// What to look for.
    r#type: String,
    /// How many results.
    #[schemars(range(min = 1, max = 10))]
    limit: u32,
) -> anyhow::Result<Vec<String>> {
    Ok(vec![r#type; limit as usize])
}

#[tokio::test]
async fn name_option_raw_identifiers_and_schemars_attributes() {
    let tool = search_catalogue_tool();
    let (name, _, schema) = definition(&tool);
    assert_eq!(name, "search");
    assert_eq!(
        schema,
        &json!({
            "type": "object",
            "properties": {
                "type": {"description": "What to look for.", "type": "string"},
                "limit": {
                    "description": "How many results.",
                    "type": "integer",
                    "format": "uint32",
                    "minimum": 1,
                    "maximum": 10
                }
            },
            "required": ["type", "limit"]
        })
    );
    let output = tool
        .execute(json!({"type": "book", "limit": 2}))
        .await
        .unwrap();
    assert_eq!(output.0.to_text(), r#"["book","book"]"#);
    let error = tool
        .execute(json!({"type": "book", "limit": 11}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::ToolArgumentParse { tool, .. } if tool == "search"),
        "{error:?}"
    );
}

/// Takes nothing.
#[tool]
async fn ping() -> &'static str {
    "pong"
}

#[tokio::test]
async fn no_parameters_is_an_empty_object() {
    let tool = ping_tool();
    assert_eq!(
        definition(&tool).2,
        &json!({"type": "object", "properties": {}})
    );
    assert_eq!(tool.execute(json!({})).await.unwrap().0.to_text(), "pong");
}
