//! Student's t distribution (CDF and quantile) and the t confidence interval of a mean.
//!
//! The quantile is implemented here rather than taken from a crate: `statrs` is not in the
//! tree, and matching `scipy.stats.t.ppf` (Boost's `students_t` quantile) to ~1e-12 needs
//! an incomplete beta that stays accurate where the textbook continued fraction does not
//! (large `df`, where `x = df/(df+t^2)` is within `1/df` of 1 and the continued fraction
//! cancels catastrophically). So:
//!
//! * The tail `P(T > |t|) = I_x(df/2, 1/2) / 2` and the central mass `P(|T| < |t|) =
//!   I_y(1/2, df/2)` (`y = t^2/(df+t^2)`) are computed from `t` and `df` directly, never
//!   from a rounded `1 - x`: the modified-Lentz continued fraction of the incomplete beta
//!   (DiDonato & Morris, ACM TOMS 18(3), 1992, BFRAC; Numerical Recipes' `betacf`) on the
//!   side where it converges, and for `df >= 30` near `x = 1` DiDonato & Morris's
//!   asymptotic expansion BGRAT (the one Boost uses there), which for `b = 1/2` reduces to
//!   upper incomplete gamma functions of half-integer order.
//! * The quantile inverts that CDF by safeguarded Newton iterations, on the central mass for
//!   `0.25 <= p <= 0.75` and on the log of the tail otherwise, so the answer is accurate
//!   relative to `t` everywhere (near 0 and in the far tails alike).
//!
//! [`MeanVar`] keeps the streaming moments (count, mean, sum of squared deviations) of a
//! column, mergeable across partitions (Welford; Chan et al. 1979), and [`MeanVar::ci`] is
//! `scipy.stats.t.interval(c, n-1, loc=mean, scale=scipy.stats.sem(x))`.

const SQRT_PI: f64 = 1.772_453_850_905_516;
const EPS: f64 = f64::EPSILON;

/// Coefficients `c_k` of `ln(Γ(a+1/2)/Γ(a)) - ln(a)/2 = Σ c_k a^-(2k-1)` (Stirling series:
/// `c = (2 - 2^(1-2k)) (-B_2k) / (2k (2k-1))`), exact rationals rounded to f64.
const LN_HALF_RATIO: [f64; 8] = [
    -0.125,
    0.005_208_333_333_333_333,
    -0.001_562_5,
    0.001_185_825_892_857_142_8,
    -0.001_681_857_638_888_889,
    0.003_834_117_542_613_636_5,
    -0.012_819_730_318_509_616,
    0.059_100_405_375_162_764,
];

/// Taylor coefficients of `ψ(v) = ((v/2)/sinh(v/2))^(1/2) = Σ e_k v^(2k)` (radius 2π), the
/// kernel of BGRAT for `b = 1/2`; exact rationals rounded to f64.
const PSI: [f64; 24] = [
    1.0,
    -0.020_833_333_333_333_332,
    0.000_390_625,
    -7.879_670_965_608_466e-6,
    1.696_766_579_172_178_2e-7,
    -3.805_064_191_721_906e-9,
    8.748_377_596_315_407e-11,
    -2.044_523_359_411_974e-12,
    4.833_351_797_967_704e-14,
    -1.152_434_101_767_386e-15,
    2.766_052_043_599_37e-17,
    -6.674_281_950_891_66e-19,
    1.617_455_077_181_58e-20,
    -3.933_977_920_091_38e-22,
    9.597_634_062_586_047e-24,
    -2.347_690_291_162_632e-25,
    5.755_870_387_544_266_6e-27,
    -1.414_008_810_826_549e-28,
    3.479_869_365_059_028e-30,
    -8.577_466_165_340_376e-32,
    2.117_235_104_167_986_5e-33,
    -5.232_780_285_737_599e-35,
    1.294_783_576_977_770_7e-36,
    -3.207_141_297_803_777_5e-38,
];

