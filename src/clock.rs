//! The system clock in; the time now out, as RFC 3339 with milliseconds and as epoch
//! milliseconds ([`now`]), and how often a live run's heartbeat is touched
//! ([`HEARTBEAT_EVERY`]): the run's trail writes both, the ledger's reader judges liveness by
//! them.

use std::time::{Duration, SystemTime};

/// How often the heartbeat file is touched while a run is alive.
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// The time now as RFC 3339 with milliseconds, and as epoch milliseconds.
pub(crate) fn now() -> (String, i64) {
    let t = SystemTime::now();
    let ms = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    (humantime::format_rfc3339_millis(t).to_string(), ms)
}
