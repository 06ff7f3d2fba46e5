//! A browser test of `joiner simulate --report`: headless Chromium renders the HTML page and
//! the screenshot must show every chart's series, in its colour.
//!
//! `.ci/run` installs Debian's Chromium; where there is none (a developer machine, or a CI run
//! whose package install failed) the test says so on stderr and passes.

use std::path::{Path, PathBuf};
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .map(|name| Path::new("/usr/bin").join(name))
        .find(|p| p.exists())
}

/// Pixels within a small distance of `rgb` (anti-aliasing blends line edges).
fn count_near(pixels: &[u8], channels: usize, rgb: (u8, u8, u8)) -> usize {
    pixels
        .chunks_exact(channels)
        .filter(|px| {
            let d = |a: u8, b: u8| (a as i32 - b as i32).abs();
            d(px[0], rgb.0) < 24 && d(px[1], rgb.1) < 24 && d(px[2], rgb.2) < 24
        })
        .count()
}

#[test]
fn the_report_renders_its_charts_in_a_browser() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must have Chromium installed for the report's browser test"
        );
        eprintln!("no Chromium here: browser test not run");
        return;
    };
    let root = joiner_test_support::example_dir("learning-lab-day");
    let dir = std::env::temp_dir().join(format!("joiner-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args([
            "simulate",
            "-f",
            &root.display().to_string(),
            "--scenario",
            &root.join("scenario.yaml").display().to_string(),
            "--report",
            &report.display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shot = dir.join("report.png");
    let status = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", dir.join("profile").display()),
            "--window-size=1200,2200",
            &format!("--screenshot={}", shot.display()),
            &format!("file://{}", report.display()),
        ])
        .output()
        .unwrap();
    assert!(
        shot.exists(),
        "no screenshot: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels = &buf[..info.buffer_size()];
    // A colour no chart uses stays absent: the check can fail.
    assert!(
        count_near(pixels, channels, (0xff, 0xff, 0x00)) < 10,
        "unexpected yellow"
    );
    // The series colours of the four charts (nodes, cost, GPU allocation, running pods).
    for (name, rgb) in [
        ("nodes", (0x2b, 0x6c, 0xb0)),
        ("cost", (0xc0, 0x56, 0x21)),
        ("GPU allocation", (0x2f, 0x85, 0x5a)),
        ("running pods", (0x55, 0x3c, 0x9a)),
    ] {
        let n = count_near(pixels, channels, rgb);
        assert!(
            n > 200,
            "the {name} series is not drawn ({n} pixels of its colour)"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
