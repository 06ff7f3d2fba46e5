//! Renders a Helm chart's templates the way `helm template` does, for the subset of Helm the
//! Joiner chart uses: Go `text/template` (through `gtmpl`), named templates shared across files,
//! `.Values`, `.Release`, `.Chart` and `.Template`, and the functions in [`FUNCTIONS`].
//!
//! Values are merged as Helm merges them (the chart's `values.yaml`, then each values file, then
//! each `--set`), with the same code the controller uses for its own `--values`/`--set`.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use gtmpl::{Context, Template};
use gtmpl_value::{Func, FuncError, Number, Value as Tv};
use joiner_model::settings::{SettingsError, apply_set, merge_values};
use serde_json::Value;

/// Why a chart could not be loaded or rendered. Names the file or template.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: not valid YAML: {message}")]
    Yaml { path: String, message: String },
    #[error("{template}: {message}")]
    Template { template: String, message: String },
    #[error(transparent)]
    Values(#[from] SettingsError),
}

/// The release being rendered (`.Release`).
#[derive(Debug, Clone)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    /// `helm install` (true) or `helm upgrade` (false).
    pub is_install: bool,
}

impl Release {
    /// A first install of `name` into `namespace`.
    pub fn install(name: &str, namespace: &str) -> Release {
        Release {
            name: name.to_string(),
            namespace: namespace.to_string(),
            is_install: true,
        }
    }
}

/// One rendered template file, non-empty after rendering (as Helm drops empty ones).
#[derive(Debug, Clone)]
pub struct Rendered {
    /// `<chart>/templates/<file>`, as Helm names it in `# Source:` comments.
    pub template: String,
    pub text: String,
}

impl Rendered {
    /// The YAML documents in this file, without empty ones.
    pub fn documents(&self) -> Result<Vec<Value>, RenderError> {
        let docs: Vec<Value> =
            serde_saphyr::from_multiple(&self.text).map_err(|e| RenderError::Yaml {
                path: self.template.clone(),
                message: e.to_string(),
            })?;
        Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
    }
}

/// A chart read from its folder.
#[derive(Debug, Clone)]
pub struct Chart {
    /// `Chart.yaml`.
    pub metadata: Value,
    /// The chart's `values.yaml`.
    pub default_values: Value,
    /// `(templates/<file> path, text)` for every file under `templates/`, sorted by path.
    pub templates: Vec<(String, String)>,
}

/// The Helm and Sprig functions this renderer provides, beyond Go's built-ins (`eq`, `ne`,
/// `lt`, `le`, `gt`, `ge`, `len`, `and`, `or`, `not`, `print`, `printf`, `index`).
pub const FUNCTIONS: &[&str] = &[
    "include",
    "toYaml",
    "indent",
    "nindent",
    "quote",
    "default",
    "required",
    "fail",
    "trunc",
    "trimSuffix",
    "replace",
    "contains",
    "hasKey",
    "empty",
    "toString",
    "list",
    "splitList",
    "kindIs",
    "regexMatch",
    "float64",
    "sha256sum",
];

fn funcs() -> Vec<(&'static str, Func)> {
    vec![
        ("include", include as Func),
        ("toYaml", to_yaml as Func),
        ("indent", indent as Func),
        ("nindent", nindent as Func),
        ("quote", quote as Func),
        ("default", default as Func),
        ("required", required as Func),
        ("fail", fail as Func),
        ("trunc", trunc as Func),
        ("trimSuffix", trim_suffix as Func),
        ("replace", replace as Func),
        ("contains", contains as Func),
        ("hasKey", has_key as Func),
        ("empty", empty as Func),
        ("toString", to_string as Func),
        ("list", list as Func),
        ("splitList", split_list as Func),
        ("kindIs", kind_is as Func),
        ("regexMatch", regex_match as Func),
        ("float64", float64 as Func),
        ("sha256sum", sha256sum as Func),
        // Go's comparisons, replacing gtmpl's, which cannot compare a float with a whole
        // number (gtmpl stores `0.0` as an integer; Go keeps it a float64).
        ("lt", lt as Func),
        ("le", le as Func),
        ("gt", gt as Func),
        ("ge", ge as Func),
    ]
}

/// The file Helm prints after an install instead of applying it.
const NOTES: &str = "NOTES.txt";

