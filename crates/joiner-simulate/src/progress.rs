//! Progress of a long simulation, on standard error and only when that is a terminal: piped or
//! redirected output (CI, `> file`, the tests) is exactly what it would be without it.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::run::clock_text;

/// A progress bar over simulated time, or nothing.
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A bar on standard error when it is a terminal; otherwise one that draws nothing.
    pub fn on_terminal(scenario: &str) -> Progress {
        Progress::new(scenario, std::io::stderr().is_terminal())
    }

    fn new(scenario: &str, draw: bool) -> Progress {
        if !draw {
            return Progress { bar: None };
        }
        let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
        // The template is fixed and valid; fall back to the default style if it ever is not.
        if let Ok(style) =
            ProgressStyle::with_template("{prefix} [{bar:40}] {msg} ({elapsed}, ETA {eta})")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(format!("simulating {scenario}"));
        Progress { bar: Some(bar) }
    }

    /// `done` of `total` simulated seconds.
    pub fn update(&self, done: u64, total: u64) {
        if let Some(bar) = &self.bar {
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(format!("{} / {}", clock_text(done), clock_text(total)));
        }
    }

    /// Clears the bar, leaving the terminal as it was.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_bar_when_not_drawing() {
        let p = Progress::new("x", false);
        assert!(p.bar.is_none());
        p.update(5, 10);
        p.finish();
        let shown = Progress::new("x", true);
        shown.update(30, 60);
        assert_eq!(shown.bar.as_ref().map(|b| b.position()), Some(30));
        shown.finish();
    }
}
