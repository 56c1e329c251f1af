//! What a reproduction prints: for each headline result the paper's figure
//! next to inagg's, and whether inagg's lands on the paper's side of the
//! baseline; plus the figures to plot.

use std::fmt::Write as _;

use crate::svg::Figure;

/// How a headline result is judged: the direction the paper claims.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Claim {
    /// inagg's value must be above this.
    Above(f64),
    /// inagg's value must be below this.
    Below(f64),
    /// inagg's value must lie in [lo, hi].
    Within(f64, f64),
}

impl Claim {
    /// Whether `x` agrees with the claim.
    pub fn holds(&self, x: f64) -> bool {
        match *self {
            Claim::Above(v) => x > v,
            Claim::Below(v) => x < v,
            Claim::Within(lo, hi) => (lo..=hi).contains(&x),
        }
    }
}

/// One headline result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    /// What is measured.
    pub name: String,
    /// The paper's figure, as the paper states it.
    pub paper: String,
    /// inagg's figure.
    pub inagg: f64,
    /// The direction (and rough size) inagg's figure must show.
    pub claim: Claim,
    /// Whether it does.
    pub holds: bool,
}

impl Row {
    pub fn new(name: impl Into<String>, paper: impl Into<String>, inagg: f64, claim: Claim) -> Row {
        Row {
            name: name.into(),
            paper: paper.into(),
            inagg,
            holds: claim.holds(inagg),
            claim,
        }
    }
}

/// A reproduction's output.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The policy reproduced (the CLI's name).
    pub paper: String,
    /// The setup, in one line.
    pub setup: String,
    pub rows: Vec<Row>,
    /// Figures (written as SVG by the caller).
    #[serde(skip)]
    pub figures: Vec<Figure>,
    /// Figures that answer no claim of the paper but explain a gap (a
    /// setting the paper does not give, tried at several values), printed
    /// under the table so that REPRODUCTION.md quotes only what a command
    /// prints.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Report {
    /// The table as text.
    pub fn table(&self) -> String {
        let (name_w, paper_w) = widths(self.rows.iter().map(|r| (&r.name, &r.paper)));
        let mut out = format!("{}: {}\n", self.paper, self.setup);
        let _ = writeln!(
            out,
            "{:<name_w$}  {:<paper_w$}  {:>10}  agrees",
            "result", "paper", "inagg"
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{:<name_w$}  {:<paper_w$}  {:>10}  {}",
                r.name,
                r.paper,
                fmt_value(r.inagg),
                if r.holds { "yes" } else { "NO" }
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        out
    }

    /// Every row agrees with its claim.
    pub fn all_hold(&self) -> bool {
        self.rows.iter().all(|r| r.holds)
    }
}

/// One headline result over several seeds: how much of a verdict is the
/// luck of the draw.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeedRow {
    pub name: String,
    pub paper: String,
    /// The median of inagg's figure over the seeds.
    pub inagg: f64,
    pub min: f64,
    pub max: f64,
    pub claim: Claim,
    /// Whether the median agrees with the claim.
    pub holds: bool,
    /// On how many seeds the figure agrees.
    pub agreeing: usize,
}

