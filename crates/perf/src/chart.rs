//! An SVG chart of a run, written by hand: produce latency and end-to-end latency percentiles
//! (log scale) and produce/consume throughput over time, with the phases shaded.

use std::fmt::Write;

use crate::stats::LatencySummary;

/// One second of the run.
pub struct ChartPoint {
    /// End of the second, seconds since the start of sending.
    pub t: f64,
    pub produce: Option<LatencySummary>,
    pub e2e: Option<LatencySummary>,
    pub produce_mib: f64,
    pub consume_mib: f64,
}

pub struct ChartPhase {
    pub name: String,
    pub start: f64,
    pub end: f64,
}

const WIDTH: f64 = 1000.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 130.0;
const TOP: f64 = 60.0;
const PANEL: f64 = 220.0;
const GAP: f64 = 55.0;

type Pick = fn(&LatencySummary) -> f64;

const PERCENTILES: [(&str, &str, Pick); 5] = [
    ("p50", "#1f77b4", |s| s.p50),
    ("p90", "#2ca02c", |s| s.p90),
    ("p99", "#ff7f0e", |s| s.p99),
    ("p99.9", "#d62728", |s| s.p999),
    ("max", "#9467bd", |s| s.max),
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A step of 1, 2 or 5 times a power of ten giving about `n` intervals over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    if span <= 0.0 || !span.is_finite() {
        return 1.0;
    }
    let raw = span / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn fmt_num(v: f64) -> String {
    if v >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').to_string()
    }
}

struct Panel {
    top: f64,
    t_max: f64,
}

impl Panel {
    fn x(&self, t: f64) -> f64 {
        LEFT + (t / self.t_max).clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
    }
    fn bottom(&self) -> f64 {
        self.top + PANEL
    }
}

fn frame(out: &mut String, p: &Panel, title: &str, phases: &[ChartPhase]) {
    let w = WIDTH - LEFT - RIGHT;
    for ph in phases {
        let fill = match ph.name.as_str() {
            "warmup" => "#eeeeee",
            "backlog" => "#fff1dc",
            "catch-up" => "#e3f0fb",
            _ => "none",
        };
        let (x0, x1) = (p.x(ph.start), p.x(ph.end));
        let _ = writeln!(
            out,
            r##"<rect x="{x0:.1}" y="{:.1}" width="{:.1}" height="{PANEL}" fill="{fill}" stroke="#ccc" stroke-dasharray="2 2"/>"##,
            p.top,
            (x1 - x0).max(0.0)
        );
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#777" text-anchor="middle">{}</text>"##,
            (x0 + x1) / 2.0,
            p.top + 13.0,
            escape(&ph.name)
        );
    }
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{:.1}" width="{w:.1}" height="{PANEL}" fill="none" stroke="#999"/>"##,
        p.top
    );
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{:.1}" font-size="14" font-weight="bold">{}</text>"#,
        p.top - 8.0,
        escape(title)
    );
    let step = nice_step(p.t_max, 10.0);
    let mut t = 0.0;
    while t <= p.t_max + 1e-9 {
        let x = p.x(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            p.bottom(),
            p.bottom() + 4.0,
            p.bottom() + 16.0,
            fmt_num(t)
        );
        t += step;
    }
}

fn y_grid(out: &mut String, p: &Panel, y: f64, label: &str) {
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{label}</text>"##,
        WIDTH - RIGHT,
        LEFT - 6.0,
        y + 4.0
    );
    let _ = p;
}

/// Polylines of one series, broken where a point has no value.
fn series(
    out: &mut String,
    p: &Panel,
    pts: &[(f64, Option<f64>)],
    y: impl Fn(f64) -> f64,
    color: &str,
    dashed: bool,
) {
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
    for (t, v) in pts {
        match v {
            Some(v) => runs.last_mut().map_or((), |r| r.push((p.x(*t), y(*v)))),
            None => runs.push(Vec::new()),
        }
    }
    let dash = if dashed {
        r#" stroke-dasharray="4 3""#
    } else {
        ""
    };
    for r in runs.iter().filter(|r| !r.is_empty()) {
        let mut pts = String::new();
        for (x, y) in r {
            let _ = write!(pts, "{x:.1},{y:.1} ");
        }
        if r.len() == 1 {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="1.5" fill="{color}"/>"#,
                r[0].0, r[0].1
            );
        } else {
            let _ = writeln!(
                out,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.5"{dash}/>"#,
                pts.trim_end()
            );
        }
    }
}

fn legend(out: &mut String, p: &Panel, items: &[(&str, &str)]) {
    for (i, (name, color)) in items.iter().enumerate() {
        let x = WIDTH - RIGHT + 15.0;
        let y = p.top + 15.0 + i as f64 * 18.0;
        let _ = writeln!(
            out,
            r#"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}" font-size="12">{}</text>"#,
            x + 20.0,
            x + 26.0,
            y + 4.0,
            escape(name)
        );
    }
}

