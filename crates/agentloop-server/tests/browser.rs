//! The web page in a real headless Chromium, driven through chromedriver's WebDriver HTTP API.
//! Skips (with a notice) when chromium or chromedriver is not installed
//! (`apt-get install -y chromium chromium-driver`). Screenshots go to
//! `<target>/tmp/agentloop-server/`.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentloop::{Agent, Tool};
use agentloop_server::ServerConfig;
use agentloop_testkit::{ScriptedModel, Turn};
use base64::Engine;
use common::TestServer;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process with one browser session.
struct Browser {
    http: reqwest::Client,
    session: String,
    driver_addr: String,
    session_id: String,
    _driver: tokio::process::Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    async fn start() -> Self {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let driver = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        wait_for("chromedriver to be ready", || async {
            let ready = http.get(format!("{base}/status")).send().await.ok()?;
            let status: Value = ready.json().await.ok()?;
            status["value"]["ready"].as_bool().filter(|r| *r)
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,860",
        ]
        .iter()
        .map(|a| a.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": CHROMIUM, "args": args}
            }}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = created["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("a session was created: {created}"));
        Self {
            session: format!("{base}/session/{session}"),
            driver_addr: format!("127.0.0.1:{port}"),
            session_id: session.to_owned(),
            http,
            _driver: driver,
            _profile: profile,
        }
    }
}

/// Ends the WebDriver session, which closes Chromium: killing chromedriver alone would leave the
/// browser running. Plain blocking HTTP, so it also runs when a test panics.
impl Drop for Browser {
    fn drop(&mut self) {
        use std::io::{Read, Write};
        let Ok(mut stream) = std::net::TcpStream::connect(&self.driver_addr) else {
            return;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let request = format!(
            "DELETE /session/{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            self.session_id, self.driver_addr
        );
        if stream.write_all(request.as_bytes()).is_ok() {
            let _ = stream.read_to_end(&mut Vec::new());
        }
    }
}

impl Browser {
    async fn command(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.try_command(method, path, body)
            .await
            .unwrap_or_else(|answer| panic!("WebDriver {path} failed: {answer}"))
    }

    /// A command's value, or WebDriver's whole answer when it reports an error.
    async fn try_command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, Value> {
        let mut request = self.http.request(method, format!("{}{path}", self.session));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request.send().await.unwrap().json().await.unwrap();
        if answer["value"]["error"].is_string() {
            return Err(answer);
        }
        Ok(answer["value"].clone())
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.command(reqwest::Method::POST, path, Some(body)).await
    }

    async fn open(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    async fn element(&self, css: &str) -> String {
        let found = self
            .post("/element", json!({"using": "css selector", "value": css}))
            .await;
        found[ELEMENT_KEY].as_str().unwrap().to_owned()
    }

    async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.post(&format!("/element/{id}/value"), json!({ "text": text }))
            .await;
    }

    /// Clicks the element `css` selects. The page re-renders lists while it refreshes them, so
    /// an element found just before that is gone by the click: it is then found again.
    async fn click(&self, css: &str) {
        wait_for(&format!("a click on {css}"), || async {
            let id = self.element(css).await;
            let path = format!("/element/{id}/click");
            match self
                .try_command(reqwest::Method::POST, &path, Some(json!({})))
                .await
            {
                Ok(_) => Some(()),
                Err(answer) if answer["value"]["error"] == "stale element reference" => None,
                Err(answer) => panic!("WebDriver {path} failed: {answer}"),
            }
        })
        .await;
    }

    async fn script(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    async fn resize(&self, width: u32, height: u32) {
        self.post("/window/rect", json!({"width": width, "height": height}))
            .await;
    }

    /// A click at a point of the viewport (what a finger tap on a backdrop does), through the
    /// actions API: an element click would land on whatever element is at its centre.
    async fn click_at(&self, x: i64, y: i64) {
        self.post(
            "/actions",
            json!({"actions": [{"type": "pointer", "id": "finger", "parameters": {"pointerType": "touch"},
                "actions": [
                    {"type": "pointerMove", "duration": 0, "x": x, "y": y, "origin": "viewport"},
                    {"type": "pointerDown", "button": 0},
                    {"type": "pointerUp", "button": 0}
                ]}]}),
        )
        .await;
    }

    /// Press one key (a WebDriver key code such as `\u{E00C}` for Escape) on the focused
    /// element.
    async fn press(&self, key: &str) {
        self.post(
            "/actions",
            json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}
            ]}]}),
        )
        .await;
    }

    /// A Chrome DevTools Protocol command, through chromedriver's `goog/cdp/execute`.
    async fn cdp(&self, cmd: &str, params: Value) -> Value {
        self.post("/goog/cdp/execute", json!({"cmd": cmd, "params": params}))
            .await
    }

    async fn url(&self) -> String {
        let url = self.command(reqwest::Method::GET, "/url", None).await;
        url.as_str().unwrap().to_owned()
    }

    async fn screenshot(&self, path: &Path) {
        let data = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }

    /// What the page shows: the answer text, the tool cards, the conversation list.
    async fn page_state(&self) -> Value {
        self.script(
            "return {
                answer: [...document.querySelectorAll('.bubble.answer')].map(b => b.textContent.trim()),
                users: [...document.querySelectorAll('.message.user .bubble')].map(b => b.textContent),
                cards: [...document.querySelectorAll('.tool-card')].map(c => ({
                    name: c.querySelector('.tool-name').textContent,
                    state: c.querySelector('.tool-state').textContent,
                    classes: c.className,
                    arguments: JSON.parse(c.querySelector('.tool-arguments pre').textContent),
                    result: c.querySelector('.tool-result pre')?.textContent ?? null,
                })),
                conversations: [...document.querySelectorAll('#conversations button.open')].map(b => b.textContent),
                busy: !document.getElementById('stop').hidden,
                overflow: document.documentElement.scrollWidth > document.documentElement.clientWidth,
            };",
        )
        .await
    }
}

