//! Percentile bootstrap of a mean and the paired bootstrap test of two systems, as Poisson
//! bootstraps whose weights are a hash of the data, so the result does not depend on how
//! the rows are partitioned or ordered.
//!
//! # The resampling
//!
//! In the Poisson bootstrap (Hanley & MacGibbon 2006; Chamandy et al. 2012) each row gets,
//! in resample `b`, an independent weight `W ~ Poisson(1)` instead of a multinomial count;
//! a resample's mean is `Σ W·x / Σ W` (resamples with `Σ W = 0` are left out). For large
//! `n` it is equivalent to the classic bootstrap (`scipy.stats.bootstrap`), and its weights
//! need no knowledge of the other rows.
//!
//! The weights here come from a hash, not from a stream of random numbers: a row's weights
//! depend only on the seed, the resample index and the row's value. Rows with *equal*
//! values must still get independent weights (a binary metric has only two values), so the
//! state keeps the multiplicity `m` of each distinct value, and the value gets, in resample
//! `b`, one weight `W ~ Poisson(m)` — the sum of `m` independent `Poisson(1)` weights,
//! which is what its `m` rows would have got. So the state is a map value → count, merged
//! by adding counts: exactly associative and commutative, and the final sums are taken
//! over the distinct values in ascending order, so the interval is bit-for-bit the same
//! however the rows were split, ordered or merged.
//!
//! `W` for (seed, b, value, m) is drawn from SplitMix64 (Steele, Lea & Flood 2014) seeded
//! with `key(value) ^ key(seed, b)`, where the keys are SplitMix64's finaliser `mix64`:
//!
//! * `seed_key = mix64(seed ^ 0x5851_F42D_4C95_7F2D)`,
//!   `key(seed, b) = mix64(seed_key + (b + 1)·0x9E37_79B9_7F4A_7C15)` (wrapping);
//! * `key(x) = mix64(bits(x) ^ 0xD1B5_4A32_D192_ED03)` (`-0.0` counts as `0.0`);
//!   for a pair `key(a, b) = mix64(mix64(bits(a) ^ 0xD1B5_4A32_D192_ED03) ^ bits(b))`;
//! * the generator's `k`-th output is `mix64(s + k·0x9E37_79B9_7F4A_7C15)` (`k = 1, 2, …`),
//!   a uniform `u = (output >> 11) / 2^53`.
//!
//! For `m < 10`, `W` is the sum of `m` `Poisson(1)` draws, each by inverse CDF on the
//! 53-bit integer `output >> 11` against [`POISSON1_THRESHOLDS`] (`round(2^53 · F(k))`); for
//! `m >= 10` it is one draw of Hörmann's PTRS (transformed rejection with squeeze, 1993).
//! `tests/stats/reference.py` implements the same generator in Python and reproduces the
//! intervals and p-values bit for bit.
//!
//! The memory of a state is one entry per distinct value (per distinct pair for the paired
//! test); the work of [`BootstrapState::ci`] is `resamples × distinct values` weights.

use super::counts::Counts;

/// The default confidence level of the intervals.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;
/// The default number of bootstrap resamples.
pub const DEFAULT_RESAMPLES: usize = 2000;
/// The default seed of the resampling.
pub const DEFAULT_SEED: u64 = 42;

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
const SEED_SALT: u64 = 0x5851_F42D_4C95_7F2D;
const VALUE_SALT: u64 = 0xD1B5_4A32_D192_ED03;