thread_local! {
    /// Every template file of the chart being rendered, so `include` can find named templates
    /// defined in any of them (Helm shares `define`s across a chart's files). Set for the
    /// duration of [`Chart::render`].
    static SOURCES: RefCell<Sources> = RefCell::new(Sources::default());
}

/// The chart's template files, and each named template parsed once (on its first `include`).
#[derive(Default)]
struct Sources {
    files: Rc<Vec<(String, String)>>,
    parsed: HashMap<String, Rc<Template>>,
}

impl Chart {
    /// Reads `Chart.yaml`, `values.yaml` and `templates/*` from `dir`.
    pub fn load(dir: &Path) -> Result<Chart, RenderError> {
        let metadata = read_yaml(&dir.join("Chart.yaml"))?;
        let default_values = read_yaml(&dir.join("values.yaml"))?;
        let templates_dir = dir.join("templates");
        let entries = std::fs::read_dir(&templates_dir).map_err(|source| RenderError::Io {
            path: templates_dir.clone(),
            source,
        })?;
        let mut templates = Vec::new();
        for entry in entries {
            let path = entry
                .map_err(|source| RenderError::Io {
                    path: templates_dir.clone(),
                    source,
                })?
                .path();
            if !path.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&path).map_err(|source| RenderError::Io {
                path: path.clone(),
                source,
            })?;
            let file = path.file_name().map(|f| f.to_string_lossy().into_owned());
            templates.push((format!("templates/{}", file.unwrap_or_default()), text));
        }
        templates.sort();
        Ok(Chart {
            metadata,
            default_values,
            templates,
        })
    }

    /// The chart's name from `Chart.yaml`.
    pub fn name(&self) -> &str {
        self.metadata["name"].as_str().unwrap_or_default()
    }

    /// The chart's defaults merged with `files` (in order) and then `sets` (`--set` expressions).
    pub fn values(&self, files: &[Value], sets: &[&str]) -> Result<Value, RenderError> {
        let mut values = self.default_values.clone();
        for file in files {
            merge_values(&mut values, file.clone());
        }
        for set in sets {
            apply_set(&mut values, set)?;
        }
        Ok(values)
    }

    /// Renders every template that is not a partial (`_*`) or `NOTES.txt`, in file order; files
    /// that render to nothing but whitespace are left out, as Helm leaves them out.
    pub fn render(&self, values: &Value, release: &Release) -> Result<Vec<Rendered>, RenderError> {
        let _guard = SourcesGuard::set(self.templates.clone());
        let chart_name = self.name().to_string();
        let mut out = Vec::new();
        for (file, _) in &self.templates {
            let base = file.rsplit('/').next().unwrap_or(file);
            if base.starts_with('_') || base == NOTES {
                continue;
            }
            let name = format!("{chart_name}/{file}");
            let top = self.top_level(values, release, &name);
            let mut template = new_template(file);
            for (other, other_text) in &self.templates {
                template
                    .add_template(other.clone(), other_text.clone())
                    .map_err(|e| template_error(other, e))?;
            }
            let text = template
                .render(&Context::from(top))
                .map_err(|e| template_error(&name, e))?;
            // Helm prints a missing value as nothing rather than Go's `<no value>`.
            let text = text.replace("<no value>", "");
            if !text.trim().is_empty() {
                out.push(Rendered {
                    template: name,
                    text,
                });
            }
        }
        Ok(out)
    }

    /// `templates/NOTES.txt` rendered, as `helm install` prints it; `None` without one.
    pub fn notes(&self, values: &Value, release: &Release) -> Result<Option<String>, RenderError> {
        let path = format!("templates/{NOTES}");
        if !self.templates.iter().any(|(file, _)| *file == path) {
            return Ok(None);
        }
        let _guard = SourcesGuard::set(self.templates.clone());
        let name = format!("{}/{path}", self.name());
        let mut template = new_template(&path);
        for (file, text) in &self.templates {
            template
                .add_template(file.clone(), text.clone())
                .map_err(|e| template_error(file, e))?;
        }
        let text = template
            .render(&Context::from(self.top_level(values, release, &name)))
            .map_err(|e| template_error(&name, e))?;
        Ok(Some(text.replace("<no value>", "")))
    }

    fn top_level(&self, values: &Value, release: &Release, template: &str) -> Tv {
        let meta = &self.metadata;
        let chart = serde_json::json!({
            "Name": meta["name"],
            "Version": meta["version"],
            "AppVersion": meta["appVersion"],
            "Description": meta["description"],
        });
        let release = serde_json::json!({
            "Name": release.name,
            "Namespace": release.namespace,
            "Service": "Helm",
            "IsInstall": release.is_install,
            "IsUpgrade": !release.is_install,
            "Revision": 1,
        });
        let base_path = format!("{}/templates", self.name());
        let top = serde_json::json!({
            "Values": values,
            "Chart": chart,
            "Release": release,
            "Template": {"Name": template, "BasePath": base_path},
        });
        to_template_value(&top)
    }
}

