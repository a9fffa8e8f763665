//! Calibrating a judge cascade: on a sample judged by both a small model (with a confidence
//! per row) and the main model, the loosest confidence threshold at which the small model's
//! agreement with the main model, over the rows it would keep, is certified to be at least a
//! target — with fixed-sequence testing as in "Trust or Escalate" (Jung et al., ICLR 2025):
//! thresholds are tested from strict to loose, each with a one-sided Clopper–Pearson lower
//! bound, and the scan stops at the first that fails.
//!
//! Why the guarantee holds: the order of the thresholds depends only on the confidences, not
//! on whether the models agreed, so the first failing test ends a sequence of level-δ tests
//! and the kept threshold's agreement is at least the target with probability `1 - δ`.
//! Thresholds that keep so few rows that even a perfect record could not pass
//! (`δ^(1/n) < target`) are not tested: they cannot pass, and testing them first would end
//! every scan at once.

/// `P(X >= k)` for `X ~ Binomial(n, p)`, summed in log space from the mode outward so that
/// no term under- or overflows.
fn binomial_upper_tail(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n || p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let (ln_p, ln_q) = (p.ln(), (-p).ln_1p());
    let ln_choose = |i: u64| {
        ln_gamma(n as f64 + 1.0) - ln_gamma(i as f64 + 1.0) - ln_gamma((n - i) as f64 + 1.0)
    };
    let terms: Vec<f64> = (k..=n)
        .map(|i| ln_choose(i) + i as f64 * ln_p + (n - i) as f64 * ln_q)
        .collect();
    let max = terms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = terms.iter().map(|t| (t - max).exp()).sum();
    (max + sum.ln()).exp().min(1.0)
}

