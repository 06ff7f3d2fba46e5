//! MIME multipart user data, read and written the way cloud-init and `nodeadm` read it.
//!
//! The user's parts are kept byte for byte (headers and body): a document that is already MIME
//! multipart keeps each of its parts; plain text is wrapped as one part, a NodeConfig or a
//! shell script by its content.

/// The MIME type `nodeadm` reads its NodeConfig from.
pub const NODECONFIG_CONTENT_TYPE: &str = "application/node.eks.aws";
pub(crate) const SHELL_CONTENT_TYPE: &str = "text/x-shellscript; charset=\"us-ascii\"";

/// A user's userData that cannot be merged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    #[error("userData says it is MIME multipart but names no boundary")]
    NoBoundary,
    #[error("userData is MIME multipart but has no closing boundary `--{0}--`")]
    Unterminated(String),
    /// Bottlerocket reads TOML; what it cannot read, it would not boot with.
    #[error("userData is not valid TOML for Bottlerocket: {0}")]
    Toml(String),
    /// A Bottlerocket setting Joiner writes has another type in the user's TOML.
    #[error("userData sets {0} to something other than a table; Bottlerocket needs a table there")]
    NotATable(String),
}

/// One MIME part, headers and body as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Part {
    pub(crate) fn new(content_type: &str, body: String) -> Part {
        Part {
            headers: vec![("Content-Type".to_string(), content_type.to_string())],
            body,
        }
    }

    /// The part's `Content-Type`, without parameters, lower case.
    pub fn content_type(&self) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            .map(|(_, v)| {
                v.split(';')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_ascii_lowercase()
            })
    }
}

/// AL2023: the user's parts, then Joiner's NodeConfig.
/// The user's userData as parts: a multipart document's own parts, or the text as one part.
pub fn user_parts(user: Option<&str>) -> Result<Vec<Part>, UserDataError> {
    let Some(text) = user.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let text = text.replace("\r\n", "\n");
    let (headers, body) = split_headers(&text);
    let is_mime = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("mime-version"));
    if !is_mime {
        let content_type = if text.contains("node.eks.aws/") && text.contains("NodeConfig") {
            NODECONFIG_CONTENT_TYPE
        } else {
            SHELL_CONTENT_TYPE
        };
        return Ok(vec![Part::new(content_type, text)]);
    }
    let boundary = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .and_then(|(_, v)| boundary_of(v))
        .ok_or(UserDataError::NoBoundary)?;
    parse_parts(body, &boundary)
}

/// The `boundary` parameter of a `multipart/...` content type.
fn boundary_of(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|param| {
        let (k, v) = param.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|b| !b.is_empty())
    })
}

/// Headers (up to the first empty line) and the rest. Text with no header block is all body.
fn split_headers(text: &str) -> (Vec<(String, String)>, &str) {
    let (head, body) = match text.split_once("\n\n") {
        Some((h, b)) => (h, b),
        None => (text, ""),
    };
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.lines() {
        if line.starts_with([' ', '\t']) {
            // A folded header continues the previous one.
            match headers.last_mut() {
                Some(last) => {
                    last.1.push(' ');
                    last.1.push_str(line.trim());
                }
                None => return (Vec::new(), text),
            }
            continue;
        }
        match line.split_once(':') {
            Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
                headers.push((k.to_string(), v.trim().to_string()));
            }
            _ => return (Vec::new(), text),
        }
    }
    (headers, body)
}

fn parse_parts(body: &str, boundary: &str) -> Result<Vec<Part>, UserDataError> {
    let delimiter = format!("--{boundary}");
    let closing = format!("--{boundary}--");
    let mut parts = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in body.lines() {
        let trimmed = line.trim_end();
        if trimmed == closing {
            if let Some(lines) = current.take() {
                parts.push(part_of(&lines));
            }
            return Ok(parts);
        }
        if trimmed == delimiter {
            if let Some(lines) = current.take() {
                parts.push(part_of(&lines));
            }
            current = Some(Vec::new());
        } else if let Some(lines) = current.as_mut() {
            lines.push(line);
        }
    }
    Err(UserDataError::Unterminated(boundary.to_string()))
}

fn part_of(lines: &[&str]) -> Part {
    let text = lines.join("\n");
    let (headers, body) = split_headers(&text);
    Part {
        headers,
        body: body.trim_end_matches('\n').to_string(),
    }
}

/// A `multipart/mixed` document of `parts`, with a boundary that appears in none of them.
pub fn multipart(parts: &[Part]) -> String {
    let mut boundary = "//".to_string();
    let mut n = 0u32;
    while parts
        .iter()
        .any(|p| p.body.contains(&format!("--{boundary}")))
    {
        n += 1;
        boundary = format!("joiner-boundary-{n}");
    }
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{boundary}\"\n\n");
    for part in parts {
        out.push_str(&format!("--{boundary}\n"));
        for (k, v) in &part.headers {
            out.push_str(&format!("{k}: {v}\n"));
        }
        out.push('\n');
        out.push_str(part.body.trim_end_matches('\n'));
        out.push('\n');
    }
    out.push_str(&format!("--{boundary}--\n"));
    out
}
