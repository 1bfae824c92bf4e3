//! `--runtime-config`, kube-apiserver's flag for switching API group versions on and off,
//! for the one group version Finale can switch: `deletion.finale.dev/v1alpha1`.
//!
//! The flag takes a comma-separated list of `group/version=bool` entries (repeatable); an
//! entry without `=` means `=true`, and the value is read as Go's `strconv.ParseBool` reads it
//! (`1 t T TRUE true True`, `0 f F FALSE false False`). The last entry for a key wins.
//!
//! # Guarantees
//! - A key that names any other group version, a key that is not `group/version`, or a value
//!   that is not a bool is an error naming the entry, so a typo stops the server at start-up
//!   rather than leaving the API on unnoticed.

use super::{API_VERSION, GROUP};

/// Whether `deletion.finale.dev/v1alpha1` is served, from the `--runtime-config` values
/// (each possibly a comma-separated list). Served by default.
pub fn insight_api_enabled(values: &[String]) -> Result<bool, String> {
    let mut enabled = true;
    for entry in values
        .iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
    {
        let (key, value) = entry.split_once('=').unwrap_or((entry, "true"));
        let on = parse_bool(value).ok_or_else(|| {
            format!(
                "invalid value {key}={value}: the value must be true or false (--runtime-config {API_VERSION}=false)"
            )
        })?;
        let Some((group, version)) = key.split_once('/') else {
            return Err(format!(
                "invalid key {key}: --runtime-config takes group/version=bool entries, such as {API_VERSION}=false"
            ));
        };
        if group != GROUP || version != super::VERSION {
            return Err(format!(
                "unknown api groups {key}: Finale can switch only {API_VERSION} with --runtime-config (its other APIs are always served)"
            ));
        }
        enabled = on;
    }
    Ok(enabled)
}

fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Result<bool, String> {
        insight_api_enabled(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn switches_the_group_off_and_on() {
        assert_eq!(parse(&[]), Ok(true));
        assert_eq!(parse(&["deletion.finale.dev/v1alpha1=false"]), Ok(false));
        assert_eq!(parse(&["deletion.finale.dev/v1alpha1=0"]), Ok(false));
        assert_eq!(parse(&["deletion.finale.dev/v1alpha1"]), Ok(true));
        assert_eq!(
            parse(&["deletion.finale.dev/v1alpha1=false,deletion.finale.dev/v1alpha1=true"]),
            Ok(true),
            "the last entry wins"
        );
        assert_eq!(
            parse(&[
                "deletion.finale.dev/v1alpha1=true",
                "deletion.finale.dev/v1alpha1=F"
            ]),
            Ok(false)
        );
    }

    #[test]
    fn unknown_groups_bad_keys_and_bad_values_are_errors() {
        let error = parse(&["batch/v1=false"]).expect_err("unknown group");
        assert!(error.starts_with("unknown api groups batch/v1"), "{error}");
        let error = parse(&["deletion.finale.dev=false"]).expect_err("no version");
        assert!(
            error.starts_with("invalid key deletion.finale.dev"),
            "{error}"
        );
        let error = parse(&["deletion.finale.dev/v1alpha1=off"]).expect_err("bad value");
        assert!(error.contains("=off"), "{error}");
    }
}
