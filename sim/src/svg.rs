//! Line plots as standalone SVG: enough for a paper's key figures (x, y,
//! one line per scheme, a legend), with no plotting dependency.

use std::fmt::Write as _;

/// One line of a plot.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A plot, written to `file` (a name inside the output folder).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub file: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 160.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

impl Figure {
    /// The plot as an SVG document.
    pub fn to_svg(&self) -> String {
        let pts = self.series.iter().flat_map(|s| s.points.iter());
        let finite: Vec<(f64, f64)> = pts
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let (x0, x1) = bounds(finite.iter().map(|p| p.0), false);
        let (y0, y1) = bounds(finite.iter().map(|p| p.1), true);
        let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * (W - LEFT - RIGHT);
        let py = |y: f64| H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM);
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>",
            W / 2.0,
            esc(&self.title)
        );
        axes(&mut s, (x0, x1, y0, y1), &px, &py);
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            (LEFT + W - RIGHT) / 2.0,
            H - 12.0,
            esc(&self.x_label)
        );
        let _ = writeln!(s, "<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>", H / 2.0, H / 2.0, esc(&self.y_label));
        for (i, series) in self.series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let path: Vec<String> = series
                .points
                .iter()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
                .collect();
            let _ = writeln!(
                s,
                "<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>",
                path.join(" ")
            );
            for p in &path {
                let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(s, "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{c}\"/>");
            }
            let ly = TOP + 10.0 + 18.0 * i as f64;
            let lx = W - RIGHT + 12.0;
            let _ = writeln!(s, "<line x1=\"{lx}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{c}\" stroke-width=\"2\"/>", lx + 20.0);
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\">{}</text>",
                lx + 26.0,
                ly + 4.0,
                esc(&series.name)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

/// The frame with five ticks per axis.
fn axes(
    s: &mut String,
    (x0, x1, y0, y1): (f64, f64, f64, f64),
    px: &dyn Fn(f64) -> f64,
    py: &dyn Fn(f64) -> f64,
) {
    let (l, r, t, b) = (LEFT, W - RIGHT, TOP, H - BOTTOM);
    let _ = writeln!(
        s,
        "<rect x=\"{l}\" y=\"{t}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>",
        r - l,
        b - t
    );
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let (x, y) = (x0 + f * (x1 - x0), y0 + f * (y1 - y0));
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(x),
            b + 18.0,
            tick(x)
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            l - 6.0,
            py(y) + 4.0,
            tick(y)
        );
        let _ = writeln!(
            s,
            "<line x1=\"{l}\" y1=\"{:.1}\" x2=\"{r}\" y2=\"{:.1}\" stroke=\"#ddd\"/>",
            py(y),
            py(y)
        );
    }
}

/// The range of `xs`, widened when flat; from 0 when `from_zero` and all
/// are positive.
fn bounds(xs: impl Iterator<Item = f64>, from_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), x| {
        (l.min(x), h.max(x))
    });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if from_zero && lo > 0.0 {
        lo = 0.0;
    }
    if hi - lo < 1e-12 {
        hi = lo + 1.0;
    }
    (lo, hi)
}

fn tick(x: f64) -> String {
    if x.abs() >= 100.0 || x == x.round() {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_has_a_line_and_legend_per_series() {
        let f = Figure {
            file: "f.svg".into(),
            title: "a < b".into(),
            x_label: "n".into(),
            y_label: "s".into(),
            series: vec![
                Series {
                    name: "one".into(),
                    points: vec![(1.0, 2.0), (2.0, 3.0)],
                },
                Series {
                    name: "two".into(),
                    points: vec![(1.0, f64::NAN), (2.0, 1.0)],
                },
            ],
        };
        let svg = f.to_svg();
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">one<") && svg.contains(">two<"));
        assert!(svg.contains("a &lt; b"));
        assert!(!svg.contains("NaN"));
    }
}
