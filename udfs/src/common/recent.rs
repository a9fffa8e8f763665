//! Work done on a column array, remembered per thread for the other functions of the same
//! query that read the same column.
//!
//! DataFusion hands every function of a projection (or every argument list of an
//! aggregation) the same column array, one function after the other on one thread. So
//! when several metrics need the same per-row preparation of a column — the six
//! trajectory metrics parsing the same trajectories, BLEU, GLEU and METEOR tokenizing the
//! same texts — the first one does it and the others find it here, keyed by the array's
//! identity (`Arc::ptr_eq`, never its content). An entry keeps its array alive, so the
//! array's address cannot be reused for other data while the entry exists; only the last
//! [`RECENT_COLUMNS`] arrays are kept, so a thread holds at most that many batches'
//! worth after a query, and an entry whose array nobody else holds any more (its batch is
//! done) is dropped when the next batch's work begins.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;
use std::thread::LocalKey;

use datafusion::arrow::array::ArrayRef;
use datafusion::logical_expr::ColumnarValue;

use super::StrArg;

/// How many columns a thread remembers per kind of work: enough for the two arguments of
/// a pair metric and a little more.
pub const RECENT_COLUMNS: usize = 4;

/// The last [`RECENT_COLUMNS`] arrays a kind of work was done on, with its results.
pub struct Recent<T> {
    entries: VecDeque<(ArrayRef, Arc<T>)>,
}

impl<T> Recent<T> {
    pub const fn new() -> Self {
        Recent {
            entries: VecDeque::new(),
        }
    }
}

/// The result of `make` for `array`: from this thread's `memo` when the same array was
/// seen lately, otherwise computed (outside any borrow of `memo`) and remembered.
pub fn memoized<T: 'static>(
    memo: &'static LocalKey<RefCell<Recent<T>>>,
    array: &ArrayRef,
    make: impl FnOnce() -> T,
) -> Arc<T> {
    let hit = memo.with_borrow(|m| {
        m.entries
            .iter()
            .find(|(a, _)| Arc::ptr_eq(a, array))
            .map(|(_, value)| Arc::clone(value))
    });
    if let Some(value) = hit {
        return value;
    }
    // An entry whose array only the entry itself still holds can never be asked for again
    // (a caller would need its own reference to pass it): the batch it came from is done.
    // Dropping such entries before `make` lets this batch's work reuse the memory of the
    // last one, still in the caches, instead of growing the thread's footprint by up to
    // [`RECENT_COLUMNS`] batches' worth of dead work (measured on the 1M-row trajectory
    // job: see README, "Performance").
    memo.with_borrow_mut(|m| m.entries.retain(|(a, _)| Arc::strong_count(a) > 1));
    let value = Arc::new(make());
    memo.with_borrow_mut(|m| {
        if m.entries.len() == RECENT_COLUMNS {
            m.entries.pop_front();
        }
        m.entries.push_back((Arc::clone(array), Arc::clone(&value)));
    });
    value
}

/// [`memoized`] for a function argument: a column array is looked up and remembered; a
/// literal (one value for every row) has no array identity and is prepared afresh.
pub fn memoized_argument<T: 'static>(
    memo: &'static LocalKey<RefCell<Recent<T>>>,
    value: &ColumnarValue,
    make: impl FnOnce() -> T,
) -> Arc<T> {
    match value {
        ColumnarValue::Array(array) => memoized(memo, array, make),
        ColumnarValue::Scalar(_) => Arc::new(make()),
    }
}

/// Where each row's items (tokens) lie when a batch's rows are prepared back to back in
/// one store: row `r` holds items `ends[r]..ends[r + 1]`. A literal argument has one row,
/// which stands for every row.
#[derive(Debug)]
pub struct RowRanges {
    ends: Vec<usize>,
    scalar: bool,
}

impl RowRanges {
    /// Calls `push` on each non-NULL row of `text` (`number_rows` rows; one for a literal);
    /// `push` appends the row's items to the store and returns how many the store holds
    /// then, or an error that gives the whole column up. A NULL row has no items (the
    /// functions give NULL there before looking).
    pub fn build<E>(
        text: &StrArg<'_>,
        number_rows: usize,
        mut push: impl FnMut(&str) -> Result<usize, E>,
    ) -> Result<Self, E> {
        let scalar = text.is_scalar();
        let n = if scalar { 1 } else { number_rows };
        let mut ends = Vec::with_capacity(n + 1);
        ends.push(0);
        for row in 0..n {
            let end = match text.get(row) {
                Some(t) => push(t)?,
                None => ends[row],
            };
            ends.push(end);
        }
        Ok(RowRanges { ends, scalar })
    }

    /// The items of `row`.
    pub fn get(&self, row: usize) -> Range<usize> {
        let row = if self.scalar { 0 } else { row };
        self.ends[row]..self.ends[row + 1]
    }

    /// How many rows were prepared (one for a literal).
    #[cfg(test)]
    pub fn rows(&self) -> usize {
        self.ends.len() - 1
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::StringArray;

    use super::*;

    thread_local! {
        static MEMO: RefCell<Recent<usize>> = const { RefCell::new(Recent::new()) };
    }

    #[test]
    fn same_array_is_a_hit_equal_content_is_not() {
        let a: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        let b: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        let mut made = 0;
        let mut get = |array: &ArrayRef| {
            *memoized(&MEMO, array, || {
                made += 1;
                made
            })
        };
        assert_eq!(get(&a), 1);
        assert_eq!(get(&Arc::clone(&a)), 1);
        assert_eq!(get(&b), 2);
        // Older arrays fall out once RECENT_COLUMNS newer ones came.
        let others: Vec<ArrayRef> = (0..RECENT_COLUMNS)
            .map(|_| Arc::new(StringArray::from(vec!["y"])) as ArrayRef)
            .collect();
        for o in &others {
            get(o);
        }
        assert_eq!(get(&a), 2 + RECENT_COLUMNS + 1);
    }

    thread_local! {
        static MEMO_DEAD: RefCell<Recent<usize>> = const { RefCell::new(Recent::new()) };
    }

    #[test]
    fn work_on_a_dropped_array_is_freed_at_the_next_miss() {
        let done: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
        let live: ArrayRef = Arc::new(StringArray::from(vec!["y"]));
        let of_done = memoized(&MEMO_DEAD, &done, || 1);
        let of_live = memoized(&MEMO_DEAD, &live, || 2);
        assert_eq!(Arc::strong_count(&of_done), 2, "the memo holds it too");
        drop(done);
        // A hit keeps everything as it was.
        assert_eq!(*memoized(&MEMO_DEAD, &live, || 0), 2);
        assert_eq!(Arc::strong_count(&of_done), 2);
        let next: ArrayRef = Arc::new(StringArray::from(vec!["z"]));
        assert_eq!(*memoized(&MEMO_DEAD, &next, || 3), 3);
        assert_eq!(
            Arc::strong_count(&of_done),
            1,
            "no one can ask for it again"
        );
        assert_eq!(Arc::strong_count(&of_live), 2, "its array is still held");
        assert_eq!(*memoized(&MEMO_DEAD, &live, || 0), 2);
    }
}
