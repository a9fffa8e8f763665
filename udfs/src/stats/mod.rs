//! Statistics aggregates ([`rates`]: pass and win rates) and their numerical kernels, free of DataFusion types: the Student-t
//! interval of a mean ([`student_t`]), hash-seeded Poisson bootstrap intervals and the paired
//! bootstrap test ([`bootstrap`]), Cohen's kappa, unweighted and weighted ([`kappa`]), and
//! Krippendorff's alpha ([`krippendorff`]); prediction-powered means ([`ppi`]); pass@k / pass^k ([`pass_at_k`]); Benjamini–Hochberg q-values ([`fdr_bh`], a window
//! function). Each partial state merges
//! across partitions; `tests/stats/reference.py` computes the same quantities with
//! scipy, numpy and scikit-learn.

pub mod bootstrap;
pub mod bootstrap_ci;
pub mod cohen_kappa;
pub mod fdr_bh;
pub mod kappa;
pub mod krippendorff;
pub mod mean_ci;
pub mod paired_bootstrap_pvalue;
pub mod pass_at_k;
pub mod ppi;
pub mod rates;
pub(crate) mod state;
pub mod student_t;

/// What the HTML report shares with the statistics aggregates: one Student-t interval.
pub use student_t::{MeanVar, t_quantile};