/// `Γ(a + 1/2) / Γ(a)` for `a > 0`: the Stirling series of its logarithm for `a >= 10`
/// (terms to `a^-15`, below 1e-17 there), reached from smaller `a` by the recurrence
/// `R(a) = R(a+1) · a / (a + 1/2)`.
fn gamma_half_ratio(a: f64) -> f64 {
    let mut a = a;
    let mut prod = 1.0;
    while a < 10.0 {
        prod *= a / (a + 0.5);
        a += 1.0;
    }
    let inv = 1.0 / a;
    let inv2 = inv * inv;
    let mut s = 0.0;
    for c in LN_HALF_RATIO.iter().rev() {
        s = s * inv2 + c;
    }
    prod * a.sqrt() * (s * inv).exp()
}

/// The continued fraction of the regularized incomplete beta (modified Lentz):
/// `I_x(a, b) = x^a (1-x)^b / (a B(a, b)) · beta_cf(a, b, x)`. Converges quickly for
/// `x < (a+1)/(a+b+2)`.
fn beta_cf(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let qab = a + b;
    let qap = a + 1.0;
    let qam = a - 1.0;
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=100_000 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 + aa * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + aa / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() <= EPS {
            break;
        }
    }
    h
}

/// `Γ(1/2, z) e^z z^(-1/2)` for `z > 0` (Legendre's continued fraction of the upper
/// incomplete gamma function, modified Lentz). Equals `√π erfcx(√z) / √z`.
fn upper_gamma_half_scaled(z: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let s = 0.5;
    let mut b = z + 1.0 - s;
    let mut c = 1.0 / TINY;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..=100_000 {
        let i = f64::from(i);
        let an = -i * (i - s);
        b += 2.0;
        d = an * d + b;
        if d.abs() < TINY {
            d = TINY;
        }
        c = b + an / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let del = d * c;
        h *= del;
        if (del - 1.0).abs() <= EPS {
            break;
        }
    }
    h
}

/// `erf(z)` for `0 <= z <= 1.5`: `2z/√π e^(-z²) Σ (2z²)^n / (1·3···(2n+1))`, a series of
/// positive terms (no cancellation).
fn erf_small(z: f64) -> f64 {
    let z2 = z * z;
    let mut term = 1.0;
    let mut sum = 1.0;
    let mut n = 0.0;
    loop {
        n += 1.0;
        term *= 2.0 * z2 / (2.0 * n + 1.0);
        sum += term;
        if term <= EPS * sum * 0.5 {
            break;
        }
    }
    2.0 * z / SQRT_PI * (-z2).exp() * sum
}

/// The tail `P(T > t)` and central mass `P(|T| < t)` of Student's t with `df` degrees of
/// freedom, for `t >= 0`; `direct_central` tells which one was computed directly (the other
/// is its complement, never a small difference of larger numbers).
struct Masses {
    tail: f64,
    central: f64,
    direct_central: bool,
}

