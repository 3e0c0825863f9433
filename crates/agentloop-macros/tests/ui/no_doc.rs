use agentloop::tool;

#[tool]
async fn get_weather(city: String) -> String {
    city
}

fn main() {}
