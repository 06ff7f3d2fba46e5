//! The run as people read it: the timeline line by line and the summary as text, and the
//! self-contained HTML report with inline SVG charts.

use std::fmt::Write as _;

use serde_json::Value;

use crate::run::{Outcome, Sample, Summary, clock_text};

/// The human-readable line of one timeline event.
pub fn line(e: &Value) -> String {
    let at = e["at"].as_str().unwrap_or_default();
    let event = e["event"].as_str().unwrap_or_default();
    let mut rest: Vec<String> = Vec::new();
    if let Value::Object(m) = e {
        for (k, v) in m {
            if matches!(k.as_str(), "at" | "t" | "event") || v.is_null() {
                continue;
            }
            if let Value::Array(a) = v
                && a.is_empty()
            {
                continue;
            }
            let text = match v {
                Value::String(s) => s.clone(),
                Value::Array(a) => a
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| x.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(","),
                other => other.to_string(),
            };
            rest.push(format!("{k}={text}"));
        }
    }
    format!("{at}  {event:<24} {}", rest.join(" "))
}

/// The summary as the text output ends with.
pub fn summary_text(s: &Summary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nSummary of {:?} ({} simulated, {} s ticks)",
        s.scenario,
        clock_text(s.simulated_seconds),
        s.tick_seconds
    );
    let _ = writeln!(
        out,
        "  nodes: peak {} (instances {}), at the end {}; {} instances launched",
        s.peak_nodes, s.peak_instances, s.final_nodes, s.instances_launched
    );
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>10} {:>10}",
        "INSTANCE TYPE", "NODE-HOURS", "USD/H", "COST USD"
    );
    for (t, u) in &s.by_instance_type {
        let _ = writeln!(
            out,
            "  {:<16} {:>10.2} {:>10.4} {:>10.2}",
            t, u.node_hours, u.price_per_hour, u.cost
        );
    }
    let _ = writeln!(
        out,
        "  {:<16} {:>10.2} {:>10} {:>10.2}",
        "total", s.total_node_hours, "", s.total_cost
    );
    let _ = writeln!(
        out,
        "  pods scheduled: {}; pending time mean {:.1} s, max {:.0} s; still pending {}",
        s.pods_scheduled, s.pending_mean_seconds, s.pending_max_seconds, s.pods_still_pending
    );
    let _ = writeln!(
        out,
        "  GPU allocation (time-weighted): {:.1}%",
        s.gpu_allocation_mean * 100.0
    );
    let d: Vec<String> = s
        .disruptions
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        out,
        "  disruptions: {}",
        if d.is_empty() {
            "none".into()
        } else {
            d.join(", ")
        }
    );
    if let Some(r) = &s.repairs {
        let rebooted = if r.rebooted > 0 {
            format!(
                "rebooted {} times ({} mended by a reboot), ",
                r.rebooted, r.recovered_by_reboot
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  nodes failed: {}; {rebooted}replaced by node repair {}, time to repair mean {:.0} s, max {:.0} s",
            r.failed, r.repaired, r.mean_seconds, r.max_seconds
        );
    }
    let _ = writeln!(out, "  errors (retried): {}", s.errors);
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Series<'a> {
    name: &'a str,
    color: &'a str,
    /// Drawn dashed and thin (a secondary series).
    dashed: bool,
    value: Box<dyn Fn(&Sample) -> f64 + 'a>,
}

const W: f64 = 880.0;
const H: f64 = 220.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 28.0;

fn nice_max(max: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let mag = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * mag >= max {
            return m * mag;
        }
    }
    10.0 * mag
}