/// Poll until `check` gives a value (an external process is getting ready, or the page is
/// rendering); panics after 30 s.
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[derive(Deserialize, JsonSchema)]
struct City {
    city: String,
}

fn weather_tool() -> Tool {
    Tool::function("get_weather", "Current weather", |c: City| async move {
        if c.city == "Atlantis" {
            Err(format!("no weather station in {}", c.city))
        } else {
            Ok(format!("18 °C in {}", c.city))
        }
    })
}

fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("agentloop-server");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_streams_the_answer_and_shows_tool_cards() {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        agentloop_testkit::skip(
            "chromium or chromedriver is missing (apt-get install -y chromium chromium-driver)",
        );
        return;
    }
    let answer = "Paris has 18 °C; Atlantis has no weather station.";
    let model = ScriptedModel::new([
        Turn::text("Let me check both.")
            .then_tool_call("get_weather", json!({"city": "Paris"}))
            .then_tool_call("get_weather", json!({"city": "Atlantis"})),
        Turn::text(answer).with_chunk_delay(Duration::from_millis(30)),
    ]);
    let agent = Agent::builder(model.clone()).tool(weather_tool()).build();
    let server = TestServer::start(ServerConfig::new(agent).in_memory_database()).await;
    let browser = Browser::start().await;

    browser.open(&server.url("/")).await;
    browser
        .type_into("#input", "Weather in Paris and Atlantis?")
        .await;
    browser.click("#send").await;
    let shown = wait_for("the streamed answer", || async {
        let state = browser.page_state().await;
        // The list is refreshed by a request of its own, which may finish after the answer.
        let listed = state["conversations"]
            .as_array()
            .is_some_and(|c| !c.is_empty());
        (state["answer"].as_array().map(Vec::len) == Some(2)
            && state["busy"] == json!(false)
            && listed)
            .then_some(state)
    })
    .await;
    assert_eq!(shown["users"], json!(["Weather in Paris and Atlantis?"]));
    assert_eq!(shown["answer"], json!(["Let me check both.", answer]));
    assert_eq!(
        shown["cards"],
        json!([
            {"name": "get_weather", "state": "done", "classes": "tool-card done",
             "arguments": {"city": "Paris"}, "result": "18 °C in Paris"},
            {"name": "get_weather", "state": "error", "classes": "tool-card error",
             "arguments": {"city": "Atlantis"}, "result": "Error: no weather station in Atlantis"},
        ])
    );
    assert_eq!(
        shown["conversations"],
        json!(["Weather in Paris and Atlantis?"])
    );
    assert_eq!(shown["overflow"], json!(false));
    let dir = artifacts();
    browser.screenshot(&dir.join("page-wide.png")).await;

    // A past conversation loads from the list with its cards.
    browser.click("#new-chat").await;
    wait_for("an empty chat", || async {
        let state = browser.page_state().await;
        (state["cards"] == json!([])).then_some(())
    })
    .await;
    browser.click("#conversations button.open").await;
    let loaded = wait_for("the loaded conversation", || async {
        let state = browser.page_state().await;
        (state["cards"].as_array().map(Vec::len) == Some(2)).then_some(state)
    })
    .await;
    assert_eq!(loaded["cards"], shown["cards"]);
    assert_eq!(loaded["answer"], shown["answer"]);

    // A phone-sized window: no horizontal scrolling, the list folds away.
    browser.resize(390, 844).await;
    let folded = "const r = document.getElementById('sidebar').getBoundingClientRect();
        return r.right <= 0 && getComputedStyle(document.getElementById('toggle-sidebar')).display !== 'none';";
    wait_for("the list to fold away", || async {
        (browser.script(folded).await == json!(true)).then_some(())
    })
    .await;
    let narrow = browser.page_state().await;
    assert_eq!(narrow["overflow"], json!(false));
    browser.screenshot(&dir.join("page-narrow.png")).await;
    browser.click("#toggle-sidebar").await;
    let open = "return document.getElementById('sidebar').getBoundingClientRect().left >= 0;";
    wait_for("the list to slide in", || async {
        (browser.script(open).await == json!(true)).then_some(())
    })
    .await;
    // Let the slide finish before the picture: the transition takes 0.2 s.
    wait_for("the slide to settle", || async {
        let moving = browser
            .script("return document.getElementById('sidebar').getAnimations().length > 0;")
            .await;
        (moving == json!(false)).then_some(())
    })
    .await;
    browser.screenshot(&dir.join("page-narrow-list.png")).await;
    model.assert_complete();
}

