//! Wall-clock times as the Kubernetes API writes them: `Time` (RFC 3339, whole seconds, UTC)
//! and `MicroTime` (six fractional digits), plus the millisecond form `state.json` keeps.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `metav1.Time`: RFC 3339 truncated to the second, as Go's `time.RFC3339` prints it.
pub(crate) fn rfc3339(time: SystemTime) -> String {
    let seconds = unix_seconds(time);
    match jiff::Timestamp::from_second(seconds) {
        Ok(timestamp) => timestamp.to_string(),
        Err(_) => "1970-01-01T00:00:00Z".to_string(),
    }
}

/// `metav1.MicroTime`: RFC 3339 with exactly six fractional digits.
pub(crate) fn rfc3339_micros(time: SystemTime) -> String {
    match jiff::Timestamp::try_from(time) {
        Ok(timestamp) => timestamp.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
        Err(_) => "1970-01-01T00:00:00.000000Z".to_string(),
    }
}

/// Parses an RFC 3339 time from the API (either precision).
pub(crate) fn parse(text: &str) -> Option<SystemTime> {
    text.parse::<jiff::Timestamp>().ok().map(SystemTime::from)
}

/// A `k8s-openapi` time as a `SystemTime`.
pub(crate) fn from_api(timestamp: &jiff::Timestamp) -> SystemTime {
    SystemTime::from(*timestamp)
}

fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// Milliseconds since the epoch, for `state.json` (times before 1970 are clamped to 0).
pub(crate) fn to_unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

pub(crate) fn from_unix_millis(millis: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(millis)
}

/// How far `later` is after `earlier`; zero when it is not later.
pub(crate) fn until(earlier: SystemTime, later: SystemTime) -> Duration {
    later.duration_since(earlier).unwrap_or(Duration::ZERO)
}

/// The tokio instant at which the wall clock will read `at` (now if it already has).
pub(crate) fn instant_at(at: SystemTime) -> tokio::time::Instant {
    tokio::time::Instant::now() + until(SystemTime::now(), at)
}

/// A duration as Go's `time.Duration.String` prints it (`10s`, `1m20s`, `5m0s`, `200ms`),
/// for the kubelet's messages such as `back-off 20s restarting failed container=…`.
pub(crate) fn go_duration(duration: Duration) -> String {
    let total_ms = duration.as_millis();
    if total_ms == 0 {
        return "0s".to_string();
    }
    if duration < Duration::from_secs(1) {
        return format!("{total_ms}ms");
    }
    let hours = duration.as_secs() / 3600;
    let minutes = (duration.as_secs() % 3600) / 60;
    let seconds = duration.as_secs() % 60;
    let millis = duration.subsec_millis();
    let seconds = if millis == 0 {
        format!("{seconds}s")
    } else {
        let fraction = format!("{millis:03}");
        format!("{seconds}.{}s", fraction.trim_end_matches('0'))
    };
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}")
    } else {
        seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_times_are_rfc3339_in_utc() {
        let time = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339(time), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_micros(time), "2023-11-14T22:13:20.123000Z");
        assert_eq!(
            parse("2023-11-14T22:13:20Z"),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(parse("2023-11-14T22:13:20.123000Z"), Some(time));
        assert_eq!(parse("yesterday"), None);
        assert_eq!(from_unix_millis(to_unix_millis(time)), time);
    }

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_millis(200)), "200ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(3660)), "1h1m0s");
        assert_eq!(go_duration(Duration::ZERO), "0s");
    }
}