fn masses(t: f64, df: f64) -> Masses {
    if t == 0.0 {
        return Masses {
            tail: 0.5,
            central: 0.0,
            direct_central: true,
        };
    }
    if t == f64::INFINITY {
        return Masses {
            tail: 0.0,
            central: 1.0,
            direct_central: false,
        };
    }
    if df == f64::INFINITY {
        // The normal distribution: P(|Z| < t) = erf(t/√2), P(Z > t) = erfc(t/√2)/2.
        let z = t * std::f64::consts::FRAC_1_SQRT_2;
        if z <= 1.0 {
            let central = erf_small(z);
            return Masses {
                tail: 0.5 * (1.0 - central),
                central,
                direct_central: true,
            };
        }
        let z2 = z * z;
        let tail = 0.5 * (-z2).exp() * z * upper_gamma_half_scaled(z2) / SQRT_PI;
        return Masses {
            tail,
            central: 1.0 - 2.0 * tail,
            direct_central: false,
        };
    }
    let a = 0.5 * df;
    // r = t²/df; x = df/(df+t²) = 1/(1+r), y = 1 - x = r/(1+r), ln x = -ln(1+r).
    let r = (t / df) * t;
    let (x, y, ln_x) = if r.is_finite() {
        (1.0 / (1.0 + r), r / (1.0 + r), -r.ln_1p())
    } else {
        (0.0, 1.0, -(2.0 * t.ln() - df.ln()))
    };
    let ratio = gamma_half_ratio(a);
    if x >= (a + 1.0) / (a + 2.5) {
        // Small |t|: I_y(1/2, a) by its continued fraction (y small, all terms accurate).
        let front = (a * ln_x).exp() * y.sqrt() * ratio / SQRT_PI;
        let central = (2.0 * front * beta_cf(0.5, a, y)).min(1.0);
        return Masses {
            tail: 0.5 * (1.0 - central),
            central,
            direct_central: true,
        };
    }
    let u0 = -ln_x;
    let tail = if a >= 15.0 && u0 <= 1.0 {
        0.5 * bgrat_half(a, u0, ratio)
    } else {
        let front = (a * ln_x).exp() * y.sqrt() * ratio / SQRT_PI;
        0.5 * front * beta_cf(a, 0.5, x) / a
    };
    Masses {
        tail,
        central: 1.0 - 2.0 * tail,
        direct_central: false,
    }
}

/// `I_x(a, 1/2)` with `u0 = -ln x` by DiDonato & Morris's BGRAT: substituting `s = e^-v`,
/// `I_x(a,1/2) = 1/B(a,1/2) ∫_{u0}^∞ e^{-Tv} v^{-1/2} ψ(v) dv` with `T = a - 1/4` and
/// `ψ(v) = ((v/2)/sinh(v/2))^{1/2} = Σ e_k v^{2k}`, so
/// `I = R(a)/√π · e^{-z} √u0 · Σ e_k h_k`, `z = T u0`, `h_k = Γ(2k+1/2, z) e^z z^{-1/2} / T^{2k}`,
/// `h_{k+1} = ((2k+3/2)(2k+1/2) h_k + u0^{2k} (2k+3/2+z)) / T²`.
fn bgrat_half(a: f64, u0: f64, ratio: f64) -> f64 {
    let t = a - 0.25;
    let z = t * u0;
    let t2 = t * t;
    let u02 = u0 * u0;
    let mut h = upper_gamma_half_scaled(z);
    let mut sum = h;
    let mut u0_pow = 1.0; // u0^(2k)
    for (k, &e) in PSI.iter().enumerate().skip(1) {
        let km = (k - 1) as f64;
        h = ((2.0 * km + 1.5) * (2.0 * km + 0.5) * h + u0_pow * (2.0 * km + 1.5 + z)) / t2;
        u0_pow *= u02;
        let term = e * h;
        sum += term;
        if term.abs() <= 0.25 * EPS * sum.abs() {
            break;
        }
    }
    ratio / SQRT_PI * (-z).exp() * u0.sqrt() * sum
}

/// The density of Student's t at `t` (any sign).
fn pdf(t: f64, df: f64) -> f64 {
    if df == f64::INFINITY {
        return (-0.5 * t * t).exp() / (2.0 * SQRT_PI * SQRT_PI).sqrt();
    }
    let a = 0.5 * df;
    let r = (t.abs() / df) * t.abs();
    let ln_1p_r = if r.is_finite() {
        r.ln_1p()
    } else {
        2.0 * t.abs().ln() - df.ln()
    };
    gamma_half_ratio(a) / (SQRT_PI * df.sqrt()) * (-(a + 0.5) * ln_1p_r).exp()
}