/// `true` (after printing a skip notice) when there is no browser to drive.
fn no_browser() -> bool {
    if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
        agentloop_testkit::skip(
            "chromium or chromedriver is missing (apt-get install -y chromium chromium-driver)",
        );
        return true;
    }
    false
}

impl Browser {
    /// Wait until `script` (a function body) returns `true`.
    async fn until(&self, what: &str, script: &str) {
        wait_for(what, || async {
            (self.script(script).await == json!(true)).then_some(())
        })
        .await;
    }

    /// Type `prompt`, send it, and wait until the answer has ended.
    async fn ask(&self, prompt: &str) {
        let before = self
            .script("return document.querySelectorAll('.message.assistant .meta, .message.assistant .alert').length;")
            .await;
        self.type_into("#input", prompt).await;
        self.click("#send").await;
        self.until(
            "the answer to end",
            &format!(
                "return document.querySelectorAll('.message.assistant .meta, .message.assistant .alert').length > {before}
                    && document.getElementById('stop').hidden;"
            ),
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_render_markdown_and_highlighted_code_and_model_html_runs_nothing() {
    if no_browser() {
        return;
    }
    let answer = "# Plan\n\nUse **bold** and `inline code`:\n\n- one\n- two\n\n\
        ```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\n\
        <script>window.__pwned = 'script';</script>\n\
        <img src=\"x\" onerror=\"window.__pwned = 'onerror'\">\n\n\
        [a link](javascript:window.__pwned='link') and [docs](https://example.com/)";
    let model = ScriptedModel::new([Turn::text(answer).with_text_pieces(12)]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).build()).in_memory_database(),
    )
    .await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;
    browser.ask("Show me some Markdown").await;
    let rendered = browser
        .script(
            "const b = document.querySelector('.bubble.answer');
            const code = b.querySelector('.code-block pre code');
            return {
                h1: b.querySelector('h1')?.textContent,
                strong: b.querySelector('strong')?.textContent,
                inline: b.querySelector('p code')?.textContent,
                items: [...b.querySelectorAll('li')].map(li => li.textContent),
                code: code?.textContent,
                highlighted: code.classList.contains('hljs'),
                keywords: [...code.querySelectorAll('.hljs-keyword')].map(k => k.textContent),
                copy: b.querySelector('.code-block button.copy')?.getAttribute('aria-label'),
                scripts: b.querySelectorAll('script').length,
                handlers: b.querySelectorAll('[onerror]').length,
                links: [...b.querySelectorAll('a')].map(a => [a.textContent, a.getAttribute('href'), a.rel]),
                pwned: window.__pwned ?? null,
            };",
        )
        .await;
    assert_eq!(
        rendered,
        json!({
            "h1": "Plan",
            "strong": "bold",
            "inline": "inline code",
            "items": ["one", "two"],
            "code": "fn main() {\n    println!(\"hi\");\n}\n",
            "highlighted": true,
            "keywords": ["fn"],
            "copy": "Copy code",
            "scripts": 0,
            "handlers": 0,
            "links": [["a link", null, ""], ["docs", "https://example.com/", "noopener noreferrer"]],
            "pwned": null,
        })
    );
    // The copy button puts the code, without the button's label, on the clipboard.
    browser
        .cdp(
            "Browser.grantPermissions",
            json!({"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]}),
        )
        .await;
    browser.click(".code-block button.copy").await;
    browser
        .until(
            "the copy to be confirmed",
            "return document.querySelector('.code-block button.copy').textContent === 'Copied';",
        )
        .await;
    let copied = browser
        .post(
            "/execute/async",
            json!({"script": "navigator.clipboard.readText().then(arguments[0], e => arguments[0](String(e)));", "args": []}),
        )
        .await;
    assert_eq!(copied, json!("fn main() {\n    println!(\"hi\");\n}\n"));
    browser
        .screenshot(&artifacts().join("page-markdown.png"))
        .await;
    println!("screenshots in {}", artifacts().display());
    model.assert_complete();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_chat_has_a_url_that_survives_a_reload_and_back_and_forward() {
    if no_browser() {
        return;
    }
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Paris"})).with_usage(11, 2),
        Turn::text("It is **18 °C**.").with_usage(13, 4),
        Turn::text("Hello there.").with_usage(5, 1),
    ]);
    let agent = Agent::builder(model.clone()).tool(weather_tool()).build();
    let server = TestServer::start(ServerConfig::new(agent).in_memory_database()).await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;
    browser.ask("Weather in Paris?").await;
    let first = wait_for("the chat's own URL", || async {
        let url = browser.url().await;
        url.contains("/c/conv_").then_some(url)
    })
    .await;

    // A tool card starts folded; its button unfolds the pretty-printed arguments and result.
    let card = "const head = document.querySelector('.tool-card .tool-head');
        const body = document.getElementById(head.getAttribute('aria-controls'));
        return {expanded: head.getAttribute('aria-expanded'), hidden: body.hidden,
                arguments: body.querySelector('.tool-arguments pre').textContent};";
    assert_eq!(
        browser.script(card).await,
        json!({"expanded": "false", "hidden": true, "arguments": "{\n  \"city\": \"Paris\"\n}"})
    );
    browser.click(".tool-card .tool-head").await;
    assert_eq!(browser.script(card).await["expanded"], json!("true"));
    assert_eq!(browser.script(card).await["hidden"], json!(false));

    // A second chat, from the New chat button.
    browser.click("#new-chat").await;
    browser
        .until("the new chat's URL", "return location.pathname === '/';")
        .await;
    browser.ask("Hello?").await;
    let second = wait_for("the second chat's URL", || async {
        let url = browser.url().await;
        (url.contains("/c/conv_") && url != first).then_some(url)
    })
    .await;

    // Reloading a chat's URL shows that chat, with each answer's usage.
    browser.open(&first).await;
    let shown = "return {
        users: [...document.querySelectorAll('.message.user .bubble')].map(b => b.textContent),
        answer: [...document.querySelectorAll('.bubble.answer')].map(b => b.textContent.trim()),
        meta: [...document.querySelectorAll('.message.assistant .meta')].map(m => m.textContent),
        title: document.getElementById('title').textContent,
        active: document.querySelector('#conversations button.active')?.textContent ?? null,
    };";
    let expected_first = json!({
        "users": ["Weather in Paris?"], "answer": ["It is 18 °C."],
        "meta": ["24 tokens in · 6 out"], "title": "Weather in Paris?", "active": "Weather in Paris?",
    });
    wait_for("the reloaded chat", || async {
        (browser.script(shown).await == expected_first).then_some(())
    })
    .await;

    // Back and Forward move between the chats.
    browser.open(&second).await;
    let expected_second = json!({
        "users": ["Hello?"], "answer": ["Hello there."],
        "meta": ["5 tokens in · 1 out"], "title": "Hello?", "active": "Hello?",
    });
    wait_for("the second chat", || async {
        (browser.script(shown).await == expected_second).then_some(())
    })
    .await;
    browser.post("/back", json!({})).await;
    wait_for("the first chat after Back", || async {
        (browser.script(shown).await == expected_first).then_some(())
    })
    .await;
    assert_eq!(browser.url().await, first);
    browser.post("/forward", json!({})).await;
    wait_for("the second chat after Forward", || async {
        (browser.script(shown).await == expected_second).then_some(())
    })
    .await;
    // Picking a chat in the list pushes its URL, so Back returns to the one shown before.
    browser
        .click("#conversations li:last-child button.open")
        .await;
    wait_for("the first chat from the list", || async {
        (browser.script(shown).await == expected_first).then_some(())
    })
    .await;
    assert_eq!(browser.url().await, first);
    browser.post("/back", json!({})).await;
    wait_for("the second chat after Back", || async {
        (browser.script(shown).await == expected_second).then_some(())
    })
    .await;
    browser
        .screenshot(&artifacts().join("page-chat-url.png"))
        .await;
    // The URL of a chat that is gone (deleted, another database) leads to a new chat.
    browser.open(&server.url("/c/conv_gone")).await;
    browser
        .until(
            "the missing chat to be reported",
            "return location.pathname === '/'
                && document.getElementById('status').textContent === 'no conversation has the id `conv_gone`'
                && document.getElementById('title').textContent === 'New chat';",
        )
        .await;
    model.assert_complete();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mobile_drawer_closes_on_a_backdrop_tap_and_on_escape() {
    if no_browser() {
        return;
    }
    let model = ScriptedModel::new([]);
    let server =
        TestServer::start(ServerConfig::new(Agent::builder(model).build()).in_memory_database())
            .await;
    let browser = Browser::start().await;
    browser.resize(390, 844).await;
    browser.open(&server.url("/")).await;
    let drawer = "const s = document.getElementById('sidebar');
        return {open: s.getBoundingClientRect().left >= 0 && s.getAnimations().length === 0,
                closed: s.getBoundingClientRect().right <= 0 && s.getAnimations().length === 0,
                backdrop: !document.getElementById('backdrop').hidden,
                expanded: document.getElementById('toggle-sidebar').getAttribute('aria-expanded')};";
    let opened = json!({"open": true, "closed": false, "backdrop": true, "expanded": "true"});
    let closed = json!({"open": false, "closed": true, "backdrop": false, "expanded": "false"});
    let settles = |expected: Value, what: &'static str| {
        let browser = &browser;
        async move {
            wait_for(what, || async {
                (browser.script(drawer).await == expected).then_some(())
            })
            .await
        }
    };
    settles(closed.clone(), "the drawer to start closed").await;

    browser.click("#toggle-sidebar").await;
    settles(opened.clone(), "the drawer to open").await;
    // While it is open, the chat behind it takes no focus.
    assert_eq!(
        browser
            .script("return [document.querySelector('.main').inert, document.getElementById('sidebar').contains(document.activeElement)];")
            .await,
        json!([true, true])
    );
    browser
        .screenshot(&artifacts().join("page-drawer-open.png"))
        .await;
    // A tap on the backdrop, right of the drawer (which is at most 300 px wide).
    browser.click_at(360, 400).await;
    settles(closed.clone(), "the drawer to close on a backdrop tap").await;

    browser.click("#toggle-sidebar").await;
    settles(opened, "the drawer to open again").await;
    browser.press("\u{E00C}").await;
    settles(closed, "the drawer to close on Escape").await;
    assert_eq!(
        browser
            .script("return document.querySelector('.main').inert;")
            .await,
        json!(false)
    );
    // Focus goes back to the button that opened it.
    assert_eq!(
        browser.script("return document.activeElement.id;").await,
        json!("toggle-sidebar")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dark_mode_follows_the_system_setting_with_aa_contrast_in_both() {
    if no_browser() {
        return;
    }
    let model = ScriptedModel::new([
        Turn::tool_call("get_weather", json!({"city": "Atlantis"})),
        Turn::text(
            "Some `code` and [a link](https://example.com/):\n\n> quoted\n\n\
             ```js\n// a comment\nfunction f(x) { return \"s\" + 1 + true; }\n```",
        ),
    ]);
    let agent = Agent::builder(model.clone()).tool(weather_tool()).build();
    let server = TestServer::start(ServerConfig::new(agent).in_memory_database()).await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;
    browser.ask("Colours?").await;
    browser.click(".tool-card .tool-head").await;
    // Text against the background it is drawn on, by the WCAG 2 formula: what is below AA's
    // 4.5:1 for normal text.
    let contrast = "const channel = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
        const lum = (rgb) => { const [r, g, b] = rgb.match(/[\\d.]+/g).map(Number);
            return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b); };
        const opaque = (c) => !/^rgba\\(.*,\\s*0\\)$/.test(c);
        const background = (el) => { for (let n = el; n; n = n.parentElement) {
            const c = getComputedStyle(n).backgroundColor; if (opaque(c)) return c; } };
        const checked = ['.brand', '#new-chat', '#conversations button.open', '.settings summary', '#title',
            '.message.user .bubble', '.bubble.answer p', '.bubble.answer a', '.bubble.answer blockquote',
            '.bubble.answer p code', '.copy', '.meta', '.tool-name', '.tool-state', '.tool-label',
            '.tool-section pre', '#input', '#send',
            ...[...document.querySelectorAll('.code-block code span')].map((s) => '.' + s.classList[0])];
        const failing = [];
        for (const sel of new Set(checked)) {
            const el = document.querySelector(sel);
            if (!el) { failing.push([sel, 'missing']); continue; }
            const [a, b] = [lum(getComputedStyle(el).color), lum(background(el))];
            const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
            if (ratio < 4.5) failing.push([sel, Math.round(ratio * 100) / 100]);
        }
        const placeholder = getComputedStyle(document.getElementById('input'), '::placeholder').color;
        const p = [lum(placeholder), lum(background(document.getElementById('input')))];
        const ratio = (Math.max(...p) + 0.05) / (Math.min(...p) + 0.05);
        if (ratio < 4.5) failing.push(['#input::placeholder', Math.round(ratio * 100) / 100]);
        return failing;";
    let colours = "const style = (sel) => getComputedStyle(document.querySelector(sel));
        return {dark: matchMedia('(prefers-color-scheme: dark)').matches,
                page: style('html').backgroundColor, text: style('html').color,
                answer: style('.bubble.answer').backgroundColor,
                code: style('.code-block pre').backgroundColor};";
    // Chromium's emulated media, as DevTools' "Emulate CSS prefers-color-scheme" sets it.
    browser
        .cdp(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": "dark"}]}),
        )
        .await;
    assert_eq!(
        browser.script(colours).await,
        json!({"dark": true, "page": "rgb(15, 17, 21)", "text": "rgb(230, 232, 238)",
               "answer": "rgb(23, 26, 33)", "code": "rgb(13, 17, 23)"})
    );
    assert_eq!(browser.script(contrast).await, json!([]), "dark");
    browser.screenshot(&artifacts().join("page-dark.png")).await;
    browser
        .cdp(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": "light"}]}),
        )
        .await;
    assert_eq!(
        browser.script(colours).await,
        json!({"dark": false, "page": "rgb(246, 247, 249)", "text": "rgb(29, 35, 48)",
               "answer": "rgb(255, 255, 255)", "code": "rgb(246, 248, 250)"})
    );
    assert_eq!(browser.script(contrast).await, json!([]), "light");
    browser
        .screenshot(&artifacts().join("page-light.png"))
        .await;
    model.assert_complete();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_leaves_a_reader_who_scrolled_up_in_place() {
    if no_browser() {
        return;
    }
    let long = (1..=60)
        .map(|i| format!("Line {i} of a long answer."))
        .collect::<Vec<_>>()
        .join("\n\n");
    let model = ScriptedModel::new([
        Turn::text(long.clone()),
        // Slow enough that the reader scrolls up while it streams.
        Turn::text(long)
            .with_text_pieces(40)
            .with_chunk_delay(Duration::from_millis(50)),
    ]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).build()).in_memory_database(),
    )
    .await;
    let browser = Browser::start().await;
    browser.resize(1000, 700).await;
    browser.open(&server.url("/")).await;
    browser.ask("Something long").await;
    // While at the bottom, the log follows the answer.
    let position = "const log = document.getElementById('log');
        return {top: log.scrollTop,
                bottom: log.scrollHeight - log.scrollTop - log.clientHeight < 2,
                jump: !document.getElementById('jump').hidden,
                announced: document.getElementById('announcer').textContent.slice(0, 30)};";
    let followed = browser.script(position).await;
    assert_eq!(followed["bottom"], json!(true), "{followed}");

    browser.type_into("#input", "Again").await;
    browser.click("#send").await;
    browser
        .until(
            "the second answer to start streaming",
            "return document.querySelectorAll('.bubble.answer').length === 2;",
        )
        .await;
    browser
        .script("document.getElementById('log').scrollTop = 100; return null;")
        .await;
    browser
        .until(
            "the answer to end and be announced",
            "return document.getElementById('stop').hidden
                && document.getElementById('announcer').textContent !== '';",
        )
        .await;
    let after = browser.script(position).await;
    assert_eq!(
        after,
        json!({"top": 100, "bottom": false, "jump": true, "announced": "Answer finished: Line 1 of a l"})
    );
    browser
        .screenshot(&artifacts().join("page-scrolled-up.png"))
        .await;
    browser.click("#jump").await;
    let jumped = browser.script(position).await;
    assert_eq!(jumped["bottom"], json!(true), "{jumped}");
    assert_eq!(jumped["jump"], json!(false), "{jumped}");
    model.assert_complete();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escape_stops_an_answer_and_enter_on_an_empty_box_does_nothing() {
    if no_browser() {
        return;
    }
    let model = ScriptedModel::new([Turn::text("word ".repeat(400))
        .with_text_pieces(400)
        .with_chunk_delay(Duration::from_millis(50))]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).build()).in_memory_database(),
    )
    .await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;