/// `round(2^53 · P(Poisson(1) <= k))` for `k = 0, 1, …` (computed with 60-digit
/// arithmetic); the last entry is `2^53`, so every 53-bit uniform finds its `k`.
pub const POISSON1_THRESHOLDS: [u64; 19] = [
    3_313_563_428_353_948,
    6_627_126_856_707_896,
    8_283_908_570_884_870,
    8_836_169_142_277_194,
    8_974_234_285_125_276,
    9_001_847_313_694_892,
    9_006_449_485_123_161,
    9_007_106_938_184_342,
    9_007_189_119_816_990,
    9_007_198_251_109_507,
    9_007_199_164_238_758,
    9_007_199_247_250_508,
    9_007_199_254_168_154,
    9_007_199_254_700_281,
    9_007_199_254_738_290,
    9_007_199_254_740_824,
    9_007_199_254_740_982,
    9_007_199_254_740_991,
    9_007_199_254_740_992,
];

/// SplitMix64's output function (Stafford's "Mix13" variant of the MurmurHash3 finaliser).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The bits that identify a value: `-0.0` is `0.0`, every NaN is one NaN.
fn value_bits(x: f64) -> u64 {
    if x == 0.0 {
        0
    } else if x.is_nan() {
        f64::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

/// The value a key stands for (inverse of [`value_bits`] on canonical bits).
fn bits_value(bits: u64) -> f64 {
    f64::from_bits(bits)
}

/// The per-resample keys `key(seed, b)` for `b = 0..resamples`.
fn resample_keys(seed: u64, resamples: usize) -> Vec<u64> {
    let seed_key = mix64(seed ^ SEED_SALT);
    (0..resamples as u64)
        .map(|b| mix64(seed_key.wrapping_add((b + 1).wrapping_mul(GOLDEN))))
        .collect()
}

fn single_key(bits: u64) -> u64 {
    mix64(bits ^ VALUE_SALT)
}

fn pair_key(a_bits: u64, b_bits: u64) -> u64 {
    mix64(mix64(a_bits ^ VALUE_SALT) ^ b_bits)
}

/// SplitMix64 from a given state.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix64(self.0)
    }

    /// A uniform on `[0, 1)` with 53 random bits.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// One `Poisson(1)` draw by inverse CDF (branch-free over the first 8 thresholds,
    /// which a uniform passes with probability 1e-5).
    fn poisson1(&mut self) -> u64 {
        let u = self.next_u64() >> 11;
        let mut k: u64 = POISSON1_THRESHOLDS[..8]
            .iter()
            .map(|&t| u64::from(t <= u))
            .sum();
        if k == 8 {
            k += POISSON1_THRESHOLDS[8..]
                .iter()
                .take_while(|&&t| t <= u)
                .count() as u64;
        }
        k
    }
}

/// `ln(k!)`: exact factorial below 16, Stirling's series (to `x^-5`, error < 1e-12) above.
fn ln_factorial(k: f64) -> f64 {
    if k < 16.0 {
        let mut f = 1.0;
        let mut i = 2.0;
        while i <= k {
            f *= i;
            i += 1.0;
        }
        f.ln()
    } else {
        let x = k + 1.0;
        let x2 = x * x;
        (x - 0.5) * x.ln() - x
            + 0.918_938_533_204_672_8
            + (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / (1260.0 * x2)) / x2) / x
    }
}

/// One `Poisson(lambda)` draw, `lambda >= 10`, by Hörmann's PTRS.
fn poisson_ptrs(lambda: f64, rng: &mut SplitMix64) -> u64 {
    let slam = lambda.sqrt();
    let loglam = lambda.ln();
    let b = 0.931 + 2.53 * slam;
    let a = -0.059 + 0.02483 * b;
    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    let vr = 0.9277 - 3.6224 / (b - 2.0);
    loop {
        let u = rng.next_f64() - 0.5;
        let v = rng.next_f64();
        let us = 0.5 - u.abs();
        let k = ((2.0 * a / us + b) * u + lambda + 0.43).floor();
        if us >= 0.07 && v <= vr {
            return k as u64;
        }
        if !(k >= 0.0) || (us < 0.013 && v > us) {
            continue;
        }
        if v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln()
            <= -lambda + k * loglam - ln_factorial(k)
        {
            return k as u64;
        }
    }
}