/// One chart: step lines over time, gridlines, hour ticks and a legend.
fn chart(
    id: &str,
    title: &str,
    unit: &str,
    samples: &[Sample],
    series: &[Series<'_>],
    fixed_max: Option<f64>,
    integer: bool,
) -> String {
    let end = samples.last().map_or(1, |s| s.t).max(1) as f64;
    let max = fixed_max.unwrap_or_else(|| {
        nice_max(
            samples
                .iter()
                .flat_map(|s| series.iter().map(move |x| (x.value)(s)))
                .fold(0.0, f64::max),
        )
    });
    let x = |t: u64| LEFT + (t as f64 / end) * (W - LEFT - RIGHT);
    let y = |v: f64| TOP + (1.0 - v / max) * (H - TOP - BOTTOM);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg id="{id}" class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{t}"><title>{t}</title>"#,
        t = esc(title)
    );
    let _ = write!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="#fbfbfd" stroke="#ddd"/>"##,
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    // Whole-number gridlines for small counts.
    let divisions =
        if fixed_max.is_none() && max <= 10.0 && max.fract() == 0.0 && unit.is_empty() && integer {
            max as usize
        } else {
            4
        };
    for i in 0..=divisions {
        let v = max * i as f64 / divisions as f64;
        let yy = y(v);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e4e4ea"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end" fill="#555">{}{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            trim(v),
            esc(unit)
        );
    }
    let hours = (end / 3600.0).ceil() as u64;
    let every = if hours > 48 {
        12
    } else if hours > 12 {
        2
    } else {
        1
    };
    let mut h = 0;
    while h * 3600 <= end as u64 {
        let xx = x(h * 3600);
        let _ = write!(
            svg,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{TOP}" y2="{}" stroke="#eee"/><text x="{xx:.1}" y="{}" font-size="11" text-anchor="middle" fill="#555">{:02}:00</text>"##,
            H - BOTTOM,
            H - BOTTOM + 16.0,
            h % 24
        );
        h += every;
    }
    for (i, s) in series.iter().enumerate() {
        let mut d = String::new();
        let mut prev: Option<f64> = None;
        for p in samples {
            let v = (s.value)(p);
            match prev {
                None => {
                    let _ = write!(d, "M{:.1} {:.1}", x(p.t), y(v));
                }
                Some(pv) => {
                    let _ = write!(d, " H{:.1}", x(p.t));
                    if (pv - v).abs() > f64::EPSILON {
                        let _ = write!(d, " V{:.1}", y(v));
                    }
                }
            }
            prev = Some(v);
        }
        let _ = write!(
            svg,
            r#"<path class="series" data-series="{n}" d="{d}" fill="none" stroke="{c}" stroke-width="{w}"{dash}><title>{n}</title></path>"#,
            n = esc(s.name),
            c = s.color,
            w = if s.dashed { "1.5" } else { "2.5" },
            dash = if s.dashed {
                r#" stroke-dasharray="5 3""#
            } else {
                ""
            }
        );
        let lx = LEFT + 10.0 + i as f64 * 200.0;
        let _ = write!(
            svg,
            r##"<rect x="{lx:.1}" y="{}" width="12" height="4" fill="{c}"/><text x="{:.1}" y="{}" font-size="12" fill="#333">{n}</text>"##,
            TOP + 8.0,
            lx + 16.0,
            TOP + 13.0,
            c = s.color,
            n = esc(s.name)
        );
    }
    svg.push_str("</svg>");
    format!("<section><h2>{}</h2>{svg}</section>\n", esc(title))
}

fn trim(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.2}")
    }
}

