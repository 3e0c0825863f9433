//! Who may ask: the optional bearer token (compared in constant time), and, for browsers, the
//! `Host` and `Origin` checks that keep other web pages out.
//!
//! Without a token, a page on any site could reach a server on loopback by DNS rebinding (its
//! name re-resolved to 127.0.0.1): its requests then carry its own name in `Host`, which is
//! why only loopback names (and the configured extra hosts) are answered. And a page of
//! another origin must not drive the API through the user's browser, token or not: `/v1`
//! requests whose `Origin` is neither the server's own nor a configured CORS origin are
//! refused.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::state::AppState;

/// Whether `given` equals `expected`, taking the same time wherever they differ: the loop runs
/// over `expected` in full and folds every difference (length included) into one value.
pub(crate) fn tokens_match(expected: &[u8], given: &[u8]) -> bool {
    let mut difference = (expected.len() ^ given.len()) as u64;
    for (i, byte) in expected.iter().enumerate() {
        let other = given.get(i).copied().unwrap_or(!*byte);
        difference |= u64::from(byte ^ other);
    }
    std::hint::black_box(difference) == 0
}

fn bearer(value: &HeaderValue) -> Option<&[u8]> {
    let value = value.as_bytes();
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value[7..].trim_ascii())
}

/// Reject requests without the configured token.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = &state.config().token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(bearer);
    match given {
        Some(token) if tokens_match(expected.as_bytes(), token) => next.run(request).await,
        _ => {
            let message = if given.is_some() {
                "the bearer token is wrong"
            } else {
                "this server needs `Authorization: Bearer <token>`"
            };
            let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            response
        }
    }
}

/// `authority` (a `Host` value, or an origin without its scheme) split into its host and port.
/// IPv6 literals keep their brackets. `None` when it is malformed.
fn split_authority(authority: &str) -> Option<(&str, Option<&str>)> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        let (host, rest) = authority.split_at(end + 1);
        match rest {
            "" => (host, None),
            _ => (host, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port_ok = port.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (!host.is_empty() && port_ok).then_some((host, port))
}

/// Whether `host` (a `Host` header value) names this server when it has no token: a loopback
/// name on any port, or one of `allowed` (a name without a port matches any port).
pub(crate) fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let Some((name, port)) = split_authority(host) else {
        return false;
    };
    let loopback = ["localhost", "127.0.0.1", "[::1]"];
    if loopback.iter().any(|l| name.eq_ignore_ascii_case(l)) {
        return true;
    }
    allowed.iter().any(|entry| {
        split_authority(entry.trim()).is_some_and(|(allowed_name, allowed_port)| {
            allowed_name.eq_ignore_ascii_case(name) && allowed_port.is_none_or(|p| Some(p) == port)
        })
    })
}

/// Whether a request with `origin` may use the API of a server asked for as `host`: the same
/// origin (its `host:port` is the `Host`), or one listed in `cors_origins` (`*`: any).
pub(crate) fn origin_allowed(origin: &str, host: Option<&str>, cors_origins: &[String]) -> bool {
    let origin = origin.trim();
    let listed = cors_origins.iter().any(|listed| {
        let listed = listed.trim().trim_end_matches('/');
        listed == "*" || listed.eq_ignore_ascii_case(origin)
    });
    if listed {
        return true;
    }
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((authority, host), (Some(a), Some(h)) if a.eq_ignore_ascii_case(h.trim()))
}

/// The host a request was sent to: the `Host` header, or the URI's authority (HTTP/2).
fn request_host(request: &Request) -> Option<&str> {
    match request.headers().get(header::HOST) {
        Some(value) => value.to_str().ok(),
        None => request.uri().authority().map(|a| a.as_str()),
    }
}

/// Without a token, answer only requests addressed to a loopback name or an allowed host.
pub(crate) async fn check_host(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let config = state.config();
    if config.token.is_some() {
        return next.run(request).await;
    }
    let host = request_host(&request);
    if host.is_some_and(|h| host_allowed(h, &config.allowed_hosts)) {
        return next.run(request).await;
    }
    let host = host.unwrap_or("");
    let name = split_authority(host).map_or(host, |(name, _)| name);
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "this server has no token, so it only answers requests addressed to localhost, \
             127.0.0.1 or [::1] (this one was for `{host}`): a web page could otherwise reach it \
             by DNS rebinding. Start it with --allowed-host {name} (ServerConfig::allowed_hosts) \
             to accept that name, or set a token"
        ),
    )
    .into_response()
}

/// Refuse API requests from web pages of origins other than the server's own and the
/// configured CORS origins.
pub(crate) async fn check_origin(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(origin) = request.headers().get(header::ORIGIN) else {
        return next.run(request).await;
    };
    let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
    let host = request_host(&request);
    if origin_allowed(&origin, host, &state.config().cors_origins) {
        return next.run(request).await;
    }
    ApiError::new(
        StatusCode::FORBIDDEN,
        format!(
            "requests from web pages of other origins are refused (Origin `{origin}`, Host `{}`); \
             start the server with --cors-origin {origin} (ServerConfig::cors_origins) to allow \
             this one",
            host.unwrap_or("")
        ),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_loopback_names_or_allowed_ones() {
        let allowed = vec!["chat.internal".to_owned(), "proxy.lan:8443".to_owned()];
        for host in [
            "localhost",
            "localhost:8080",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.1:0",
            "[::1]",
            "[::1]:8080",
            "chat.internal:80",
            "Chat.Internal",
            "proxy.lan:8443",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in [
            "",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.2",
            "[::2]:80",
            "::1",
            "localhost:",
            "localhost:80x",
            "[::1]x",
            "proxy.lan:8444",
            "proxy.lan",
            "chat.internal.evil",
        ] {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }

    #[test]
    fn origins_are_the_same_one_or_listed() {
        let listed = vec!["http://app.example:3000/".to_owned()];
        assert!(origin_allowed(
            "http://127.0.0.1:8080",
            Some("127.0.0.1:8080"),
            &[]
        ));
        assert!(origin_allowed(
            "https://Chat.Example",
            Some("chat.example"),
            &[]
        ));
        assert!(origin_allowed(
            "http://app.example:3000",
            Some("127.0.0.1:8080"),
            &listed
        ));
        assert!(origin_allowed("http://x", None, &["*".to_owned()]));
        for (origin, host) in [
            ("http://evil.example", Some("127.0.0.1:8080")),
            ("http://127.0.0.1:8081", Some("127.0.0.1:8080")),
            ("null", Some("127.0.0.1:8080")),
            ("http://app.example:3001", Some("127.0.0.1:8080")),
            ("file://", Some("localhost")),
            ("http://localhost", None),
        ] {
            assert!(!origin_allowed(origin, host, &listed), "{origin} {host:?}");
        }
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(tokens_match(b"secret", b"secret"));
        assert!(!tokens_match(b"secret", b"secreT"));
        assert!(!tokens_match(b"secret", b"secret2"));
        assert!(!tokens_match(b"secret", b"secre"));
        assert!(!tokens_match(b"secret", b""));
        // A given token that is a prefix padded with the complement bytes must not match.
        assert!(!tokens_match(b"\0", b""));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(
            bearer(&HeaderValue::from_static("Bearer abc")),
            Some(&b"abc"[..])
        );
        assert_eq!(
            bearer(&HeaderValue::from_static("bearer  abc ")),
            Some(&b"abc"[..])
        );
        assert_eq!(bearer(&HeaderValue::from_static("Basic abc")), None);
        assert_eq!(bearer(&HeaderValue::from_static("Bear")), None);
    }
}
