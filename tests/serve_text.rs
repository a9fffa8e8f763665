//! PostgreSQL's text format of records and arrays, as `evalsql serve` sends them: the bytes
//! of the DataRow messages arrow-pg encodes for a batch (the path of both the simple and the
//! extended protocol), against the text PostgreSQL 16's `record_out` / `array_out` write for
//! the same values; and one end-to-end check through psql.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float32Array, Float64Array, Int32Array,
    Int64Array, ListArray, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
    TimestampNanosecondArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{Field, Fields, Int32Type, Schema};
use datafusion_postgres::arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use datafusion_postgres::pgwire::api::Type;
use datafusion_postgres::pgwire::api::portal::Format;
use datafusion_postgres::pgwire::api::results::{FieldFormat, FieldInfo};
use datafusion_postgres::pgwire::types::format::FormatOptions;

use crate::serve::{psql, run_psql, start_server};

/// The value of every row of a one-column batch, as sent in `format` (None for NULL).
fn encode(column: ArrayRef, format: Format, options: FormatOptions) -> Vec<Option<Vec<u8>>> {
    let schema = Schema::new(vec![Field::new("v", column.data_type().clone(), true)]);
    let fields = arrow_schema_to_pg_fields(&schema, &format, Some(Arc::new(options))).unwrap();
    encode_as(column, fields)
}

/// The rows of a one-column batch encoded for the result column `fields[0]`.
fn encode_as(column: ArrayRef, fields: Vec<FieldInfo>) -> Vec<Option<Vec<u8>>> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "v",
        column.data_type().clone(),
        true,
    )]));
    let batch = RecordBatch::try_new(schema, vec![column]).unwrap();
    encode_recordbatch(Arc::new(fields), batch)
        .map(|row| {
            let row = row.unwrap();
            assert_eq!(row.field_count, 1);
            let len = i32::from_be_bytes(row.data[..4].try_into().unwrap());
            (len >= 0).then(|| row.data[4..].to_vec())
        })
        .collect()
}

/// The text of every row (None for NULL), with PostgreSQL's default options.
fn text(column: ArrayRef) -> Vec<Option<String>> {
    text_with(column, FormatOptions::default())
}

fn text_with(column: ArrayRef, options: FormatOptions) -> Vec<Option<String>> {
    encode(column, Format::UnifiedText, options)
        .into_iter()
        .map(|v| v.map(|b| String::from_utf8(b).unwrap()))
        .collect()
}

fn some(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some(v.to_string())).collect()
}

fn strings(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

fn record(fields: Vec<(&str, ArrayRef)>, nulls: Option<NullBuffer>) -> StructArray {
    let (fields, columns): (Vec<Field>, Vec<ArrayRef>) = fields
        .into_iter()
        .map(|(name, c)| (Field::new(name, c.data_type().clone(), true), c))
        .unzip();
    StructArray::new(Fields::from(fields), columns, nulls)
}

/// A list column of `lengths` consecutive slices of `values` (None: a NULL list).
fn lists(values: ArrayRef, lengths: &[Option<usize>]) -> ArrayRef {
    let offsets = OffsetBuffer::from_lengths(lengths.iter().map(|l| l.unwrap_or(0)));
    let nulls = NullBuffer::from(lengths.iter().map(Option::is_some).collect::<Vec<_>>());
    let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
    Arc::new(ListArray::new(field, offsets, values, Some(nulls)))
}

#[test]
fn record_fields_null_empty_and_quoted() {
    // named_struct('b', CAST(NULL AS VARCHAR)) is `()`, an empty string `("")`.
    let judge = record(
        vec![
            (
                "score",
                Arc::new(Float64Array::from(vec![4.5, 1.0, 2.0, 0.0])) as ArrayRef,
            ),
            (
                "pass",
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    Some(false),
                    None,
                    None,
                ])),
            ),
            ("label", strings(&[Some("grounded"), None, Some(""), None])),
        ],
        Some(NullBuffer::from(vec![true, true, true, false])),
    );
    assert_eq!(
        text(Arc::new(judge)),
        vec![
            Some("(4.5,t,grounded)".into()),
            Some("(1,f,)".into()),
            Some("(2,,\"\")".into()),
            None
        ]
    );
    let only_null = record(vec![("b", strings(&[None]))], None);
    assert_eq!(text(Arc::new(only_null)), some(&["()"]));

    // record_out quotes for " \ ( ) , and white space, doubling " and \ inside; it does not
    // quote NULL, { or }.
    let tricky = [
        "a\"b",
        "back\\slash",
        "a,b",
        "(x)",
        "two words",
        "tab\there",
        "NULL",
        "{a}",
        "plain",
    ];
    let column = record(
        vec![
            ("s", strings(&tricky.map(Some))),
            ("n", strings(&[None; 9])),
        ],
        None,
    );
    assert_eq!(
        text(Arc::new(column)),
        some(&[
            "(\"a\"\"b\",)",
            "(\"back\\\\slash\",)",
            "(\"a,b\",)",
            "(\"(x)\",)",
            "(\"two words\",)",
            "(\"tab\there\",)",
            "(NULL,)",
            "({a},)",
            "(plain,)",
        ])
    );
}

