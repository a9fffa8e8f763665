//! Cohen's kappa: the agreement of two raters on nominal labels beyond chance
//! (Cohen 1960), as `sklearn.metrics.cohen_kappa_score(a, b)` (unweighted) computes it.

use std::collections::HashMap;

use super::counts::Counts;

/// The partial aggregate of Cohen's kappa: the contingency table of (label of rater A,
/// label of rater B) → count. Merging adds counts; labels compare as exact strings.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KappaState {
    counts: Counts<(String, String)>,
}

impl KappaState {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one item rated `a` by the first rater and `b` by the second.
    pub fn update(&mut self, a: &str, b: &str) {
        self.update_count(a, b, 1);
    }

    /// Adds `count` items rated `(a, b)` (restores a state from [`Self::entries`]).
    pub fn update_count(&mut self, a: &str, b: &str, count: u64) {
        self.counts.add((a.to_owned(), b.to_owned()), count);
    }

    /// Adds the items of `other`.
    pub fn merge(&mut self, other: &KappaState) {
        self.counts.merge(&other.counts);
    }

    /// The number of rated items.
    pub fn items(&self) -> u64 {
        self.counts.total()
    }

    /// The contingency table as `(a, b, count)`, sorted by `a` then `b`: the serialisable
    /// state.
    pub fn entries(&self) -> Vec<(&str, &str, u64)> {
        let mut e: Vec<(&str, &str, u64)> = self
            .counts
            .iter()
            .map(|((a, b), &c)| (a.as_str(), b.as_str(), c))
            .collect();
        e.sort_unstable();
        e
    }

    /// Cohen's kappa `κ = 1 - Σ_{i≠j} C_ij / Σ_{i≠j} E_ij`, with `C` the contingency table
    /// and `E_ij = r_i c_j / N` the counts expected from the raters' marginals — the
    /// formula of `sklearn.metrics.cohen_kappa_score` (unweighted), which equals
    /// `(p_o - p_e) / (1 - p_e)`. Computed from exact integer sums, so it agrees with
    /// sklearn to ~1e-15.
    ///
    /// `None` when there are no items, or when the expected disagreement is zero — both
    /// raters gave every item one and the same label — where sklearn warns and returns NaN
    /// (its `replace_undefined_by` default).
    pub fn kappa(&self) -> Option<f64> {
        let n: u128 = self.counts.values().map(|&c| u128::from(c)).sum();
        if n == 0 {
            return None;
        }
        let mut rows: HashMap<&str, u128> = HashMap::new();
        let mut cols: HashMap<&str, u128> = HashMap::new();
        let mut agree: u128 = 0;
        for ((a, b), &c) in &self.counts {
            let c = u128::from(c);
            *rows.entry(a.as_str()).or_insert(0) += c;
            *cols.entry(b.as_str()).or_insert(0) += c;
            if a == b {
                agree += c;
            }
        }
        // Σ_i r_i c_i over the labels both raters used.
        let chance: u128 = rows
            .iter()
            .filter_map(|(label, &r)| cols.get(label).map(|&c| r * c))
            .sum();
        // Σ_{i≠j} C_ij = N - agree; Σ_{i≠j} E_ij = (N² - chance) / N.
        let expected_disagreement = n * n - chance;
        if expected_disagreement == 0 {
            return None;
        }
        let observed_disagreement = n - agree;
        Some(1.0 - (observed_disagreement * n) as f64 / expected_disagreement as f64)
    }
}

/// Cohen's weighted kappa's disagreement weights, over the labels' sorted order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    /// |i − j|.
    Linear,
    /// (i − j)².
    Quadratic,
}

impl Weights {
    /// `linear` or `quadratic` (any case).
    pub fn named(name: &str) -> Option<Weights> {
        match name.trim().to_ascii_lowercase().as_str() {
            "linear" => Some(Weights::Linear),
            "quadratic" => Some(Weights::Quadratic),
            _ => None,
        }
    }

    fn of(self, i: usize, j: usize) -> f64 {
        let d = i.abs_diff(j) as f64;
        match self {
            Weights::Linear => d,
            Weights::Quadratic => d * d,
        }
    }
}