/// Puts the chart's sources where `include` finds them, and takes them away again.
struct SourcesGuard;

impl SourcesGuard {
    fn set(sources: Vec<(String, String)>) -> SourcesGuard {
        SOURCES.with(|s| {
            *s.borrow_mut() = Sources {
                files: Rc::new(sources),
                parsed: HashMap::new(),
            }
        });
        SourcesGuard
    }
}

impl Drop for SourcesGuard {
    fn drop(&mut self) {
        SOURCES.with(|s| *s.borrow_mut() = Sources::default());
    }
}

fn new_template(name: &str) -> Template {
    let mut template = Template::with_name(name);
    template.add_funcs(&funcs());
    template
}

fn template_error(template: &str, e: impl std::fmt::Display) -> RenderError {
    RenderError::Template {
        template: template.to_string(),
        message: e.to_string(),
    }
}

fn read_yaml(path: &Path) -> Result<Value, RenderError> {
    let text = std::fs::read_to_string(path).map_err(|source| RenderError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let value: Value = serde_saphyr::from_str(&text).map_err(|e| RenderError::Yaml {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    Ok(value)
}

/// JSON to the template engine's values; maps become `Map`s so `.Values.a.b` works on them.
pub fn to_template_value(v: &Value) -> Tv {
    match v {
        Value::Null => Tv::Nil,
        Value::Bool(b) => Tv::Bool(*b),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Tv::Number(Number::from(i))
            } else if let Some(u) = n.as_u64() {
                Tv::Number(Number::from(u))
            } else {
                Tv::Number(Number::from(n.as_f64().unwrap_or(0.0)))
            }
        }
        Value::String(s) => Tv::String(s.clone()),
        Value::Array(a) => Tv::Array(a.iter().map(to_template_value).collect()),
        Value::Object(m) => Tv::Map(
            m.iter()
                .map(|(k, v)| (k.clone(), to_template_value(v)))
                .collect::<HashMap<_, _>>(),
        ),
    }
}

/// The template engine's values back to JSON, map keys sorted (as Go's YAML encoder sorts them).
pub fn from_template_value(v: &Tv) -> Value {
    match v {
        Tv::NoValue | Tv::Nil | Tv::Function(_) => Value::Null,
        Tv::Bool(b) => Value::Bool(*b),
        Tv::String(s) => Value::String(s.clone()),
        Tv::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Value::from(i),
            (None, Some(u), _) => Value::from(u),
            (None, None, Some(f)) => {
                serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
            }
            _ => Value::Null,
        },
        Tv::Array(a) => Value::Array(a.iter().map(from_template_value).collect()),
        Tv::Map(m) | Tv::Object(m) => {
            let sorted: BTreeMap<&String, &Tv> = m.iter().collect();
            Value::Object(
                sorted
                    .into_iter()
                    .map(|(k, v)| (k.clone(), from_template_value(v)))
                    .collect(),
            )
        }
    }
}

fn generic(message: impl Into<String>) -> FuncError {
    FuncError::Generic(message.into())
}

/// The text of a value as Go's `%v` prints the scalars the chart passes around.
fn text_of(v: &Tv) -> String {
    match v {
        Tv::NoValue | Tv::Nil => String::new(),
        other => other.to_string(),
    }
}

fn string_arg<'a>(args: &'a [Tv], i: usize, func: &str) -> Result<&'a str, FuncError> {
    match args.get(i) {
        Some(Tv::String(s)) => Ok(s),
        _ => Err(generic(format!(
            "{func}: argument {} must be a string",
            i + 1
        ))),
    }
}

fn int_arg(args: &[Tv], i: usize, func: &str) -> Result<i64, FuncError> {
    match args.get(i) {
        Some(Tv::Number(n)) => n
            .as_i64()
            .ok_or_else(|| generic(format!("{func}: argument {} must be an integer", i + 1))),
        _ => Err(generic(format!(
            "{func}: argument {} must be an integer",
            i + 1
        ))),
    }
}