#[test]
fn array_elements_null_and_quoted() {
    // array_out quotes the empty string, NULL in any case, and " \ { } , white space, with a
    // backslash before " and \; ( and ) alone need no quotes.
    let values = strings(&[
        Some("a"),
        None,
        Some(""),
        Some("NULL"),
        Some("null"),
        Some("a,b"),
        Some("a\"b"),
        Some("a\\b"),
        Some("{x}"),
        Some(" sp"),
        Some("(p)"),
        Some("NULLS"),
    ]);
    assert_eq!(
        text(lists(values, &[Some(12), Some(0), None])),
        vec![
            Some(r#"{a,NULL,"","NULL","null","a,b","a\"b","a\\b","{x}"," sp",(p),NULLS}"#.into()),
            Some("{}".into()),
            None,
        ]
    );
}

#[test]
fn arrays_of_records_and_records_of_arrays() {
    // metrics: [{name, value}], as PostgreSQL writes an array of records.
    let metric = record(
        vec![
            (
                "name",
                strings(&[
                    Some("f1"),
                    Some("bleu"),
                    Some("f1"),
                    None,
                    Some("say \"hi\""),
                ]),
            ),
            (
                "value",
                Arc::new(Float64Array::from(vec![
                    Some(0.5),
                    Some(0.25),
                    None,
                    None,
                    Some(1.0),
                ])),
            ),
        ],
        Some(NullBuffer::from(vec![true, true, true, false, true])),
    );
    assert_eq!(
        text(lists(Arc::new(metric), &[Some(2), Some(1), Some(2)])),
        some(&[
            r#"{"(f1,0.5)","(bleu,0.25)"}"#,
            r#"{"(f1,)"}"#,
            r#"{NULL,"(\"say \"\"hi\"\"\",1)"}"#,
        ])
    );

    // A record with an array field and a record field.
    let tags = lists(
        strings(&[Some("a"), Some("b"), Some("c"), None]),
        &[Some(2), Some(1), Some(0), None, Some(1)],
    );
    let inner = record(
        vec![
            (
                "x",
                Arc::new(Int32Array::from(vec![
                    Some(1),
                    None,
                    Some(3),
                    Some(4),
                    Some(5),
                ])) as ArrayRef,
            ),
            (
                "y",
                strings(&[None, Some("q"), Some("two words"), Some(""), Some("z")]),
            ),
        ],
        Some(NullBuffer::from(vec![true, true, true, true, false])),
    );
    let outer = record(vec![("tags", tags), ("inner", Arc::new(inner))], None);
    assert_eq!(
        text(Arc::new(outer)),
        some(&[
            r#"("{a,b}","(1,)")"#,
            r#"({c},"(,q)")"#,
            r#"({},"(3,""two words"")")"#,
            r#"(,"(4,"""")")"#,
            r#"({NULL},)"#,
        ])
    );

    // A list of lists (which arrow-pg describes as no PostgreSQL type): PostgreSQL's
    // multidimensional form.
    let inner = lists(
        Arc::new(Int32Array::from(vec![1, 2, 3])),
        &[Some(2), Some(1)],
    );
    let int4s = FieldInfo::new("v".into(), None, None, Type::INT4_ARRAY, FieldFormat::Text);
    let got = encode_as(lists(inner, &[Some(2)]), vec![int4s]);
    assert_eq!(got, vec![Some(b"{{1,2},{3}}".to_vec())]);
}

#[test]
fn element_values_in_their_own_text_form() {
    let floats = Arc::new(Float64Array::from(vec![
        1.0,
        1.5,
        -0.0,
        0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e20,
        1e15,
        1e14,
        0.0001,
        0.00001,
        123456789012345680.0,
        0.1 + 0.2,
        -2.5e-7,
    ]));
    let want = "{1,1.5,-0,0,NaN,Infinity,-Infinity,1e+20,1e+15,100000000000000,0.0001,1e-05,\
                1.2345678901234568e+17,0.30000000000000004,-2.5e-07}";
    assert_eq!(text(lists(floats.clone(), &[Some(15)])), some(&[want]));
    // A float column on its own is written the same way (pgwire alone would send `1.0` and
    // `inf`, which pgJDBC and node-postgres cannot read as Infinity).
    let column: Vec<String> = text(floats.clone())
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(
        format!("{{{}}}", column.join(",")),
        want,
        "a float column in text format"
    );
    // extra_float_digits 0: %.15g.
    let mut options = FormatOptions::default();
    options.extra_float_digits = 0;
    assert_eq!(
        text_with(lists(Arc::new(floats.slice(12, 2)), &[Some(2)]), options),
        some(&["{1.23456789012346e+17,0.3}"])
    );
    let reals = Arc::new(Float32Array::from(vec![1.0, 0.1, 1e6, 123456.0, 1.5e-5]));
    assert_eq!(
        text(lists(reals, &[Some(5)])),
        some(&["{1,0.1,1e+06,123456,1.5e-05}"])
    );

    let decimals = Decimal128Array::from(vec![Some(1230), Some(-5), Some(0), None])
        .with_precision_and_scale(6, 2)
        .unwrap();
    let ints = Int64Array::from(vec![Some(-7), None, Some(0), Some(9)]);
    let days = Date32Array::from(vec![Some(19849), Some(0), None, Some(-1)]);
    let row = record(
        vec![
            ("amount", Arc::new(decimals) as ArrayRef),
            ("n", Arc::new(ints)),
            ("d", Arc::new(days)),
        ],
        None,
    );
    assert_eq!(
        text(Arc::new(row)),
        some(&[
            "(12.30,-7,2024-05-06)",
            "(-0.05,,1970-01-01)",
            "(0.00,0,)",
            "(,9,1969-12-31)"
        ])
    );

    // Timestamps as PostgreSQL prints them: no fraction when whole, no trailing zeros, the
    // offset as +00 or +05:30.
    let at = 1_714_979_289_000_000i64; // 2024-05-06 07:08:09 UTC
    let utc = TimestampMicrosecondArray::from(vec![at, at + 250_000]).with_timezone("+00:00");
    let kolkata = TimestampMicrosecondArray::from(vec![at, at + 1]).with_timezone("Asia/Kolkata");
    let naive = TimestampNanosecondArray::from(vec![at * 1000, at * 1000 + 120_000_000]);
    let row = record(
        vec![
            ("utc", Arc::new(utc) as ArrayRef),
            ("kolkata", Arc::new(kolkata)),
            ("naive", Arc::new(naive)),
        ],
        None,
    );
    assert_eq!(
        text(Arc::new(row)),
        some(&[
            r#"("2024-05-06 07:08:09+00","2024-05-06 12:38:09+05:30","2024-05-06 07:08:09")"#,
            r#"("2024-05-06 07:08:09.25+00","2024-05-06 12:38:09.000001+05:30","2024-05-06 07:08:09.12")"#,
        ])
    );
}

#[test]
fn binary_format_is_unchanged() {
    // A record in binary: the field count, then each field's type OID, length and value.
    let row = record(
        vec![
            ("n", Arc::new(Int32Array::from(vec![7])) as ArrayRef),
            ("s", strings(&[None])),
        ],
        None,
    );
    let got = encode(
        Arc::new(row),
        Format::UnifiedBinary,
        FormatOptions::default(),
    );
    let mut want = Vec::new();
    want.extend(2i32.to_be_bytes());
    want.extend(23u32.to_be_bytes()); // int4
    want.extend(4i32.to_be_bytes());
    want.extend(7i32.to_be_bytes());
    want.extend(25u32.to_be_bytes()); // text
    want.extend((-1i32).to_be_bytes());
    assert_eq!(got, vec![Some(want)]);
    // A list in binary: one dimension, a NULL flag, the element OID, length and lower bound.
    let list = Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
        Some(vec![Some(1), None]),
    ]));
    let got = encode(list, Format::UnifiedBinary, FormatOptions::default());
    let mut want = Vec::new();
    for v in [1i32, 1, 23, 2, 1, 4, 1, -1] {
        want.extend(v.to_be_bytes());
    }
    assert_eq!(got, vec![Some(want)]);
}

/// The issue's own example through psql (the simple protocol) against the server.
#[test]
fn psql_reads_postgresql_text() {
    let Some(psql) = psql() else { return };
    let server = start_server(
        &[("EVALSQL_PG_USER", "u"), ("EVALSQL_PG_PASSWORD", "p")],
        &[],
    )
    .unwrap();
    let sql = "SELECT named_struct('b', CAST(NULL AS VARCHAR)), \
               named_struct('x', 1.0, 'y', 'two words'), \
               [named_struct('f', 'a,b', 'g', CAST(NULL AS DOUBLE))], \
               ['x', NULL, '']";
    let (ok, out, err) = run_psql(&psql, server.port, "u", "p", sql);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim_end(),
        r#"()|(1,"two words")|{"(\"a,b\",)"}|{x,NULL,""}"#
    );
}
