use agentloop::tool;

/// Current weather for a city.
#[tool]
fn get_weather(city: String) -> String {
    city
}

fn main() {}
