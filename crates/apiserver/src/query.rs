//! Query-string values as kube-apiserver converts them into request options
//! (`ListOptions`, `DeleteOptions`, `PodLogOptions`): apimachinery's conversion functions, so
//! that what any client sends means here what it means upstream.

/// A boolean query parameter, as apimachinery's `Convert_Slice_string_To_bool`: absent,
/// `0` or `false` (any case) is false; anything else, the empty value and Python's `True`
/// included, is true. Upstream never rejects one, so neither does Finale.
pub fn flag(value: Option<&str>) -> bool {
    match value {
        None => false,
        Some(text) => !(text == "0" || text.eq_ignore_ascii_case("false")),
    }
}

#[cfg(test)]
mod tests {
    use super::flag;

    #[test]
    fn booleans_convert_as_apimachinery_converts_them() {
        for value in ["true", "True", "1", "", "yes", "t"] {
            assert!(flag(Some(value)), "{value:?}");
        }
        for value in ["false", "False", "FALSE", "0"] {
            assert!(!flag(Some(value)), "{value:?}");
        }
        assert!(!flag(None));
    }
}