    // Enter in an empty box, or one of spaces: nothing is sent, nothing is shown.
    browser.click("#input").await;
    browser.press("\u{E007}").await;
    browser.type_into("#input", "   ").await;
    browser.press("\u{E007}").await;
    let idle = browser
        .script(
            "return {messages: document.querySelectorAll('.message').length,
                     value: document.getElementById('input').value,
                     send: document.getElementById('send').disabled,
                     invalid: document.querySelectorAll(':invalid').length};",
        )
        .await;
    assert_eq!(
        idle,
        json!({"messages": 0, "value": "   ", "send": true, "invalid": 0})
    );
    assert!(model.requests().is_empty());

    browser
        .script("document.getElementById('input').value = ''; return null;")
        .await;
    browser.type_into("#input", "Talk for a long time").await;
    browser.press("\u{E007}").await;
    browser
        .until(
            "the answer to start",
            "return (document.querySelector('.bubble.answer')?.textContent ?? '').includes('word');",
        )
        .await;
    browser.press("\u{E00C}").await;
    browser
        .until(
            "the answer to stop",
            "return document.getElementById('stop').hidden;",
        )
        .await;
    let meta = browser
        .script("return document.querySelector('.message.assistant .meta').textContent;")
        .await;
    assert!(meta.as_str().unwrap().ends_with("interrupted"), "{meta}");
    let shown = browser
        .script("return document.querySelector('.bubble.answer').textContent.length;")
        .await;
    assert!(
        shown.as_u64().unwrap() < 2000,
        "the whole answer came: {shown}"
    );
}

