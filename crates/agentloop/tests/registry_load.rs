//! Loading tool descriptors from files and directories, and the errors bad files give.

#![cfg(feature = "registry")]

use agentloop::registry::{
    HttpSpec, MockSpec, OnExhausted, Registry, ToolDescriptor, ToolMode, ToolSource,
};
use serde_json::json;

fn fixtures() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tools").to_owned()
}

fn load_error(file: &str) -> String {
    Registry::from_file(format!("{}/bad/{file}", fixtures()))
        .unwrap_err()
        .to_string()
}

#[test]
fn a_directory_of_json_yaml_and_manifests_gives_exactly_its_descriptors() {
    let dir = fixtures();
    let registry = Registry::load_dir(format!("{dir}/good")).unwrap();

    let mut greet = ToolDescriptor::new("greet", "Greet someone by name");
    greet.input_schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "excited": {"type": "boolean"}},
        "required": ["name"]
    });
    greet.mode = ToolMode::Mock;
    greet.mock = Some(MockSpec::Template(
        r#"{"greeting": "Hello, {{ name }}{% if excited %}!{% else %}.{% endif %}", "args": {{ args | tojson }}}"#
            .to_owned(),
    ));

    let mut deploy = ToolDescriptor::new("deploy_status", "Status of the latest deployment");
    deploy.mode = ToolMode::Mock;
    deploy.mock = Some(MockSpec::Sequence {
        responses: vec![json!({"status": "pending"}), json!({"status": "done"})],
        on_exhausted: OnExhausted::Error,
    });

    let mut lookup = ToolDescriptor::new("lookup_order", "Look up an order in the shop backend");
    lookup.input_schema = json!({
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"]
    });
    lookup.mode = ToolMode::Http;
    lookup.mock = Some(MockSpec::Response(json!({"id": 1, "state": "shipped"})));
    let mut http = HttpSpec::post("http://127.0.0.1:9/orders");
    http.method = "post".to_owned();
    http.allowed_hosts = vec!["127.0.0.1".to_owned()];
    lookup.http = Some(http);
    lookup.timeout_ms = Some(5000);

    let local = ToolDescriptor::new("local_calc", "Implemented in code and bound by name");

    let mut weather = ToolDescriptor::new("get_weather", "Current weather for a city");
    weather.input_schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"]
    });
    weather.output_schema = Some(json!({
        "type": "object",
        "properties": {"temp_c": {"type": "number"}},
        "required": ["temp_c"]
    }));
    weather.mode = ToolMode::Mock;
    weather.mock = Some(MockSpec::Response(json!({"temp_c": 18, "sky": "clear"})));
    weather.timeout_ms = Some(2000);

    // Path order: greet.json, nested/deploy.yaml, nested/more.yml (two documents), weather.yaml.
    // `.hidden.yaml` and `README.md` are not read.
    let expected = [&greet, &deploy, &lookup, &local, &weather];
    assert_eq!(registry.descriptors(), expected);
    assert_eq!(
        registry.source("lookup_order"),
        Some(&ToolSource::File(
            format!("{dir}/good/nested/more.yml").into()
        ))
    );

    // The tools the run loop gets carry the same definitions and timeouts.
    let tools = registry.tools();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "greet",
            "deploy_status",
            "lookup_order",
            "local_calc",
            "get_weather"
        ]
    );
    let weather_tool = registry.get("get_weather").unwrap();
    assert_eq!(weather_tool.definition().input_schema, weather.input_schema);
    assert_eq!(
        weather_tool.timeout(),
        Some(std::time::Duration::from_millis(2000))
    );
    assert!(weather_tool.handler().is_some());
    // A function descriptor from a file is definition-only until a handler is bound.
    assert!(registry.get("local_calc").unwrap().handler().is_none());
}

#[test]
fn a_single_file_loads_with_from_file() {
    let registry = Registry::from_file(format!("{}/good/nested/more.yml", fixtures())).unwrap();
    assert_eq!(registry.names(), ["lookup_order", "local_calc"]);
}

#[test]
fn descriptors_round_trip_through_json() {
    let registry = Registry::load_dir(format!("{}/good", fixtures())).unwrap();
    for descriptor in registry.descriptors() {
        let text = serde_json::to_string(descriptor).unwrap();
        let back: ToolDescriptor = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, descriptor);
    }
}

#[test]
fn syntax_errors_give_file_line_and_column() {
    let dir = fixtures();
    assert_eq!(
        load_error("syntax.json"),
        format!("{dir}/bad/syntax.json:4:3: expected `,` or `}}`")
    );
    assert_eq!(
        load_error("syntax.yaml"),
        format!(
            "{dir}/bad/syntax.yaml:4:2: did not find expected key, while parsing a block mapping"
        )
    );
}