/// Sprig's emptiness: nil, false, 0, "" and empty lists and maps.
fn is_empty(v: &Tv) -> bool {
    match v {
        Tv::NoValue | Tv::Nil => true,
        Tv::Bool(b) => !b,
        Tv::String(s) => s.is_empty(),
        Tv::Array(a) => a.is_empty(),
        Tv::Map(m) | Tv::Object(m) => m.is_empty(),
        Tv::Number(n) => number_of(n) == Some(0.0),
        Tv::Function(_) => false,
    }
}

/// `include NAME CONTEXT`: renders a named template to a string, so it can be piped.
fn include(args: &[Tv]) -> Result<Tv, FuncError> {
    let name = string_arg(args, 0, "include")?;
    let ctx = args.get(1).cloned().unwrap_or(Tv::Nil);
    let template = match SOURCES.with(|s| s.borrow().parsed.get(name).cloned()) {
        Some(t) => t,
        None => {
            let files = SOURCES.with(|s| Rc::clone(&s.borrow().files));
            let mut template = new_template(name);
            for (file, text) in files.iter() {
                template
                    .add_template(file.clone(), text.clone())
                    .map_err(|e| generic(format!("include {name:?}: {file}: {e}")))?;
            }
            if !template.tree_set.contains_key(name) {
                return Err(generic(format!("include: no template named {name:?}")));
            }
            let template = Rc::new(template);
            SOURCES.with(|s| {
                s.borrow_mut()
                    .parsed
                    .insert(name.to_string(), Rc::clone(&template))
            });
            template
        }
    };
    let text = template
        .render(&Context::from(ctx))
        .map_err(|e| generic(format!("include {name:?}: {e}")))?;
    Ok(Tv::String(text.replace("<no value>", "")))
}

/// `toYaml V`: block-style YAML without the trailing newline, as Helm's `toYaml` writes it.
fn to_yaml(args: &[Tv]) -> Result<Tv, FuncError> {
    let value = from_template_value(args.first().unwrap_or(&Tv::Nil));
    let text = serde_saphyr::to_string(&value).map_err(|e| generic(format!("toYaml: {e}")))?;
    let text = text.strip_prefix("---\n").unwrap_or(&text);
    Ok(Tv::String(text.trim_end_matches('\n').to_string()))
}

fn indent_text(n: i64, text: &str) -> String {
    let pad = " ".repeat(usize::try_from(n).unwrap_or(0));
    text.split('\n')
        .map(|line| format!("{pad}{line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn indent(args: &[Tv]) -> Result<Tv, FuncError> {
    let n = int_arg(args, 0, "indent")?;
    let text = text_of(args.get(1).unwrap_or(&Tv::Nil));
    Ok(Tv::String(indent_text(n, &text)))
}

fn nindent(args: &[Tv]) -> Result<Tv, FuncError> {
    let n = int_arg(args, 0, "nindent")?;
    let text = text_of(args.get(1).unwrap_or(&Tv::Nil));
    Ok(Tv::String(format!("\n{}", indent_text(n, &text))))
}

/// `quote V...`: each non-nil argument as a double-quoted string, space separated.
fn quote(args: &[Tv]) -> Result<Tv, FuncError> {
    let quoted: Vec<String> = args
        .iter()
        .filter(|v| !matches!(v, Tv::Nil | Tv::NoValue))
        .map(|v| Value::String(text_of(v)).to_string())
        .collect();
    Ok(Tv::String(quoted.join(" ")))
}

/// `default D V`: V unless it is empty, else D.
fn default(args: &[Tv]) -> Result<Tv, FuncError> {
    let fallback = args
        .first()
        .cloned()
        .ok_or_else(|| generic("default needs a default value"))?;
    match args.get(1) {
        Some(v) if !is_empty(v) => Ok(v.clone()),
        _ => Ok(fallback),
    }
}

/// `required MSG V`: V, or a render failure with MSG when V is nil or an empty string.
fn required(args: &[Tv]) -> Result<Tv, FuncError> {
    let message = string_arg(args, 0, "required")?;
    match args.get(1) {
        None | Some(Tv::Nil | Tv::NoValue) => Err(generic(message)),
        Some(Tv::String(s)) if s.is_empty() => Err(generic(message)),
        Some(v) => Ok(v.clone()),
    }
}

/// `fail MSG`: stops rendering with MSG.
fn fail(args: &[Tv]) -> Result<Tv, FuncError> {
    Err(generic(string_arg(args, 0, "fail")?))
}

/// `trunc N S`: the first N characters of S.
fn trunc(args: &[Tv]) -> Result<Tv, FuncError> {
    let n = usize::try_from(int_arg(args, 0, "trunc")?).unwrap_or(0);
    let s = text_of(args.get(1).unwrap_or(&Tv::Nil));
    Ok(Tv::String(s.chars().take(n).collect()))
}

fn trim_suffix(args: &[Tv]) -> Result<Tv, FuncError> {
    let suffix = string_arg(args, 0, "trimSuffix")?;
    let s = text_of(args.get(1).unwrap_or(&Tv::Nil));
    Ok(Tv::String(s.strip_suffix(suffix).unwrap_or(&s).to_string()))
}

fn replace(args: &[Tv]) -> Result<Tv, FuncError> {
    let old = string_arg(args, 0, "replace")?;
    let new = string_arg(args, 1, "replace")?;
    let s = text_of(args.get(2).unwrap_or(&Tv::Nil));
    Ok(Tv::String(s.replace(old, new)))
}

fn contains(args: &[Tv]) -> Result<Tv, FuncError> {
    let needle = string_arg(args, 0, "contains")?;
    let s = text_of(args.get(1).unwrap_or(&Tv::Nil));
    Ok(Tv::Bool(s.contains(needle)))
}

fn has_key(args: &[Tv]) -> Result<Tv, FuncError> {
    let key = string_arg(args, 1, "hasKey")?;
    match args.first() {
        Some(Tv::Map(m) | Tv::Object(m)) => Ok(Tv::Bool(m.contains_key(key))),
        _ => Ok(Tv::Bool(false)),
    }
}

fn empty(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::Bool(is_empty(args.first().unwrap_or(&Tv::Nil))))
}

fn to_string(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::String(text_of(args.first().unwrap_or(&Tv::Nil))))
}

