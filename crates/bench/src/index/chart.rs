//! Draws the ingest chart: transactions/s and block MB/s for each tenth of
//! the chain, a line per run, on axes from zero, so a slowdown as the index
//! grows shows as a falling line. Hand-written SVG like the latency chart.

use super::report::IndexReport;
use crate::svg::{escape, open_document, COLOURS};
use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const PANEL_HEIGHT: f64 = 170.0;
const PANEL_TOP: f64 = 34.0;
const PANEL_BOTTOM: f64 = 36.0;

/// Renders the chart of `report` as a standalone SVG document.
pub fn ingest_chart(report: &IndexReport) -> String {
    let runs: Vec<_> = report.runs.iter().filter(|r| r.ok).collect();
    // (title, per run: one value per tenth)
    let panels: [(&str, Vec<Vec<Option<f64>>>); 2] = [
        (
            "Transactions per second, each tenth of the chain",
            runs.iter()
                .map(|r| r.tenths.iter().map(|t| t.txs_per_second).collect())
                .collect(),
        ),
        (
            "Block data, MB per second, each tenth of the chain",
            runs.iter()
                .map(|r| r.tenths.iter().map(|t| t.block_mb_per_second).collect())
                .collect(),
        ),
    ];
    let legend_height = 22.0 * runs.len().max(1) as f64 + 40.0;
    let panel_total = PANEL_TOP + PANEL_HEIGHT + PANEL_BOTTOM;
    let height = legend_height + panel_total * panels.len() as f64 + 10.0;
    let mut svg = open_document(
        WIDTH,
        height,
        LEFT,
        &format!(
            "Index build of chaingen preset {} (tip {}), {}, {}",
            report.chain.preset, report.chain.tip_height, report.indexer.version, report.date
        ),
    );
    for (i, run) in runs.iter().enumerate() {
        let y = 40.0 + 22.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{LEFT}" y="{}" width="24" height="4" fill="{}"/><text x="{}" y="{y}">run {}</text>"#,
            y - 4.0,
            COLOURS[i % COLOURS.len()],
            LEFT + 32.0,
            run.run
        );
    }
    for (p, (title, series)) in panels.iter().enumerate() {
        let top = legend_height + panel_total * p as f64 + PANEL_TOP;
        draw_panel(&mut svg, title, series, top);
    }
    svg.push_str("</svg>\n");
    svg
}

fn draw_panel(svg: &mut String, title: &str, series: &[Vec<Option<f64>>], top: f64) {
    let plot_width = WIDTH - LEFT - RIGHT;
    let bottom = top + PANEL_HEIGHT;
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-weight="bold">{}</text>"#,
        top - 10.0,
        escape(title)
    );
    let max = series
        .iter()
        .flatten()
        .flatten()
        .copied()
        .fold(0.0, f64::max);
    let tenths = series.iter().map(Vec::len).max().unwrap_or(0);
    if max <= 0.0 || tenths == 0 {
        let _ = writeln!(
            svg,
            r#"<text x="{LEFT}" y="{}">no successful runs</text>"#,
            top + 20.0
        );
        return;
    }
    let y_max = nice_ceiling(max);
    let x_of = |k: usize| LEFT + (k as f64 + 0.5) / tenths as f64 * plot_width;
    let y_of = |v: f64| bottom - v / y_max * PANEL_HEIGHT;
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{top}" width="{plot_width}" height="{PANEL_HEIGHT}" fill="none" stroke="#999"/>"##
    );
    for step in 0..=4 {
        let v = y_max * f64::from(step) / 4.0;
        let y = y_of(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_width,
            LEFT - 6.0,
            y + 4.0,
            crate::report::fmt_significant(v, 3)
        );
    }
    for k in 0..tenths {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x_of(k),
            bottom + 15.0,
            k + 1
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">tenth of the chain, by height</text>"#,
        LEFT + plot_width / 2.0,
        bottom + 30.0
    );
    for (i, values) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(k, v)| v.map(|v| (x_of(k), y_of(v))))
            .collect();
        let line: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"/>"#,
            line.join(" ")
        );
        for (x, y) in points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{x:.1}" cy="{y:.1}" r="3" fill="{colour}"/>"#
            );
        }
    }
}

/// Rounds `value` up to 1, 2 or 5 times a power of ten, for a readable axis.
fn nice_ceiling(value: f64) -> f64 {
    let decade = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|f| f * decade)
        .find(|&v| v >= value)
        .unwrap_or(10.0 * decade)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_tops_are_round() {
        assert_eq!(nice_ceiling(730.0), 1000.0);
        assert_eq!(nice_ceiling(1000.0), 1000.0);
        assert_eq!(nice_ceiling(0.31), 0.5);
        assert_eq!(nice_ceiling(1501.0), 2000.0);
    }
}
