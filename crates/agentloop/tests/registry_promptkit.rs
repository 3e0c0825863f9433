//! Descriptors written the way PromptKit writes them (seed 004: `inputSchema`, `mockResponse`,
//! `mockTemplate`, `endpoint`, `mode: live`, `timeoutMs`), and packs: several tools with
//! shared defaults, in one file or a directory.

#![cfg(feature = "registry")]

use std::collections::BTreeMap;
use std::time::Duration;

use agentloop::ToolResultContent;
use agentloop::registry::{
    HttpSpec, MockSpec, Registry, Syntax, ToolDescriptor, ToolMode, ToolSource, parse_descriptors,
};
use agentloop::tool::ToolOutput;
use axum::Json;
use axum::http::{HeaderMap, Uri};
use serde_json::{Value, json};

fn fixtures() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/tools/promptkit"
    )
    .to_owned()
}

fn json_of(output: &ToolOutput) -> Value {
    match &output.0 {
        ToolResultContent::Text(text) => serde_json::from_str(text).expect("the output is JSON"),
        other => panic!("expected text output, got {other:?}"),
    }
}

fn schema_with(property: &str, kind: &str, required: bool) -> Value {
    let mut schema = json!({"type": "object", "properties": {property: {"type": kind}}});
    if required {
        schema["required"] = json!([property]);
    }
    schema
}

fn mock(name: &str, description: &str, spec: MockSpec) -> ToolDescriptor {
    let mut descriptor = ToolDescriptor::new(name, description);
    descriptor.mode = ToolMode::Mock;
    descriptor.mock = Some(spec);
    descriptor
}

fn load_error(file: &str) -> String {
    Registry::from_file(format!("{}/bad/{file}", fixtures()))
        .unwrap_err()
        .to_string()
}

