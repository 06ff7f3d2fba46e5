//! Naming objects and the places they came from, so every error can say which file, which
//! object (`kind/namespace/name`) and which field is wrong.

use std::fmt;

/// Where a document came from: a file (or `-` for standard input) and its position in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Source {
    /// The path as the user gave it, or `-` for standard input, or a description such as
    /// `cluster` for objects that came from an API server.
    pub file: String,
    /// 1-based index of the YAML document within the file (0 when not meaningful).
    pub document: usize,
}

impl Source {
    pub fn new(file: impl Into<String>, document: usize) -> Self {
        Source {
            file: file.into(),
            document,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.document > 0 {
            write!(f, "{} (document {})", self.file, self.document)
        } else {
            f.write_str(&self.file)
        }
    }
}

/// `kind/namespace/name`, or `kind/name` for cluster-scoped objects.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ObjectRef {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(kind: impl Into<String>, namespace: Option<&str>, name: impl Into<String>) -> Self {
        ObjectRef {
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// An input that cannot be used: names the file, the object and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {object}: {field}: {message}")]
pub struct InputError {
    /// The file and document the object came from.
    pub origin: Source,
    pub object: ObjectRef,
    /// A path into the object such as `spec.template.spec.containers[0].resources.requests.cpu`.
    pub field: String,
    pub message: String,
}

impl InputError {
    pub fn new(
        origin: &Source,
        object: &ObjectRef,
        field: impl Into<String>,
        message: impl fmt::Display,
    ) -> Self {
        InputError {
            origin: origin.clone(),
            object: object.clone(),
            field: field.into(),
            message: message.to_string(),
        }
    }
}
