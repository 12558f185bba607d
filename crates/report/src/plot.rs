//! The two kinds of chart the page draws, through `plotters`' SVG backend:
//!
//! - [`series_chart`]: throughput over a parameter, one line per variant,
//!   **one `<circle>` per row** (a variant measured once — the floor, say —
//!   is a flat line with its one circle at the right edge), plus the
//!   paper's reference drawn as a dashed line without circles;
//! - [`claims_chart`]: one bar per claim with a measured value (fill
//!   [`BAR_FILL`]), the paper's value as a red cross and the target as a
//!   short black line.
//!
//! The counts are what the tests check: circles = rows plotted, bars =
//! claims measured.

use plotters::prelude::*;

/// The colour of claim bars, as the SVG writes it.
pub const BAR_FILL: &str = "#1F77B4";
const BAR: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const PAPER: RGBColor = RGBColor(0xd6, 0x27, 0x28);
const PALETTE: [RGBColor; 14] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xff, 0xbb, 0x78),
    RGBColor(0x98, 0xdf, 0x8a),
    RGBColor(0xae, 0xc7, 0xe8),
    RGBColor(0x80, 0x00, 0x40),
];

/// One line of a series chart: its name and `(x, y)` points, one per row.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// The paper's value drawn into a series chart.
#[derive(Clone, Debug, PartialEq)]
pub enum Reference {
    /// A vertical line at `x` (a crossover).
    VLine(f64, String),
    /// A dashed line through points (a multiple of a measured series).
    Line(Vec<(f64, f64)>, String),
}

/// What a series chart shows.
pub struct SeriesSpec<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// Bounds with a margin; on a log axis the low bound stays positive.
fn bounds(vals: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals.filter(|v| v.is_finite() && (!log || *v > 0.0)) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    if log {
        (lo / 1.5, hi * 1.5)
    } else if hi > lo {
        let pad = (hi - lo) * 0.08;
        (
            (lo - pad)
                .min(0.0)
                .max(if lo >= 0.0 { 0.0 } else { f64::MIN }),
            hi + pad,
        )
    } else {
        (lo.min(0.0), hi.max(lo + 1.0) * 1.1)
    }
}

fn fmt_num(v: f64) -> String {
    // Three decimals at most, trailing zeros dropped: 3.5M, 12k, 0.25.
    let trim = |x: f64, suffix: &str| {
        let t = format!("{x:.3}");
        let t = t.trim_end_matches('0').trim_end_matches('.');
        format!("{t}{suffix}")
    };
    let a = v.abs();
    if a >= 1e9 {
        trim(v / 1e9, "G")
    } else if a >= 1e6 {
        trim(v / 1e6, "M")
    } else if a >= 1e3 {
        trim(v / 1e3, "k")
    } else if a >= 10.0 {
        format!("{v:.0}")
    } else {
        trim(v, "")
    }
}

