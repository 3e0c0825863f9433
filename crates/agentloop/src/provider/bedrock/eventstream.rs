//! AWS event-stream framing (`application/vnd.amazon.eventstream`), the binary body of
//! Bedrock's `ConverseStream`.
//!
//! A frame is a 12-byte prelude (total length, headers length, both big-endian `u32`, and the
//! CRC32 of those 8 bytes), the headers (name length `u8`, name, value type `u8`, value), the
//! payload, and the CRC32 of everything before it. Written by hand rather than through
//! `aws-smithy-eventstream`: that crate brings `aws-smithy-types` and copies every frame into
//! an owned message with a header map, where this reads the payload in place and looks up the
//! two or three headers it needs.

use std::fmt;

/// The largest frame accepted (AWS caps event-stream messages at 16 MiB).
pub const MAX_FRAME: usize = 16 * 1024 * 1024;
/// The prelude's size.
const PRELUDE: usize = 12;
/// The prelude and the message CRC.
const OVERHEAD: usize = PRELUDE + 4;

/// Why bytes are not a valid frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The prelude's lengths are impossible (too short, too long, headers past the end).
    Length {
        /// The total length the prelude claims.
        total: u32,
        /// The headers' length the prelude claims.
        headers: u32,
    },
    /// The prelude's CRC does not match.
    PreludeCrc,
    /// The message's CRC does not match.
    MessageCrc,
    /// A header runs past the headers section or has an unknown value type.
    Header,
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length { total, headers } => write!(
                f,
                "an event-stream frame claims {total} bytes with {headers} bytes of headers, which cannot be"
            ),
            Self::PreludeCrc => f.write_str("an event-stream frame's prelude CRC does not match"),
            Self::MessageCrc => f.write_str("an event-stream frame's message CRC does not match"),
            Self::Header => f.write_str("an event-stream frame has a malformed header"),
        }
    }
}

/// One frame, borrowed from the bytes it was read from.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    headers: &'a [u8],
    /// The payload (JSON for Bedrock).
    pub payload: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The headers section as sent (for comparing it whole with the headers a service always
    /// sends).
    pub(crate) fn headers(&self) -> &'a [u8] {
        self.headers
    }

    /// The value of the string header `name` (`:event-type`, `:message-type`, ...); `None`
    /// when absent or not a string.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        let mut rest = self.headers;
        while let Some((header, value, next)) = split_header(rest) {
            if header == name.as_bytes() {
                return match value {
                    HeaderValue::Text(text) => std::str::from_utf8(text).ok(),
                    HeaderValue::Other => None,
                };
            }
            rest = next;
        }
        None
    }
}

enum HeaderValue<'a> {
    Text(&'a [u8]),
    Other,
}