/// The answer's stream drops; the first reconnect finds no server (restarting), the second
/// gets 409 because the restarted server cut the events after its last checkpoint. The page
/// shows the answer again from its first event, once, without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_answer_reconnects_and_a_cut_log_is_shown_again_from_its_start() {
    if no_browser() {
        return;
    }
    let answer = (1..=30)
        .map(|i| format!("w{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let model = ScriptedModel::new([Turn::text(answer.clone())
        .with_text_pieces(30)
        .with_chunk_delay(Duration::from_millis(20))]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).build()).in_memory_database(),
    )
    .await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;
    // The network as the page meets it: `/v1/chat`'s body breaks off after three reads, the
    // first reconnect fails like a refused connection, the second gets the restarted server's
    // 409; after that the real server answers.
    browser
        .script(
            "const real = window.fetch;
             window.chatCalls = [];
             let reconnects = 0;
             window.fetch = async (path, options = {}) => {
               const url = String(path);
               if (!url.startsWith('/v1/chat')) return real(path, options);
               const lastId = (options.headers || {})['Last-Event-ID'] ?? null;
               window.chatCalls.push([url.replace(/[^/]+\\/events$/, 'ID/events'), lastId]);
               if (url.endsWith('/events') && lastId !== null) {
                 reconnects += 1;
                 if (reconnects === 1) throw new TypeError('Failed to fetch');
                 if (reconnects === 2) {
                   return new Response('{\"error\":{\"message\":\"event 4 was cut\"}}',
                     {status: 409, headers: {'Content-Type': 'application/json'}});
                 }
               }
               const response = await real(path, options);
               if (url !== '/v1/chat') return response;
               const reader = response.body.getReader();
               let reads = 0;
               const body = new ReadableStream({
                 async pull(controller) {
                   if (reads === 3) {
                     reader.cancel();
                     controller.error(new TypeError('network error'));
                     return;
                   }
                   reads += 1;
                   const { value, done } = await reader.read();
                   if (done) controller.close(); else controller.enqueue(value);
                 },
               });
               return new Response(body, {status: response.status, headers: response.headers});
             };
             return null;",
        )
        .await;
    browser.ask("Count to thirty").await;
    let shown = browser
        .script(
            "return {answers: [...document.querySelectorAll('.bubble.answer')].map((b) => b.textContent.trim()),
                     alerts: document.querySelectorAll('.alert').length,
                     calls: window.chatCalls.map(([url, id]) => [url, id !== null])};",
        )
        .await;
    assert_eq!(
        shown,
        json!({
            "answers": [answer],
            "alerts": 0,
            "calls": [
                ["/v1/chat", false],
                ["/v1/chat/ID/events", true],
                ["/v1/chat/ID/events", true],
                ["/v1/chat/ID/events", false],
            ],
        })
    );
    model.assert_complete();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_renamed_and_deleted_from_the_list() {
    if no_browser() {
        return;
    }
    let model = ScriptedModel::new([Turn::text("Sure.")]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).build()).in_memory_database(),
    )
    .await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;
    browser
        .ask("Could you please explain how the borrow checker decides when a mutable reference may be taken?")
        .await;
    let listed = "return [...document.querySelectorAll('#conversations button.open')].map(b => b.textContent);";
    wait_for("the title cut at a word boundary", || async {
        (browser.script(listed).await
            == json!(["Could you please explain how the borrow checker decides…"]))
        .then_some(())
    })
    .await;

    browser
        .click("#conversations .item-action[aria-label^='Rename']")
        .await;
    browser
        .script("document.querySelector('#conversations input.rename').value = ''; return null;")
        .await;
    browser
        .type_into("#conversations input.rename", "Borrow checker")
        .await;
    browser.press("\u{E007}").await;
    wait_for("the new title", || async {
        let shown = browser
            .script("return [document.getElementById('title').textContent, document.title];")
            .await;
        (browser.script(listed).await == json!(["Borrow checker"])
            && shown == json!(["Borrow checker", "Borrow checker · agentloop"]))
        .then_some(())
    })
    .await;
    let stored = server.state.conversations().await.unwrap();
    assert_eq!(stored[0].title, "Borrow checker");

    browser
        .click("#conversations .item-action[aria-label^='Delete']")
        .await;
    // The confirmation dialog.
    browser.post("/alert/accept", json!({})).await;
    wait_for("the chat to be gone", || async {
        let state = browser
            .script("return [location.pathname, document.querySelectorAll('.message').length, document.querySelector('#conversations .none')?.textContent];")
            .await;
        (state == json!(["/", 0, "No conversations yet"])).then_some(())
    })
    .await;
    assert!(server.state.conversations().await.unwrap().is_empty());
    model.assert_complete();
}

