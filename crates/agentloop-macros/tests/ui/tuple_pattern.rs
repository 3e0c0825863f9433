use agentloop::tool;

/// Add two numbers.
#[tool]
async fn add((a, b): (i32, i32)) -> i32 {
    a + b
}

fn main() {}