/// The CDF `P(T <= t)` of Student's t distribution with `df > 0` degrees of freedom
/// (`df = +inf` is the standard normal): `scipy.stats.t.cdf(t, df)` (`scipy.special.stdtr`),
/// to ~1e-13 relative (checked against 40-digit mpmath). NaN for NaN arguments or `df <= 0`.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    let m = masses(t.abs(), df);
    if t < 0.0 {
        m.tail
    } else if m.direct_central {
        0.5 + 0.5 * m.central
    } else {
        1.0 - m.tail
    }
}

/// The quantile (inverse CDF) of Student's t distribution: the `t` with `t_cdf(t, df) = p`,
/// i.e. `scipy.stats.t.ppf(p, df)` (`scipy.special.stdtrit`), accurate to ~2e-14 relative
/// for `df > 0` (`df = +inf` is the standard normal) and every `0 < p < 1`. `±inf` at
/// `p = 0`/`1`; NaN for NaN arguments, `p` outside `[0, 1]` or `df <= 0`.
///
/// Where scipy is itself inexact (`|p - 1/2| < 1e-6` with small `df`, where it keeps only
/// absolute accuracy; `p = 1e-300` with `df = 1.5`) this returns the correct value.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if p.is_nan() || df.is_nan() || df <= 0.0 || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    if p == 0.5 {
        return 0.0;
    }
    // q = the one-sided tail, exact (1 - p is exact for p >= 1/2).
    let (sign, q) = if p < 0.5 { (-1.0, p) } else { (1.0, 1.0 - p) };
    let t = if q >= 0.25 {
        // 1 - 2q is exact here too.
        solve_central(1.0 - 2.0 * q, df)
    } else {
        solve_tail(q, df)
    };
    sign * t
}

/// The `t >= 0` with `P(|T| < t) = c`, `0 < c <= 1/2`. The central mass is concave in `t`,
/// so Newton's iterations from `c / (2 pdf(0))` (a lower bound) increase monotonically to
/// the root.
fn solve_central(c: f64, df: f64) -> f64 {
    let mut t = c / (2.0 * pdf(0.0, df));
    for _ in 0..100 {
        let m = masses(t, df);
        let step = (m.central - c) / (2.0 * pdf(t, df));
        let next = t - step;
        if !(next > 0.0) {
            t *= 0.5;
            continue;
        }
        let done = (next - t).abs() <= 2.0 * EPS * next;
        t = next;
        if done {
            break;
        }
    }
    t
}

/// The `t > 0` with `P(T > t) = q`, `0 < q < 1/4`: Newton's iterations on
/// `ln(tail(t)/q)`, kept inside a bracket that bisection shrinks when a step leaves it.
fn solve_tail(q: f64, df: f64) -> f64 {
    let mut t = initial_tail_guess(q, df);
    let (mut lo, mut hi) = (0.0_f64, f64::INFINITY);
    for _ in 0..400 {
        let tail = masses(t, df).tail;
        let f = (tail / q).ln();
        if f == 0.0 {
            return t;
        }
        if f > 0.0 {
            lo = t;
        } else {
            hi = t;
        }
        let mut next = t + f * tail / pdf(t, df);
        if !(next > lo && next < hi) {
            next = if hi == f64::INFINITY {
                2.0 * t
            } else if lo > 0.0 && hi > 4.0 * lo {
                (lo * hi).sqrt()
            } else {
                0.5 * (lo + hi)
            };
        }
        let done = (next - t).abs() <= 2.0 * EPS * next || hi - lo <= 2.0 * EPS * lo;
        t = next;
        if done {
            break;
        }
    }
    t
}