/// A reproduction run once per seed, row by row.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeedReport {
    pub paper: String,
    pub setup: String,
    pub seeds: Vec<u64>,
    pub rows: Vec<SeedRow>,
    /// The first seed's notes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl SeedReport {
    /// Folds `reports` (the same reproduction, one per seed in `seeds`)
    /// into one row per result of the first; a result missing from a
    /// report counts as disagreeing there.
    pub fn new(seeds: &[u64], reports: &[Report]) -> SeedReport {
        let first = &reports[0];
        let rows = first
            .rows
            .iter()
            .map(|row| {
                let found: Vec<&Row> = reports
                    .iter()
                    .filter_map(|r| r.rows.iter().find(|x| x.name == row.name))
                    .collect();
                let values: Vec<f64> = found.iter().map(|r| r.inagg).collect();
                let (min, median, max) = spread(&values);
                SeedRow {
                    name: row.name.clone(),
                    paper: row.paper.clone(),
                    inagg: median,
                    min,
                    max,
                    claim: row.claim,
                    holds: row.claim.holds(median),
                    agreeing: found.iter().filter(|r| r.holds).count(),
                }
            })
            .collect();
        SeedReport {
            paper: first.paper.clone(),
            setup: first.setup.clone(),
            seeds: seeds.to_vec(),
            rows,
            notes: first.notes.clone(),
        }
    }

    /// The table as text: the median, the range and the seeds agreeing.
    pub fn table(&self) -> String {
        let (name_w, paper_w) = widths(self.rows.iter().map(|r| (&r.name, &r.paper)));
        let n = self.seeds.len();
        let (lo, hi) = (
            self.seeds.iter().min().copied().unwrap_or(0),
            self.seeds.iter().max().copied().unwrap_or(0),
        );
        let mut out = format!("{}: {}; seeds {lo}-{hi}\n", self.paper, self.setup);
        let _ = writeln!(
            out,
            "{:<name_w$}  {:<paper_w$}  {:>10}  {:>17}  agrees (seeds)",
            "result", "paper", "median", "min - max"
        );
        for r in &self.rows {
            let range = format!("{} - {}", fmt_value(r.min), fmt_value(r.max));
            let _ = writeln!(
                out,
                "{:<name_w$}  {:<paper_w$}  {:>10}  {range:>17}  {} ({}/{n})",
                r.name,
                r.paper,
                fmt_value(r.inagg),
                if r.holds { "yes" } else { "NO" },
                r.agreeing,
            );
        }
        for note in &self.notes {
            let _ = writeln!(out, "note (seed {lo}): {note}");
        }
        out
    }
}

/// The widths of a table's name and paper columns: their longest entry,
/// and no less than their headings.
fn widths<'a>(rows: impl Iterator<Item = (&'a String, &'a String)>) -> (usize, usize) {
    rows.fold((6, 5), |(n, p), (name, paper)| {
        (n.max(name.len()), p.max(paper.len()))
    })
}

fn fmt_value(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

/// min, median and max of `xs` (NaN when empty).
pub fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let mid = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    (v[0], mid, v[v.len() - 1])
}

/// The median of `xs`.
pub fn median(xs: &[f64]) -> f64 {
    spread(xs).1
}

/// The mean of `xs` (NaN when empty).
pub fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_marks_disagreement() {
        let r = Report {
            paper: "x".into(),
            setup: "s".into(),
            rows: vec![
                Row::new("speedup", "2x", 1.5, Claim::Above(1.0)),
                Row::new("ratio", "~1", 1.5, Claim::Within(0.9, 1.1)),
            ],
            figures: Vec::new(),
            notes: Vec::new(),
        };
        let t = r.table();
        assert!(t.contains("speedup") && t.contains("1.500  yes"), "{t}");
        assert!(t.contains("NO"));
        assert!(!r.all_hold());
        assert_eq!(spread(&[3.0, 1.0, 2.0, 10.0]), (1.0, 2.5, 10.0));
    }

    /// Rows are matched by name across seeds; the median decides the
    /// verdict and every seed's own verdict is counted.
    #[test]
    fn seeds_fold_into_median_range_and_count() {
        let report = |x: f64, extra: bool| Report {
            paper: "x".into(),
            setup: "s".into(),
            rows: std::iter::once(Row::new("gain", "2x", x, Claim::Above(1.0)))
                .chain(extra.then(|| Row::new("only once", "~1", 1.0, Claim::Below(2.0))))
                .collect(),
            figures: Vec::new(),
            notes: Vec::new(),
        };
        let folded = SeedReport::new(
            &[1, 2, 3],
            &[report(1.5, true), report(0.8, false), report(1.2, false)],
        );
        let gain = &folded.rows[0];
        assert_eq!((gain.min, gain.inagg, gain.max), (0.8, 1.2, 1.5));
        assert!(gain.holds);
        assert_eq!(gain.agreeing, 2);
        assert_eq!(folded.rows[1].agreeing, 1);
        let t = folded.table();
        assert!(t.contains("seeds 1-3"), "{t}");
        assert!(t.contains("0.800 - 1.500  yes (2/3)"), "{t}");
        assert!(t.contains("yes (1/3)"), "{t}");
        assert!(folded.rows.iter().all(|r| r.holds));
    }
}