fn latency_panel(
    out: &mut String,
    p: &Panel,
    title: &str,
    points: &[ChartPoint],
    pick: fn(&ChartPoint) -> Option<LatencySummary>,
    phases: &[ChartPhase],
) {
    frame(out, p, title, phases);
    let values: Vec<f64> = points
        .iter()
        .filter_map(pick)
        .flat_map(|s| [s.p50, s.max])
        .filter(|v| *v > 0.0)
        .collect();
    if values.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="13" fill="#777" text-anchor="middle">no data</text>"##,
            (LEFT + WIDTH - RIGHT) / 2.0,
            p.top + PANEL / 2.0
        );
        return;
    }
    let lo = values.iter().cloned().fold(f64::MAX, f64::min).max(0.001);
    let hi = values.iter().cloned().fold(0.0, f64::max).max(lo * 10.0);
    let (d0, d1) = (lo.log10().floor(), hi.log10().ceil());
    let y = |v: f64| {
        let f = (v.max(10f64.powf(d0)).log10() - d0) / (d1 - d0);
        p.bottom() - f * PANEL
    };
    let mut d = d0;
    while d <= d1 + 1e-9 {
        let v = 10f64.powf(d);
        y_grid(out, p, y(v), &format!("{} ms", fmt_num(v)));
        d += 1.0;
    }
    for (name, color, f) in PERCENTILES {
        let pts: Vec<(f64, Option<f64>)> = points
            .iter()
            .map(|c| (c.t, pick(c).map(|s| f(&s))))
            .collect();
        series(out, p, &pts, y, color, name == "max");
    }
    let items: Vec<(&str, &str)> = PERCENTILES.iter().map(|(n, c, _)| (*n, *c)).collect();
    legend(out, p, &items);
}

fn throughput_panel(out: &mut String, p: &Panel, points: &[ChartPoint], phases: &[ChartPhase]) {
    frame(out, p, "Throughput (MiB/s)", phases);
    let hi = points
        .iter()
        .flat_map(|c| [c.produce_mib, c.consume_mib])
        .fold(0.0, f64::max)
        .max(0.001);
    let step = nice_step(hi, 5.0);
    let top = (hi / step).ceil() * step;
    let y = |v: f64| p.bottom() - (v / top).clamp(0.0, 1.0) * PANEL;
    let mut v = 0.0;
    while v <= top + 1e-9 {
        y_grid(out, p, y(v), &fmt_num(v));
        v += step;
    }
    let items = [("produce", "#1f77b4"), ("consume", "#ff7f0e")];
    for (name, color) in items {
        let pts: Vec<(f64, Option<f64>)> = points
            .iter()
            .map(|c| {
                (
                    c.t,
                    Some(if name == "produce" {
                        c.produce_mib
                    } else {
                        c.consume_mib
                    }),
                )
            })
            .collect();
        series(out, p, &pts, y, color, false);
    }
    legend(out, p, &items);
}

/// The whole chart as an SVG document.
pub fn svg(title: &str, points: &[ChartPoint], phases: &[ChartPhase]) -> String {
    let t_max = points
        .iter()
        .map(|c| c.t)
        .chain(phases.iter().map(|p| p.end))
        .fold(1.0, f64::max);
    let height = TOP + 3.0 * PANEL + 2.0 * GAP + 45.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{LEFT}" y="24" font-size="15">{}</text>"#,
        escape(title)
    );
    let panel = |i: f64| Panel {
        top: TOP + i * (PANEL + GAP),
        t_max,
    };
    latency_panel(
        &mut out,
        &panel(0.0),
        "Produce latency (send to acknowledgement), per second",
        points,
        |c| c.produce,
        phases,
    );
    latency_panel(
        &mut out,
        &panel(1.0),
        "End-to-end latency (send to consume), per second",
        points,
        |c| c.e2e,
        phases,
    );
    let tp = panel(2.0);
    throughput_panel(&mut out, &tp, points, phases);
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">seconds since the start of sending</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        tp.bottom() + 34.0
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(v: f64) -> LatencySummary {
        LatencySummary {
            count: 1,
            avg: v,
            p50: v,
            p75: v,
            p90: v,
            p95: v,
            p99: v * 2.0,
            p999: v * 3.0,
            p9999: v * 3.5,
            max: v * 4.0,
        }
    }

    #[test]
    fn chart_is_well_formed_svg() {
        let points: Vec<ChartPoint> = (1..=20)
            .map(|i| ChartPoint {
                t: i as f64,
                produce: Some(summary(i as f64 * 0.1)),
                e2e: if i % 5 == 0 { None } else { Some(summary(1.0)) },
                produce_mib: 10.0,
                consume_mib: i as f64,
            })
            .collect();
        let phases = vec![
            ChartPhase {
                name: "warmup".into(),
                start: 0.0,
                end: 5.0,
            },
            ChartPhase {
                name: "measure".into(),
                start: 5.0,
                end: 20.0,
            },
        ];
        let s = svg("a <b> & c", &points, &phases);
        assert!(s.starts_with("<svg"));
        assert!(s.trim_end().ends_with("</svg>"));
        assert!(s.contains("a &lt;b&gt; &amp; c"));
        assert!(s.contains("<polyline"));
        assert!(!s.contains("NaN"));
        assert_eq!(s.matches("<svg").count(), 1);
        // Empty runs still give a chart.
        let empty = svg("x", &[], &[]);
        assert!(empty.contains("no data"));
        assert!(!empty.contains("NaN"));
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(60.0, 10.0), 10.0);
        assert_eq!(nice_step(100.0, 5.0), 20.0);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
        assert_eq!(fmt_num(0.01), "0.01");
        assert_eq!(fmt_num(2.5), "2.5");
        assert_eq!(fmt_num(1000.0), "1000");
    }
}