fn number_of(n: &Number) -> Option<f64> {
    n.as_f64()
        .or_else(|| n.as_i64().map(|i| i as f64))
        .or_else(|| n.as_u64().map(|u| u as f64))
}

fn compare(args: &[Tv], func: &str) -> Result<std::cmp::Ordering, FuncError> {
    let incomparable = || generic(format!("{func}: incompatible types for comparison"));
    match (args.first(), args.get(1)) {
        (Some(Tv::Number(a)), Some(Tv::Number(b))) => {
            let (a, b) = (number_of(a), number_of(b));
            a.zip(b)
                .and_then(|(a, b)| a.partial_cmp(&b))
                .ok_or_else(incomparable)
        }
        (Some(Tv::String(a)), Some(Tv::String(b))) => Ok(a.cmp(b)),
        _ => Err(incomparable()),
    }
}

fn lt(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::Bool(compare(args, "lt")?.is_lt()))
}

fn le(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::Bool(compare(args, "le")?.is_le()))
}

fn gt(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::Bool(compare(args, "gt")?.is_gt()))
}

fn ge(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::Bool(compare(args, "ge")?.is_ge()))
}

/// `splitList SEP S`: S split at each SEP.
fn split_list(args: &[Tv]) -> Result<Tv, FuncError> {
    let sep = string_arg(args, 0, "splitList")?;
    let s = text_of(args.get(1).unwrap_or(&Tv::Nil));
    Ok(Tv::Array(
        s.split(sep).map(|p| Tv::String(p.to_string())).collect(),
    ))
}

fn list(args: &[Tv]) -> Result<Tv, FuncError> {
    Ok(Tv::Array(args.to_vec()))
}

/// Go's kind of a value as Helm sees values: `invalid` for nil, `bool`, `string`, `map`,
/// `slice`, `int64`, `float64`.
fn kind_of(v: &Tv) -> &'static str {
    match v {
        Tv::NoValue | Tv::Nil => "invalid",
        Tv::Bool(_) => "bool",
        Tv::String(_) => "string",
        Tv::Map(_) | Tv::Object(_) => "map",
        Tv::Array(_) => "slice",
        Tv::Number(n) if n.as_i64().is_some() || n.as_u64().is_some() => "int64",
        Tv::Number(_) => "float64",
        Tv::Function(_) => "func",
    }
}