#[test]
fn type_errors_and_unknown_fields_name_the_tool_and_position() {
    let dir = fixtures();
    assert_eq!(
        load_error("wrong_type.yaml"),
        format!(
            "{dir}/bad/wrong_type.yaml:4:13: tool `slow_tool`: timeout_ms: invalid type: string \"soon\", expected u64"
        )
    );
    assert_eq!(
        load_error("unknown_field.json"),
        format!(
            "{dir}/bad/unknown_field.json:3:15: tool `typo`: unknown field `input_shema`, expected one of `name`, `description`, `inputSchema`, `input_schema`, `outputSchema`, `output_schema`, `mode`, `mock`, `mockResponse`, `mockTemplate`, `http`, `endpoint`, `mcp`, `timeoutMs`, `timeout_ms`, `needsApproval`, `needs_approval`"
        )
    );
}

#[test]
fn structural_errors_name_file_tool_and_problem() {
    let dir = fixtures();
    let cases = [
        ("no_name.yaml", "missing field `name`".to_owned()),
        (
            "list.json",
            "expected a tool (an object), got a list; put several tools in one YAML file as documents separated by `---`".to_owned(),
        ),
        (
            "wrong_kind.yaml",
            "tool `not_a_tool`: `kind: Prompt` is not a tool manifest: expected `kind: Tool`"
                .to_owned(),
        ),
        (
            "http_without_section.yaml",
            "tool `fetch`: `mode: http` needs an `http` section describing the endpoint (`url`)"
                .to_owned(),
        ),
        (
            "two_mocks.yaml",
            "tool `undecided`: `mock` needs exactly one of `response`, `template` or `sequence`, found `response` and `template`".to_owned(),
        ),
    ];
    for (file, message) in cases {
        assert_eq!(
            load_error(file),
            format!("{dir}/bad/{file}: {message}"),
            "{file}"
        );
    }
}

#[test]
fn executor_errors_surface_at_load() {
    let dir = fixtures();
    let cases = [
        (
            "bad_schema.json",
            "tool `list_things`: invalid input schema: tool arguments must be an object: expected `\"type\": \"object\"`, got `\"array\"`",
        ),
        (
            "bad_template.yaml",
            "tool `templated`: the mock template does not compile: syntax error: unexpected end of input, expected end of variable block (template line 1)",
        ),
        (
            "missing_env.yaml",
            "tool `secret_api`: header `Authorization`: the environment variable `AGENTLOOP_TEST_SURELY_UNSET` is not set",
        ),
        (
            "host_not_allowed.yaml",
            "tool `exfiltrate`: the endpoint host `evil.example.net` is not in `http.allowed_hosts` (api.example.com)",
        ),
    ];
    for (file, message) in cases {
        assert_eq!(
            load_error(file),
            format!("{dir}/bad/{file}: {message}"),
            "{file}"
        );
    }
}

#[test]
fn load_errors_are_typed() {
    let err = Registry::from_file(format!("{}/bad/wrong_type.yaml", fixtures())).unwrap_err();
    let agentloop::Error::ToolLoad {
        tool, line, column, ..
    } = &err
    else {
        panic!("expected a ToolLoad error, got {err:?}");
    };
    assert_eq!(
        (tool.as_deref(), *line, *column),
        (Some("slow_tool"), Some(4), Some(13))
    );
    assert_eq!(err.kind(), "tool_load");
}

#[test]
fn duplicate_names_across_files_name_both_files() {
    let dir = fixtures();
    let err = Registry::load_dir(format!("{dir}/dup")).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{dir}/dup/sub/b.json: tool `search`: duplicate tool name: it is already defined in {dir}/dup/a.yaml"
        )
    );
}

#[test]
fn duplicate_names_within_a_file_and_against_code_are_refused() {
    let dir = std::env::temp_dir().join(format!("agentloop-dup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("twice.yaml");
    std::fs::write(&file, "name: x\n---\nname: x\n").unwrap();
    let err = Registry::from_file(&file).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        err,
        format!(
            "{}: tool `x`: duplicate tool name: it is defined twice in this file",
            file.display()
        )
    );

    let mut registry = Registry::new();
    registry
        .add_descriptor(ToolDescriptor::new("search", "from code"))
        .unwrap();
    let err = registry
        .add_dir(format!("{}/dup", fixtures()))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "{}/dup/a.yaml: tool `search`: duplicate tool name: it is already defined in code",
            fixtures()
        )
    );
    // Nothing of the failed file was added.
    assert_eq!(registry.names(), ["search"]);
}

#[test]
fn unreadable_paths_and_wrong_extensions_are_named() {
    let dir = fixtures();
    assert_eq!(
        Registry::from_file(format!("{dir}/good/README.md"))
            .unwrap_err()
            .to_string(),
        format!("{dir}/good/README.md: not a tool file: tool files end in .json, .yaml or .yml")
    );
    let missing = Registry::load_dir(format!("{dir}/nowhere"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        missing,
        format!(
            "{dir}/nowhere: could not read the directory: No such file or directory (os error 2)"
        )
    );
}