/// The whole page.
pub fn html(o: &Outcome) -> String {
    let s = &o.summary;
    let samples = &o.samples;
    let mut page = String::new();
    let _ = write!(
        page,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>joiner simulate: {name}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 920px; color: #222; }}
h1 {{ font-size: 22px; margin-bottom: 4px; }}
h2 {{ font-size: 16px; margin: 22px 0 6px; }}
.cards {{ display: flex; flex-wrap: wrap; gap: 10px; margin: 14px 0; }}
.card {{ background: #f3f4f8; border-radius: 8px; padding: 10px 14px; min-width: 120px; }}
.card b {{ display: block; font-size: 20px; }}
.card span {{ font-size: 12px; color: #555; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ padding: 4px 10px; border-bottom: 1px solid #e4e4ea; text-align: right; }}
td:first-child, th:first-child {{ text-align: left; }}
pre {{ font-size: 12px; background: #f6f6f9; padding: 10px; overflow-x: auto; }}
</style>
</head>
<body>
<h1>Simulation: {name}</h1>
<p>{dur} simulated in {tick} s steps by <code>joiner simulate</code>: the controller's provisioning, lifecycle and disruption loops against a simulated cloud.</p>
"#,
        name = esc(&s.scenario),
        dur = clock_text(s.simulated_seconds),
        tick = s.tick_seconds
    );
    page.push_str("<div class=\"cards\">\n");
    for (value, label) in [
        (s.peak_nodes.to_string(), "peak nodes"),
        (s.final_nodes.to_string(), "nodes at the end"),
        (format!("{:.2}", s.total_node_hours), "node-hours"),
        (format!("${:.2}", s.total_cost), "total cost"),
        (
            format!("{:.0}%", s.gpu_allocation_mean * 100.0),
            "GPU allocation",
        ),
        (
            format!("{:.0} s", s.pending_mean_seconds),
            "mean pending time",
        ),
        (
            format!("{:.0} s", s.pending_max_seconds),
            "max pending time",
        ),
    ] {
        let _ = writeln!(
            page,
            "<div class=\"card\"><b>{}</b><span>{}</span></div>",
            esc(&value),
            label
        );
    }
    page.push_str("</div>\n");
    page.push_str(&chart(
        "nodes",
        "Nodes over time",
        "",
        samples,
        &[
            Series {
                name: "instances (incl. draining)",
                color: "#a0aec0",
                dashed: true,
                value: Box::new(|p| p.instances as f64),
            },
            Series {
                name: "nodes",
                color: "#2b6cb0",
                dashed: false,
                value: Box::new(|p| p.nodes as f64),
            },
        ],
        None,
        true,
    ));
    page.push_str(&chart(
        "cost",
        "Cost per hour (USD)",
        "",
        samples,
        &[Series {
            name: "cost per hour",
            color: "#c05621",
            dashed: false,
            value: Box::new(|p| p.cost_per_hour),
        }],
        None,
        false,
    ));
    page.push_str(&chart(
        "gpu",
        "GPU allocation (requested / allocatable)",
        "%",
        samples,
        &[Series {
            name: "GPU allocation",
            color: "#2f855a",
            dashed: false,
            value: Box::new(|p| {
                if p.gpus_allocatable > 0.0 {
                    100.0 * p.gpus_requested / p.gpus_allocatable
                } else {
                    0.0
                }
            }),
        }],
        Some(100.0),
        false,
    ));
    page.push_str(&chart(
        "pods",
        "Pods",
        "",
        samples,
        &[
            Series {
                name: "running",
                color: "#553c9a",
                dashed: false,
                value: Box::new(|p| p.pods_running as f64),
            },
            Series {
                name: "pending",
                color: "#e53e3e",
                dashed: false,
                value: Box::new(|p| p.pods_pending as f64),
            },
        ],
        None,
        true,
    ));
    page.push_str("<h2>Node-hours and cost by instance type</h2>\n<table><tr><th>instance type</th><th>node-hours</th><th>USD/h</th><th>cost (USD)</th></tr>\n");
    for (t, u) in &s.by_instance_type {
        let _ = writeln!(
            page,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.4}</td><td>{:.2}</td></tr>",
            esc(t),
            u.node_hours,
            u.price_per_hour,
            u.cost
        );
    }
    let _ = writeln!(
        page,
        "<tr><td><b>total</b></td><td><b>{:.2}</b></td><td></td><td><b>{:.2}</b></td></tr>\n</table>",
        s.total_node_hours, s.total_cost
    );
    page.push_str("<h2>Decisions</h2>\n<details><summary>Timeline (");
    let decisions: Vec<&Value> = o
        .events
        .iter()
        .filter(|e| !matches!(e["event"].as_str(), Some("registered")))
        .collect();
    let _ = write!(page, "{} events)</summary>\n<pre>", decisions.len());
    for e in decisions {
        page.push_str(&esc(&line(e)));
        page.push('\n');
    }
    page.push_str("</pre></details>\n</body>\n</html>\n");
    page
}