#[derive(Deserialize, JsonSchema)]
struct Deploy {
    env: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_needing_approval_shows_a_keyboard_usable_card_that_approves_edits_and_denies() {
    if no_browser() {
        return;
    }
    let ran = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let log = ran.clone();
    let deploy = Tool::function("deploy", "Deploy the app", move |d: Deploy| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(d.env.clone());
            Ok::<_, String>(format!("deployed to {}", d.env))
        }
    })
    .with_approval_required(true);
    let model = ScriptedModel::new([
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_1"]),
        Turn::text("Deployed to staging."),
        Turn::tool_call("deploy", json!({"env": "prod"})).with_ids(["call_2"]),
        Turn::text("Not deployed."),
    ]);
    let server = TestServer::start(
        ServerConfig::new(Agent::builder(model.clone()).tool(deploy).build()).in_memory_database(),
    )
    .await;
    let browser = Browser::start().await;
    browser.open(&server.url("/")).await;
    let dir = artifacts();

    browser.type_into("#input", "Deploy it").await;
    browser.click("#send").await;
    browser
        .until(
            "the approval card",
            "return !!document.querySelector('.approval .approve');",
        )
        .await;
    // The card shows the tool, why it asks, and the arguments; the focus is on Approve.
    let card = browser
        .script(
            "const a = document.querySelector('.approval');
             return {
                 label: a.getAttribute('aria-label'),
                 reason: a.querySelector('.approval-reason').textContent,
                 arguments: JSON.parse(a.querySelector('.approval-arguments').textContent),
                 buttons: [...a.querySelectorAll('.approval-actions button')].map(b => b.textContent),
                 focused: document.activeElement.textContent,
                 status: document.getElementById('status').textContent,
             };",
        )
        .await;
    assert_eq!(
        card,
        json!({
            "label": "deploy needs your approval",
            "reason": "tool `deploy` needs approval",
            "arguments": {"env": "prod"},
            "buttons": ["Approve", "Edit", "Deny"],
            "focused": "Approve",
            "status": "Waiting for your approval",
        })
    );
    assert!(ran.lock().unwrap().is_empty());
    browser
        .screenshot(&dir.join("page-approval-card.png"))
        .await;

    // Keyboard only: Tab to Edit, Enter opens the arguments in a text box.
    browser.press("\u{E004}").await;
    browser.press("\u{E007}").await;
    browser
        .until(
            "the arguments editor",
            "const t = document.querySelector('.approval textarea');
             return !!t && !t.hidden && document.activeElement === t;",
        )
        .await;
    // Not JSON: the card says so and nothing is sent.
    browser
        .script("document.querySelector('.approval textarea').value = '{oops'; return null;")
        .await;
    browser.click(".approval .edit").await;
    browser
        .until(
            "the JSON error",
            "return document.querySelector('.approval-error').textContent.includes('not valid JSON');",
        )
        .await;
    // A value the tool's schema refuses: the server's 422 shows in the card, which stays.
    browser
        .script("document.querySelector('.approval textarea').value = '{\"env\": 5}'; return null;")
        .await;
    browser.click(".approval .edit").await;
    browser
        .until(
            "the server's refusal",
            "return document.querySelector('.approval-error').textContent.includes('does not fit');",
        )
        .await;
    browser
        .script(
            "document.querySelector('.approval textarea').value = '{\"env\": \"staging\"}'; return null;",
        )
        .await;
    browser.click(".approval .edit").await;
    browser
        .until(
            "the answer after the edit",
            "return document.querySelectorAll('.message.assistant .meta').length === 1
                && document.getElementById('stop').hidden;",
        )
        .await;
    let state = browser.page_state().await;
    assert_eq!(state["answer"], json!(["Deployed to staging."]));
    assert_eq!(state["cards"][0]["state"], "done");
    assert_eq!(state["cards"][0]["result"], "deployed to staging");
    let decided = browser
        .script("return [...document.querySelectorAll('.approval')].map(a => a.querySelector('.approval-decision')?.textContent ?? null);")
        .await;
    assert_eq!(decided, json!(["Approved with edited arguments"]));
    assert_eq!(*ran.lock().unwrap(), ["staging"]);

    // Deny, with a reason the model reads.
    browser.type_into("#input", "Deploy again").await;
    browser.click("#send").await;
    browser
        .until(
            "the second approval card",
            "return document.querySelectorAll('.approval .approve').length === 1;",
        )
        .await;
    browser.click(".approval .deny").await;
    browser
        .until(
            "the reason box",
            "const r = document.querySelector('.approval input.approval-why');
             return !!r && !r.hidden && document.activeElement === r;",
        )
        .await;
    browser
        .type_into(".approval input.approval-why", "not on a Friday")
        .await;
    browser.press("\u{E007}").await;
    browser
        .until(
            "the answer after the denial",
            "return document.querySelectorAll('.message.assistant .meta').length === 2
                && document.getElementById('stop').hidden;",
        )
        .await;
    let state = browser.page_state().await;
    assert_eq!(
        state["answer"],
        json!(["Deployed to staging.", "Not deployed."])
    );
    assert_eq!(state["cards"][1]["state"], "error");
    browser
        .screenshot(&dir.join("page-approval-decided.png"))
        .await;
    assert_eq!(*ran.lock().unwrap(), ["staging"]);
    model.assert_complete();
    let denied = model.requests()[3].messages.last().unwrap().clone();
    assert_eq!(
        denied,
        agentloop::Message::tool_results([agentloop::ToolResult::error(
            "call_2",
            "Error: the call to `deploy` was denied: not on a Friday"
        )])
    );
}
