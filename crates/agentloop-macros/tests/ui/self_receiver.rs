use agentloop::tool;

struct Station;

impl Station {
    /// Current weather for a city.
    #[tool]
    async fn get_weather(&self, city: String) -> String {
        city
    }
}

fn main() {}
