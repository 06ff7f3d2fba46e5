//! How Karpenter derives the instance family, category, generation
//! and size labels from a type's name, so that a NodePool requirement such as
//! `karpenter.k8s.aws/instance-category In [g, p]` selects the same types it would in Karpenter.

/// The labels Karpenter derives from an instance type's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NameParts<'a> {
    /// Everything before the dot (`p6-b200`), when the name has exactly one dot.
    pub family: Option<&'a str>,
    /// Everything after the dot (`48xlarge`), when the name has exactly one dot.
    pub size: Option<&'a str>,
    /// The leading letters (`gr` in `gr6f`).
    pub category: Option<&'a str>,
    /// The digits after the category, skipping a `-<n>tb` memory marker (`u-6tb1` -> `1`).
    pub generation: Option<&'a str>,
}

/// Splits an instance type name the way Karpenter does.
pub fn parse_name(name: &str) -> NameParts<'_> {
    let mut parts = NameParts::default();
    let mut dots = name.split('.');
    if let (Some(family), Some(size), None) = (dots.next(), dots.next(), dots.next()) {
        parts.family = Some(family);
        parts.size = Some(size);
    }
    if let Some((category, generation)) = category_generation(name) {
        parts.category = Some(category);
        parts.generation = Some(generation);
    }
    parts
}

/// Category and generation: leading lower-case letters, an optional `-<digits>tb`, then
/// digits, with a dot somewhere after them.
fn category_generation(name: &str) -> Option<(&str, &str)> {
    let letters = leading(name, |c| c.is_ascii_lowercase());
    if letters == 0 {
        return None;
    }
    let (category, mut rest) = name.split_at(letters);
    if let Some(after_dash) = rest.strip_prefix('-') {
        let digits = leading(after_dash, |c| c.is_ascii_digit());
        if digits > 0
            && let Some(after_tb) = after_dash.get(digits..).and_then(|r| r.strip_prefix("tb"))
        {
            rest = after_tb;
        }
    }
    let digits = leading(rest, |c| c.is_ascii_digit());
    let (generation, tail) = rest.split_at(digits);
    (digits > 0 && tail.contains('.')).then_some((category, generation))
}

/// Length in bytes of the ASCII prefix whose characters satisfy `pred`.
fn leading(s: &str, pred: impl Fn(char) -> bool) -> usize {
    s.find(|c: char| !pred(c)).unwrap_or(s.len())
}

/// Karpenter's lower-kebab-case of EC2 names (`NVIDIA` -> `nvidia`, `Radeon Pro V520` ->
/// `radeon-pro-v520`).
pub fn lower_kebab(s: &str) -> String {
    s.replace(' ', "-").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(name: &str) -> (Option<&str>, Option<&str>, Option<&str>, Option<&str>) {
        let p = parse_name(name);
        (p.family, p.category, p.generation, p.size)
    }

    #[test]
    fn parses_names_like_karpenter() {
        assert_eq!(
            parts("g4dn.xlarge"),
            (Some("g4dn"), Some("g"), Some("4"), Some("xlarge"))
        );
        assert_eq!(
            parts("p6-b200.48xlarge"),
            (Some("p6-b200"), Some("p"), Some("6"), Some("48xlarge"))
        );
        assert_eq!(
            parts("g5g.xlarge"),
            (Some("g5g"), Some("g"), Some("5"), Some("xlarge"))
        );
        assert_eq!(
            parts("gr6f.4xlarge"),
            (Some("gr6f"), Some("gr"), Some("6"), Some("4xlarge"))
        );
        assert_eq!(
            parts("m7i.large"),
            (Some("m7i"), Some("m"), Some("7"), Some("large"))
        );
        assert_eq!(
            parts("u-6tb1.metal"),
            (Some("u-6tb1"), Some("u"), Some("1"), Some("metal"))
        );
        assert_eq!(parts("my-box"), (None, None, None, None));
        assert_eq!(parts("a.b.c"), (None, None, None, None));
        assert_eq!(parts("x1.y"), (Some("x1"), Some("x"), Some("1"), Some("y")));
    }

    #[test]
    fn kebab() {
        assert_eq!(lower_kebab("Radeon Pro V520"), "radeon-pro-v520");
    }
}
