//! Optional bearer-token authentication, compared in constant time.

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

#[cfg(test)]
mod tests {
    use super::*;

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
