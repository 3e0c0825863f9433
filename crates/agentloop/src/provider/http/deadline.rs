//! Deadlines from user-given durations, which may be as large as `Duration::MAX`.

use std::time::Duration;

use tokio::time::Instant;

/// Far enough away to mean "never" for a timer.
pub(crate) const FAR: Duration = Duration::from_secs(86_400 * 365);

/// `at + after`, or [`FAR`] from `at` when that overflows: a `Duration::MAX` timeout means no
/// timeout, not a panic.
pub(crate) fn later(at: Instant, after: Duration) -> Instant {
    at.checked_add(after).unwrap_or_else(|| at + FAR)
}
