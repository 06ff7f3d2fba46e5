//! The whole-process benchmark: what a user waits for when `joiner plan` reads files from disk,
//! beside what only parsing those files costs. Each figure comes from a fresh child process of
//! this executable (the time from spawn to exit, and the peak resident memory the kernel
//! reports for it), so allocation, page faults and start-up are all counted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};

/// One child process's cost.
struct Measured {
    secs: f64,
    peak_mib: f64,
}

/// How the pods are written: as `kubectl get -o yaml` and `-o json` write them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    /// One YAML document per pod.
    Yaml,
    /// One JSON `List` of every pod.
    Json,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Yaml => "yaml",
            Format::Json => "json",
        }
    }
}

/// Runs the scheduling benchmark's shape as files, at each size and in each format: parse only
/// (to generic values), read (typed objects, as every command reads them) and the whole
/// `joiner plan`.
pub fn run(sizes: &[usize]) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("the path of this executable")?;
    println!(
        "\nWhole process (the scheduling benchmark's pods, instance types and NodePool as files; `joiner plan -f DIR -o json`, one child process per figure)"
    );
    println!(
        "{:>8}  {:>6}  {:>9}  {:>16}  {:>16}  {:>16}  {:>10}",
        "PODS",
        "FORMAT",
        "INPUT MiB",
        "PARSE s / MiB",
        "READ s / MiB",
        "PLAN s / MiB",
        "PLAN/PARSE"
    );
    for &pods in sizes {
        for format in [Format::Yaml, Format::Json] {
            measure(&exe, pods, format)?;
        }
    }
    Ok(())
}

/// One row of the table: the three children on one size and format.
fn measure(exe: &PathBuf, pods: usize, format: Format) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!(
        "joiner-bench-{}-{pods}-{}",
        std::process::id(),
        format.name()
    ));
    let input_mib = write_shape(&dir, pods, format)?;
    let dir_arg = dir.display().to_string();
    let figures = (|| -> anyhow::Result<[Measured; 3]> {
        Ok([
            child(exe, &["bench", "--parse-only", &dir_arg], &dir)?,
            child(exe, &["bench", "--read-only", &dir_arg], &dir)?,
            child(exe, &["plan", "-f", &dir_arg, "-o", "json"], &dir)?,
        ])
    })();
    let _ = std::fs::remove_dir_all(&dir);
    let [parse, read, plan] = figures?;
    let cell = |m: &Measured| format!("{:.3} / {:.0}", m.secs, m.peak_mib);
    println!(
        "{pods:>8}  {:>6}  {input_mib:>9.1}  {:>16}  {:>16}  {:>16}  {:>10.2}",
        format.name(),
        cell(&parse),
        cell(&read),
        cell(&plan),
        plan.secs / parse.secs
    );
    Ok(())
}

/// `joiner bench --write-input DIR`: the files of each size, under `DIR/<pods>` (YAML) and
/// `DIR/<pods>-json`.
pub fn write_inputs(dir: &Path, sizes: &[usize]) -> anyhow::Result<()> {
    for &pods in sizes {
        for format in [Format::Yaml, Format::Json] {
            let at = match format {
                Format::Yaml => dir.join(pods.to_string()),
                Format::Json => dir.join(format!("{pods}-json")),
            };
            let mib = write_shape(&at, pods, format)?;
            println!("{}: {pods} pods, {mib:.1} MiB", at.display());
        }
    }
    Ok(())
}

/// Writes the benchmark's documents as two files, the pods in `format` and the NodePool,
/// EC2NodeClass and instance types as YAML, and returns their size in MiB.
fn write_shape(dir: &Path, pods: usize, format: Format) -> anyhow::Result<f64> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let docs = joiner_engine::bench::scheduling_documents(pods);
    let (pods, setup): (Vec<_>, Vec<_>) = docs.into_iter().partition(|d| d["kind"] == "Pod");
    let pods_file = match format {
        Format::Yaml => ("pods.yaml", yaml_stream(&pods)?),
        Format::Json => (
            "pods.json",
            serde_json::to_string_pretty(
                &serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pods}),
            )?,
        ),
    };
    let mut bytes = 0;
    for (name, text) in [pods_file, ("pool.yaml", yaml_stream(&setup)?)] {
        bytes += text.len();
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
    }
    Ok(bytes as f64 / (1 << 20) as f64)
}

/// Documents as one YAML stream, each after a `---`.
fn yaml_stream(docs: &[serde_json::Value]) -> anyhow::Result<String> {
    let mut text = String::new();
    for doc in docs {
        text.push_str("---\n");
        text.push_str(&serde_saphyr::to_string(doc)?);
    }
    Ok(text)
}

/// Runs this executable with `args` and measures it; its output is discarded and its errors
/// kept in `dir` to report a failure.
fn child(exe: &PathBuf, args: &[&str], dir: &Path) -> anyhow::Result<Measured> {
    let errors = dir.join("stderr.txt");
    let start = Instant::now();
    let process = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&errors)?)
        .spawn()
        .context("starting the benchmark's child process")?;
    let (ok, peak_kib) = wait_with_peak_rss(process.id())?;
    let secs = start.elapsed().as_secs_f64();
    if !ok {
        let text = std::fs::read_to_string(&errors).unwrap_or_default();
        bail!("joiner {} failed: {text}", args.join(" "));
    }
    Ok(Measured {
        secs,
        peak_mib: peak_kib as f64 / 1024.0,
    })
}

/// Waits for the child `pid` and returns whether it succeeded and its peak resident memory in
/// KiB. The standard library's `wait` does not give the child's resource usage, so this asks
/// the kernel directly (`wait4`).
fn wait_with_peak_rss(pid: u32) -> anyhow::Result<(bool, i64)> {
    let mut status: libc::c_int = 0;
    // SAFETY: `rusage` is plain old data, for which all-zero bytes are a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = libc::pid_t::try_from(pid).context("child process id")?;
    // SAFETY: both pointers are to live locals of the right types; `pid` is our own child,
    // spawned above and not yet waited for.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if waited != pid {
        bail!(
            "waiting for the benchmark's child process: {}",
            std::io::Error::last_os_error()
        );
    }
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok((ok, usage.ru_maxrss))
}

/// `joiner bench --parse-only DIR`: reads the manifest files under `path` and parses them into
/// generic values one document at a time, as every command does, and nothing more: the floor
/// under any command that reads them.
pub fn parse_only(path: &Path) -> anyhow::Result<()> {
    let mut documents = 0;
    for file in crate::load::expand_path(path)? {
        let text = std::fs::read_to_string(&file).with_context(|| format!("{}", file.display()))?;
        joiner_model::for_each_document(&file.display().to_string(), &text, |_| {
            documents += 1;
            Ok(())
        })?;
    }
    println!("{documents} documents");
    Ok(())
}

/// `joiner bench --read-only DIR`: reads the files as every command does, into typed objects,
/// and plans nothing.
pub fn read_only(path: &Path) -> anyhow::Result<()> {
    let manifests = crate::load::load_manifests(&[path.to_path_buf()])?;
    println!("{} objects", manifests.object_count());
    Ok(())
}