/// The first header of `bytes`: name, value, and what follows. `None` when `bytes` is empty
/// or the header is malformed (checked once by [`parse`], so lookups need not tell them apart).
fn split_header(bytes: &[u8]) -> Option<(&[u8], HeaderValue<'_>, &[u8])> {
    let (&name_len, rest) = bytes.split_first()?;
    let name = rest.get(..usize::from(name_len))?;
    let rest = &rest[usize::from(name_len)..];
    let (&kind, rest) = rest.split_first()?;
    let fixed = |n: usize| rest.get(n..).map(|next| (HeaderValue::Other, next));
    let (value, next) = match kind {
        0 | 1 => (HeaderValue::Other, rest),
        2 => fixed(1)?,
        3 => fixed(2)?,
        4 => fixed(4)?,
        5 | 8 => fixed(8)?,
        9 => fixed(16)?,
        6 | 7 => {
            let len = usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]));
            let value = rest.get(2..2 + len)?;
            let next = &rest[2 + len..];
            if kind == 7 {
                (HeaderValue::Text(value), next)
            } else {
                (HeaderValue::Other, next)
            }
        }
        _ => return None,
    };
    Some((name, value, next))
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The total length of the frame starting `bytes`, once its prelude is there (checked: a
/// wrong prelude is an error before its whole frame has been waited for).
pub fn frame_len(bytes: &[u8]) -> Result<Option<usize>, FrameError> {
    if bytes.len() < PRELUDE {
        return Ok(None);
    }
    let total = be32(bytes, 0);
    let headers = be32(bytes, 4);
    let len = total as usize;
    if !(OVERHEAD..=MAX_FRAME).contains(&len) || headers as usize > len - OVERHEAD {
        return Err(FrameError::Length { total, headers });
    }
    if crc32fast::hash(&bytes[..8]) != be32(bytes, 8) {
        return Err(FrameError::PreludeCrc);
    }
    Ok(Some(len))
}

/// The frame at the start of `bytes` and its length, `None` when `bytes` holds only part of it.
pub fn parse(bytes: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(len) = frame_len(bytes)? else {
        return Ok(None);
    };
    let Some(frame) = bytes.get(..len) else {
        return Ok(None);
    };
    // The message CRC runs over the prelude too: it goes on from the prelude's CRC, which
    // `frame_len` checked, rather than hashing those bytes again.
    let mut crc = crc32fast::Hasher::new_with_initial(be32(frame, 8));
    crc.update(&frame[8..len - 4]);
    if crc.finalize() != be32(frame, len - 4) {
        return Err(FrameError::MessageCrc);
    }
    let headers_len = be32(frame, 4) as usize;
    let headers = &frame[PRELUDE..PRELUDE + headers_len];
    let mut rest = headers;
    while !rest.is_empty() {
        let Some((_, _, next)) = split_header(rest) else {
            return Err(FrameError::Header);
        };
        rest = next;
    }
    Ok(Some((
        Frame {
            headers,
            payload: &frame[PRELUDE + headers_len..len - 4],
        },
        len,
    )))
}

/// A frame with string headers and `payload`, as a server writes it (for the testkit's wire
/// server, tests and benches).
pub fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut head = Vec::new();
    for (name, value) in headers {
        // Names are at most 255 bytes and values 65535 in the format; longer ones are cut.
        let name = &name.as_bytes()[..name.len().min(255)];
        let value = &value.as_bytes()[..value.len().min(usize::from(u16::MAX))];
        head.push(name.len() as u8);
        head.extend_from_slice(name);
        head.push(7);
        head.extend_from_slice(&(value.len() as u16).to_be_bytes());
        head.extend_from_slice(value);
    }
    let total = OVERHEAD + head.len() + payload.len();
    let mut frame = Vec::with_capacity(total);
    frame.extend_from_slice(&(total as u32).to_be_bytes());
    frame.extend_from_slice(&(head.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&frame);
    frame.extend_from_slice(&prelude_crc.to_be_bytes());
    frame.extend_from_slice(&head);
    frame.extend_from_slice(payload);
    let crc = crc32fast::hash(&frame);
    frame.extend_from_slice(&crc.to_be_bytes());
    frame
}

/// An event frame as Bedrock sends one: `:event-type`, `:content-type` and `:message-type`.
pub fn event(event_type: &str, payload: &[u8]) -> Vec<u8> {
    encode(
        &[
            (":event-type", event_type),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload,
    )
}

/// An exception frame as Bedrock sends one mid-stream (`throttlingException`,
/// `modelStreamErrorException`, ...), with `{"message": ...}` as payload.
pub fn exception(exception_type: &str, payload: &[u8]) -> Vec<u8> {
    encode(
        &[
            (":exception-type", exception_type),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        payload,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_its_crcs_are_checked() {
        let bytes = event("messageStart", br#"{"role":"assistant"}"#);
        let (frame, len) = parse(&bytes).unwrap().unwrap();
        assert_eq!(len, bytes.len());
        assert_eq!(frame.header(":event-type"), Some("messageStart"));
        assert_eq!(frame.header(":message-type"), Some("event"));
        assert_eq!(frame.header(":exception-type"), None);
        assert_eq!(frame.payload, br#"{"role":"assistant"}"#);
        for cut in 0..bytes.len() {
            assert!(parse(&bytes[..cut]).unwrap().is_none(), "cut at {cut}");
        }
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert_eq!(parse(&bad).unwrap_err(), FrameError::MessageCrc);
        let mut bad = bytes.clone();
        bad[9] ^= 1;
        assert_eq!(parse(&bad).unwrap_err(), FrameError::PreludeCrc);
        let mut bad = bytes;
        bad[3] = 3;
        assert!(matches!(parse(&bad), Err(FrameError::Length { .. })));
    }

    #[test]
    fn the_documented_empty_frame_is_read() {
        // The smallest valid message (no headers, no payload) from the event-stream test
        // suite that AWS SDKs share (`empty_message`): 00 00 00 10, 00 00 00 00, CRCs.
        let bytes = [
            0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x05, 0xc2, 0x48, 0xeb, 0x7d, 0x98,
            0xc8, 0xff,
        ];
        let (frame, len) = parse(&bytes).unwrap().unwrap();
        assert_eq!(len, 16);
        assert!(frame.payload.is_empty());
        assert_eq!(encode(&[], b""), bytes);
    }
}