/// The total weight, in one resample, of a value seen `count` times: `Poisson(count)`.
fn weight(stream_seed: u64, count: u64) -> u64 {
    let mut rng = SplitMix64(stream_seed);
    if count < 10 {
        (0..count).map(|_| rng.poisson1()).sum()
    } else {
        poisson_ptrs(count as f64, &mut rng)
    }
}

/// The `q`-quantile of ascending `sorted` values by linear interpolation between closest
/// ranks, `numpy.percentile(x, 100 q)`'s default method, with numpy's exact arithmetic
/// (virtual index `(n - 1) q`; `b - (b - a)(1 - g)` for fractions `g >= 1/2`).
pub fn percentile_linear(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    let virtual_index = (n - 1) as f64 * q;
    if virtual_index >= (n - 1) as f64 {
        return sorted[n - 1];
    }
    if virtual_index < 0.0 {
        return sorted[0];
    }
    let prev = virtual_index.floor();
    let g = virtual_index - prev;
    let lo = sorted[prev as usize];
    let hi = sorted[prev as usize + 1];
    let diff = hi - lo;
    if g >= 0.5 {
        hi - diff * (1.0 - g)
    } else {
        lo + diff * g
    }
}

/// The percentile interval `(q_{(1-c)/2}, q_{(1+c)/2})` of `values` (sorted in place).
fn percentile_interval(values: &mut [f64], confidence: f64) -> Option<(f64, f64)> {
    if values.is_empty() || !(confidence > 0.0 && confidence < 1.0) {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some((
        percentile_linear(values, (1.0 - confidence) / 2.0),
        percentile_linear(values, (1.0 + confidence) / 2.0),
    ))
}

/// The partial aggregate of the bootstrap interval of a mean: each distinct value and how
/// often it was seen. Merging adds counts, so the interval does not depend on partitioning.
#[derive(Clone, Debug, PartialEq)]
pub struct BootstrapState {
    seed: u64,
    resamples: usize,
    counts: Counts<u64>,
}

impl Default for BootstrapState {
    fn default() -> Self {
        Self::new(DEFAULT_SEED, DEFAULT_RESAMPLES)
    }
}

impl BootstrapState {
    /// An empty state drawing `resamples` resamples from `seed`.
    pub fn new(seed: u64, resamples: usize) -> Self {
        Self {
            seed,
            resamples,
            counts: Counts::default(),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The number of resamples.
    pub fn resamples(&self) -> usize {
        self.resamples
    }

    /// The number of rows seen.
    pub fn rows(&self) -> u64 {
        self.counts.total()
    }

    /// Adds one row.
    pub fn update(&mut self, x: f64) {
        self.update_count(x, 1);
    }

    /// Adds `count` rows of value `x` (restores a state from [`Self::entries`]).
    pub fn update_count(&mut self, x: f64, count: u64) {
        self.counts.add(value_bits(x), count);
    }

    /// Adds the rows of `other` (which must have the same seed and resamples).
    pub fn merge(&mut self, other: &BootstrapState) {
        debug_assert_eq!((self.seed, self.resamples), (other.seed, other.resamples));
        self.counts.merge(&other.counts);
    }

    /// The distinct values and their counts, ascending by value: the serialisable state.
    pub fn entries(&self) -> Vec<(f64, u64)> {
        let mut e: Vec<(f64, u64)> = self
            .counts
            .iter()
            .map(|(&bits, &count)| (bits_value(bits), count))
            .collect();
        e.sort_by(|x, y| x.0.total_cmp(&y.0));
        e
    }

    /// The mean of every resample with a positive total weight, in resample order.
    pub fn resample_means(&self) -> Vec<f64> {
        let keys = resample_keys(self.seed, self.resamples);
        let mut wx = vec![0.0_f64; self.resamples];
        let mut w = vec![0_u64; self.resamples];
        for (x, count) in self.entries() {
            let key = single_key(value_bits(x));
            for ((k, sx), sw) in keys.iter().zip(&mut wx).zip(&mut w) {
                // Adding 0·x when wt = 0 leaves the sum bit-for-bit unchanged (x is finite
                // and a sum starting at +0.0 is never -0.0), so no branch is needed.
                let wt = weight(key ^ k, count);
                *sx += wt as f64 * x;
                *sw += wt;
            }
        }
        wx.iter()
            .zip(&w)
            .filter(|(_, sw)| **sw > 0)
            .map(|(sx, &sw)| sx / sw as f64)
            .collect()
    }

    /// The percentile bootstrap interval of the mean at level `confidence`: the
    /// `(1-c)/2` and `(1+c)/2` quantiles (numpy's default linear interpolation) of the
    /// resample means. The counterpart of `scipy.stats.bootstrap((x,), np.mean,
    /// confidence_level=c, method='percentile')` — equal in distribution, not in its random
    /// numbers. `None` with no rows or `confidence` outside `(0, 1)`; `(NaN, NaN)` if a
    /// value is NaN or infinite.
    pub fn ci(&self, confidence: f64) -> Option<(f64, f64)> {
        if self.counts.is_empty() || !(confidence > 0.0 && confidence < 1.0) {
            return None;
        }
        if self.counts.keys().any(|&b| !bits_value(b).is_finite()) {
            return Some((f64::NAN, f64::NAN));
        }
        percentile_interval(&mut self.resample_means(), confidence)
    }
}

/// The partial aggregate of the paired bootstrap test of two systems scored on the same
/// rows: each distinct pair of scores `(a, b)` and how often it was seen.
///
/// The test (the paired bootstrap of Koehn 2004 and Berg-Kirkpatrick et al. 2012, made
/// two-sided by centring the bootstrap distribution as Efron & Tibshirani 1993 §16.4 do):
///
/// * observed difference `d = mean(a) - mean(b)`;
/// * resample differences `d_i = Σ W a / Σ W - Σ W b / Σ W` over the resamples with
///   `Σ W > 0` (`B'` of them), weights as in the module documentation;
/// * `p = (1 + #{i : |d_i - d| >= |d|}) / (1 + B')` — the share of resamples whose
///   difference, shifted to mean zero under the null, is at least as extreme as the
///   observed one; the `+1`s (Davison & Hinkley 1997, eq. 4.11) keep `p > 0`. `p = 1` when
///   `d = 0`.
#[derive(Clone, Debug, PartialEq)]
pub struct PairedBootstrapState {
    seed: u64,
    resamples: usize,
    counts: Counts<(u64, u64)>,
}

impl Default for PairedBootstrapState {
    fn default() -> Self {
        Self::new(DEFAULT_SEED, DEFAULT_RESAMPLES)
    }
}

/// The observed and resampled differences of a paired test.
struct PairedDiffs {
    observed: f64,
    resampled: Vec<f64>,
}

impl PairedBootstrapState {
    /// An empty state drawing `resamples` resamples from `seed`.
    pub fn new(seed: u64, resamples: usize) -> Self {
        Self {
            seed,
            resamples,
            counts: Counts::default(),
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The number of resamples.
    pub fn resamples(&self) -> usize {
        self.resamples
    }

    /// The number of rows seen.
    pub fn rows(&self) -> u64 {
        self.counts.total()
    }

    /// Adds one row: system A scored `a`, system B scored `b`.
    pub fn update(&mut self, a: f64, b: f64) {
        self.update_count(a, b, 1);
    }

    /// Adds `count` rows of scores `(a, b)` (restores a state from [`Self::entries`]).
    pub fn update_count(&mut self, a: f64, b: f64, count: u64) {
        self.counts.add((value_bits(a), value_bits(b)), count);
    }

    /// Adds the rows of `other` (which must have the same seed and resamples).
    pub fn merge(&mut self, other: &PairedBootstrapState) {
        debug_assert_eq!((self.seed, self.resamples), (other.seed, other.resamples));
        self.counts.merge(&other.counts);
    }

    /// The distinct pairs and their counts, ascending by `a` then `b`: the serialisable
    /// state.
    pub fn entries(&self) -> Vec<(f64, f64, u64)> {
        let mut e: Vec<(f64, f64, u64)> = self
            .counts
            .iter()
            .map(|(&(a, b), &count)| (bits_value(a), bits_value(b), count))
            .collect();
        e.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1)));
        e
    }

    fn has_non_finite(&self) -> bool {
        self.counts
            .keys()
            .any(|&(a, b)| !bits_value(a).is_finite() || !bits_value(b).is_finite())
    }

    fn diffs(&self) -> Option<PairedDiffs> {
        if self.counts.is_empty() {
            return None;
        }
        let entries = self.entries();
        let keys = resample_keys(self.seed, self.resamples);
        let (mut sa, mut sb, mut n) = (0.0_f64, 0.0_f64, 0_u64);
        let mut wa = vec![0.0_f64; self.resamples];
        let mut wb = vec![0.0_f64; self.resamples];
        let mut w = vec![0_u64; self.resamples];
        for &(a, b, count) in &entries {
            sa += count as f64 * a;
            sb += count as f64 * b;
            n += count;
            let key = pair_key(value_bits(a), value_bits(b));
            for (((k, ra), rb), rw) in keys.iter().zip(&mut wa).zip(&mut wb).zip(&mut w) {
                let wt = weight(key ^ k, count);
                if wt > 0 {
                    *ra += wt as f64 * a;
                    *rb += wt as f64 * b;
                    *rw += wt;
                }
            }
        }
        let observed = sa / n as f64 - sb / n as f64;
        let resampled = (0..self.resamples)
            .filter(|&i| w[i] > 0)
            .map(|i| {
                let sw = w[i] as f64;
                wa[i] / sw - wb[i] / sw
            })
            .collect();
        Some(PairedDiffs {
            observed,
            resampled,
        })
    }

    /// The observed difference of means `mean(a) - mean(b)` (summed over the distinct
    /// pairs in ascending order); `None` with no rows.
    pub fn observed_diff(&self) -> Option<f64> {
        let (mut sa, mut sb, mut n) = (0.0_f64, 0.0_f64, 0_u64);
        for (a, b, count) in self.entries() {
            sa += count as f64 * a;
            sb += count as f64 * b;
            n += count;
        }
        (n > 0).then(|| sa / n as f64 - sb / n as f64)
    }

    /// The two-sided paired bootstrap p-value defined on [`PairedBootstrapState`]; `None`
    /// with no rows (or no resample), NaN if a score is NaN or infinite.
    pub fn p_value(&self) -> Option<f64> {
        if self.has_non_finite() && !self.counts.is_empty() {
            return Some(f64::NAN);
        }
        let d = self.diffs()?;
        if d.resampled.is_empty() {
            return None;
        }
        let extreme = d
            .resampled
            .iter()
            .filter(|&&di| (di - d.observed).abs() >= d.observed.abs())
            .count();
        Some((1 + extreme) as f64 / (1 + d.resampled.len()) as f64)
    }

    /// The percentile bootstrap interval of `mean(a) - mean(b)` at level `confidence`
    /// (as [`BootstrapState::ci`], on the resample differences). `None` with no rows or
    /// `confidence` outside `(0, 1)`; `(NaN, NaN)` if a score is NaN or infinite.
    pub fn diff_ci(&self, confidence: f64) -> Option<(f64, f64)> {
        if self.counts.is_empty() || !(confidence > 0.0 && confidence < 1.0) {
            return None;
        }
        if self.has_non_finite() {
            return Some((f64::NAN, f64::NAN));
        }
        percentile_interval(&mut self.diffs()?.resampled, confidence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(n: usize) -> Vec<f64> {
        // A deterministic skewed sample with ties.
        (0..n)
            .map(|i| ((mix64(i as u64) >> 40) % 1000) as f64 / 250.0)
            .map(|x| x * x / 4.0)
            .collect()
    }

    #[test]
    fn poisson1_weights_have_unit_mean_and_variance() {
        let mut rng = SplitMix64(12345);
        let n = 200_000;
        let draws: Vec<f64> = (0..n).map(|_| rng.poisson1() as f64).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let var = draws.iter().map(|d| (d - mean) * (d - mean)).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.01, "{mean}");
        assert!((var - 1.0).abs() < 0.02, "{var}");
        let zeros = draws.iter().filter(|&&d| d == 0.0).count() as f64 / n as f64;
        assert!((zeros - (-1.0_f64).exp()).abs() < 0.005, "{zeros}");
    }

    #[test]
    fn ptrs_weights_have_poisson_moments() {
        for lambda in [10.0, 37.0, 1000.0] {
            let mut rng = SplitMix64(7);
            let n = 100_000;
            let draws: Vec<f64> = (0..n)
                .map(|_| poisson_ptrs(lambda, &mut rng) as f64)
                .collect();
            let mean = draws.iter().sum::<f64>() / n as f64;
            let var = draws.iter().map(|d| (d - mean) * (d - mean)).sum::<f64>() / n as f64;
            assert!((mean / lambda - 1.0).abs() < 0.01, "{lambda}: {mean}");
            assert!((var / lambda - 1.0).abs() < 0.03, "{lambda}: {var}");
        }
    }

    #[test]
    fn weights_are_uncorrelated_across_values_and_resamples() {
        let keys = resample_keys(DEFAULT_SEED, 2000);
        let w = |x: f64, b: usize| weight(single_key(value_bits(x)) ^ keys[b], 1) as f64;
        let n = 2000;
        let corr = |f: &dyn Fn(usize) -> (f64, f64)| {
            let pairs: Vec<(f64, f64)> = (0..n).map(f).collect();
            let mx = pairs.iter().map(|p| p.0).sum::<f64>() / n as f64;
            let my = pairs.iter().map(|p| p.1).sum::<f64>() / n as f64;
            let cov: f64 = pairs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            let vx: f64 = pairs.iter().map(|p| (p.0 - mx).powi(2)).sum();
            let vy: f64 = pairs.iter().map(|p| (p.1 - my).powi(2)).sum();
            cov / (vx * vy).sqrt()
        };
        // Neighbouring values in one resample; one value in neighbouring resamples.
        assert!(corr(&|b| (w(1.0, b), w(2.0, b))).abs() < 0.08);
        assert!(corr(&|i| (w(i as f64, 0), w(i as f64 + 1.0, 0))).abs() < 0.08);
        assert!(corr(&|b| (w(0.5, b), w(0.5, (b + 1) % 2000))).abs() < 0.08);
    }

    #[test]
    fn ties_get_independent_weights() {
        // 100 zeros and 100 ones: the bootstrap interval of the mean must be about
        // ±1.96 · 0.5/√200 = ±0.069 around 0.5, not the width of two shared weights.
        let mut s = BootstrapState::default();
        for i in 0..200 {
            s.update((i % 2) as f64);
        }
        let (lo, hi) = s.ci(0.95).unwrap();
        assert!(
            (lo - 0.431).abs() < 0.02 && (hi - 0.569).abs() < 0.02,
            "{lo} {hi}"
        );
    }

    #[test]
    fn partitioning_and_order_do_not_change_the_interval() {
        let xs = sample(300);
        let mut whole = BootstrapState::new(7, 500);
        for &x in &xs {
            whole.update(x);
        }
        let mut parts: Vec<BootstrapState> = (0..3).map(|_| BootstrapState::new(7, 500)).collect();
        for (i, &x) in xs.iter().enumerate().rev() {
            parts[(i * 7) % 3].update(x);
        }
        let mut merged = BootstrapState::new(7, 500);
        merged.merge(&parts[2]);
        merged.merge(&parts[0]);
        merged.merge(&parts[1]);
        assert_eq!(whole.ci(0.9), merged.ci(0.9));
        let mut restored = BootstrapState::new(7, 500);
        for (x, c) in merged.entries() {
            restored.update_count(x, c);
        }
        assert_eq!(restored.ci(0.9), whole.ci(0.9));
        assert_eq!(whole.rows(), 300);
    }

    #[test]
    fn interval_brackets_the_mean_and_is_about_the_normal_width() {
        let xs = sample(400);
        let mut s = BootstrapState::default();
        xs.iter().for_each(|&x| s.update(x));
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let mv = (mean, sd);
        let (lo, hi) = s.ci(0.95).unwrap();
        let width = 2.0 * 1.96 * mv.1 / (xs.len() as f64).sqrt();
        assert!(lo < mv.0 && mv.0 < hi);
        assert!(((hi - lo) / width - 1.0).abs() < 0.15, "{lo} {hi} {width}");
    }

    #[test]
    fn degenerate_inputs() {
        let mut s = BootstrapState::default();
        assert_eq!(s.ci(0.95), None);
        s.update(-0.0);
        s.update(0.0);
        assert_eq!(s.entries(), vec![(0.0, 2)]);
        assert_eq!(s.ci(0.95), Some((0.0, 0.0)));
        assert_eq!(s.ci(1.0), None);
        s.update(f64::NAN);
        let (lo, hi) = s.ci(0.95).unwrap();
        assert!(lo.is_nan() && hi.is_nan());
    }

    #[test]
    fn percentile_matches_numpy() {
        // numpy.percentile([1, 2, 3, 4, 10], [2.5, 97.5]) = [1.1, 9.4]
        let v = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(percentile_linear(&v, 0.025), 1.1);
        assert_eq!(percentile_linear(&v, 0.975), 9.399_999_999_999_999);
        assert_eq!(percentile_linear(&v, 0.0), 1.0);
        assert_eq!(percentile_linear(&v, 1.0), 10.0);
        assert_eq!(percentile_linear(&[3.0], 0.3), 3.0);
    }

    #[test]
    fn paired_test() {
        let a = sample(300);
        // System B is A plus noise: no real difference, then a clear one.
        let noise: Vec<f64> = (0..300)
            .map(|i| ((mix64(i + 999) >> 60) as f64 - 7.5) / 10.0)
            .collect();
        let mut same = PairedBootstrapState::default();
        let mut better = PairedBootstrapState::default();
        for i in 0..300 {
            same.update(a[i], a[i] + noise[i] * 0.01);
            better.update(a[i] + 0.3, a[i] + noise[i]);
        }
        assert!(same.p_value().unwrap() > 0.05);
        let p = better.p_value().unwrap();
        assert!(p < 0.01, "{p}");
        assert!(p >= 1.0 / 2001.0);
        let (lo, hi) = better.diff_ci(0.95).unwrap();
        let d = better.observed_diff().unwrap();
        assert!(lo < d && d < hi && lo > 0.0);
        // Identical systems: d = 0, p = 1.
        let mut tie = PairedBootstrapState::default();
        a.iter().for_each(|&x| tie.update(x, x));
        assert_eq!(tie.p_value(), Some(1.0));
        // Order and partitioning do not matter.
        let mut left = PairedBootstrapState::default();
        let mut right = PairedBootstrapState::default();
        for i in (0..300).rev() {
            let s = if i % 3 == 0 { &mut left } else { &mut right };
            s.update(a[i] + 0.3, a[i] + noise[i]);
        }
        right.merge(&left);
        assert_eq!(right.p_value(), better.p_value());
        assert_eq!(right.diff_ci(0.9), better.diff_ci(0.9));
        assert_eq!(PairedBootstrapState::default().p_value(), None);
    }
}