/// Draws `series` with the paper's `reference` into an SVG string.
pub fn series_chart(
    spec: &SeriesSpec<'_>,
    series: &[Series],
    reference: Option<&Reference>,
) -> Result<String, String> {
    let all_x: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    let mut all_y: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .collect();
    if let Some(Reference::Line(pts, _)) = reference {
        all_y.extend(pts.iter().map(|p| p.1));
    }
    let (x0, x1) = bounds(all_x.iter().copied(), spec.log_x);
    let (y0, y1) = bounds(all_y.iter().copied(), spec.log_y);
    // Room above the data for the legend (one line per series).
    let rows = (series.len() + 1) as f64;
    let y1 = if spec.log_y {
        y1 * (y1 / y0).powf(rows * 0.045 + 0.1)
    } else {
        y1 + (y1 - y0) * (rows * 0.06 + 0.1)
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (820, 480)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut cb = ChartBuilder::on(&root);
        cb.caption(spec.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(70);
        // The four axis combinations are four coordinate types.
        macro_rules! draw {
            ($xr:expr, $yr:expr) => {{
                let mut chart = cb.build_cartesian_2d($xr, $yr).map_err(err)?;
                chart
                    .configure_mesh()
                    .x_desc(spec.x_label)
                    .y_desc(spec.y_label)
                    .light_line_style(TRANSPARENT)
                    .x_label_formatter(&|v| fmt_num(*v))
                    .y_label_formatter(&|v| fmt_num(*v))
                    .draw()
                    .map_err(err)?;
                for (i, s) in series.iter().enumerate() {
                    let c = PALETTE[i % PALETTE.len()];
                    let mut pts = s.points.clone();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    let line: Vec<(f64, f64)> = if pts.len() == 1 {
                        vec![(x0, pts[0].1), (x1, pts[0].1)]
                    } else {
                        pts.clone()
                    };
                    chart
                        .draw_series(LineSeries::new(line, c.stroke_width(2)))
                        .map_err(err)?
                        .label(s.name.clone())
                        .legend(move |(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                        });
                    let at_edge = pts.len() == 1;
                    chart
                        .draw_series(pts.iter().map(|&(x, y)| {
                            Circle::new((if at_edge { x1 } else { x }, y), 3, c.filled())
                        }))
                        .map_err(err)?;
                }
                if let Some(r) = reference {
                    let (pts, label) = match r {
                        Reference::VLine(x, l) => (vec![(*x, y0), (*x, y1)], l.clone()),
                        Reference::Line(p, l) => (p.clone(), l.clone()),
                    };
                    chart
                        .draw_series(DashedLineSeries::new(pts, 8, 5, PAPER.stroke_width(2)))
                        .map_err(err)?
                        .label(label)
                        .legend(|(x, y)| {
                            PathElement::new(vec![(x, y), (x + 18, y)], PAPER.stroke_width(2))
                        });
                }
                chart
                    .configure_series_labels()
                    .position(SeriesLabelPosition::UpperRight)
                    .background_style(WHITE.mix(0.85))
                    .border_style(BLACK)
                    .label_font(("sans-serif", 11))
                    .draw()
                    .map_err(err)?;
            }};
        }
        match (spec.log_x, spec.log_y) {
            (true, true) => draw!((x0..x1).log_scale(), (y0..y1).log_scale()),
            (true, false) => draw!((x0..x1).log_scale(), y0..y1),
            (false, true) => draw!(x0..x1, (y0..y1).log_scale()),
            (false, false) => draw!(x0..x1, y0..y1),
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// One bar of a claims chart.
#[derive(Clone, Debug, PartialEq)]
pub struct Bar {
    /// Printed under the bar (the claim's number in the table beside).
    pub label: String,
    pub measured: f64,
    pub paper: Option<f64>,
    /// The target line, if the claim has a single threshold.
    pub target: Option<f64>,
}

/// Bars of measured values (log scale) with the paper's values and the
/// targets.
pub fn claims_chart(title: &str, bars: &[Bar]) -> Result<String, String> {
    let vals = bars
        .iter()
        .flat_map(|b| [Some(b.measured), b.paper, b.target])
        .flatten();
    let (y0, y1) = bounds(vals.chain([1.0]), true);
    let n = bars.len().max(1) as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5..n - 0.5, (y0..y1).log_scale())
            .map_err(err)?;
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(TRANSPARENT)
            .x_labels(bars.len().max(2) * 2 + 1)
            .x_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_desc("measured (bar), paper (red ×), target (black)")
            .y_label_formatter(&|v| fmt_num(*v))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, b)| {
                let x = i as f64;
                Rectangle::new(
                    [(x - 0.32, y0), (x + 0.32, b.measured.max(y0))],
                    BAR.filled(),
                )
            }))
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                b.target.map(|t| {
                    PathElement::new(
                        vec![(i as f64 - 0.42, t), (i as f64 + 0.42, t)],
                        BLACK.stroke_width(2),
                    )
                })
            }))
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(i, b)| {
                b.paper
                    .map(|p| Cross::new((i as f64, p), 7, PAPER.stroke_width(3)))
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_circle_per_point_and_the_reference_is_drawn() {
        let spec = SeriesSpec {
            title: "t",
            x_label: "x",
            y_label: "y",
            log_x: true,
            log_y: false,
        };
        let s = vec![
            Series {
                name: "a".into(),
                points: vec![(1.0, 5.0), (4.0, 7.0), (16.0, 6.0)],
            },
            Series {
                name: "floor".into(),
                points: vec![(256.0, 9.0)],
            },
        ];
        let svg =
            series_chart(&spec, &s, Some(&Reference::VLine(28.0, "paper: 28".into()))).unwrap();
        assert_eq!(svg.matches("<circle").count(), 4, "{svg}");
        assert!(svg.contains("paper: 28"));
        assert!(svg.starts_with("<svg"));
    }

    #[test]
    fn axis_numbers_are_short() {
        assert_eq!(fmt_num(3_500_000.0), "3.5M");
        assert_eq!(fmt_num(12_000.0), "12k");
        assert_eq!(fmt_num(1.0), "1");
        assert_eq!(fmt_num(0.25), "0.25");
        assert_eq!(fmt_num(0.0), "0");
        assert_eq!(fmt_num(256.0), "256");
    }

    #[test]
    fn one_bar_per_claim() {
        let bars = vec![
            Bar {
                label: "1".into(),
                measured: 2.5,
                paper: Some(2.0),
                target: Some(2.5),
            },
            Bar {
                label: "2".into(),
                measured: 0.4,
                paper: None,
                target: None,
            },
        ];
        let svg = claims_chart("c", &bars).unwrap();
        assert_eq!(
            svg.matches(&format!("fill=\"{BAR_FILL}\"")).count(),
            2,
            "{svg}"
        );
    }
}
