use std::sync::Arc;

#[cfg(not(feature = "datafusion"))]
use arrow::array::RecordBatch;
#[cfg(feature = "datafusion")]
use datafusion::arrow::array::RecordBatch;

use pgwire::{
    api::results::{DataRowEncoder, FieldInfo},
    error::PgWireResult,
    messages::data::DataRow,
};

use crate::encoder::encode_value;

/// evalsql patch: a check run before each row is encoded, given an upper bound of the bytes
/// its values take; an error is sent to the client instead of the row (a row of many large
/// values would otherwise be copied into one message however large).
pub type RowGuard = fn(usize) -> Result<(), String>;

static ROW_GUARD: std::sync::OnceLock<RowGuard> = std::sync::OnceLock::new();

/// Installs the row check for the process (the first call wins).
pub fn set_row_guard(guard: RowGuard) {
    let _ = ROW_GUARD.set(guard);
}

/// An upper bound of the bytes row `idx` of `rb` takes: lengths of strings and binaries,
/// the memory of a nested value's slice, 16 bytes for anything else.
fn row_bytes(rb: &RecordBatch, idx: usize) -> usize {
    #[cfg(not(feature = "datafusion"))]
    use arrow::array::{Array, AsArray};
    #[cfg(not(feature = "datafusion"))]
    use arrow::datatypes::DataType;
    #[cfg(feature = "datafusion")]
    use datafusion::arrow::array::{Array, AsArray};
    #[cfg(feature = "datafusion")]
    use datafusion::arrow::datatypes::DataType;
    rb.columns()
        .iter()
        .map(|array| match array.data_type() {
            _ if array.is_null(idx) => 0,
            DataType::Utf8 => array.as_string::<i32>().value(idx).len(),
            DataType::LargeUtf8 => array.as_string::<i64>().value(idx).len(),
            DataType::Utf8View => array.as_string_view().value(idx).len(),
            DataType::Binary => array.as_binary::<i32>().value(idx).len(),
            DataType::LargeBinary => array.as_binary::<i64>().value(idx).len(),
            DataType::BinaryView => array.as_binary_view().value(idx).len(),
            DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Struct(_)
            | DataType::Map(..) => array
                .slice(idx, 1)
                .to_data()
                .get_slice_memory_size()
                .unwrap_or(0),
            _ => 16,
        })
        .sum()
}

pub struct RowEncoder {
    rb: RecordBatch,
    curr_idx: usize,
    fields: Arc<Vec<FieldInfo>>,
    row_encoder: DataRowEncoder,
}

impl RowEncoder {
    pub fn new(rb: RecordBatch, fields: Arc<Vec<FieldInfo>>) -> Self {
        assert_eq!(rb.num_columns(), fields.len());
        Self {
            rb,
            fields: fields.clone(),
            curr_idx: 0,
            row_encoder: DataRowEncoder::new(fields),
        }
    }

    pub fn next_row(&mut self) -> Option<PgWireResult<DataRow>> {
        if self.curr_idx == self.rb.num_rows() {
            return None;
        }

        if let Some(guard) = ROW_GUARD.get()
            && let Err(message) = guard(row_bytes(&self.rb, self.curr_idx))
        {
            self.curr_idx = self.rb.num_rows();
            return Some(Err(pgwire::error::PgWireError::UserError(Box::new(
                pgwire::error::ErrorInfo::new("ERROR".into(), "53200".into(), message),
            ))));
        }

        let arrow_schema = self.rb.schema_ref();
        for col in 0..self.rb.num_columns() {
            let array = self.rb.column(col);
            let arrow_field = arrow_schema.field(col);
            let pg_field = &self.fields[col];

            if let Err(e) = encode_value(
                &mut self.row_encoder,
                array,
                self.curr_idx,
                arrow_field,
                pg_field,
            ) {
                return Some(Err(e));
            };
        }
        self.curr_idx += 1;
        Some(Ok(self.row_encoder.take_row()))
    }
}
