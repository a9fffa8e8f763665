//! Statistics aggregates ([`rates`]: pass and win rates) and their numerical kernels, free of DataFusion types: the Student-t
//! interval of a mean ([`student_t`]), hash-seeded Poisson bootstrap intervals and the paired
//! bootstrap test ([`bootstrap`]), Cohen's kappa, unweighted and weighted ([`kappa`]), and
//! Krippendorff's alpha ([`krippendorff`]); prediction-powered means ([`ppi`]); pass@k / pass^k ([`pass_at_k`]); Benjamini–Hochberg q-values ([`fdr_bh`], a window
//! function); the calibration of a judge cascade's confidence threshold with a
//! Clopper–Pearson bound ([`calibration`]); an anytime-valid confidence sequence for a
//! bounded mean, for alerts checked after every run ([`mean_cs`]). Each partial state merges
//! across partitions; `tests/stats/reference.py` computes the same quantities with
//! scipy, numpy and scikit-learn.

pub mod bootstrap;
pub mod bootstrap_ci;
pub mod calibration;
pub mod cohen_kappa;
pub mod counts;
pub mod fdr_bh;
pub mod kappa;
pub mod krippendorff;
pub mod mean_ci;
pub mod mean_cs;
pub mod paired_bootstrap_pvalue;
pub mod pass_at_k;
pub mod ppi;
pub mod rates;
pub(crate) mod state;
pub mod student_t;

/// What the HTML report shares with the statistics aggregates: one Student-t interval.
pub use student_t::{MeanVar, t_quantile};

/// The statistics family's functions: aggregates and the `fdr_bh` window function.
pub fn functions() -> crate::common::Functions {
    use std::sync::Arc;

    use datafusion::logical_expr::{AggregateUDF, WindowUDF};
    let mut aggregate = vec![
        AggregateUDF::new_from_impl(rates::RateFunc::pass_rate()),
        AggregateUDF::new_from_impl(rates::RateFunc::win_rate()),
        AggregateUDF::new_from_impl(mean_ci::MeanCiFunc::default()),
        AggregateUDF::new_from_impl(mean_cs::MeanCsFunc::default()),
        AggregateUDF::new_from_impl(bootstrap_ci::BootstrapCiFunc::default()),
        AggregateUDF::new_from_impl(paired_bootstrap_pvalue::PairedBootstrapPvalueFunc::default()),
        AggregateUDF::new_from_impl(cohen_kappa::CohenKappaFunc::default()),
        AggregateUDF::new_from_impl(krippendorff::KrippendorffAlphaFunc::default()),
        AggregateUDF::new_from_impl(ppi::PpiMeanCiFunc::default()),
    ];
    for hat in [false, true] {
        aggregate.push(AggregateUDF::new_from_impl(pass_at_k::PassAtKFunc::new(
            hat,
        )));
    }
    crate::common::Functions {
        aggregate: aggregate.into_iter().map(Arc::new).collect(),
        window: vec![Arc::new(WindowUDF::new_from_impl(
            fdr_bh::FdrBhFunc::default(),
        ))],
        ..Default::default()
    }
}
