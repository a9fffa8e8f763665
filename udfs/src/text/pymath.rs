//! Python's `math.fsum`, which NLTK's BLEU uses to add the weighted log precisions: a plain
//! left-to-right sum differs from it in the last bits.

/// `math.fsum(values)`: the correctly rounded sum (Shewchuk's partials, with CPython's
/// final round-half-even correction). Inputs are finite here (logs of positive numbers).
pub fn fsum(values: impl IntoIterator<Item = f64>) -> f64 {
    thread_local! {
        /// The partials of the last sum, kept for the next (BLEU sums once a row).
        static PARTIALS: std::cell::Cell<Vec<f64>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let mut partials = PARTIALS.take();
    partials.clear();
    let sum = fsum_with(&mut partials, values);
    PARTIALS.set(partials);
    sum
}

fn fsum_with(partials: &mut Vec<f64>, values: impl IntoIterator<Item = f64>) -> f64 {
    for mut x in values {
        let mut i = 0;
        for j in 0..partials.len() {
            let mut y = partials[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                partials[i] = lo;
                i += 1;
            }
            x = hi;
        }
        partials.truncate(i);
        partials.push(x);
    }
    let Some(mut n) = partials.len().checked_sub(1) else {
        return 0.0;
    };
    let mut hi = partials[n];
    let mut lo = 0.0;
    while n > 0 {
        let x = hi;
        n -= 1;
        let y = partials[n];
        hi = x + y;
        let yr = hi - x;
        lo = y - yr;
        if lo != 0.0 {
            break;
        }
    }
    // Round half to even across the remaining partials, as CPython does.
    if n > 0 && ((lo < 0.0 && partials[n - 1] < 0.0) || (lo > 0.0 && partials[n - 1] > 0.0)) {
        let y = lo * 2.0;
        let x = hi + y;
        let yr = x - hi;
        if y == yr {
            hi = x;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::fsum;

    #[test]
    fn matches_python_fsum() {
        // Values from CPython 3.11: math.fsum(...)
        assert_eq!(fsum([0.1; 10]), 1.0);
        assert_eq!(
            fsum([1e100, 1.0, -1e100, 1e-100, 1e50, -1.0, -1e50]),
            1e-100
        );
        assert_eq!(fsum([]), 0.0);
        let v = [
            -0.2876820724517809,
            -0.5753641449035618,
            -0.8630462173553427,
            -1.1507282898071236,
        ];
        assert_eq!(fsum(v), -2.876820724517809);
    }
}
