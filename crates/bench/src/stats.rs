//! Statistics helpers: medians and percentiles over per-run figures, and latency histograms.
//!
//! Run-level figures (throughput, start time, RSS) are few, so they are kept as plain `f64`
//! slices and summarised exactly. Per-operation latencies are many, so they go into an HDR
//! histogram (3 significant digits, microsecond resolution) that is cheap to record into from
//! every worker and to merge.

use hdrhistogram::Histogram;

/// The median of `values`: the middle value, or the mean of the two middle values for an even
/// count. `None` for an empty slice. NaNs sort last, so they only matter if most values are NaN.
pub fn median(values: &[f64]) -> Option<f64> {
    let sorted = sorted(values);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The `q`-quantile (0.0..=1.0) of `values` by the nearest-rank method: the smallest value such
/// that at least `q` of all values are less than or equal to it. `None` for an empty slice.
///
/// Nearest rank (rather than interpolation) matches what HDR histograms report, so p99 of a
/// run and p99 of a slice of samples mean the same thing.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let sorted = sorted(values);
    if sorted.is_empty() {
        return None;
    }
    let q = q.clamp(0.0, 1.0);
    // Rank is 1-based: ceil(q * n), at least 1.
    let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
    Some(sorted[rank - 1])
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// Latencies up to 10 minutes in microseconds; anything longer is clamped (the load generator
/// times operations out well before that).
const MAX_LATENCY_US: u64 = 600_000_000;

/// A fresh latency histogram in microseconds. Record with `saturating_record`, so an outlier
/// beyond the bound is clamped rather than lost.
pub fn latency_histogram() -> anyhow::Result<Histogram<u64>> {
    Ok(Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)?)
}

/// The `q`-quantile of a latency histogram, in milliseconds; `None` if nothing was recorded.
pub fn quantile_ms(histogram: &Histogram<u64>, q: f64) -> Option<f64> {
    if histogram.is_empty() {
        None
    } else {
        Some(histogram.value_at_quantile(q) as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_count_is_the_middle_value() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    }

    #[test]
    fn median_of_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn median_of_nothing_is_none() {
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn percentile_uses_nearest_rank() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.50), Some(50.0));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&values, 1.0), Some(100.0));
        assert_eq!(percentile(&values, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn histogram_quantiles_are_reported_in_milliseconds() {
        let mut histogram = latency_histogram().unwrap();
        for us in 1..=1000u64 {
            histogram.record(us * 10).unwrap();
        }
        let p50 = quantile_ms(&histogram, 0.5).unwrap();
        let p99 = quantile_ms(&histogram, 0.99).unwrap();
        // Three significant digits: within 0.1% of 5 ms and 9.9 ms.
        assert!((p50 - 5.0).abs() < 0.01, "p50 {p50}");
        assert!((p99 - 9.9).abs() < 0.01, "p99 {p99}");
        assert_eq!(quantile_ms(&latency_histogram().unwrap(), 0.5), None);
    }
}