#[test]
fn seed_shaped_descriptors_load_to_exactly_our_descriptors() {
    let registry = Registry::load_dir(format!("{}/descriptors", fixtures())).unwrap();

    let deploy = mock(
        "deploy_status",
        "Status of the latest deployment",
        MockSpec::Response(json!({"status": "done"})),
    );

    let mut weather = mock(
        "get_weather",
        "Current weather for a city",
        MockSpec::Response(json!({"temp_c": 18, "sky": "clear"})),
    );
    weather.input_schema = schema_with("city", "string", true);
    weather.output_schema = Some(schema_with("temp_c", "number", true));
    weather.timeout_ms = Some(3000);

    let mut greet = mock(
        "greet",
        "Greet someone by name",
        MockSpec::Template(r#"{"greeting": "Hello, {{ name }}!"}"#.to_owned()),
    );
    greet.input_schema = schema_with("name", "string", true);
    greet.output_schema = Some(json!({"type": "object"}));
    greet.timeout_ms = Some(1000);

    // `mode: live` is our `http`; `endpoint` is a POST to that URL.
    let mut lookup = ToolDescriptor::new("lookup_order", "Look up an order in the shop backend");
    lookup.input_schema = schema_with("id", "integer", true);
    lookup.output_schema = Some(json!({"type": "object"}));
    lookup.mode = ToolMode::Http;
    lookup.http = Some(HttpSpec::post("http://127.0.0.1:9/orders"));
    lookup.mock = Some(MockSpec::Response(json!({"id": 1, "state": "shipped"})));
    lookup.timeout_ms = Some(5000);

    assert_eq!(registry.descriptors(), [&deploy, &weather, &greet, &lookup]);
}

#[tokio::test]
async fn seed_shaped_mocks_answer_with_their_response_and_template() {
    let registry = Registry::load_dir(format!("{}/descriptors", fixtures())).unwrap();
    let output = registry
        .call("get_weather", json!({"city": "Paris"}))
        .await
        .unwrap();
    assert_eq!(json_of(&output), json!({"temp_c": 18, "sky": "clear"}));
    let output = registry
        .call("greet", json!({"name": "Ada"}))
        .await
        .unwrap();
    assert_eq!(json_of(&output), json!({"greeting": "Hello, Ada!"}));
    let output = registry.call("deploy_status", json!({})).await.unwrap();
    assert_eq!(json_of(&output), json!({"status": "done"}));
}

/// What the loopback endpoint saw: path, `x-tenant` header and body.
async fn echo(uri: Uri, headers: HeaderMap, Json(body): Json<Value>) -> Json<Value> {
    let tenant = headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Json(json!({"path": uri.path(), "tenant": tenant, "received": body}))
}

/// A loopback server answering every POST with what it received; returns `host:port`.
async fn start_echo() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let app = axum::Router::new().fallback(axum::routing::post(echo));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

/// The fixtures point at the discard port 9; the tests point them at their own server.
fn fixture_text(relative: &str, addr: &str) -> String {
    std::fs::read_to_string(format!("{}/{relative}", fixtures()))
        .unwrap()
        .replace("127.0.0.1:9", addr)
}

#[tokio::test]
async fn a_live_endpoint_tool_posts_its_arguments_to_the_endpoint() {
    let addr = start_echo().await;
    let text = fixture_text("descriptors/lookup_order.json", &addr);
    let mut registry = Registry::new();
    for descriptor in parse_descriptors(&text, Syntax::Json, "lookup_order.json").unwrap() {
        registry.add_descriptor(descriptor).unwrap();
    }
    let output = registry
        .call("lookup_order", json!({"id": 7}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&output),
        json!({"path": "/orders", "tenant": null, "received": {"id": 7}})
    );
}

#[test]
fn a_pack_file_applies_its_defaults_and_each_tool_overrides_them() {
    let path = format!("{}/pack.yaml", fixtures());
    let registry = Registry::from_pack(&path).unwrap();

    let headers = BTreeMap::from([("X-Tenant".to_owned(), "acme".to_owned())]);
    let mut lookup = ToolDescriptor::new("lookup_order", "Look up an order");
    lookup.input_schema = schema_with("id", "integer", true);
    lookup.mode = ToolMode::Http;
    let mut http = HttpSpec::post("http://127.0.0.1:9/api/orders/lookup");
    http.headers = headers.clone();
    lookup.http = Some(http);
    lookup.mock = Some(MockSpec::Response(json!({"id": 1, "state": "shipped"})));
    lookup.timeout_ms = Some(4000);

    let mut cancel = ToolDescriptor::new("cancel_order", "Cancel an order");
    cancel.input_schema = schema_with("id", "integer", true);
    cancel.mode = ToolMode::Http;
    let mut http = HttpSpec::post("http://127.0.0.1:9/admin/cancel");
    http.headers = headers;
    cancel.http = Some(http);
    cancel.timeout_ms = Some(9000);

    let mut hours = mock(
        "store_hours",
        "Opening hours of the store",
        MockSpec::Response(json!("Open 9 to 5")),
    );
    hours.timeout_ms = Some(4000);

    assert_eq!(registry.descriptors(), [&lookup, &cancel, &hours]);
    assert_eq!(
        registry.source("cancel_order"),
        Some(&ToolSource::File(path.clone().into()))
    );
    // A pack file is also a tool file: the plain loaders read it the same way.
    let same = Registry::from_file(&path).unwrap();
    assert_eq!(same.descriptors(), registry.descriptors());
    assert_eq!(
        registry.get("cancel_order").unwrap().timeout(),
        Some(Duration::from_millis(9000))
    );
}

#[tokio::test]
async fn a_pack_tool_calls_its_endpoint_under_the_pack_base_url_with_its_headers() {
    let addr = start_echo().await;
    let text = fixture_text("pack.yaml", &addr);
    let mut registry = Registry::new();
    for descriptor in parse_descriptors(&text, Syntax::Yaml, "pack.yaml").unwrap() {
        registry.add_descriptor(descriptor).unwrap();
    }
    let output = registry
        .call("lookup_order", json!({"id": 3}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&output),
        json!({"path": "/api/orders/lookup", "tenant": "acme", "received": {"id": 3}})
    );
    let output = registry
        .call("cancel_order", json!({"id": 4}))
        .await
        .unwrap();
    assert_eq!(
        json_of(&output),
        json!({"path": "/admin/cancel", "tenant": "acme", "received": {"id": 4}})
    );
}

#[tokio::test]
async fn a_pack_directory_applies_its_pack_file_to_every_tool_file_under_it() {
    let dir = format!("{}/pack_dir", fixtures());
    let registry = Registry::from_pack(&dir).unwrap();

    let mut forecast = mock(
        "forecast",
        "Tomorrow's forecast for a city",
        MockSpec::Template(r#"{"city": {{ city | tojson }}, "sky": "rain"}"#.to_owned()),
    );
    forecast.input_schema = schema_with("city", "string", false);
    forecast.timeout_ms = Some(2500);

    // No `mode` of its own: the pack's `mock` runs it although it also has an endpoint.
    let mut current = mock(
        "current_weather",
        "Current weather for a city",
        MockSpec::Response(json!({"temp_c": 18})),
    );
    current.input_schema = schema_with("city", "string", false);
    current.http = Some(HttpSpec::post("http://127.0.0.1:9/weather"));
    current.timeout_ms = Some(1000);

    // Its own `mode: live` wins over the pack's.
    let mut alerts = ToolDescriptor::new("weather_alerts", "Active weather alerts");
    alerts.mode = ToolMode::Http;
    alerts.http = Some(HttpSpec::post("http://127.0.0.1:9/alerts"));
    alerts.mock = Some(MockSpec::Response(json!([])));
    alerts.timeout_ms = Some(2500);

    // The pack file's own tools first, then the tool files in path order.
    assert_eq!(registry.descriptors(), [&forecast, &alerts, &current]);
    assert_eq!(
        registry.source("current_weather"),
        Some(&ToolSource::File(
            format!("{dir}/tools/current.json").into()
        ))
    );
    assert_eq!(
        registry.source("forecast"),
        Some(&ToolSource::File(format!("{dir}/pack.yaml").into()))
    );
    // `load_dir` on a pack directory is the same load.
    let same = Registry::load_dir(&dir).unwrap();
    assert_eq!(same.descriptors(), registry.descriptors());

    let output = registry
        .call("forecast", json!({"city": "Oslo"}))
        .await
        .unwrap();
    assert_eq!(json_of(&output), json!({"city": "Oslo", "sky": "rain"}));
    let output = registry.call("current_weather", json!({})).await.unwrap();
    assert_eq!(json_of(&output), json!({"temp_c": 18}));
}

#[test]
fn pack_and_alias_errors_name_the_file_the_tool_and_the_field() {
    // Inside a pack's `tools`, a tool's problems have no line (they are read from the parsed
    // value) but name the tool; the pack's own keys keep their position.
    let dir = fixtures();
    let cases = [
        (
            "pack_tool_typo.yaml",
            ": tool `typo`: unknown field `mockRespons`, expected one of `name`, `description`, `inputSchema`, `input_schema`, `outputSchema`, `output_schema`, `mode`, `mock`, `mockResponse`, `mockTemplate`, `http`, `endpoint`, `mcp`, `timeoutMs`, `timeout_ms`, `needsApproval`, `needs_approval`",
        ),
        (
            "pack_default_typo.yaml",
            ":2:3: defaults: unknown field `timeout`, expected one of `mode`, `timeoutMs`, `timeout_ms`, `baseUrl`, `base_url`, `headers`, `allowedHosts`, `allowed_hosts`",
        ),
        (
            "mock_twice.yaml",
            ": tool `twice`: `mockResponse` and a `mock` section are both given: keep one",
        ),
        (
            "endpoint_twice.yaml",
            ": tool `twice`: `endpoint` and an `http` section are both given: put the URL in `http.url`",
        ),
        (
            "pack_name_mismatch.yaml",
            ": tool `forecast`: `name` (`weather`) differs from its key in `tools`",
        ),
    ];
    for (file, message) in cases {
        assert_eq!(
            load_error(file),
            format!("{dir}/bad/{file}{message}"),
            "{file}"
        );
    }
}

/// A scratch directory for pack layouts the fixtures do not have; removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str, files: &[(&str, &str)]) -> Self {
        let dir = std::env::temp_dir().join(format!("agentloop-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        Self(dir)
    }

    fn path(&self, relative: &str) -> String {
        self.0.join(relative).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn pack_directory_errors_name_the_file_and_the_tool_and_add_nothing() {
    // A tool file that needs the pack's base URL, with a typo in another tool file.
    let bad = Scratch::new(
        "pack-bad",
        &[
            (
                "pack.yaml",
                "defaults: {baseUrl: 'http://127.0.0.1:9/', mode: live}\n",
            ),
            ("a.yaml", "name: fine\nendpoint: ok\n"),
            ("b/c.json", r#"{"name": "broken", "timeoutMs": "soon"}"#),
        ],
    );
    let mut registry = Registry::new();
    let err = registry.add_pack(bad.path("")).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}:1:38: tool `broken`: invalid type: string \"soon\", expected u64",
            bad.path("b/c.json")
        )
    );
    assert!(registry.is_empty(), "a pack with a bad tool adds nothing");

    let twice = Scratch::new(
        "pack-dup",
        &[
            ("pack.json", r#"{"tools": {"search": {"mockResponse": 1}}}"#),
            ("x/search.yaml", "name: search\nmockResponse: 2\n"),
        ],
    );
    assert_eq!(
        Registry::from_pack(twice.path("")).unwrap_err().to_string(),
        format!(
            "{}: tool `search`: duplicate tool name: it is already defined in {}",
            twice.path("x/search.yaml"),
            twice.path("pack.json")
        )
    );

    let plain = Scratch::new("pack-none", &[("a.yaml", "name: a\n")]);
    assert_eq!(
        Registry::from_pack(plain.path("")).unwrap_err().to_string(),
        format!(
            "{}: not a pack directory: it has no `pack.yaml`, `pack.yml` or `pack.json` at its root",
            plain.path("")
        )
    );
}
