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
        let name_w = self
            .rows
            .iter()
            .map(|r| r.name.len())
            .max()
            .unwrap_or(4)
            .max(6);
        let paper_w = self
            .rows
            .iter()
            .map(|r| r.paper.len())
            .max()
            .unwrap_or(5)
            .max(5);
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
}