impl KappaState {
    /// Weighted kappa `κ = 1 − Σ w_ij C_ij / Σ w_ij E_ij`, as
    /// `sklearn.metrics.cohen_kappa_score(a, b, weights=...)`: the labels of both raters are
    /// sorted (by value when `numeric`, as numpy sorts numbers; else as strings) and `w_ij`
    /// is the distance of their positions in that order, not of their values. `None` as
    /// [`Self::kappa`].
    pub fn weighted_kappa(&self, weights: Weights, numeric: bool) -> Option<f64> {
        let n: f64 = self.counts.values().map(|&c| c as f64).sum();
        if n == 0.0 {
            return None;
        }
        let mut labels: Vec<&str> = self
            .counts
            .keys()
            .flat_map(|(a, b)| [a.as_str(), b.as_str()])
            .collect();
        if numeric {
            labels.sort_by(|x, y| {
                let (x, y) = (
                    x.parse::<f64>().unwrap_or(f64::NAN),
                    y.parse::<f64>().unwrap_or(f64::NAN),
                );
                x.total_cmp(&y)
            });
        } else {
            labels.sort_unstable();
        }
        labels.dedup();
        let index: HashMap<&str, usize> = labels.iter().enumerate().map(|(i, l)| (*l, i)).collect();
        let k = labels.len();
        let (mut rows, mut cols) = (vec![0.0; k], vec![0.0; k]);
        let mut observed = 0.0;
        for ((a, b), &c) in &self.counts {
            let (i, j) = (index[a.as_str()], index[b.as_str()]);
            rows[i] += c as f64;
            cols[j] += c as f64;
            observed += weights.of(i, j) * c as f64;
        }
        let mut expected = 0.0;
        for (i, r) in rows.iter().enumerate() {
            for (j, c) in cols.iter().enumerate() {
                expected += weights.of(i, j) * r * c / n;
            }
        }
        if expected == 0.0 {
            return None;
        }
        Some(1.0 - observed / expected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kappa(a: &[&str], b: &[&str]) -> Option<f64> {
        let mut s = KappaState::new();
        for (x, y) in a.iter().zip(b) {
            s.update(x, y);
        }
        s.kappa()
    }

    #[test]
    fn weighted_matches_sklearn() {
        let mut s = KappaState::new();
        for (x, y) in [("1", "1"), ("2", "3"), ("3", "3"), ("1", "2"), ("10", "3")] {
            s.update(x, y);
        }
        // cohen_kappa_score([1,2,3,1,10], [1,3,3,2,3], weights=...): numbers sort by value
        // (10 last), weights are positions in [1, 2, 3, 10].
        let linear = s.weighted_kappa(Weights::Linear, true).unwrap();
        let quadratic = s.weighted_kappa(Weights::Quadratic, true).unwrap();
        assert!((linear - 0.48275862068965525).abs() < 1e-12, "{linear}");
        assert!(
            (quadratic - 0.7058823529411765).abs() < 1e-12,
            "{quadratic}"
        );
        assert_eq!(Weights::named("Quadratic"), Some(Weights::Quadratic));
        assert_eq!(Weights::named("cubic"), None);
    }

    #[test]
    fn matches_sklearn() {
        // sklearn's docstring example: 0.6875.
        let y1 = ["negative", "positive", "negative", "neutral", "positive"];
        let y2 = ["negative", "positive", "negative", "neutral", "negative"];
        assert_eq!(kappa(&y1, &y2), Some(0.6875));
        // cohen_kappa_score(["a","a","a"], ["a","b","a"]) = 0.0; perfect disagreement = -1.
        assert_eq!(kappa(&["a", "a", "a"], &["a", "b", "a"]), Some(0.0));
        assert_eq!(kappa(&["a", "b"], &["b", "a"]), Some(-1.0));
        assert_eq!(kappa(&["x", "y", "y"], &["x", "y", "y"]), Some(1.0));
        // cohen_kappa_score(list("aabbbc"), list("abbbcc")) = 11/23 = 0.4782608695652174
        let a = ["a", "a", "b", "b", "b", "c"];
        let b = ["a", "b", "b", "b", "c", "c"];
        assert!((kappa(&a, &b).unwrap() - 0.478_260_869_565_217_4).abs() < 1e-15);
    }

    #[test]
    fn undefined_cases() {
        assert_eq!(kappa(&[], &[]), None);
        assert_eq!(kappa(&["a", "a"], &["a", "a"]), None);
    }

    #[test]
    fn merge_and_restore() {
        let a = ["1", "0", "1", "1", "0", "true"];
        let b = ["1", "1", "1", "0", "0", "true"];
        let whole = {
            let mut s = KappaState::new();
            a.iter().zip(&b).for_each(|(x, y)| s.update(x, y));
            s
        };
        let mut left = KappaState::new();
        let mut right = KappaState::new();
        for i in 0..a.len() {
            if i % 2 == 0 { &mut left } else { &mut right }.update(a[i], b[i]);
        }
        left.merge(&right);
        assert_eq!(left, whole);
        let mut restored = KappaState::new();
        for (x, y, c) in whole.entries() {
            restored.update_count(x, y, c);
        }
        assert_eq!(restored.kappa(), whole.kappa());
        assert_eq!(whole.items(), 6);
    }
}