/// A starting point for [`solve_tail`]: the better (by tail mismatch) of the Cornish-Fisher
/// expansion around a normal quantile (Abramowitz & Stegun 26.2.23 and 26.7.5) and the
/// power law `P(T > t) ≈ df^(df/2) Γ((df+1)/2) / (df √π Γ(df/2)) t^-df` of the far tail.
fn initial_tail_guess(q: f64, df: f64) -> f64 {
    let w = (-2.0 * q.ln()).sqrt();
    let z = w
        - (2.515_517 + 0.802_853 * w + 0.010_328 * w * w)
            / (1.0 + 1.432_788 * w + 0.189_269 * w * w + 0.001_308 * w * w * w);
    if df == f64::INFINITY {
        return z;
    }
    let z2 = z * z;
    let cornish =
        z + (z2 + 1.0) * z / (4.0 * df) + ((5.0 * z2 + 16.0) * z2 + 3.0) * z / (96.0 * df * df);
    let a = 0.5 * df;
    let ln_power = (a * df.ln() + (gamma_half_ratio(a) / (2.0 * a * SQRT_PI)).ln() - q.ln()) / df;
    let power = ln_power.exp();
    let mismatch = |t: f64| {
        if t > 0.0 && t.is_finite() {
            (masses(t, df).tail / q).ln().abs()
        } else {
            f64::INFINITY
        }
    };
    if mismatch(power) < mismatch(cornish) {
        power
    } else if cornish > 0.0 {
        cornish
    } else {
        1.0
    }
}

/// Streaming moments of a column: count, mean and `m2 = Σ (x - mean)²`, updated by
/// Welford's method and merged by Chan, Golub & LeVeque's pairwise formula, so partial
/// aggregates of any partitioning combine (results agree to rounding, ~1e-15 relative).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MeanVar {
    pub count: u64,
    pub mean: f64,
    pub m2: f64,
}

impl MeanVar {
    /// No values yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The moments of `values`.
    pub fn from_values(values: &[f64]) -> Self {
        let mut s = Self::new();
        for &x in values {
            s.update(x);
        }
        s
    }

    /// Adds one value.
    pub fn update(&mut self, x: f64) {
        self.count += 1;
        let delta = x - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// Adds the values summarised by `other`.
    pub fn merge(&mut self, other: &MeanVar) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            *self = *other;
            return;
        }
        let n = self.count + other.count;
        let (na, nb, nf) = (self.count as f64, other.count as f64, n as f64);
        let delta = other.mean - self.mean;
        self.mean += delta * (nb / nf);
        self.m2 += other.m2 + delta * delta * (na * nb / nf);
        self.count = n;
    }

    /// The sample variance (`ddof = 1`, `numpy.var(x, ddof=1)`); `None` when `n < 2`.
    pub fn variance(&self) -> Option<f64> {
        (self.count >= 2).then(|| self.m2 / (self.count - 1) as f64)
    }

    /// The standard error of the mean, `scipy.stats.sem(x)` (`std(x, ddof=1) / √n`);
    /// `None` when `n < 2`.
    pub fn sem(&self) -> Option<f64> {
        Some(self.variance()?.sqrt() / (self.count as f64).sqrt())
    }

    /// The two-sided Student-t confidence interval of the mean at level `confidence`:
    /// `scipy.stats.t.interval(confidence, n-1, loc=mean, scale=scipy.stats.sem(x))`, i.e.
    /// `mean + sem · t_quantile((1∓confidence)/2, n-1)`.
    ///
    /// `None` when `n < 2` or `confidence` is not in `(0, 1)`. When every value is equal
    /// (`sem = 0`) this gives `(mean, mean)`, where scipy answers NaN (it rejects
    /// `scale = 0`).
    pub fn ci(&self, confidence: f64) -> Option<(f64, f64)> {
        if !(confidence > 0.0 && confidence < 1.0) {
            return None;
        }
        let sem = self.sem()?;
        if sem == 0.0 {
            return Some((self.mean, self.mean));
        }
        let df = (self.count - 1) as f64;
        let lo = t_quantile((1.0 - confidence) / 2.0, df);
        let hi = t_quantile((1.0 + confidence) / 2.0, df);
        Some((lo * sem + self.mean, hi * sem + self.mean))
    }
}