/// `ln Γ(x)` for `x >= 1` (Lanczos, g = 7, n = 9: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The one-sided Clopper–Pearson lower confidence bound, at level `1 - delta`, of a
/// proportion seen `k` times in `n`: the `p` at which `P(X >= k) = delta`. 0 when `k` is 0.
pub fn clopper_pearson_lower(k: u64, n: u64, delta: f64) -> f64 {
    if k == 0 || n == 0 {
        return 0.0;
    }
    let (mut lo, mut hi) = (0.0_f64, 1.0_f64);
    // The tail grows with p: bisect to 1e-12.
    for _ in 0..50 {
        let mid = (lo + hi) / 2.0;
        if binomial_upper_tail(k, n, mid) < delta {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// One calibration row: the small model's confidence and whether its score agreed with the
/// main model's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judged {
    pub confidence: f64,
    pub agrees: bool,
}

/// What calibration found.
#[derive(Debug, Clone, PartialEq)]
pub struct Calibration {
    /// Rows at or above it keep the small model's score; `None`: every row escalates.
    pub threshold: Option<f64>,
    /// The small model's agreement over the calibration rows the threshold keeps, and its
    /// lower bound (0 and 0 when none is kept).
    pub agreement: f64,
    pub lower_bound: f64,
    /// The share of calibration rows that would escalate.
    pub escalated_share: f64,
    /// Why no threshold qualified, when none did.
    pub reason: Option<String>,
}

/// The loosest threshold whose kept rows' agreement is certified at `target` with level
/// `1 - delta` (see the module documentation).
pub fn calibrate(rows: &[Judged], target: f64, delta: f64) -> Calibration {
    let mut by_confidence: Vec<Judged> = rows
        .iter()
        .copied()
        .filter(|r| r.confidence.is_finite())
        .collect();
    by_confidence.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    let total = rows.len().max(1) as f64;
    // Fewer rows than this cannot certify `target` even if every one agrees.
    let testable = if target <= 0.0 {
        1
    } else if target >= 1.0 {
        usize::MAX
    } else {
        (delta.ln() / target.ln()).ceil().max(1.0) as usize
    };
    let mut best: Option<(f64, u64, u64, f64)> = None;
    let mut failed_at = None;
    let (mut kept, mut agreeing) = (0u64, 0u64);
    let mut i = 0;
    while i < by_confidence.len() {
        // Every row at this confidence is kept together.
        let threshold = by_confidence[i].confidence;
        while i < by_confidence.len() && by_confidence[i].confidence == threshold {
            kept += 1;
            agreeing += u64::from(by_confidence[i].agrees);
            i += 1;
        }
        if (kept as usize) < testable {
            continue;
        }
        let bound = clopper_pearson_lower(agreeing, kept, delta);
        if bound < target {
            failed_at = Some((threshold, agreeing, kept, bound));
            break;
        }
        best = Some((threshold, agreeing, kept, bound));
    }
    match best {
        Some((threshold, agreeing, kept, bound)) => Calibration {
            threshold: Some(threshold),
            agreement: agreeing as f64 / kept as f64,
            lower_bound: bound,
            escalated_share: 1.0 - kept as f64 / total,
            reason: None,
        },
        None => Calibration {
            threshold: None,
            agreement: 0.0,
            lower_bound: 0.0,
            escalated_share: 1.0,
            reason: Some(match failed_at {
                Some((threshold, agreeing, kept, bound)) => format!(
                    "at the strictest testable threshold ({threshold}) the small model agreed on \
                     {agreeing} of {kept} rows, a lower bound of {bound:.3} under the target \
                     {target}"
                ),
                None => format!(
                    "{} calibration rows cannot certify an agreement of {target} at level {}: \
                     at least {testable} are needed",
                    rows.len(),
                    1.0 - delta
                ),
            }),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clopper_pearson_matches_scipy() {
        // scipy.stats.beta.ppf(0.05, k, n - k + 1), scipy 1.x
        for (k, n, want) in [
            (9, 10, 0.605_836_697_563_495_2),
            (50, 50, 0.941_844_920_883_027_7),
            (180, 200, 0.858_010_748_409_054_9),
            (1, 1, 0.05),
        ] {
            let got = clopper_pearson_lower(k, n, 0.05);
            assert!((got - want).abs() < 1e-9, "{k}/{n}: {got} vs {want}");
        }
        assert_eq!(clopper_pearson_lower(0, 10, 0.05), 0.0);
    }

    /// A seeded uniform stream (splitmix64).
    struct Stream(u64);

    impl Stream {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// `n` rows where the small model agrees with probability `agree`; its confidence is
    /// drawn from [0.55, 1) where it agrees and [0.3, 0.65) where not (overlapping), or from
    /// [0, 1) either way when `informative` is false.
    fn simulate(seed: u64, n: usize, agree: f64, informative: bool) -> Vec<Judged> {
        let overlap = if informative {
            [(0.55, 1.0), (0.3, 0.65)]
        } else {
            [(0.0, 1.0), (0.0, 1.0)]
        };
        simulate_with(seed, n, agree, overlap)
    }

    /// As [`simulate`], with the confidence ranges of agreeing and disagreeing rows given.
    fn simulate_with(seed: u64, n: usize, agree: f64, ranges: [(f64, f64); 2]) -> Vec<Judged> {
        let mut s = Stream(seed);
        (0..n)
            .map(|_| {
                let agrees = s.next() < agree;
                let (lo, hi) = ranges[usize::from(!agrees)];
                let confidence = lo + (hi - lo) * s.next();
                Judged { confidence, agrees }
            })
            .collect()
    }

    /// Over 40 seeds: how often the final agreement on rows outside a 200-row calibration
    /// sample reached the target, and the mean share escalated.
    fn outside_the_sample(agree: f64, ranges: [(f64, f64); 2], target: f64) -> (usize, f64) {
        let mut held = 0;
        let mut escalated = 0.0;
        for seed in 0..40u64 {
            let rows = simulate_with(seed * 7_919 + 1, 2_200, agree, ranges);
            let (sample, rest) = rows.split_at(200);
            let threshold = calibrate(sample, target, 0.05)
                .threshold
                .unwrap_or(f64::INFINITY);
            // Kept rows carry the small model's score; escalated ones the main model's.
            let agreeing = rest
                .iter()
                .filter(|r| r.confidence < threshold || r.agrees)
                .count();
            if agreeing as f64 / rest.len() as f64 >= target {
                held += 1;
            }
            let up = rest.iter().filter(|r| r.confidence < threshold).count();
            escalated += up as f64 / rest.len() as f64 / 40.0;
        }
        (held, escalated)
    }

    #[test]
    fn the_guarantee_holds_on_rows_outside_the_sample_for_most_seeds() {
        // The small model agrees on 85 % of rows; its confidence tells them apart, with an
        // overlap.
        let (held, escalated) = outside_the_sample(0.85, [(0.55, 1.0), (0.3, 0.65)], 0.9);
        assert!(held >= 36, "the agreement held for {held} of 40 seeds");
        assert!(
            escalated <= 0.35,
            "on average {escalated:.2} of the rows escalate"
        );
        // A wide overlap: the kept rows' agreement sits near the target, and the bound
        // still holds it there.
        let (held, _) = outside_the_sample(0.85, [(0.5, 1.0), (0.3, 0.8)], 0.9);
        assert!(
            held >= 36,
            "with a wide overlap, it held for {held} of 40 seeds"
        );
        // Without the bound (the loosest threshold whose sample agreement reaches the
        // target), the same data miss the target more often: the bound is what holds it.
        let mut naive_held = 0;
        for seed in 0..40u64 {
            let rows = simulate_with(seed * 7_919 + 1, 2_200, 0.85, [(0.5, 1.0), (0.3, 0.8)]);
            let (sample, rest) = rows.split_at(200);
            let mut sorted = sample.to_vec();
            sorted.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
            let (mut k, mut threshold) = (0, f64::INFINITY);
            for (i, r) in sorted.iter().enumerate() {
                k += usize::from(r.agrees);
                if k as f64 / (i + 1) as f64 >= 0.9 {
                    threshold = r.confidence;
                }
            }
            let agreeing = rest
                .iter()
                .filter(|r| r.confidence < threshold || r.agrees)
                .count();
            naive_held += usize::from(agreeing as f64 / rest.len() as f64 >= 0.9);
        }
        assert!(naive_held < held, "naive {naive_held}, calibrated {held}");
    }

    #[test]
    fn an_uninformative_confidence_at_half_agreement_escalates_everything() {
        for seed in 0..10 {
            let rows = simulate(seed, 200, 0.5, false);
            let c = calibrate(&rows, 0.9, 0.05);
            assert_eq!(c.threshold, None, "seed {seed}: {c:?}");
            assert_eq!(c.escalated_share, 1.0);
            assert!(
                c.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("lower bound")),
                "{c:?}"
            );
        }
    }

    #[test]
    fn too_few_rows_say_how_many_are_needed() {
        let rows = vec![
            Judged {
                confidence: 0.9,
                agrees: true,
            };
            10
        ];
        let c = calibrate(&rows, 0.9, 0.05);
        assert_eq!(c.threshold, None);
        assert!(c.reason.unwrap().contains("at least 29"));
    }
}
