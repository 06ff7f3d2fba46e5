//! `joiner simulate` as a command: a scenario file and manifests in; the timeline and summary
//! (text or JSON lines) out, and the HTML report where asked. The `joiner` binary parses the
//! command line and loads the manifests and settings; everything after that is here.

use std::io::Write;
use std::path::{Path, PathBuf};

use joiner_model::Manifests;
use joiner_model::settings::Settings;
use serde_json::json;

use crate::error::{Context, Error};
use crate::progress::Progress;
use crate::report;
use crate::run::{Outcome, simulate_observed};
use crate::scenario::Scenario;

/// What `joiner simulate` was asked.
pub struct Request {
    pub manifests: Manifests,
    pub settings: Settings,
    /// The scenario file.
    pub scenario: PathBuf,
    /// Where to write the HTML report, if anywhere.
    pub report: Option<PathBuf>,
    /// JSON lines (one per event, then the summary) instead of text.
    pub json: bool,
    /// Where to write the Prometheus exposition the controller would serve at the end.
    pub metrics: Option<PathBuf>,
    /// Where to write the Kubernetes Events it published, as JSON lines.
    pub events: Option<PathBuf>,
}

/// Runs `joiner simulate`: the timeline and summary go to `out`, a progress bar to standard
/// error while it is a terminal.
pub fn run(req: Request, out: &mut dyn Write) -> Result<(), Error> {
    let scenario = Scenario::load(&req.scenario)?;
    let bar = Progress::on_terminal(&scenario.name);
    let outcome = simulate_observed(
        &req.manifests,
        req.settings,
        &scenario,
        &mut |done, total| bar.update(done, total),
        req.metrics.is_some() || req.events.is_some(),
    );
    bar.finish();
    let outcome = outcome?;
    let mut text = String::new();
    if req.json {
        for e in &outcome.events {
            text.push_str(&serde_json::to_string(e)?);
            text.push('\n');
        }
        text.push_str(&serde_json::to_string(
            &json!({"summary": outcome.summary}),
        )?);
        text.push('\n');
    } else {
        for e in &outcome.events {
            text.push_str(&report::line(e));
            text.push('\n');
        }
        text.push_str(&report::summary_text(&outcome.summary));
    }
    out.write_all(text.as_bytes())?;
    if let Some(path) = &req.report {
        write_report(path, &outcome)?;
    }
    if let Some(observer) = &outcome.telemetry {
        if let Some(path) = &req.metrics {
            std::fs::write(path, observer.exposition())
                .context(|| format!("writing {}", path.display()))?;
        }
        if let Some(path) = &req.events {
            let mut lines = String::new();
            for e in observer.events() {
                lines.push_str(&serde_json::to_string(e)?);
                lines.push('\n');
            }
            std::fs::write(path, lines).context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

fn write_report(path: &Path, outcome: &Outcome) -> Result<(), Error> {
    let html = report::html(outcome);
    std::fs::write(path, html).context(|| format!("writing {}", path.display()))
}