/// [`MeanVar::ci`] of a slice of values.
pub fn mean_ci(values: &[f64], confidence: f64) -> Option<(f64, f64)> {
    MeanVar::from_values(values).ci(confidence)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(f64::MIN_POSITIVE)
    }

    #[test]
    fn quantiles_match_scipy() {
        // scipy 1.17.1: scipy.stats.t.ppf(p, df)
        let cases = [
            (0.975, 1.0, 12.706_204_736_174_694),
            (0.975, 9.0, 2.262_157_162_798_205),
            (0.975, 199.0, 1.971_956_544_251_753_3),
            (0.995, 29.0, 2.756_385_903_670_605),
            (0.05, 4.0, -2.131_846_786_326_651),
            (0.6, 3.0, 0.276_670_662_332_689_8),
            (1e-10, 2.0, -70_710.678_108_048_16),
            (0.975, f64::INFINITY, 1.959_963_984_540_053_8),
        ];
        for (p, df, want) in cases {
            let got = t_quantile(p, df);
            assert!(close(got, want, 1e-13), "p={p} df={df}: {got} vs {want}");
        }
    }

    #[test]
    fn closed_forms() {
        // df = 1 (Cauchy): tan(π (p - 1/2)); df = 2: (2p-1)/√(2p(1-p)).
        for &p in &[0.01, 0.1, 0.3, 0.7, 0.9, 0.999] {
            let cauchy = (std::f64::consts::PI * (p - 0.5)).tan();
            assert!(close(t_quantile(p, 1.0), cauchy, 1e-13));
            let two = (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt();
            assert!(close(t_quantile(p, 2.0), two, 1e-13));
            assert!(close(t_cdf(t_quantile(p, 7.5), 7.5), p, 1e-14));
        }
    }

    #[test]
    fn edge_arguments() {
        assert_eq!(t_quantile(0.0, 3.0), f64::NEG_INFINITY);
        assert_eq!(t_quantile(1.0, 3.0), f64::INFINITY);
        assert_eq!(t_quantile(0.5, 3.0), 0.0);
        assert!(t_quantile(1.5, 3.0).is_nan());
        assert!(t_quantile(0.3, 0.0).is_nan());
        assert_eq!(t_cdf(0.0, 5.0), 0.5);
        assert_eq!(t_cdf(f64::INFINITY, 5.0), 1.0);
        assert_eq!(t_cdf(f64::NEG_INFINITY, 5.0), 0.0);
    }

    #[test]
    fn merged_moments_equal_whole() {
        let xs: Vec<f64> = (0..57)
            .map(|i| ((i * 37) % 11) as f64 * 0.25 - 1.0)
            .collect();
        let whole = MeanVar::from_values(&xs);
        let mut left = MeanVar::from_values(&xs[..20]);
        left.merge(&MeanVar::from_values(&xs[20..]));
        assert_eq!(left.count, whole.count);
        assert!(close(left.mean, whole.mean, 1e-14));
        assert!(close(left.m2, whole.m2, 1e-13));
    }

    #[test]
    fn mean_ci_matches_scipy() {
        // scipy.stats.t.interval(0.95, 4, loc=np.mean(x), scale=scipy.stats.sem(x))
        let x = [1.0, 2.0, 3.0, 4.0, 10.0];
        let (lo, hi) = mean_ci(&x, 0.95).unwrap();
        assert!(close(lo, -0.389_945_165_425_413_8, 1e-12), "{lo}");
        assert!(close(hi, 8.389_945_165_425_413, 1e-12), "{hi}");
        assert_eq!(mean_ci(&[1.0], 0.95), None);
        assert_eq!(mean_ci(&[2.0, 2.0, 2.0], 0.95), Some((2.0, 2.0)));
        assert_eq!(mean_ci(&x, 1.0), None);
    }
}
