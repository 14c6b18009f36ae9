//! Draws the latency chart: for each workload, the distribution (CDF) of
//! batch latencies of each server over its warm runs, on a log time axis.
//! Hand-written SVG, so the bench needs no plotting library.

use crate::report::Report;
use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 20.0;
const PANEL_HEIGHT: f64 = 170.0;
const PANEL_TOP: f64 = 34.0;
const PANEL_BOTTOM: f64 = 36.0;
/// Points drawn per line: quantiles beyond this add nothing a reader can see.
const POINTS_MAX: usize = 400;
pub(crate) const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// Renders the chart of `report` as a standalone SVG document.
pub fn latency_chart(report: &Report) -> String {
    // (workload title, per server: sorted latencies in ms)
    let panels: Vec<(String, Vec<Vec<f64>>)> = report
        .workloads
        .iter()
        .map(|&workload| {
            let per_server = report
                .servers
                .iter()
                .map(|server| {
                    let records: Vec<_> = server
                        .runs
                        .iter()
                        .filter(|r| r.workload == workload && r.ok)
                        .collect();
                    let warm_only = records.iter().any(|r| r.run_index > 0);
                    let mut ms: Vec<f64> = records
                        .iter()
                        .filter(|r| !warm_only || r.run_index > 0)
                        .flat_map(|r| r.batch_latencies_us.iter().map(|us| *us as f64 / 1e3))
                        .collect();
                    ms.sort_by(f64::total_cmp);
                    ms
                })
                .collect();
            (workload.title().to_owned(), per_server)
        })
        .collect();

    let legend_height = 22.0 * report.servers.len() as f64 + 40.0;
    let panel_total = PANEL_TOP + PANEL_HEIGHT + PANEL_BOTTOM;
    let height = legend_height + panel_total * panels.len() as f64 + 10.0;
    let mut svg = open_document(
        WIDTH,
        height,
        LEFT,
        &format!(
            "Batch latency distribution (warm runs, batches of {}), {}",
            report.batch, report.date
        ),
    );
    for (i, server) in report.servers.iter().enumerate() {
        let y = 40.0 + 22.0 * i as f64;
        let colour = COLOURS[i % COLOURS.len()];
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{}" width="24" height="4" fill="{colour}"/><text x="{}" y="{}">{}</text>"#,
            y - 4.0,
            LEFT + 32.0,
            y,
            escape(&server.name())
        );
    }
    for (p, (title, per_server)) in panels.iter().enumerate() {
        let top = legend_height + panel_total * p as f64 + PANEL_TOP;
        draw_panel(&mut svg, title, per_server, top);
    }
    svg.push_str("</svg>\n");
    svg
}

fn draw_panel(svg: &mut String, title: &str, per_server: &[Vec<f64>], top: f64) {
    let plot_width = WIDTH - LEFT - RIGHT;
    let bottom = top + PANEL_HEIGHT;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#,
        top - 10.0,
        escape(title)
    );
    let all = per_server.iter().flatten().copied().filter(|v| *v > 0.0);
    let (min, max) = all.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !min.is_finite() {
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="{}">no successful runs</text>"#,
            top + 20.0
        );
        return;
    }
    let lo = min.log10().floor();
    let hi = max.log10().ceil().max(lo + 1.0);
    let x_of = |ms: f64| LEFT + (ms.max(min).log10() - lo) / (hi - lo) * plot_width;
    let y_of = |fraction: f64| bottom - fraction * PANEL_HEIGHT;

    // Axes, decade grid and labels.
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{top}" width="{plot_width}" height="{PANEL_HEIGHT}" fill="none" stroke="#999"/>"##
    );
    let mut decade = lo;
    while decade <= hi + 1e-9 {
        let x = LEFT + (decade - lo) / (hi - lo) * plot_width;
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
            bottom + 15.0,
            ms_label(10f64.powf(decade))
        );
        decade += 1.0;
    }
    // Minor grid at 2x and 5x each decade, so values between decades can be read.
    let mut minor = lo;
    while minor < hi - 1e-9 {
        for factor in [2f64, 5.0] {
            let x = LEFT + (minor + factor.log10() - lo) / (hi - lo) * plot_width;
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{bottom}" stroke="#f0f0f0"/>"##
            );
        }
        minor += 1.0;
    }
    // The p99 line has no label: it would overprint "100%".
    let _ = writeln!(
        svg,
        r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ccc" stroke-dasharray="4 3"/>"##,
        LEFT + plot_width,
        y = y_of(0.99)
    );
    for (fraction, label) in [(0.0, "0%"), (0.5, "50%"), (1.0, "100%")] {
        let y = y_of(fraction);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            LEFT + plot_width,
            LEFT - 6.0,
            y + 4.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">batch latency (log scale); dashed line: 99th percentile</text>"#,
        LEFT + plot_width / 2.0,
        bottom + 30.0
    );

    // One step line per server: the fraction of batches at most this slow.
    for (i, sorted) in per_server.iter().enumerate() {
        if sorted.is_empty() {
            continue;
        }
        let n = sorted.len();
        let step = n.div_ceil(POINTS_MAX).max(1);
        let mut points = format!("{:.1},{:.1}", x_of(sorted[0]), y_of(0.0));
        let mut index = 0;
        while index < n {
            let last = (index + step).min(n) - 1;
            let x = x_of(sorted[last]);
            let _ = write!(
                points,
                " {x:.1},{:.1} {x:.1},{:.1}",
                y_of(index as f64 / n as f64),
                y_of((last + 1) as f64 / n as f64)
            );
            index = last + 1;
        }
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{points}"/>"#,
            COLOURS[i % COLOURS.len()]
        );
    }
}

/// Labels a decade of milliseconds: "10 µs", "1 ms", "1 s".
fn ms_label(ms: f64) -> String {
    if ms < 1.0 {
        format!("{} µs", (ms * 1e3).round())
    } else if ms < 1e3 {
        format!("{} ms", ms.round())
    } else {
        format!("{} s", (ms / 1e3).round())
    }
}

/// Escapes text for SVG (server names come from the servers).
/// Starts an SVG document of the given size on a white background, with
/// `title` (escaped here) as its heading at `left`.
pub(crate) fn open_document(width: f64, height: f64, left: f64, title: &str) -> String {
    let mut svg = String::new();
    // Writing into a String cannot fail.
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{left}" y="20" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    svg
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_escapes() {
        assert_eq!(ms_label(0.01), "10 µs");
        assert_eq!(ms_label(100.0), "100 ms");
        assert_eq!(ms_label(10_000.0), "10 s");
        assert_eq!(escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
    }
}
