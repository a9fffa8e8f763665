//! The ranked-retrieval kernels, computed the way trec_eval computes them (as PyPI's
//! `pytrec-eval-terrier` runs it): `ndcg_cut_k`, `P_k`, `recall_k`, `success_k`,
//! `recip_rank` and `map`, for one query whose ranking is the list order.
//!
//! trec_eval's conventions, kept bit for bit:
//! - a document is relevant when its grade is at least 1; a retrieved document missing from
//!   the judgements counts as not relevant;
//! - nDCG's gain is the grade itself, not 2^grade − 1 (grades of 0 or less add nothing), and
//!   rank r is discounted by log2(r + 1); the ideal ranking sorts every positive judgement,
//!   retrieved or not, by grade; with no positive judgement nDCG is 0;
//! - `P_k` divides by k even when fewer than k documents were retrieved;
//! - recall and average precision divide by the number of relevant judgements, and are 0
//!   when there is none.
//!
//! Two cases trec_eval cannot express are pinned here: a repeated id keeps its first position
//! and later copies are dropped (the documents after it move up), and empty judgements make
//! every measure NULL (the caller's job: [`Judgements::is_empty`]).

use std::collections::{HashMap, HashSet};

/// Graded relevance judgements of one query.
#[derive(Debug, Default)]
pub struct Judgements {
    grades: HashMap<String, i64>,
}

impl Judgements {
    pub fn new(grades: HashMap<String, i64>) -> Self {
        Self { grades }
    }

    pub fn is_empty(&self) -> bool {
        self.grades.is_empty()
    }

    fn grade(&self, id: &str) -> i64 {
        self.grades.get(id).copied().unwrap_or(0)
    }

    fn relevant_count(&self) -> usize {
        self.grades.values().filter(|&&g| g >= 1).count()
    }
}

/// One ranked list scored against its judgements: the grade at each rank, duplicates dropped.
#[derive(Debug)]
pub struct Ranking {
    grades: Vec<i64>,
    relevant: usize,
    /// Positive grades of every judgement, highest first (the ideal ranking's gains).
    ideal: Vec<i64>,
}

impl Ranking {
    pub fn new<'a>(retrieved: impl IntoIterator<Item = &'a str>, judgements: &Judgements) -> Self {
        let mut seen = HashSet::new();
        let grades = retrieved
            .into_iter()
            .filter(|id| seen.insert(*id))
            .map(|id| judgements.grade(id))
            .collect();
        let mut ideal: Vec<i64> = judgements
            .grades
            .values()
            .copied()
            .filter(|&g| g > 0)
            .collect();
        ideal.sort_unstable_by(|a, b| b.cmp(a));
        Ranking {
            grades,
            relevant: judgements.relevant_count(),
            ideal,
        }
    }

    fn is_relevant(grade: i64) -> bool {
        grade >= 1
    }

    fn relevant_in_top(&self, k: usize) -> usize {
        self.grades
            .iter()
            .take(k)
            .filter(|&&g| Self::is_relevant(g))
            .count()
    }

    /// trec_eval `ndcg_cut.k`.
    pub fn ndcg_at(&self, k: usize) -> f64 {
        let dcg = discounted_gain(self.grades.iter().take(k).copied());
        let ideal = discounted_gain(self.ideal.iter().take(k).copied());
        if ideal > 0.0 { dcg / ideal } else { dcg }
    }

    /// trec_eval `P.k`.
    pub fn precision_at(&self, k: usize) -> f64 {
        self.relevant_in_top(k) as f64 / k as f64
    }

    /// trec_eval `recall.k`.
    pub fn recall_at(&self, k: usize) -> f64 {
        if self.relevant == 0 {
            return 0.0;
        }
        self.relevant_in_top(k) as f64 / self.relevant as f64
    }

    /// trec_eval `success.k`.
    pub fn hit_at(&self, k: usize) -> f64 {
        if self.relevant_in_top(k) > 0 {
            1.0
        } else {
            0.0
        }
    }

    /// trec_eval `recip_rank`.
    pub fn reciprocal_rank(&self) -> f64 {
        match self.grades.iter().position(|&g| Self::is_relevant(g)) {
            Some(i) => 1.0 / (i + 1) as f64,
            None => 0.0,
        }
    }

    /// trec_eval `map` for one query: the mean, over the relevant judgements, of the
    /// precision at the rank each is retrieved (0 for those never retrieved).
    pub fn average_precision(&self) -> f64 {
        if self.relevant == 0 {
            return 0.0;
        }
        let mut so_far = 0usize;
        let mut sum = 0.0;
        for (i, &g) in self.grades.iter().enumerate() {
            if Self::is_relevant(g) {
                so_far += 1;
                sum += so_far as f64 / (i + 1) as f64;
            }
        }
        sum / self.relevant as f64
    }
}

/// Σ gain / log2(rank + 1) in rank order, added one term at a time as trec_eval adds them;
/// positive gains only.
fn discounted_gain(gains: impl Iterator<Item = i64>) -> f64 {
    let mut sum = 0.0;
    for (i, g) in gains.enumerate() {
        if g > 0 {
            sum += g as f64 / ((i + 2) as f64).log2();
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judgements(pairs: &[(&str, i64)]) -> Judgements {
        Judgements::new(pairs.iter().map(|(d, g)| (d.to_string(), *g)).collect())
    }

    #[test]
    fn ranks_are_discounted_by_log2_of_rank_plus_one() {
        let j = judgements(&[("a", 1), ("b", 1)]);
        let r = Ranking::new(["x", "a", "b"], &j);
        // dcg = 1/log2(3) + 1/log2(4); ideal = 1/log2(2) + 1/log2(3).
        let expected = (1.0 / 3f64.log2() + 0.5) / (1.0 + 1.0 / 3f64.log2());
        assert_eq!(r.ndcg_at(3), expected);
        assert_eq!(r.precision_at(5), 0.4);
        assert_eq!(r.reciprocal_rank(), 0.5);
        assert_eq!(r.average_precision(), (0.5 + 2.0 / 3.0) / 2.0);
    }

    #[test]
    fn repeated_ids_keep_their_first_position() {
        let j = judgements(&[("a", 1), ("b", 2)]);
        let r = Ranking::new(["a", "a", "b"], &j);
        assert_eq!(r.grades, vec![1, 2]);
        assert_eq!(r.recall_at(2), 1.0);
    }

    #[test]
    fn no_relevant_judgement_scores_zero() {
        let j = judgements(&[("a", 0), ("b", -1)]);
        let r = Ranking::new(["a", "b"], &j);
        assert_eq!(r.ndcg_at(10), 0.0);
        assert_eq!(r.recall_at(10), 0.0);
        assert_eq!(r.average_precision(), 0.0);
        assert_eq!(r.hit_at(1), 0.0);
    }
}
