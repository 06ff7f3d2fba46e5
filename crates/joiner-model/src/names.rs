//! Names and label values as the API server accepts them.
//!
//! Joiner writes a NodeClaim's name as the value of the `karpenter.sh/nodeclaim` label on its
//! Node (the kubelet registers with it) and a NodePool's name as `karpenter.sh/nodepool`, so
//! both must be label values: at most 63 characters, letters, digits, `-`, `_` and `.`,
//! starting and ending with a letter or digit. A name that is not would make every write that
//! carries it fail, and the node it was for be retried forever.

/// The longest label value the API server accepts.
pub const MAX_LABEL_VALUE: usize = 63;

/// Whether `value` is a label value the API server accepts (the empty value is one).
pub fn is_label_value(value: &str) -> bool {
    let alnum = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    value.len() <= MAX_LABEL_VALUE
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && alnum(value.chars().next())
        && alnum(value.chars().last())
}

/// `<prefix>-<suffix>`, with the prefix cut short so that the whole is at most
/// [`MAX_LABEL_VALUE`] characters and still a DNS-1123 name and a label value (a cut never
/// leaves the prefix ending in `-` or `.`). The suffix, which carries what makes the name
/// unique, is kept whole; it must be lowercase letters, digits and `-`, at most 40 characters.
pub fn fit(prefix: &str, suffix: &str) -> String {
    let room = MAX_LABEL_VALUE.saturating_sub(suffix.len() + 1);
    let mut cut: &str = match prefix.char_indices().nth(room) {
        Some((at, _)) => &prefix[..at],
        None => prefix,
    };
    cut = cut.trim_end_matches(['-', '.']);
    if cut.is_empty() {
        return suffix.to_string();
    }
    format!("{cut}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_follow_the_api_server() {
        assert!(is_label_value(""));
        assert!(is_label_value("gpu-pool.a_b"));
        assert!(is_label_value(&"a".repeat(63)));
        assert!(!is_label_value(&"a".repeat(64)));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value("a."));
        assert!(!is_label_value("a/b"));
    }

    #[test]
    fn a_fitted_name_is_a_label_value_and_keeps_its_suffix() {
        assert_eq!(fit("gpu", "0123456789ab"), "gpu-0123456789ab");
        let long = format!("{}-pool", "inference-h100".repeat(4));
        let name = fit(&long, "0123456789ab-r00ff00");
        assert_eq!(name.len(), 63);
        assert!(name.ends_with("-0123456789ab-r00ff00"), "{name}");
        assert!(is_label_value(&name), "{name}");
        // A cut that would end on '-' or '.' drops it.
        let dashed = format!("{}-{}", "a".repeat(49), "b".repeat(20));
        let name = fit(&dashed, "0123456789ab");
        assert!(is_label_value(&name), "{name}");
        assert!(name.len() <= 63);
        for n in 0..120 {
            let prefix: String = (0..n).map(|i| if i % 7 == 6 { '-' } else { 'x' }).collect();
            let name = fit(&prefix, "0123456789ab");
            assert!(
                is_label_value(&name) && name.ends_with("0123456789ab"),
                "{name}"
            );
        }
    }
}
