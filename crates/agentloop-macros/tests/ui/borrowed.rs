use agentloop::tool;

/// Current weather for a city.
#[tool]
async fn get_weather(city: &str) -> String {
    city.to_owned()
}

fn main() {}