fn kind_is(args: &[Tv]) -> Result<Tv, FuncError> {
    let kind = string_arg(args, 0, "kindIs")?;
    Ok(Tv::Bool(kind_of(args.get(1).unwrap_or(&Tv::Nil)) == kind))
}

/// `regexMatch RE S`. False for a non-string S: Go's `and` stops before such a call, this
/// engine's `and` does not.
fn regex_match(args: &[Tv]) -> Result<Tv, FuncError> {
    let pattern = string_arg(args, 0, "regexMatch")?;
    let re = regex::Regex::new(pattern).map_err(|e| generic(format!("regexMatch: {e}")))?;
    match args.get(1) {
        Some(Tv::String(s)) => Ok(Tv::Bool(re.is_match(s))),
        _ => Ok(Tv::Bool(false)),
    }
}

/// `float64 V`: a number as a float, a numeric string parsed, anything else 0 (as Sprig's cast).
fn float64(args: &[Tv]) -> Result<Tv, FuncError> {
    let f = match args.first() {
        Some(Tv::Number(n)) => number_of(n).unwrap_or(0.0),
        Some(Tv::String(s)) => s.trim().parse().unwrap_or(0.0),
        _ => 0.0,
    };
    Ok(Tv::Number(Number::from(f)))
}

/// `sha256sum S`: the hex SHA-256 of S, for annotations that roll pods when a ConfigMap changes.
fn sha256sum(args: &[Tv]) -> Result<Tv, FuncError> {
    use sha2::Digest;
    let text = text_of(args.first().unwrap_or(&Tv::Nil));
    let digest = sha2::Sha256::digest(text.as_bytes());
    Ok(Tv::String(
        digest.iter().map(|b| format!("{b:02x}")).collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render_one(text: &str, values: Value) -> Result<String, RenderError> {
        let chart = Chart {
            metadata: serde_json::json!({"name": "t", "version": "0.1.0", "appVersion": "1"}),
            default_values: values,
            templates: vec![
                (
                    "templates/_helpers.tpl".to_string(),
                    r#"{{- define "t.name" -}}{{ .Chart.Name }}-{{ .Release.Name | trunc 5 }}{{- end }}"#
                        .to_string(),
                ),
                ("templates/x.yaml".to_string(), text.to_string()),
            ],
        };
        let values = chart.default_values.clone();
        let out = chart.render(&values, &Release::install("release-name", "ns"))?;
        Ok(out.into_iter().map(|r| r.text).collect())
    }

    #[test]
    fn include_reaches_named_templates_of_other_files() {
        let out = render_one(r#"name: {{ include "t.name" . | quote }}"#, Value::Null).unwrap();
        assert_eq!(out, r#"name: "t-relea""#);
    }

    #[test]
    fn to_yaml_quotes_strings_that_would_change_type_and_nindent_indents() {
        let values =
            serde_json::json!({"s": {"v": "1.36", "b": "true", "n": 3, "e": {}, "l": ["a"]}});
        let out = render_one("x:{{ toYaml .Values.s | nindent 2 }}", values).unwrap();
        let parsed: Value = serde_saphyr::from_str(&out).unwrap();
        assert_eq!(
            parsed,
            serde_json::json!({"x": {"v": "1.36", "b": "true", "n": 3, "e": {}, "l": ["a"]}}),
            "{out}"
        );
    }

    #[test]
    fn default_required_and_fail_behave_like_sprig() {
        let values = serde_json::json!({"empty": "", "set": "x"});
        assert_eq!(
            render_one(r#"{{ .Values.empty | default "d" }}/{{ .Values.set | default "d" }}/{{ .Values.missing | default "m" }}"#, values.clone()).unwrap(),
            "d/x/m"
        );
        let e = render_one(
            r#"{{ required "empty is required" .Values.empty }}"#,
            values.clone(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("empty is required"), "{e}");
        let e = render_one(
            r#"{{ if .Values.set }}{{ fail "no x allowed" }}{{ end }}"#,
            values,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no x allowed"), "{e}");
    }

    #[test]
    fn values_merge_files_then_sets() {
        let chart = Chart {
            metadata: serde_json::json!({"name": "t"}),
            default_values: serde_json::json!({"a": {"b": 1, "c": 2}}),
            templates: Vec::new(),
        };
        let v = chart
            .values(&[serde_json::json!({"a": {"c": 3}})], &["a.d=x"])
            .unwrap();
        assert_eq!(v, serde_json::json!({"a": {"b": 1, "c": 3, "d": "x"}}));
    }
}
