use agentloop::tool;

/// Echo a value.
#[tool]
async fn echo<T: serde::Serialize>(value: T) -> T {
    value
}

fn main() {}
